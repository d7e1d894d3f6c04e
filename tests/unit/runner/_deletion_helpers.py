"""Shared by the tests of a deleted NodeFence's cleanup (test_deletion.py,
test_deletion_properties.py): the policy and the fence configuration (fc-off; pdu-off pdu-on;
fc-on), the time of the deletion, the run idents of the flow, and builders of a NodeFence status,
a committed run and the cleanup's observations."""

from __future__ import annotations

from typing import Any

from nodefence_world import NAME, NODE, T0, fence_config

from noderemedy_runner.machines.conditions import Condition
from noderemedy_runner.machines.deletion import CleanupObservations
from noderemedy_runner.machines.nodefence import NodeFencePolicy, NodeFenceStatus, RunRef, run_ident
from noderemedy_runner.machines.release import LeftOnNode

POLICY = NodeFencePolicy(
    grace_seconds=0, step_retries=1, retry_delay_seconds=10, recovery_timeout_seconds=600, max_restarts=1
)
CONFIG = fence_config()  # isolation=fc-off, power_management=pdu-off pdu-on, recovery=fc-on
DELETED = float(T0 + 1000)
NOW = DELETED + 5
ISO = run_ident(NAME, 0, "Isolation", 0)
PM_OFF = run_ident(NAME, 0, "PowerManagement", 0)
PM_ON = run_ident(NAME, 0, "PowerManagement", 0, segment=1)
REC = run_ident(NAME, 0, "Recovery", 0)
EMPTY = LeftOnNode()
LEFT = LeftOnNode(("ns/db-0",), ("csi-1",))


def cond(type_: str, status: str, reason: str) -> Condition:
    return Condition(type_, status, reason, "", float(T0), 1)  # type: ignore[arg-type]


def nf(phase: str = "New", step: str = "Isolation", jobs: tuple[str, ...] = (), **kw: Any) -> NodeFenceStatus:
    started = float(T0) if jobs or kw.get("current_run") else None
    return NodeFenceStatus(status=phase, step=step, jobs=jobs, start_time=started, **kw)  # type: ignore[arg-type]


def committed(ident: str, step: str, segment: int = 0) -> RunRef:
    return RunRef(ident, step, 0, float(T0), segment, 2 if step == "PowerManagement" else 1)  # type: ignore[arg-type]


def ob(**kw: Any) -> CleanupObservations:
    base: dict[str, Any] = {"node": NODE, "now": NOW, "deleted_at": DELETED}
    base.update(kw)
    return CleanupObservations(**base)
