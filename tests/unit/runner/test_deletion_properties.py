"""Hypothesis properties of the cleanup of a deleted NodeFence (machines/deletion.py): a NodeFence
deleted at any point of its flow in the simulated world of nodefence_world.py -- the taint never
goes and storage is never unfenced while the node's old pods or VolumeAttachments remain, the
cleanup never switches anything off, and the finalizer never goes before the power is back on
unless the recovery timeout passed. Besides: a crash between a cleanup run and its status write
replays the same ident, and a flow done with its power left off has it switched on. The decision
table is in test_deletion.py."""

from __future__ import annotations

import pytest
from _deletion_helpers import CONFIG, EMPTY, ISO, PM_OFF, PM_ON, POLICY, nf, ob
from hypothesis import given, settings
from hypothesis import strategies as st
from nodefence_world import NAME, NODE, T0, World

from noderemedy_runner.config.fence import FenceConfig, parse_fence_config
from noderemedy_runner.machines.actions import FenceReading
from noderemedy_runner.machines.deletion import (
    CLEANUP_FINISHED,
    CLEANUP_TIMED_OUT,
    CleanupObservations,
    CleanupStatus,
    cleanup_ident,
    decide_cleanup,
)
from noderemedy_runner.machines.nodefence import NodeFenceObservations, NodeFenceStatus, StepResult, decide
from noderemedy_runner.machines.release import LeftOnNode


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
