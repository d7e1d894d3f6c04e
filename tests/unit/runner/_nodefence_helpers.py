"""Shared by the tests of the NodeFence state machine (test_nodefence.py, test_nodefence_sweep.py,
test_nodefence_properties.py, and test_release.py, test_threshold.py): the policy, the fence
configurations (one fencing level, and two: IPMI then the PDU), fence readings, and builders of a
status, a committed run, observations, and readers of a written status and its conditions."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from nodefence_world import NAME, NODE, T0, fence_config

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.machines.actions import FenceReading
from noderemedy_runner.machines.conditions import Condition, find_condition
from noderemedy_runner.machines.nodefence import (
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    RunRef,
    run_ident,
    step_segments,
)

POLICY = NodeFencePolicy(
    grace_seconds=60,
    step_retries=2,
    retry_delay_seconds=10,
    recovery_timeout_seconds=600,
    max_restarts=1,
    restart_delay_seconds=30,
)
NOW = float(T0 + 10_000)
CONFIG = fence_config()
LEVELS = fence_config(levels=True)  # power_management=ipmi-off ipmi-on | pdu-off pdu-on
VERIFIED = FenceReading(NODE, True, "power_off", "ipmi-off", NOW)
NOT_FENCED = FenceReading(NODE, False, "power_off", "ipmi-off", NOW)
#: a storage-only fence: licenses the release of the pods on the fenced storage, never the taint
STORAGE_VERIFIED = FenceReading(NODE, True, "storage_isolated", "fc-off", NOW)
OTHER_NODE = FenceReading("worker-2", True, "power_off", "pdu-off", NOW)


def cond(type_: str, status: str, reason: str = "R", message: str = "") -> Condition:
    return Condition(type_, status, reason, message, float(T0), 1)  # type: ignore[arg-type]


#: ``FenceVerified=True`` as the machine writes it after a storage-only fence, and a power fence
STORAGE_CLAIM = cond("FenceVerified", "True", "FenceVerified", "storage_isolated read back (fc-off)")
POWER_CLAIM = cond("FenceVerified", "True", "FenceVerified", "power_off read back (ipmi-off)")


def status(phase: str = "New", step: str = "Isolation", **kw: Any) -> NodeFenceStatus:
    kw.setdefault("observed_generation", 1)
    kw.setdefault("last_transition_time", float(T0))
    return NodeFenceStatus(status=phase, step=step, **kw)  # type: ignore[arg-type]


def run_ref(
    step: str = "Isolation",
    attempt: int = 0,
    restarts: int = 0,
    not_before: float = NOW,
    segment: int = 0,
    level: int = 1,
    config: FenceConfig | None = None,
) -> RunRef:
    config = config or CONFIG
    segments = len(step_segments(config.methods(step, level)))  # type: ignore[arg-type]
    return RunRef(
        run_ident(NAME, restarts, step, attempt, segment, level),  # type: ignore[arg-type]
        step,  # type: ignore[arg-type]
        attempt,
        not_before,
        segment,
        segments,
        level,
        max(1, len(config.levels(step))),  # type: ignore[arg-type]
    )


def lref(
    step: str = "PowerManagement", attempt: int = 0, segment: int = 0, level: int = 1, **kw: Any
) -> RunRef:
    """A run of the two-level configuration (IPMI, then the PDU)."""
    return run_ref(step, attempt, segment=segment, level=level, config=LEVELS, **kw)


def observe(**kw: Any) -> NodeFenceObservations:
    base: dict[str, Any] = {
        "node": NODE,
        "now": NOW,
        "node_ready": False,
        "not_ready_since": float(T0),
        "generation": 1,
    }
    base.update(kw)
    return NodeFenceObservations(**base)


def without(config: FenceConfig, **steps: tuple) -> FenceConfig:
    return replace(config, **steps)


def written(action: Any) -> NodeFenceStatus:
    assert action.kind == "write_status", action
    return NodeFenceStatus.from_dict(action.status)


def cstat(s: NodeFenceStatus, type_: str) -> tuple[str, str] | None:
    c = find_condition(s.conditions, type_)
    return None if c is None else (c.status, c.reason)
