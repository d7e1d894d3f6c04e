"""NodeFence state machine: the transition table, and decide() on single cases around it (a run's
extravars, the release in the same run, run idents, the messages of a failure and of giving up, a
configuration for another node, the checks of the policy and of the status). The exhaustive sweep of the discrete input
space is in test_nodefence_sweep.py, the hypothesis properties in test_nodefence_properties.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from _nodefence_helpers import (
    CONFIG,
    LEVELS,
    NOT_FENCED,
    NOW,
    OTHER_NODE,
    POLICY,
    POWER_CLAIM,
    STORAGE_CLAIM,
    STORAGE_VERIFIED,
    VERIFIED,
    cond,
    cstat,
    lref,
    observe,
    run_ref,
    status,
    without,
    written,
)
from nodefence_world import NAME, NODE, T0

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.machines.actions import FENCE_KINDS, FenceReading
from noderemedy_runner.machines.conditions import Condition, find_condition
from noderemedy_runner.machines.guards import Hold
from noderemedy_runner.machines.nodefence import (
    PHASES,
    LevelOutcome,
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    StepResult,
    claimed_fence_kind,
    decide,
    fence_verified_message,
    run_ident,
)
from noderemedy_runner.machines.release import LeftOnNode

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
    ("running/claimed-power-fence-is-verified-first", status("Running", conditions=(POWER_CLAIM,)),
     observe(), CONFIG, "verify_fence", {"extravars.methods": ["fc-off", "pdu-off"]}),
    # a stale storage-only claim licenses nothing: the power step reads its own fence back
    ("running/claimed-storage-fence-power-next", status("Running", conditions=(STORAGE_CLAIM,)),
     observe(), CONFIG, "write_status",
     {"status": "Running→Running", "step": "PowerManagement", "current_run": run_ref("PowerManagement")}),
    ("running/claimed-storage-fence-held-not-read-again", status("Running", conditions=(STORAGE_CLAIM,)),
     observe(start_holds={"PowerManagement": Hold("PowerFencingLimit", "48 nodes in PowerManagement")}), CONFIG,
     "write_status", {"status": "Running→Running", "current_run": None, "Processing": ("False", "PowerFencingLimit")}),
    ("running/claimed-storage-fence-no-power-step-is-verified", status("Running", conditions=(STORAGE_CLAIM,)),
     observe(), without(CONFIG, power_management=()), "verify_fence", {"extravars.methods": ["fc-off"]}),
    ("done/claimed-storage-fence-is-verified", status("Done", "PowerManagement", conditions=(STORAGE_CLAIM,)),
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


@pytest.mark.parametrize("kind", FENCE_KINDS)
def test_the_claimed_fence_kind_is_read_back_from_the_message_the_machine_writes(kind: str) -> None:
    """What ``FenceVerified=True`` claims is read from the message the machine itself wrote; an
    empty or foreign message, or a claim no longer True, claims no kind."""
    reading = FenceReading(NODE, True, kind, "m-off", NOW)  # type: ignore[arg-type]
    claim = cond("FenceVerified", "True", "FenceVerified", fence_verified_message(reading))
    assert claimed_fence_kind(status("Running", conditions=(claim,))) == kind
    assert (
        claimed_fence_kind(status("Running", conditions=(dataclasses.replace(claim, status="False"),)))
        is None
    )
    assert claimed_fence_kind(status("Running", conditions=(cond("FenceVerified", "True"),))) is None
    assert (
        claimed_fence_kind(status("Running", conditions=(cond("FenceVerified", "True", message="on"),)))
        is None
    )
    assert claimed_fence_kind(status("Running")) is None
