"""The cleanup of a deleted NodeFence (machines/deletion.py): the decision table, and hypothesis
properties over a NodeFence deleted at any point of its flow in the simulated world of
nodefence_world.py -- the taint never goes and storage is never unfenced while the node's old pods
or VolumeAttachments remain, the cleanup never switches anything off, and the finalizer never
goes before the power is back on unless the recovery timeout passed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from nodefence_world import NAME, NODE, T0, World, fence_config

from noderemedy_runner.config.fence import FenceConfig, parse_fence_config
from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.machines.conditions import Condition
from noderemedy_runner.machines.deletion import (
    CLEANUP_FINISHED,
    CLEANUP_PARTS,
    CLEANUP_STEP_FAILED,
    CLEANUP_STEP_SUCCEEDED,
    CLEANUP_TIMED_OUT,
    CLEANUP_WAITING,
    FINALIZER,
    CleanupObservations,
    CleanupStatus,
    cleanup_ident,
    decide_cleanup,
    needs_finalizer,
)
from noderemedy_runner.machines.nodefence import (
    FENCED_STORAGE_RELEASED,
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    RunRef,
    StepResult,
    decide,
    run_ident,
)
from noderemedy_runner.machines.release import LeftOnNode

ROOT = Path(__file__).resolve().parents[3]
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


FINAL_OK = nf(
    "Final",
    "Recovery",
    (ISO, PM_OFF, PM_ON, REC),
    conditions=(cond("Succeeded", "True", "RemediationFinished"),),
)
DONE = nf("Done", "PowerManagement", (ISO, PM_OFF, PM_ON))
RECOVERED = nf("Done", "Recovery", (ISO, PM_OFF, PM_ON, REC))
STORAGE_ONLY = nf(
    "Running", "Isolation", (ISO,), conditions=(cond("WorkloadsReleased", "True", FENCED_STORAGE_RELEASED),)
)

# (id, status, cleanup, observations, expected kind, expected reason, {path: value})
TABLE: list[tuple[str, NodeFenceStatus, CleanupStatus, CleanupObservations, str, str, dict[str, Any]]] = [
    ("no-finalizer", DONE, CleanupStatus(), ob(has_finalizer=False), "none", "FinalizerRemoved", {}),
    ("new/nothing-done", nf(), CleanupStatus(), ob(), "remove_finalizer", CLEANUP_FINISHED, {}),
    (
        "new/someone-elses-taint",
        nf(),
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "final/recovered",
        FINAL_OK,
        CleanupStatus(),
        ob(node_ready=True),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "final/recovered/a-later-taint-is-not-its",
        FINAL_OK,
        CleanupStatus(),
        ob(node_ready=True, taint_present=True, left_on_node=EMPTY),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "isolation/committed/not-ready",
        nf("New", current_run=committed(ISO, "Isolation")),
        CleanupStatus(),
        ob(),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "isolation/said/not-ready",
        nf("New", current_run=committed(ISO, "Isolation")),
        CleanupStatus(waiting=f"waiting for node {NODE} to be Ready"),
        ob(),
        "wait",
        CLEANUP_WAITING,
        {},
    ),
    (
        "running/ready/unfence",
        nf("Running", "Isolation", (ISO,)),
        CleanupStatus(),
        ob(node_ready=True),
        "run_step",
        "CleanupUnfence",
        {"ident": cleanup_ident(NAME, "Unfence", 0), "methods": [("undo-fc-off", "fc", "on")]},
    ),
    (
        "running/no-node",
        nf("Running", "Isolation", (ISO,)),
        CleanupStatus(),
        ob(node_exists=False),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "pm/off-committed/power-on",
        nf("Running", "PowerManagement", (ISO,), current_run=committed(PM_OFF, "PowerManagement")),
        CleanupStatus(),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {"methods": [("undo-pdu-off", "pdu", "on")]},
    ),
    (
        "pm/on-committed/power-on",
        nf("Running", "PowerManagement", (ISO, PM_OFF), current_run=committed(PM_ON, "PowerManagement", 1)),
        CleanupStatus(),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {"ident": cleanup_ident(NAME, "PowerOn", 0)},
    ),
    (
        "pm/failed/error/power-on",
        nf(
            "Error",
            "PowerManagement",
            (ISO, PM_OFF, PM_ON),
            conditions=(cond("Processing", "False", "FenceAgentFailed"),),
        ),
        CleanupStatus(),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {},
    ),
    (
        "done/not-ready/waits",
        DONE,
        CleanupStatus(),
        ob(taint_present=True),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "done/tainted/not-looked",
        DONE,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "done/tainted/left",
        DONE,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=LEFT),
        "write_status",
        CLEANUP_WAITING,
        {"message~": "1 pod(s)"},
    ),
    (
        "done/tainted/detached/unfence",
        DONE,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "run_step",
        "CleanupUnfence",
        {},
    ),
    (
        "done/unfenced/untaint",
        DONE,
        CleanupStatus(done=("Unfence",)),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "untaint_out_of_service",
        "NodeRecovered",
        {},
    ),
    (
        "done/unfenced/untainted/go",
        DONE,
        CleanupStatus(done=("Unfence",)),
        ob(node_ready=True),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "recovered/untaint",
        RECOVERED,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "untaint_out_of_service",
        "NodeRecovered",
        {},
    ),
    (
        "recovered/left/waits",
        RECOVERED,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=LEFT),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "storage-only/stale",
        STORAGE_ONLY,
        CleanupStatus(),
        ob(node_ready=True, stale_on_node=("ns/db-0",)),
        "write_status",
        CLEANUP_WAITING,
        {"message~": "kubelet"},
    ),
    (
        "storage-only/stopped/unfence",
        STORAGE_ONLY,
        CleanupStatus(),
        ob(node_ready=True, stale_on_node=()),
        "run_step",
        "CleanupUnfence",
        {},
    ),
    (
        "result/ok/power-on",
        nf("Running", "PowerManagement", (PM_OFF,)),
        CleanupStatus(),
        ob(result=StepResult(cleanup_ident(NAME, "PowerOn", 0), True)),
        "write_status",
        CLEANUP_STEP_SUCCEEDED,
        {"cleanup.done": ["PowerOn"]},
    ),
    (
        "powered-on/go",
        nf("Running", "PowerManagement", (PM_OFF,)),
        CleanupStatus(done=("PowerOn",)),
        ob(),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "result/ok/unfence",
        nf("Running", "Isolation", (ISO,)),
        CleanupStatus(),
        ob(node_ready=True, result=StepResult(cleanup_ident(NAME, "Unfence", 0), True)),
        "write_status",
        CLEANUP_STEP_SUCCEEDED,
        {"cleanup.done": ["Unfence"]},
    ),
    (
        "result/failed",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(),
        ob(result=StepResult(cleanup_ident(NAME, "PowerOn", 0), False, message="BMC said no")),
        "write_status",
        CLEANUP_STEP_FAILED,
        {"cleanup.attempts": 1, "message~": "BMC said no"},
    ),
    (
        "retry/delay",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(attempts=1, not_before=NOW + 3),
        ob(),
        "wait",
        "CleanupRetryDelay",
        {"seconds": 3.0},
    ),
    (
        "retry/new-ident",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(attempts=1, not_before=NOW - 1),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {"ident": cleanup_ident(NAME, "PowerOn", 1)},
    ),
    (
        "timeout/power",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(),
        ob(now=DELETED + 600),
        "remove_finalizer",
        CLEANUP_TIMED_OUT,
        {"left~": "power not switched back on: pdu-off"},
    ),
    (
        "timeout/taint",
        DONE,
        CleanupStatus(done=("Unfence",)),
        ob(now=DELETED + 601, taint_present=True),
        "remove_finalizer",
        CLEANUP_TIMED_OUT,
        {"left~": "out-of-service taint"},
    ),
    (
        "config-error",
        DONE,
        CleanupStatus(),
        ob(config_error="fence-config-worker-1: not found"),
        "write_status",
        CLEANUP_WAITING,
        {"message~": "cannot be read"},
    ),
    (
        "config-error/timeout",
        DONE,
        CleanupStatus(),
        ob(now=DELETED + 600, config_error="fence-config-worker-1: not found"),
        "remove_finalizer",
        CLEANUP_TIMED_OUT,
        {"left~": "fence-config-worker-1: not found"},
    ),
]


def _get(action: Action, path: str) -> Any:
    if path == "ident":
        return action.ident
    if path == "seconds":
        return action.seconds
    if path == "methods":
        return [(m["name"], m["device_type"], m["action"]) for m in action.extravars["methods"]]
    if path == "left~":
        return "; ".join(action.extravars["left"])
    assert action.status is not None
    if path == "message~":
        return next(c["message"] for c in action.status["conditions"] if c["type"] == "Processing")
    head, tail = path.split(".")
    return action.status[head][tail]


@pytest.mark.parametrize(
    ("status", "cleanup", "obs", "kind", "reason", "fields"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_cleanup_table(
    status: NodeFenceStatus,
    cleanup: CleanupStatus,
    obs: CleanupObservations,
    kind: str,
    reason: str,
    fields: dict[str, Any],
) -> None:
    action = decide_cleanup(NAME, status, cleanup, obs, CONFIG, POLICY)
    assert (action.kind, action.reason) == (kind, reason), action
    for path, want in fields.items():
        got = _get(action, path)
        if path.endswith("~"):
            assert want in got, (path, got)
        else:
            assert got == want, (path, got)
    if kind == "run_step":
        assert all(m["action"] == "on" for m in action.extravars["methods"])
        assert action.extravars["release_workloads"] is False
    if kind == "remove_finalizer":
        assert action.extravars["finalizer"] == FINALIZER
        assert bool(action.extravars["left"]) == (reason == CLEANUP_TIMED_OUT)
    if kind == "write_status":
        assert action.status is not None
        assert NodeFenceStatus.from_dict(action.status).jobs == status.jobs  # the flow's record kept
        CleanupStatus.from_dict(action.status["cleanup"])


def test_the_finalizer_goes_on_before_any_device_action() -> None:
    assert all(needs_finalizer(k) for k in ("run_step", "run_remedy", "taint_out_of_service"))
    assert not any(needs_finalizer(k) for k in ("write_status", "wait", "none", "verify_fence"))


def test_cleanup_status_round_trip_and_errors() -> None:
    s = CleanupStatus(done=("PowerOn",), attempts=2, not_before=float(T0), waiting="w")
    assert CleanupStatus.from_dict(s.to_dict()) == s
    assert CleanupStatus.from_dict(None) == CleanupStatus()
    with pytest.raises(ValueError, match="status.cleanup.done"):
        CleanupStatus.from_dict({"done": ["Reboot"]})
    with pytest.raises(ValueError, match="status.cleanup.attempts"):
        CleanupStatus.from_dict({"attempts": -1})


def test_the_crd_schema_holds_the_cleanup_status() -> None:
    crd = yaml.safe_load((ROOT / "deploy/crds/remediation.noderemedy.io_nodefences.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    cleanup = schema["properties"]["status"]["properties"]["cleanup"]["properties"]
    full = CleanupStatus(done=CLEANUP_PARTS, attempts=1, not_before=1.0, waiting="w").to_dict()
    assert set(full) == set(cleanup)
    assert tuple(cleanup["done"]["items"]["enum"]) == CLEANUP_PARTS


def test_a_long_name_gives_a_bounded_ident() -> None:
    assert len(cleanup_ident("n" * 253, "PowerOn", 9)) <= 253


# --- properties: a NodeFence deleted anywhere in its flow ---------------------------------------------
def _flow(world: World, steps: int) -> tuple[NodeFenceStatus, float]:
    """The NodeFence machine for ``steps`` decisions in ``world`` (as nodefence_world.run does):
    the status it left and the time."""
    status, now = NodeFenceStatus(), float(T0)
    result: StepResult | None = None
    fence: FenceReading | None = None
    for _ in range(steps):
        obs = NodeFenceObservations(
            node=NODE, now=now, node_ready=world.node_ready, not_ready_since=None if world.node_ready else float(T0),
            taint_present=world.taint, fence=fence, result=result, generation=1, left_on_node=EMPTY if world.taint else None,
        )  # fmt: skip
        action = decide(NAME, status, obs, CONFIG, POLICY)
        if action.kind == "none":
            break
        if action.kind == "write_status":
            assert action.status is not None
            status = NodeFenceStatus.from_dict(action.status)
        elif action.kind == "run_step":
            result = world.run_step(action, now)
            fence = result.fence if result.ok else None
            if action.extravars.get("release_workloads") and fence is not None and fence.licenses_taint(NODE):
                world.taint = True  # the run released on the fence it verified (fence_step.yml)
        elif action.kind == "verify_fence":
            fence = world.verify(action, now)
        elif action.kind == "taint_out_of_service":
            world.taint = True
        elif action.kind == "untaint_out_of_service":
            world.taint = False
        elif action.kind == "wait":
            now += action.seconds
    return status, now


@settings(max_examples=300, deadline=None)
@given(
    fails=st.lists(st.booleans(), min_size=1, max_size=12).map(tuple),
    revive=st.booleans(),
    steps=st.integers(0, 40),
    returns_after=st.one_of(st.none(), st.integers(0, 30)),
    pods=st.integers(0, 8),
    attached=st.integers(0, 8),
    cleanup_fails=st.lists(st.booleans(), min_size=1, max_size=6).map(tuple),
    crash_at=st.sets(st.integers(0, 60), max_size=5),
)
def test_a_deleted_nodefence_leaves_the_node_consistent(
    fails: tuple[bool, ...],
    revive: bool,
    steps: int,
    returns_after: int | None,
    pods: int,
    attached: int,
    cleanup_fails: tuple[bool, ...],
    crash_at: set[int],
) -> None:
    world = World(fails, revive)
    status, now = _flow(world, steps)
    flow_powered_off = any(a == "off" for _r, _n, a in world.power_log)
    deleted_at = now
    cleanup = CleanupStatus()
    result: StepResult | None = None
    looks, runs, finished = 0, 0, None
    for i in range(400):
        if world.power_on and returns_after is not None and looks >= returns_after:
            world.node_ready = True
        if not world.power_on:
            world.node_ready = False
        left = LeftOnNode(("ns/p",) * min(pods, 1), ("va",) * min(attached, 1)) if world.taint else None
        obs = CleanupObservations(
            node=NODE, now=now, deleted_at=deleted_at, node_ready=world.node_ready, taint_present=world.taint,
            left_on_node=left if world.node_ready else None, result=result,
        )  # fmt: skip
        looks += 1
        pods, attached = max(0, pods - 1), max(0, attached - 1)
        action = decide_cleanup(NAME, status, cleanup, obs, CONFIG, POLICY)
        if action.kind == "remove_finalizer":
            finished = action
            break
        if action.kind == "write_status":
            assert action.status is not None
            if i not in crash_at:  # a crash before the write lands
                status = NodeFenceStatus.from_dict(action.status)
                cleanup = CleanupStatus.from_dict(action.status["cleanup"])
        elif action.kind == "run_step":
            methods = action.extravars["methods"]
            assert all(m["action"] == "on" for m in methods), "the cleanup never switches anything off"
            if any(m["device_type"] == "fc" for m in methods):  # unfencing storage: recovery's rules
                assert world.node_ready and (not world.taint or (left is not None and left.empty))
            ok = not cleanup_fails[runs % len(cleanup_fails)]
            runs += 1
            if ok:
                for m in methods:
                    if m["device_type"] == "fc":
                        world.fc_up = True
                    else:
                        world.power_on = True
            result = StepResult(str(action.ident), ok, message="" if ok else "device said no")
        elif action.kind == "untaint_out_of_service":
            assert world.node_ready and left is not None and left.empty, "the taint went before the detach"
            world.taint = False
        elif action.kind == "wait":
            now += action.seconds
        else:
            raise AssertionError(f"unexpected cleanup action {action}")
        if i in crash_at:
            result = None
    assert finished is not None, "the cleanup never let go"
    if finished.reason == CLEANUP_FINISHED:
        assert world.power_on or not flow_powered_off, "let go of a node it left powered off"
        assert world.fc_up and not world.taint, (world, status)
    else:
        assert finished.reason == CLEANUP_TIMED_OUT
        assert now >= deleted_at + POLICY.recovery_timeout_seconds, "let go before the timeout"
        assert finished.extravars["left"]
    # the node could come back and the devices answered: everything undone in time
    if returns_after is not None and not any(cleanup_fails):
        assert finished.reason == CLEANUP_FINISHED, (finished, world, status)


def test_a_crash_between_run_and_write_replays_the_same_ident() -> None:
    status = nf("Running", "PowerManagement", (ISO, PM_OFF))
    first = decide_cleanup(NAME, status, CleanupStatus(), ob(), CONFIG, POLICY)
    again = decide_cleanup(NAME, status, CleanupStatus(), ob(), CONFIG, POLICY)
    assert first == again and first.ident == cleanup_ident(NAME, "PowerOn", 0)
    done = decide_cleanup(
        NAME, status, CleanupStatus(), ob(result=StepResult(str(first.ident), True)), CONFIG, POLICY
    )
    assert done.kind == "write_status" and done.status is not None
    assert done.status["cleanup"]["done"] == ["PowerOn"]


def _power_config(isolation: str, power_management: str) -> FenceConfig:
    data = {
        "config.properties": f"node_name={NODE}\nisolation={isolation}\n"
        f"power_management={power_management}\nrecovery=ipmi-on",
        "fence-method-ipmi-off": "template=fence-method-template-ipmi\naction=off",
        "fence-method-ipmi-on": "template=fence-method-template-ipmi\naction=on",
        "fence-method-ipmi-reboot": "template=fence-method-template-ipmi\naction=reboot",
    }
    templates = {
        "fence-method-template-ipmi": {
            "template.properties": "type=ipmi\naddress=127.0.0.1:16001\nsecret=bmc"
        }
    }
    return parse_fence_config(f"fence-config-{NODE}", data, templates, node=NODE)


@pytest.mark.parametrize(
    ("isolation", "power_management", "jobs", "power_on"),
    [
        # the power went off in Isolation and nothing of the flow switched it on before Done
        ("ipmi-off", "", (ISO,), True),
        # PowerManagement switched it off and left it off (fence-agents' ``off``): Recovery would
        ("", "ipmi-off", (PM_OFF,), True),
        # off, then on again in the same step: on at Done
        ("", "ipmi-off ipmi-on", (PM_OFF, PM_ON), False),
        # off in Isolation, a reboot in PowerManagement: on at Done
        ("ipmi-off", "ipmi-reboot", (ISO, PM_OFF), False),
    ],
)
def test_a_flow_done_with_its_power_left_off_is_switched_on_when_deleted(
    isolation: str, power_management: str, jobs: tuple[str, ...], power_on: bool
) -> None:
    """At Done (waiting for the node to be Ready before Recovery) the power is on only when a
    finished step of the flow switched it back on after its ``off``; a NodeFence deleted then
    switches on what is still off, or the node could never turn Ready and the cleanup would wait
    for it until the recovery timeout."""
    config = _power_config(isolation, power_management)
    status = nf("Done", "PowerManagement", jobs)
    action = decide_cleanup(NAME, status, CleanupStatus(), ob(), config, POLICY)
    if power_on:
        assert (action.kind, action.reason) == ("run_step", "CleanupPowerOn"), action
        assert [m["action"] for m in action.extravars["methods"]] == ["on"]
    else:
        assert (action.kind, action.reason) != ("run_step", "CleanupPowerOn"), action
