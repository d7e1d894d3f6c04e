"""NodeFence state machine: the transition table, an exhaustive sweep of the discrete input
space, and hypothesis properties (invariant 1, resume after a crash, bounded retries/restarts)."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nodefence_world import NAME, NODE, T0, World, fence_config, run

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.machines.actions import FenceReading
from noderemedy_runner.machines.conditions import Condition, find_condition
from noderemedy_runner.machines.guards import Hold
from noderemedy_runner.machines.nodefence import (
    PHASES,
    LevelOutcome,
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    RunRef,
    StepResult,
    decide,
    is_stopped,
    is_terminal,
    run_ident,
    step_segments,
)
from noderemedy_runner.machines.release import LeftOnNode, RateHold

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


def cond(type_: str, status: str, reason: str = "R") -> Condition:
    return Condition(type_, status, reason, "", float(T0), 1)  # type: ignore[arg-type]


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


# --- the transition table ------------------------------------------------------------------
# (id, status, observations, config, expected action kind, expected fields of the written
#  status / action attributes)
ROWS: list[tuple[str, NodeFenceStatus, NodeFenceObservations, FenceConfig, str, dict[str, Any]]] = [
    ("new/ready-before-anything", status(), observe(node_ready=True, not_ready_since=None), CONFIG,
     "write_status", {"status": "New→Final", "Processing": ("False", "NodeHealthy")}),
    ("new/ready-after-restart", status(restarts=1), observe(node_ready=True, not_ready_since=None), CONFIG,
     "write_status", {"status": "New→Done"}),
    ("new/ready-but-tainted", status(), observe(node_ready=True, taint_present=True), CONFIG,
     "write_status", {"status": "New→Done"}),
    ("new/within-grace", status(), observe(not_ready_since=NOW - 10), CONFIG, "wait", {"seconds": 50.0}),
    ("new/not-ready-since-unknown", status(), observe(not_ready_since=None), CONFIG, "wait", {"seconds": 60.0}),
    ("new/grace-over", status(), observe(not_ready_since=NOW - 60), CONFIG,
     "write_status", {"status": "New→New", "current_run": run_ref(), "Processing": ("True", "FenceAgentRunning"), "start_time": NOW}),
    ("new/no-isolation-methods", status(), observe(), without(CONFIG, isolation=()), "write_status",
     {"status": "New→Running", "current_run": None, "Processing": ("True", "NoIsolationMethods")}),
    ("new/release-never-in-new", status(conditions=(cond("FenceVerified", "True"),)), observe(fence=VERIFIED), CONFIG,
     "write_status", {"status": "New→New", "current_run": run_ref()}),
    ("running/node-ready", status("Running"), observe(node_ready=True, not_ready_since=None), CONFIG,
     "write_status", {"status": "Running→Done", "last_transition_time": NOW}),
    ("running/start-power-management", status("Running"), observe(), CONFIG, "write_status",
     {"status": "Running→Running", "step": "PowerManagement", "current_run": run_ref("PowerManagement")}),
    ("running/no-power-management-methods", status("Running"), observe(), without(CONFIG, power_management=()),
     "write_status", {"status": "Running→Done", "step": "PowerManagement"}),
    ("running/verified-fence-releases", status("Running"), observe(fence=VERIFIED), CONFIG,
     "taint_out_of_service", {"fence": VERIFIED}),
    ("running/storage-fence-no-taint-power-next", status("Running", conditions=(cond("FenceVerified", "True"),)),
     observe(fence=STORAGE_VERIFIED), CONFIG, "write_status",
     {"status": "Running→Running", "step": "PowerManagement", "current_run": run_ref("PowerManagement")}),
    ("done/storage-fence-no-taint-waits",
     status("Done", "PowerManagement", conditions=(cond("FenceVerified", "True"),), last_transition_time=NOW - 10),
     observe(fence=STORAGE_VERIFIED), without(CONFIG, power_management=()), "wait", {"reason": "WaitNodeReady"}),
    ("running/claimed-fence-is-verified-first", status("Running", conditions=(cond("FenceVerified", "True"),)),
     observe(), CONFIG, "verify_fence", {"extravars.methods": ["fc-off", "pdu-off"]}),
    ("running/claimed-fence-not-held", status("Running", conditions=(cond("FenceVerified", "True"),)),
     observe(fence=NOT_FENCED), CONFIG, "write_status", {"status": "Running→Running", "FenceVerified": ("False", "FenceNotHeld")}),
    ("running/fence-of-another-node", status("Running", conditions=(cond("FenceVerified", "True"),)),
     observe(fence=OTHER_NODE), CONFIG, "write_status", {"FenceVerified": ("False", "FenceNotHeld")}),
    ("running/already-tainted", status("Running", conditions=(cond("FenceVerified", "True"),)),
     observe(fence=VERIFIED, taint_present=True), CONFIG, "write_status", {"step": "PowerManagement"}),
    ("run/pending-runs", status(current_run=run_ref()), observe(), CONFIG,
     "run_step", {"ident": run_ident(NAME, 0, "Isolation", 0), "step": "Isolation", "playbook": "fence_step.yml"}),
    ("run/other-ident-result-ignored", status(current_run=run_ref()),
     observe(result=StepResult("stale", True)), CONFIG, "run_step", {"ident": run_ident(NAME, 0, "Isolation", 0)}),
    ("run/backoff", status(current_run=run_ref(attempt=1, not_before=NOW + 7)), observe(), CONFIG, "wait", {"seconds": 7.0}),
    ("run/runs-even-if-node-ready", status(current_run=run_ref()), observe(node_ready=True), CONFIG, "run_step", {}),
    ("result/isolation-ok-verified", status(current_run=run_ref()),
     observe(result=StepResult(run_ident(NAME, 0, "Isolation", 0), True, fence=VERIFIED)), CONFIG, "write_status",
     {"status": "New→Running", "current_run": None, "retries": 0, "jobs": (run_ident(NAME, 0, "Isolation", 0),),
      "FenceAgentActionSucceeded": ("True", "FenceAgentSucceeded"), "FenceVerified": ("True", "FenceVerified")}),
    ("result/isolation-ok-unverified", status(current_run=run_ref()),
     observe(result=StepResult(run_ident(NAME, 0, "Isolation", 0), True, fence=NOT_FENCED)), CONFIG, "write_status",
     {"status": "New→Running", "FenceVerified": None}),
    ("result/failure-retries", status(current_run=run_ref()),
     observe(result=StepResult(run_ident(NAME, 0, "Isolation", 0), False)), CONFIG, "write_status",
     {"status": "New→New", "retries": 1, "current_run": run_ref(attempt=1, not_before=NOW + 10),
      "FenceAgentActionSucceeded": ("False", "FenceAgentFailed")}),
    ("result/timeout-at-limit-errors", status("Running", "PowerManagement", retries=2, current_run=run_ref("PowerManagement", 2)),
     observe(result=StepResult(run_ident(NAME, 0, "PowerManagement", 2), False, timed_out=True)), CONFIG, "write_status",
     {"status": "Running→Error", "current_run": None, "retries": 2,
      "FenceAgentActionSucceeded": ("False", "FenceAgentTimedOut"), "Processing": ("False", "FenceAgentTimedOut")}),
    ("result/power-management-off-segment-ok", status("Running", "PowerManagement", current_run=run_ref("PowerManagement")),
     observe(result=StepResult(run_ident(NAME, 0, "PowerManagement", 0), True)), CONFIG, "write_status",
     {"status": "Running→Running", "current_run": run_ref("PowerManagement", segment=1),
      "jobs": (run_ident(NAME, 0, "PowerManagement", 0),), "Processing": ("True", "FenceAgentRunning")}),
    ("run/power-management-segments", status("Running", "PowerManagement", current_run=run_ref("PowerManagement", segment=1)),
     observe(), CONFIG, "run_step", {"extravars.methods": ["pdu-on"], "extravars.release_workloads": False,
                                     "ident": run_ident(NAME, 0, "PowerManagement", 0, 1)}),
    ("run/power-management-off-segment", status("Running", "PowerManagement", current_run=run_ref("PowerManagement")),
     observe(), CONFIG, "run_step", {"extravars.methods": ["pdu-off"], "extravars.release_workloads": True}),
    ("result/power-management-ok", status("Running", "PowerManagement", current_run=run_ref("PowerManagement", segment=1)),
     observe(result=StepResult(run_ident(NAME, 0, "PowerManagement", 0, 1), True)), CONFIG, "write_status",
     {"status": "Running→Done", "current_run": None, "Processing": ("True", "StepSucceeded")}),
    ("result/on-segment-failure-retries-that-segment", status("Running", "PowerManagement", current_run=run_ref("PowerManagement", segment=1)),
     observe(result=StepResult(run_ident(NAME, 0, "PowerManagement", 0, 1), False)), CONFIG, "write_status",
     {"retries": 1, "current_run": run_ref("PowerManagement", attempt=1, segment=1, not_before=NOW + 10)}),
    ("missing-node/no-device-touched", status(), observe(node_exists=False, not_ready_since=NOW - 600), CONFIG,
     "write_status", {"status": "New→New", "current_run": None, "Processing": ("False", "NodeNotFound")}),
    ("missing-node/committed-run-held", status("Running", "PowerManagement", current_run=run_ref("PowerManagement"),
     conditions=(Condition("Processing", "False", "NodeNotFound",
                           f"node {NODE} does not exist: no fence device is touched until it does, or until the "
                           "annotation remediation.noderemedy.io/fence-without-node=true confirms fencing a "
                           "machine without a Node", float(T0), 1),)),
     observe(node_exists=False), CONFIG, "wait", {"reason": "NodeNotFound"}),
    ("missing-node/confirmed-fences-without-release", status(), observe(node_exists=False, missing_node_confirmed=True,
     not_ready_since=NOW - 600), CONFIG, "write_status", {"status": "New→New", "current_run": run_ref()}),
    ("missing-node/confirmed-run-never-releases", status(current_run=run_ref()),
     observe(node_exists=False, missing_node_confirmed=True), CONFIG, "run_step", {"extravars.release_workloads": False}),
    ("missing-node/found-again", status(conditions=(cond("Processing", "False", "NodeNotFound"),)), observe(), CONFIG,
     "write_status", {"Processing": ("True", "NodeFound")}),
    ("result/recovery-ok", status("Done", "Recovery", current_run=run_ref("Recovery")),
     observe(node_ready=True, result=StepResult(run_ident(NAME, 0, "Recovery", 0), True)), CONFIG, "write_status",
     {"status": "Done→Done", "step": "Recovery", "current_run": None}),
    ("done/release-before-recovery", status("Done", "PowerManagement"), observe(fence=VERIFIED), CONFIG,
     "taint_out_of_service", {}),
    ("done/node-ready-starts-recovery", status("Done", "PowerManagement"), observe(node_ready=True), CONFIG,
     "write_status", {"status": "Done→Done", "step": "Recovery", "current_run": run_ref("Recovery")}),
    ("done/no-recovery-methods", status("Done", "PowerManagement"), observe(node_ready=True), without(CONFIG, recovery=()),
     "write_status", {"status": "Done→Done", "step": "Recovery", "current_run": None}),
    ("done/recovered-untaints", status("Done", "Recovery"),
     observe(node_ready=True, taint_present=True, fence=VERIFIED, left_on_node=LeftOnNode()),
     CONFIG, "untaint_out_of_service", {"extravars.node": NODE}),
    ("done/recovered-final", status("Done", "Recovery", conditions=(cond("FenceVerified", "True"),)), observe(node_ready=True),
     CONFIG, "write_status", {"status": "Done→Final", "Succeeded": ("True", "RemediationFinished"),
                               "Processing": ("False", "RemediationFinished"), "FenceVerified": ("False", "FenceReleased")}),
    ("done/waiting-for-ready", status("Done", "PowerManagement", last_transition_time=NOW - 100), observe(), CONFIG,
     "wait", {"seconds": 500.0}),
    ("done/timeout", status("Done", "PowerManagement", last_transition_time=NOW - 600), observe(), CONFIG, "write_status",
     {"status": "Done→Error", "Processing": ("False", "NodeNotReadyTimeout")}),
    ("error/restart-delay", status("Error", last_transition_time=NOW - 5), observe(), CONFIG, "wait", {"seconds": 25.0}),
    ("error/restart", status("Error", "PowerManagement", retries=2, last_transition_time=NOW - 30), observe(), CONFIG,
     "write_status", {"status": "Error→New", "restarts": 1, "retries": 0, "step": "Isolation", "Processing": ("True", "Restarted")}),
    ("error/limit-reached", status("Error", restarts=1), observe(), CONFIG, "write_status",
     {"status": "Error→Error", "Succeeded": ("False", "RestartLimitReached")}),
    ("error/stays", status("Error", restarts=1, conditions=(cond("Succeeded", "False", "RestartLimitReached"),)),
     observe(), CONFIG, "none", {}),
    ("error/no-release", status("Error", restarts=1, conditions=(cond("Succeeded", "False", "RestartLimitReached"),)),
     observe(fence=VERIFIED), CONFIG, "none", {}),
    ("final/nothing", status("Final", "Recovery"), observe(fence=VERIFIED, node_ready=True), CONFIG, "none", {}),
    ("generation/observed", status("Running", observed_generation=1), observe(generation=2), CONFIG,
     "write_status", {"status": "Running→Running", "observed_generation": 2}),
    # fencing levels (Pacemaker topology): IPMI, then the PDU
    ("levels/start-at-level-1", status("Running"), observe(), LEVELS, "write_status",
     {"current_run": lref(), "Processing": ("True", "FenceAgentRunning")}),
    ("levels/level-1-runs-ipmi-off", status("Running", "PowerManagement", current_run=lref()), observe(), LEVELS,
     "run_step", {"extravars.methods": ["ipmi-off"], "extravars.level": 1, "extravars.release_workloads": True}),
    ("levels/level-1-off-fails-next-level-at-once", status("Running", "PowerManagement", current_run=lref()),
     observe(result=StepResult(lref().ident, False, message="BMC unreachable")), LEVELS, "write_status",
     {"status": "Running→Running", "retries": 0, "current_run": lref(level=2),
      "fence_levels.results": [("PowerManagement", 1, "Failed", "ipmi-off ipmi-on")],
      "FenceAgentActionSucceeded": ("False", "FenceAgentFailed")}),
    ("levels/level-2-runs-pdu-off-and-releases", status("Running", "PowerManagement", current_run=lref(level=2)),
     observe(), LEVELS, "run_step", {"extravars.methods": ["pdu-off"], "extravars.release_workloads": True,
                                     "ident": run_ident(NAME, 0, "PowerManagement", 0, 0, 2)}),
    ("levels/level-2-off-ok-then-its-on", status("Running", "PowerManagement", current_run=lref(level=2)),
     observe(result=StepResult(lref(level=2).ident, True, fence=VERIFIED)), LEVELS, "write_status",
     {"current_run": lref(level=2, segment=1), "fence_levels.results": []}),
    ("levels/level-2-done", status("Running", "PowerManagement", current_run=lref(level=2, segment=1)),
     observe(result=StepResult(lref(level=2, segment=1).ident, True)), LEVELS, "write_status",
     {"status": "Running→Done", "current_run": None,
      "fence_levels.results": [("PowerManagement", 2, "Succeeded", "pdu-off pdu-on")]}),
    ("levels/level-2-on-fails-retries-its-own-segment", status("Running", "PowerManagement", current_run=lref(level=2, segment=1)),
     observe(result=StepResult(lref(level=2, segment=1).ident, False)), LEVELS, "write_status",
     {"retries": 1, "current_run": lref(attempt=1, level=2, segment=1, not_before=NOW + 10), "fence_levels.results": []}),
    ("levels/last-level-off-fails-retries-from-level-1", status("Running", "PowerManagement", current_run=lref(level=2)),
     observe(result=StepResult(lref(level=2).ident, False)), LEVELS, "write_status",
     {"retries": 1, "current_run": lref(attempt=1, not_before=NOW + 10),
      "fence_levels.results": [("PowerManagement", 2, "Failed", "pdu-off pdu-on")]}),
    ("levels/all-levels-fail-at-retry-limit", status("Running", "PowerManagement", retries=2, current_run=lref(attempt=2, level=2)),
     observe(result=StepResult(lref(attempt=2, level=2).ident, False)), LEVELS, "write_status",
     {"status": "Running→Error", "current_run": None,
      "fence_levels.results": [("PowerManagement", 2, "Failed", "pdu-off pdu-on")]}),
    ("levels/verify-reads-the-level-that-fenced",
     status("Done", "PowerManagement", conditions=(cond("FenceVerified", "True"),),
            fence_levels=(LevelOutcome("PowerManagement", 2, 0, 0, "pdu-off pdu-on", "Succeeded", "", float(T0)),)),
     observe(), LEVELS, "verify_fence", {"extravars.methods": ["fc-off", "pdu-off"]}),
    ("levels/verify-level-1-without-a-record", status("Done", "PowerManagement", conditions=(cond("FenceVerified", "True"),)),
     observe(), LEVELS, "verify_fence", {"extravars.methods": ["fc-off", "ipmi-off"]}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("status_", "obs", "config", "kind", "expect"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_transition_table(
    status_: NodeFenceStatus,
    obs: NodeFenceObservations,
    config: FenceConfig,
    kind: str,
    expect: dict[str, Any],
) -> None:
    action = decide(NAME, status_, obs, config, POLICY)
    assert action.kind == kind, action
    new = written(action) if kind == "write_status" else None
    for key, value in expect.items():
        if key == "status":
            before, after = value.split("→")
            assert (status_.status, new.status) == (before, after)  # type: ignore[union-attr]
        elif key[0].isupper():
            assert cstat(new, key) == value  # type: ignore[arg-type]
        elif key == "fence_levels.results":
            added = new.fence_levels[len(status_.fence_levels) :]  # type: ignore[union-attr]
            assert [(lv.step, lv.level, lv.result, lv.methods) for lv in added] == value
        elif key == "extravars.methods":
            assert [m["name"] for m in action.extravars["methods"]] == value
        elif key.startswith("extravars."):
            assert action.extravars[key.split(".", 1)[1]] == value
        elif new is not None and hasattr(new, key):
            assert getattr(new, key) == value, key
        else:
            assert getattr(action, key) == value, key


def test_every_phase_has_a_row() -> None:
    assert {r[1].status for r in ROWS} == set(PHASES)


def test_run_step_extravars_are_references() -> None:
    action = decide(NAME, status(current_run=run_ref()), observe(), CONFIG, POLICY, namespace="noderemedy")
    assert action.extravars["node"] == NODE
    assert action.extravars["fence_config"] == "fence-config-worker-1"
    assert action.extravars["namespace"] == "noderemedy"
    assert [m["secret_name"] for m in action.extravars["methods"]] == ["fc"]


SAN = dataclasses.replace(CONFIG, fenced_storage=({"host_path": "/mnt/san"},))


@pytest.mark.parametrize(
    ("step", "taint_present", "config", "release"),
    [
        ("Isolation", False, SAN, True),  # fc ports with the storage behind them named
        ("Isolation", False, CONFIG, False),  # fc ports, no storage named: nothing to release
        ("PowerManagement", False, CONFIG, True),
        ("Isolation", True, SAN, False),  # released already: the run only fences
        ("PowerManagement", True, CONFIG, False),
        ("Recovery", False, SAN, False),  # recovery never releases
    ],
)
def test_fence_steps_release_in_the_same_run_only_while_no_taint_is_set(
    step: str, taint_present: bool, config: FenceConfig, release: bool
) -> None:
    phase = {"Isolation": "New", "PowerManagement": "Running", "Recovery": "Done"}[step]
    action = decide(
        NAME,
        status(phase, step, current_run=run_ref(step)),
        observe(taint_present=taint_present, node_ready=step == "Recovery"),
        config,
        POLICY,
    )
    assert action.kind == "run_step" and action.step == step
    assert action.extravars["release_workloads"] is release
    assert action.extravars["fenced_storage"] == [dict(m) for m in config.fenced_storage]


def test_run_ident_fits_the_schema_and_stays_distinct() -> None:
    long_a, long_b = "a" * 253, "a" * 252 + "b"
    ident_a = run_ident(long_a, 9, "PowerManagement", 9)
    assert len(ident_a) <= 253
    assert ident_a != run_ident(long_b, 9, "PowerManagement", 9)
    assert ident_a == run_ident(long_a, 9, "PowerManagement", 9)
    assert run_ident("nf", 0, "Isolation", 1) == "nf-r0-isolation-a1"


def test_long_executor_messages_are_truncated_in_conditions() -> None:
    ident = run_ident(NAME, 0, "Isolation", 0)
    action = decide(
        NAME,
        status(current_run=run_ref()),
        observe(result=StepResult(ident, False, message="x" * 40_000)),
        CONFIG,
        POLICY,
    )
    cond_ = find_condition(written(action).conditions, "FenceAgentActionSucceeded")
    assert cond_ is not None and len(cond_.message) < 1100


def test_giving_up_says_what_the_device_was_left_in() -> None:
    """The Error's Processing message carries the last failure, e.g. a PDU outlet left commanded
    off while its status still reads on, so an admin knows the device state."""
    ident = run_ident(NAME, 0, "PowerManagement", POLICY.step_retries)
    last = "pdu-off: 127.0.0.1:16010: not verified off within power_timeout=20s; the device is left commanded off"
    action = decide(
        NAME,
        status(
            "Running",
            "PowerManagement",
            retries=POLICY.step_retries,
            current_run=run_ref("PowerManagement", POLICY.step_retries),
        ),  # fmt: skip
        observe(result=StepResult(ident, False, message=last)),
        CONFIG,
        POLICY,
    )
    processing = find_condition(written(action).conditions, "Processing")
    assert written(action).status == "Error" and processing is not None
    assert processing.message.endswith(f"last: {last}")


def test_config_for_another_node_is_an_error() -> None:
    with pytest.raises(ValueError, match="is for node 'worker-1', not 'worker-9'"):
        decide(NAME, status(), observe(node="worker-9"), CONFIG, POLICY)


def test_policy_rejects_negative_values() -> None:
    with pytest.raises(ValueError, match="NodeFencePolicy.max_restarts = -1"):
        NodeFencePolicy(max_restarts=-1)


def test_status_round_trip_and_errors() -> None:
    s = status("Done", "Recovery", retries=1, restarts=1, jobs=("a", "b"), current_run=run_ref("Recovery", 1),
               conditions=(cond("Processing", "True"),), start_time=float(T0))  # fmt: skip
    assert NodeFenceStatus.from_dict(s.to_dict()) == s
    assert NodeFenceStatus.from_dict(None) == NodeFenceStatus()
    with pytest.raises(ValueError, match="status.status 'Fenced'"):
        NodeFenceStatus.from_dict({"status": "Fenced"})
    with pytest.raises(ValueError, match="status.step 'Reboot'"):
        NodeFenceStatus.from_dict({"step": "Reboot"})
    with pytest.raises(ValueError, match="currentRun.step"):
        NodeFenceStatus.from_dict(
            {"currentRun": {"ident": "x", "step": "X", "attempt": 0, "notBefore": "2023-11-14T22:13:20Z"}}
        )


# --- exhaustive sweep over the discrete input space ----------------------------------------
NOTHING_LEFT = LeftOnNode()
SOMETHING_LEFT = LeftOnNode(("app/db-0",), ("csi-1",))
RATE_HOLD = RateHold("12 pods released in the last 60 s; limit 10 per minute", 30.0)
ALLOWED_EDGES = {
    ("New", "New"), ("New", "Running"), ("New", "Done"), ("New", "Final"), ("New", "Error"),
    ("Running", "Running"), ("Running", "Done"), ("Running", "Error"),
    ("Done", "Done"), ("Done", "Final"), ("Done", "Error"),
    ("Error", "Error"), ("Error", "New"),
    ("Final", "Final"),
}  # fmt: skip


#: The phase in which a run of each step is committed (New runs Isolation, Running runs
#: PowerManagement, Done runs Recovery); other combinations are unreachable.
RUN_PHASE = {"Isolation": "New", "PowerManagement": "Running", "Recovery": "Done"}
STEP_NAMES = ("Isolation", "PowerManagement", "Recovery")


def _sweep(
    config: FenceConfig = CONFIG, places: tuple[tuple[int, int], ...] = ((1, 0),)
) -> list[tuple[NodeFenceStatus, NodeFenceObservations]]:
    """Every discrete status × observation; a committed run at each (level, segment) of ``places``
    (of the step's levels that exist in ``config``)."""
    cases = []
    for phase, step, run_kind, retries, restarts, fv, ltt, (level, segment) in itertools.product(
        PHASES,
        ("Isolation", "PowerManagement", "Recovery"),
        ("none", "pending", "backoff"),
        (0, POLICY.step_retries),
        (0, POLICY.max_restarts),
        (None, "True", "False"),
        (NOW - 1, NOW - 10_000),
        places,
    ):
        run = None
        if run_kind == "none" and (level, segment) != places[0]:
            continue
        if run_kind != "none":
            if RUN_PHASE[step] != phase:
                continue  # a committed run of step X exists only in the phase that runs X
            if segment >= len(step_segments(config.methods(step, level))):  # type: ignore[arg-type]
                continue
            run = run_ref(
                step, retries, restarts, NOW + 5 if run_kind == "backoff" else NOW, segment, level, config
            )
        conds = () if fv is None else (cond("FenceVerified", fv),)
        s = status(phase, step, retries=retries, restarts=restarts, current_run=run, conditions=conds,
                   last_transition_time=ltt)  # fmt: skip
        ident = run.ident if run else "none"
        lefts = (None, NOTHING_LEFT, SOMETHING_LEFT) if phase == "Done" else (None,)
        holds = (None, RATE_HOLD) if phase in ("Running", "Done") else (None,)
        for ready, taint, fence, result, left, hold in itertools.product(
            (False, True),
            (False, True),
            (None, VERIFIED, NOT_FENCED, OTHER_NODE),
            (
                None,
                StepResult(ident, True, fence=VERIFIED),
                StepResult(ident, False),
                StepResult("stale", True),
            ),
            lefts,
            holds,
        ):
            obs = observe(
                node_ready=ready, taint_present=taint, fence=fence, result=result, left_on_node=left,
                release_hold=hold,
            )  # fmt: skip
            cases.append((s, obs))
    return cases


def test_exhaustive_sweep_invariants() -> None:
    """For every combination: deterministic; releases only with a verified fence of this node;
    status writes change the status, round-trip, follow an allowed edge, and keep counters bounded."""
    cases = _sweep()
    assert len(cases) > 10_000
    kinds = _check_sweep(cases, CONFIG)
    assert kinds == {
        "write_status",
        "run_step",
        "verify_fence",
        "taint_out_of_service",
        "untaint_out_of_service",
        "wait",
        "none",
    }


def test_exhaustive_sweep_with_fencing_levels() -> None:
    """The same invariants with two levels (IPMI, then the PDU) and runs at every (level, segment);
    besides: a run moves to another level only from a level's first segment (nothing of the
    abandoned level was switched back on), and only one level further or back to level 1."""
    cases = _sweep(LEVELS, ((1, 0), (1, 1), (2, 0), (2, 1)))
    assert len(cases) > 10_000
    moves = set()
    for s, obs in cases:
        action = decide(NAME, s, obs, LEVELS, POLICY)
        if action.kind != "write_status" or s.current_run is None:
            continue
        new = written(action)
        if new.current_run is not None and new.current_run.level != s.current_run.level:
            assert s.current_run.segment == 0 and new.current_run.segment == 0
            assert new.current_run.level in (s.current_run.level + 1, 1)
            moves.add((s.current_run.level, new.current_run.level))
    assert moves == {(1, 2), (2, 1)}
    _check_sweep(cases, LEVELS)


def _check_sweep(cases: list[tuple[NodeFenceStatus, NodeFenceObservations]], config: FenceConfig) -> set[str]:
    kinds: set[str] = set()
    for s, obs in cases:
        action = decide(NAME, s, obs, config, POLICY)
        kinds.add(action.kind)
        assert action == decide(NAME, s, obs, config, POLICY)
        if action.releases_workloads:
            assert obs.fence is not None and obs.fence.licenses_taint(NODE) and action.fence is obs.fence
            assert s.status in ("Running", "Done") and s.current_run is None
        if obs.release_hold is not None:  # the rate limit holds every release, never the fencing
            assert not action.releases_workloads and not action.extravars.get("release_workloads")
        # safe return: recovery starts and the taint goes only once nothing is left on the node
        starts_recovery = (
            action.kind == "write_status"
            and s.current_run is None
            and (new_run := written(action).current_run) is not None
            and new_run.step == "Recovery"
        )
        if starts_recovery or action.kind == "untaint_out_of_service":
            assert not obs.taint_present or (obs.left_on_node is not None and obs.left_on_node.empty)
        if action.kind == "write_status":
            new = written(action)
            assert new != s
            assert new.to_dict() == dict(action.status)  # type: ignore[arg-type]
            assert (s.status, new.status) in ALLOWED_EDGES
            assert 0 <= new.retries <= POLICY.step_retries
            assert 0 <= new.restarts <= POLICY.max_restarts
            if new.current_run is not None:
                assert new.current_run.attempt == new.retries and new.current_run.step == new.step
                run = new.current_run
                assert 1 <= run.level <= run.levels == max(1, len(config.levels(run.step)))
                assert run.segment < run.segments == len(step_segments(config.methods(run.step, run.level)))
        if action.kind == "wait":
            assert action.seconds > 0
    return kinds


# --- hypothesis properties -----------------------------------------------------------------
fences = st.one_of(
    st.none(),
    st.builds(
        FenceReading,
        node=st.sampled_from([NODE, "worker-2"]),
        fenced=st.booleans(),
        kind=st.sampled_from(["power_off", "storage_isolated", "network_isolated"]),
        source=st.just("m"),
        observed_at=st.just(NOW),
    ),
)
statuses = st.builds(
    status,
    phase=st.sampled_from(PHASES),
    step=st.sampled_from(["Isolation", "PowerManagement", "Recovery"]),
    retries=st.integers(0, POLICY.step_retries),
    restarts=st.integers(0, POLICY.max_restarts),
    conditions=st.sampled_from([(), (cond("FenceVerified", "True"),), (cond("FenceVerified", "False"),)]),
    last_transition_time=st.integers(T0, int(NOW)).map(float),
)


@st.composite
def observation_steps(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "node_ready": draw(st.booleans()),
        "taint_present": draw(st.booleans()),
        "fence": draw(fences),
        "ok": draw(st.booleans()),
        "dt": draw(st.integers(0, 700)),
    }


@settings(max_examples=300, deadline=None)
@given(start=statuses, steps=st.lists(observation_steps(), min_size=1, max_size=40))
def test_invariant_1_over_random_observation_sequences(
    start: NodeFenceStatus, steps: list[dict[str, Any]]
) -> None:
    """Safety invariant 1: whatever the observations, a release action is only ever returned
    together with an observation that verifies a fence of this very node."""
    s, now = start, NOW
    for step in steps:
        now += step["dt"]
        result = (
            StepResult(s.current_run.ident, step["ok"], fence=step["fence"])
            if s.current_run and step["ok"]
            else None
        )
        obs = observe(
            now=now,
            node_ready=step["node_ready"],
            taint_present=step["taint_present"],
            fence=step["fence"],
            result=result,
        )
        action = decide(NAME, s, obs, CONFIG, POLICY)
        if action.releases_workloads:
            assert obs.fence is not None and obs.fence.fenced and obs.fence.node == NODE
        if action.kind == "write_status":
            s = written(action)


worlds = st.builds(
    World,
    fails=st.lists(st.booleans(), min_size=27, max_size=27).map(tuple),
    revive=st.booleans(),
    ready_after_isolation=st.booleans(),
    detach_waits=st.integers(0, 3),
)
policies = st.builds(
    NodeFencePolicy,
    grace_seconds=st.integers(0, 120),
    step_retries=st.integers(0, 2),
    retry_delay_seconds=st.integers(0, 20),
    recovery_timeout_seconds=st.integers(1, 900),
    max_restarts=st.integers(0, 2),
    restart_delay_seconds=st.integers(0, 60),
)


def projection(s: NodeFenceStatus) -> tuple:
    """The state compared across crash/no-crash runs: everything but times and FenceVerified."""
    return (
        s.status,
        s.step,
        s.retries,
        s.restarts,
        s.jobs,
        cstat(s, "Processing"),
        cstat(s, "Succeeded"),
        cstat(s, "FenceAgentActionSucceeded"),
    )


@settings(max_examples=200, deadline=None)
@given(world=worlds, policy=policies)
def test_runs_terminate_with_bounded_retries_and_restarts(world: World, policy: NodeFencePolicy) -> None:
    out = run(world, policy)
    assert out.terminated, out.status
    assert out.status.status in ("Final", "Error")
    statuses_written = [NodeFenceStatus.from_dict(a.status) for a in out.actions if a.kind == "write_status"]
    assert all(
        s.retries <= policy.step_retries and s.restarts <= policy.max_restarts for s in statuses_written
    )
    segments = sum(len(step_segments(CONFIG.methods(step))) for step in STEP_NAMES)
    assert len(out.world.runs) <= (policy.max_restarts + 1) * (segments + 3 * policy.step_retries)
    if out.status.status == "Final" and out.status.jobs:
        assert not out.world.taint and out.world.fc_up  # recovery ran and the taint is gone
    if out.world.releases:
        assert out.world.ever_fenced


@settings(max_examples=200, deadline=None)
@given(
    world=worlds,
    policy=policies,
    crashes=st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=80).map(tuple),
)
def test_resume_after_crash_reaches_the_same_final_state(
    world: World, policy: NodeFencePolicy, crashes: tuple[int, ...]
) -> None:
    """Invariant 4: replaying decide() from the persisted status after crashes that lose action
    results (and, for code 2, the status write itself) ends in the same state as a clean run.
    A crash may lose a power cycle's read-back, so the release can be skipped (never added)."""
    clean = run(dataclasses.replace(world, runs=[], power_log=[]), policy)
    crashed = run(dataclasses.replace(world, runs=[], power_log=[]), policy, crashes)
    assert crashed.terminated and clean.terminated
    assert projection(crashed.status) == projection(clean.status)
    assert crashed.world.taint <= clean.world.taint  # a crash can only skip a release
    assert (crashed.world.fc_up, crashed.world.power_on) == (clean.world.fc_up, clean.world.power_on)
    for out in (clean, crashed):
        assert_no_off_after_on(out.world.power_log)


def assert_no_off_after_on(log: list[tuple[int, str, str]]) -> None:
    """Within one pass of the flow (one ``restarts`` value) the power is never cut again once it
    was switched back on: a replay resumes after the segment that finished (step_segments)."""
    on_seen: set[int] = set()
    for restarts, method, action in log:
        if action == "on":
            on_seen.add(restarts)
        assert not (action == "off" and restarts in on_seen), (
            f"{method} off after on in pass {restarts}: {log}"
        )


def test_step_segments_split_where_the_direction_changes() -> None:
    names = [[m.name for m in seg] for seg in step_segments(CONFIG.power_management)]
    assert names == [["pdu-off"], ["pdu-on"]]
    assert [[m.name for m in seg] for seg in step_segments(CONFIG.isolation)] == [["fc-off"]]
    offs = CONFIG.isolation + CONFIG.power_management[:1]  # fc-off pdu-off: one segment
    assert [len(seg) for seg in step_segments(offs)] == [2]
    reboot = replace(CONFIG.power_management[0], action="reboot")
    assert [len(seg) for seg in step_segments((reboot, reboot, *CONFIG.recovery))] == [1, 1, 1]
    assert step_segments(()) == ()


def test_a_status_written_before_segments_existed_reads_as_segment_0_of_1() -> None:
    old = {"ident": "x", "step": "PowerManagement", "attempt": 0, "notBefore": "2023-11-14T22:13:20Z"}
    ref = RunRef.from_dict(old)
    assert (ref.segment, ref.segments) == (0, 1)
    with pytest.raises(ValueError, match="currentRun.segment 2"):
        RunRef.from_dict({**old, "segment": 2, "segments": 2})


# --- fencing levels: a BMC that died with its node ------------------------------------------
dead_bmc_worlds = st.builds(
    World,
    fails=st.lists(st.booleans(), min_size=27, max_size=27).map(tuple),
    revive=st.booleans(),
    bmc_dead=st.just(True),
)


@settings(max_examples=200, deadline=None)
@given(
    world=dead_bmc_worlds,
    policy=policies,
    crashes=st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=80).map(tuple),
)
def test_a_dead_bmc_is_fenced_through_the_next_level_and_resumes_after_crashes(
    world: World, policy: NodeFencePolicy, crashes: tuple[int, ...]
) -> None:
    """With power_management=ipmi-off ipmi-on | pdu-off pdu-on and a dead BMC: every power change
    that happens is the PDU's; workloads are released only after a real fence; the flow ends with
    bounded runs; a run with crashes ends in the clean run's state; no off after an on."""
    clean = run(dataclasses.replace(world, runs=[], power_log=[]), policy, config=LEVELS)
    crashed = run(dataclasses.replace(world, runs=[], power_log=[]), policy, crashes, config=LEVELS)
    for out in (clean, crashed):
        assert out.terminated and out.status.status in ("Final", "Error")
        assert {method for _r, method, _a in out.world.power_log} <= {"pdu-off", "pdu-on"}
        assert_no_off_after_on(out.world.power_log)
        if out.world.releases:
            assert out.world.ever_fenced
    segments = 1 + 2 * 2 + 1  # isolation, two levels of two segments, recovery
    assert len(clean.world.runs) <= (policy.max_restarts + 1) * (segments + 5 * policy.step_retries)
    assert projection(crashed.status) == projection(clean.status)
    assert crashed.world.taint <= clean.world.taint
    pm = [lv for lv in clean.status.fence_levels if lv.step == "PowerManagement"]
    assert all(lv.result == "Failed" for lv in pm if lv.level == 1)
    if clean.world.power_log:  # the PDU level ran, after level 1 failed in the same pass
        assert pm and pm[0].level == 1


def test_fence_levels_round_trip_and_old_runs_read_as_level_1() -> None:
    lv = LevelOutcome("PowerManagement", 2, 1, 0, "pdu-off pdu-on", "Failed", "outlet 3 reads on", float(T0))
    s = status("Running", "PowerManagement", fence_levels=(lv,), current_run=lref(level=2))
    assert NodeFenceStatus.from_dict(s.to_dict()) == s
    assert "fenceLevels" not in status().to_dict()
    old = {"ident": "x", "step": "PowerManagement", "attempt": 0, "notBefore": "2023-11-14T22:13:20Z"}
    assert (RunRef.from_dict(old).level, RunRef.from_dict(old).levels) == (1, 1)
    with pytest.raises(ValueError, match="currentRun.level 3"):
        RunRef.from_dict({**old, "level": 3, "levels": 2})
    with pytest.raises(ValueError, match="fenceLevels\\[\\].result 'Maybe'"):
        NodeFenceStatus.from_dict({"fenceLevels": [{**lv.to_dict(), "result": "Maybe"}]})
    assert run_ident("nf", 0, "PowerManagement", 1, 1, 2) == "nf-r0-power-management-a1-l2-s1"


def test_exhaustive_sweep_with_every_start_held() -> None:
    """With both fencing steps held (maintenance, quorum, limits), no Isolation or PowerManagement
    run is ever committed or newly started, and a release still needs a verified fence."""
    hold = Hold("EtcdQuorumGuard", "held")
    for s, obs in _sweep():
        held_obs = replace(obs, start_holds={"Isolation": hold, "PowerManagement": hold})
        action = decide(NAME, s, held_obs, CONFIG, POLICY)
        if action.kind == "write_status" and s.current_run is None:
            new = written(action)
            assert new.current_run is None or new.current_run.step == "Recovery", (s, action)
        if action.kind == "run_step":
            assert s.current_run is not None and action.ident == s.current_run.ident
        if action.releases_workloads:
            assert obs.fence is not None and obs.fence.licenses_taint(NODE)


# --- stop by an admin ------------------------------------------------------------------------
def test_a_stopped_nodefence_lists_its_fences_and_does_nothing_more() -> None:
    jobs = (run_ident(NAME, 0, "Isolation", 0), run_ident(NAME, 0, "PowerManagement", 0))
    s = status("Running", "PowerManagement", jobs=jobs, current_run=run_ref("PowerManagement", segment=1))
    action = decide(NAME, s, observe(stop_requested=True, taint_present=True), CONFIG, POLICY)
    stopped = written(action)
    assert action.reason == "StoppedByAdmin" and stopped.status == "Error" and stopped.current_run is None
    message = find_condition(stopped.conditions, "Processing").message  # type: ignore[union-attr]
    assert "fc-off (fence-method-template-fc plug 3), pdu-off (fence-method-template-pdu plug 5)" in message
    assert "out-of-service taint is on the node" in message
    assert cstat(stopped, "Succeeded") == ("False", "StoppedByAdmin")
    assert is_terminal(stopped, POLICY) and is_stopped(stopped)
    # nothing more, whatever is observed, while the stop stands and the node is not Ready
    for obs in (observe(stop_requested=True), observe(stop_requested=True, fence=VERIFIED),
                observe(stop_requested=True, now=NOW + 10_000)):  # fmt: skip
        assert decide(NAME, stopped, obs, CONFIG, POLICY).kind == "none"
    # the node is Ready again: Final (a later failure gets a new NodeFence)
    final = written(decide(NAME, stopped, observe(stop_requested=True, node_ready=True), CONFIG, POLICY))
    assert final.status == "Final" and cstat(final, "Succeeded") == ("False", "StoppedByAdmin")
    # the admin clears the stop: it starts over from New
    again = written(decide(NAME, stopped, observe(), CONFIG, POLICY))
    assert again.status == "New" and cstat(again, "Processing") == ("True", "StopCleared")
    assert not is_stopped(again)


def test_a_stop_never_leads_to_a_device_action_or_a_release() -> None:
    for s, obs in _sweep():
        action = decide(NAME, s, replace(obs, stop_requested=True), CONFIG, POLICY)
        assert action.kind in ("write_status", "none", "wait"), (s, action)
        if action.kind == "write_status":
            new = written(action)
            assert new.current_run is None


# --- an admin confirms the machine is down (stonith_admin --confirm) ---------------------------
@pytest.mark.parametrize("phase", ["New", "Running", "Done"])
def test_an_admin_confirmation_releases_without_a_device_then_waits_for_the_node(phase: str) -> None:
    s = status(phase, "PowerManagement" if phase == "Done" else "Isolation", last_transition_time=NOW - 10)
    action = decide(NAME, s, observe(down_confirmed=True), CONFIG, POLICY)
    assert action.kind == "taint_out_of_service" and action.fence is not None
    assert (action.fence.kind, action.fence.node, action.fence.fenced) == ("admin_confirmed", NODE, True)
    after = decide(NAME, s, observe(down_confirmed=True, taint_present=True), CONFIG, POLICY)
    if phase == "Done":
        assert after.kind == "wait"  # already waiting for the node
    else:
        new = written(after)
        assert new.status == "Done" and cstat(new, "Processing") == ("True", "FenceConfirmedByAdmin")
    # never while a run is committed (it finishes first), nor for a Ready node
    running = status(phase, current_run=run_ref()) if phase == "New" else None
    if running is not None:
        assert decide(NAME, running, observe(down_confirmed=True), CONFIG, POLICY).kind == "run_step"
    assert not decide(
        NAME, s, observe(down_confirmed=True, node_ready=True), CONFIG, POLICY
    ).releases_workloads
