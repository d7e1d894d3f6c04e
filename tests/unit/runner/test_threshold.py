"""The threshold a NodeFence records (spec.threshold): read back, the node judged by it, and the
NodeFence and remedy machines deciding "healthy" by it -- a Ready node with DiskPressure stays
unhealthy until DiskPressure clears; a NodeFence made by hand is judged by Ready as before."""

from __future__ import annotations

from typing import Any

import pytest
from _nodefence_helpers import CONFIG, NOW, POLICY, STORAGE_VERIFIED, observe, run_ref, status, written
from nodefence_world import NAME, NODE, T0

from noderemedy_runner.config.fence import parse_fence_config
from noderemedy_runner.config.remedy import Threshold
from noderemedy_runner.loops.thresholds import RELEASE_READY_NODE, with_ready_node_release
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.conditions import format_time
from noderemedy_runner.machines.nodefence import StepResult, decide
from noderemedy_runner.machines.remedies import ChainRemedy, RemedyStatus
from noderemedy_runner.machines.threshold import (
    ThresholdError,
    judge,
    threshold_from_spec,
    threshold_spec,
)

DISK = Threshold("DiskPressure", frozenset({"True"}), 600.0)
KERNEL = Threshold("KernelDeadlock", frozenset({"True"}), 30.0)
READY = Threshold("Ready", frozenset({"False", "Unknown"}), 300.0)
SINCE = float(T0)
#: isolation=fc-off only: a storage fence, no power management (the design's storage-fence remedy)
STORAGE_ONLY = parse_fence_config(
    f"fence-config-{NODE}",
    {
        "config.properties": f"node_name={NODE}\nisolation=fc-off\npower_management=\nrecovery=fc-on\n"
        "fenced_storage=hostpath:/mnt/san",
        "fence-method-fc-off": "template=fence-method-template-fc\nplug=3\naction=off",
        "fence-method-fc-on": "template=fence-method-template-fc\nplug=3\naction=on",
    },
    {"fence-method-template-fc": {"template.properties": "type=fc\naddress=127.0.0.1:16014\nsecret=fc"}},
    node=NODE,
)


def node(**conds: str | None) -> dict[str, Any]:
    """A Node with these conditions (type → status), each changed at T0."""
    return {
        "metadata": {"name": NODE},
        "status": {
            "conditions": [
                {"type": t, "status": s, "lastTransitionTime": format_time(SINCE)}
                for t, s in conds.items()
                if s is not None
            ]
        },
    }


def test_spec_round_trip_and_refusals() -> None:
    spec = {"node": NODE, "threshold": threshold_spec(DISK)}
    assert spec["threshold"] == {
        "conditionType": "DiskPressure",
        "statuses": ["True"],
        "periodSeconds": 600.0,
    }
    assert threshold_from_spec(spec) == DISK
    assert threshold_from_spec({"node": NODE}) is None  # made by hand: judged by Ready
    for bad, field in (
        ({"conditionType": "", "statuses": ["True"]}, "spec.threshold.conditionType"),
        ({"conditionType": "DiskPressure", "statuses": []}, "spec.threshold.statuses"),
        ({"conditionType": "DiskPressure", "statuses": ["true"]}, "spec.threshold.statuses"),
        ({"conditionType": "Ready", "statuses": ["True"]}, "spec.threshold.statuses"),
        ({"conditionType": "DiskPressure", "statuses": ["True"], "periodSeconds": -1}, "periodSeconds"),
        ("DiskPressure", "spec.threshold"),
    ):
        with pytest.raises(ThresholdError, match=field.replace(".", r"\.")):
            threshold_from_spec({"threshold": bad})


@pytest.mark.parametrize(
    ("conds", "healthy", "since"),
    [
        ({"Ready": "True", "DiskPressure": "True"}, False, SINCE),  # Ready, but the threshold holds
        ({"Ready": "True", "DiskPressure": "False"}, True, None),
        ({"Ready": "True"}, True, None),  # the condition is gone
        # a dead node's conditions read Unknown (node lifecycle controller): no recovery
        ({"Ready": "Unknown", "DiskPressure": "Unknown"}, False, SINCE),
        ({"Ready": "False", "DiskPressure": "False"}, False, SINCE),
    ],
)
def test_judge_by_the_threshold_and_ready(conds: dict[str, str], healthy: bool, since: float | None) -> None:
    h = judge(node(**conds), DISK)
    assert (h.healthy, h.unhealthy_since) == (healthy, since)
    assert "DiskPressure" in h.why


def test_judge_a_missing_node_and_a_ready_threshold() -> None:
    assert not judge(None, DISK).healthy
    assert judge(node(Ready="True"), READY).healthy
    assert not judge(node(Ready="Unknown"), READY).healthy


def disk_obs(pressure: bool, **kw: Any) -> Any:
    """A Ready node judged by the DiskPressure threshold."""
    h = judge(node(Ready="True", DiskPressure="True" if pressure else "False"), DISK)
    kw.setdefault("node_ready", True)
    return observe(not_ready_since=None, healthy=h.healthy, unhealthy_since=h.unhealthy_since, **kw)


def test_a_ready_node_with_disk_pressure_is_fenced_not_finished() -> None:
    """Before: a DiskPressure NodeFence of a Ready node ended Final/NodeHealthy at once."""
    action = decide(NAME, status("New"), disk_obs(True), STORAGE_ONLY, POLICY)
    assert (action.kind, action.reason) == ("write_status", "StartIsolation")
    # judged by Ready alone (a NodeFence made by hand), the same node is healthy: as before
    by_ready = decide(NAME, status("New"), observe(node_ready=True, not_ready_since=None), CONFIG, POLICY)
    assert (by_ready.reason, written(by_ready).status) == ("NodeHealthy", "Final")


def test_the_grace_period_counts_from_the_threshold_condition() -> None:
    obs = disk_obs(True, now=SINCE + 10)
    action = decide(NAME, status("New"), obs, STORAGE_ONLY, POLICY)
    assert (action.kind, action.reason, action.seconds) == ("wait", "GracePeriod", POLICY.grace_seconds - 10)


def test_storage_fence_then_done_until_disk_pressure_clears_then_recovery() -> None:
    ref = run_ref("Isolation", config=STORAGE_ONLY)
    running = status("New", current_run=ref, start_time=NOW)
    result = StepResult(ref.ident, True, fence=STORAGE_VERIFIED, released_storage=("app/web-0",))
    after = written(decide(NAME, running, disk_obs(True, result=result), STORAGE_ONLY, POLICY))
    assert after.status == "Running" and after.current_run is None
    # DiskPressure still True: not healthy; no power management methods → Done (not powered off)
    held = STORAGE_VERIFIED  # the fence that run read back, held by the reconciler
    done = written(decide(NAME, after, disk_obs(True, fence=held), STORAGE_ONLY, POLICY))
    assert (done.status, done.step) == ("Done", "PowerManagement")
    waiting = decide(NAME, done, disk_obs(True, fence=held), STORAGE_ONLY, POLICY)
    assert (waiting.kind, waiting.reason) == ("wait", "WaitNodeReady")
    # DiskPressure cleared: recovery (fc-on) starts, once the kubelet runs none of the released pods
    cleared = decide(NAME, done, disk_obs(False, fence=held, stale_on_node=()), STORAGE_ONLY, POLICY)
    assert (cleared.kind, cleared.reason) == ("write_status", "StartRecovery")


def test_a_pod_remedy_waits_for_the_threshold_to_clear() -> None:
    chain = (ChainRemedy("repair", 60.0, pod=True), ChainRemedy("fence"))
    cur = RemedyStatus("repair", 0, NOW - 5, 60.0, "nf-remedy-repair", "Succeeded")
    s = status("New", remedy=cur, start_time=NOW - 5)
    still = decide(NAME, s, disk_obs(True), CONFIG, POLICY, chain=chain)
    assert (still.kind, still.reason) == ("wait", "WaitNodeHealthy")
    done = decide(NAME, s, disk_obs(False), CONFIG, POLICY, chain=chain)
    assert (done.reason, written(done).status) == ("NodeHealthy", "Final")
    # the first remedy starts on a Ready node whose threshold holds
    start = decide(NAME, status("New"), disk_obs(True), CONFIG, POLICY, chain=chain)
    assert start.reason == "RemedyStarted"


def test_release_on_a_ready_node_only_for_other_conditions_than_ready() -> None:
    step = Action(
        kind="run_step", playbook="fence_step.yml", extravars={"node": NODE, "release_workloads": True}
    )
    assert with_ready_node_release(step, DISK).extravars[RELEASE_READY_NODE] is True
    assert with_ready_node_release(step, KERNEL).extravars[RELEASE_READY_NODE] is True
    assert RELEASE_READY_NODE not in with_ready_node_release(step, READY).extravars
    assert RELEASE_READY_NODE not in with_ready_node_release(step, None).extravars
    no_release = Action(kind="run_step", playbook="fence_step.yml", extravars={"node": NODE})
    assert RELEASE_READY_NODE not in with_ready_node_release(no_release, DISK).extravars


def test_the_crd_carries_spec_threshold_as_the_detector_writes_it() -> None:
    from test_crd_files import load, schema

    from noderemedy_runner.config.remedy import CONDITION_STATUSES
    from noderemedy_runner.machines.threshold import _CONDITION_TYPE

    spec = schema(load("remediation.noderemedy.io_nodefences.yaml"))["properties"]["spec"]
    props = spec["properties"]["threshold"]["properties"]
    assert set(props) == set(threshold_spec(DISK))
    assert tuple(props["statuses"]["items"]["enum"]) == CONDITION_STATUSES
    assert props["conditionType"]["pattern"] == _CONDITION_TYPE.pattern
    assert spec["required"] == ["node"]  # a NodeFence made by hand needs no threshold
