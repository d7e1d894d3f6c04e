"""Safe return and the release rate limit: the pure pieces (which pods and VolumeAttachments a
released node still has, the sliding window of releases) and what the NodeFence machine does with
them (recovery and the removal of the taint wait; a held release never holds the fencing)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from _nodefence_helpers import VERIFIED, cstat, observe, run_ref, status, written
from nodefence_world import NAME, NODE, T0, fence_config

from noderemedy_runner.loops.release import ReleaseLedger
from noderemedy_runner.machines.conditions import Condition
from noderemedy_runner.machines.nodefence import (
    RELEASE_RATE_LIMITED,
    RELEASE_RECHECK_SECONDS,
    WAITING_FOR_DETACH,
    WORKLOADS_RELEASED,
    NodeFencePolicy,
    decide,
)
from noderemedy_runner.machines.release import (
    Admission,
    LeftOnNode,
    RateHold,
    Release,
    admit,
    attachments_on,
    old_pods,
    tolerates_for_good,
)

POLICY = NodeFencePolicy(grace_seconds=60, recovery_timeout_seconds=600)
CONFIG = fence_config()
NOW = float(T0 + 10_000)
BEFORE = "2023-11-14T22:00:00Z"  # before T0 + 10_000 - 100 (the fence's start in these tests)
AFTER = "2023-11-15T01:00:00Z"
START = NOW - 100


def pod(name: str, node: str = NODE, created: str = BEFORE, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "app", "creationTimestamp": created}
    meta.update(spec.pop("meta", {}))
    return {"metadata": meta, "spec": {"nodeName": node, **spec}, "status": spec.pop("status", {})}


OOS_FOREVER = {"key": "node.kubernetes.io/out-of-service", "operator": "Exists", "effect": "NoExecute"}


# --- which pods the release waits for ---------------------------------------------------------------
def test_old_pods_are_the_ones_the_taint_gets_rid_of() -> None:
    pods = [
        pod("web-0"),
        pod("elsewhere", node="worker-2"),
        pod("kube-proxy-mirror", meta={"annotations": {"kubernetes.io/config.mirror": "abc"}}),
        pod("tolerates", tolerations=[OOS_FOREVER]),
        pod("tolerates-all", tolerations=[{"operator": "Exists"}]),
        pod("tolerates-300s", tolerations=[{**OOS_FOREVER, "tolerationSeconds": 300}]),
        pod("tolerates-terminating", tolerations=[OOS_FOREVER], meta={"deletionTimestamp": BEFORE}),
        pod("new-after-fence", created=AFTER),
        pod(
            "daemonset-pod",  # the DaemonSet controller's own tolerations, none of out-of-service
            tolerations=[
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            ],
            meta={"ownerReferences": [{"kind": "DaemonSet", "name": "ds"}]},
        ),
    ]
    pods[0]["status"] = {"phase": "Running"}
    finished = pod("job-done")
    finished["status"] = {"phase": "Succeeded"}
    assert old_pods([*pods, finished], NODE, START) == (
        "app/daemonset-pod",
        "app/tolerates-300s",
        "app/tolerates-terminating",
        "app/web-0",
    )
    # without a start time, pods of any age count (what a release evicts, for the rate limit)
    assert "app/new-after-fence" in old_pods(pods, NODE, None)


def test_tolerations_match_the_taint_as_the_taint_eviction_controller_does() -> None:
    assert tolerates_for_good({"spec": {"tolerations": [OOS_FOREVER]}})
    assert tolerates_for_good(
        {"spec": {"tolerations": [{"key": OOS_FOREVER["key"], "value": "nodeshutdown"}]}}
    )
    assert not tolerates_for_good({"spec": {"tolerations": [{"key": OOS_FOREVER["key"], "value": "x"}]}})
    assert not tolerates_for_good({"spec": {"tolerations": [{**OOS_FOREVER, "effect": "NoSchedule"}]}})
    assert not tolerates_for_good({"spec": {"tolerations": [{"key": "", "operator": "Equal"}]}})
    assert not tolerates_for_good({"spec": {}})


def test_volume_attachments_naming_the_node() -> None:
    vas = [
        {"metadata": {"name": "csi-b"}, "spec": {"nodeName": NODE}},
        {"metadata": {"name": "csi-a", "deletionTimestamp": BEFORE}, "spec": {"nodeName": NODE}},
        {"metadata": {"name": "csi-c"}, "spec": {"nodeName": "worker-2"}},
    ]
    assert attachments_on(vas, NODE) == ("csi-a", "csi-b")


def test_left_on_node_summary_counts_everything_and_names_a_few() -> None:
    left = LeftOnNode(tuple(f"app/p{i}" for i in range(5)), ("csi-1",))
    assert not left.empty and LeftOnNode().empty
    assert left.summary() == "5 pod(s) (app/p0, app/p1, app/p2, +2 more), 1 VolumeAttachment(s) (csi-1)"
    assert LeftOnNode().summary() == "0 pod(s), 0 VolumeAttachment(s)"


# --- the release rate limit ------------------------------------------------------------------------
def test_admit_keeps_the_window_at_or_below_the_limit() -> None:
    t = 1000.0
    assert admit([], "a", 50, t, 0) == Admission(True, 0)  # no limit
    assert admit([], "a", 50, t, 10) == Admission(True, 0)  # empty window: a big node still goes
    done = [Release("a", t - 50, 6), Release("b", t - 20, 3)]
    assert admit(done, "c", 1, t, 10) == Admission(True, 9)
    # 2 more would be 11: wait until a's 6 leave the window (at t + 10)
    assert admit(done, "c", 2, t, 10) == Admission(False, 9, pytest.approx(10.0))
    # 8 more: even without a's 6 it would be 11, so wait until b leaves too (at t + 40)
    assert admit(done, "c", 8, t, 10) == Admission(False, 9, pytest.approx(40.0))
    # 20 more than the whole limit: waits for an empty window, then goes
    assert admit(done, "c", 20, t, 10).retry_seconds == pytest.approx(40.0)
    assert admit(done, "c", 20, t + 41, 10).allowed
    # releases outside the window do not count; a node already released is not counted twice
    assert admit([Release("a", t - 60, 10)], "c", 10, t, 10).allowed
    assert admit(done, "b", 5, t, 10).allowed
    with pytest.raises(ValueError, match="limit -1"):
        admit([], "a", 1, t, -1)


# --- the machine: safe return ------------------------------------------------------------------------
LEFT = LeftOnNode((), ("csi-1",))


def test_recovery_waits_while_a_volume_attachment_names_the_node() -> None:
    s = status("Done", "PowerManagement", start_time=START)
    obs = observe(node_ready=True, not_ready_since=None, taint_present=True, left_on_node=LEFT)
    action = decide(NAME, s, obs, CONFIG, POLICY)
    new = written(action)
    assert action.reason == WAITING_FOR_DETACH and new.current_run is None and new.step == "PowerManagement"
    assert cstat(new, "Processing") == ("True", WAITING_FOR_DETACH)
    proc = next(c for c in new.conditions if c.type == "Processing")
    assert proc.message == (
        f"the out-of-service taint stays and recovery waits until the old pods of node {NODE} are gone "
        "and its volumes detached: 0 pod(s), 1 VolumeAttachment(s) (csi-1) left"
    )
    # said once; then it looks again, however long it takes (no timeout into a restart)
    later = observe(
        node_ready=True, not_ready_since=None, taint_present=True, left_on_node=LEFT, now=NOW + 10_000
    )
    again = decide(NAME, new, later, CONFIG, POLICY)
    assert (again.kind, again.seconds, again.reason) == ("wait", RELEASE_RECHECK_SECONDS, WAITING_FOR_DETACH)
    # a changed count is written again
    more = observe(
        node_ready=True,
        not_ready_since=None,
        taint_present=True,
        left_on_node=LeftOnNode(("app/db-0",), ("csi-1",)),
    )
    assert "1 pod(s) (app/db-0), 1 VolumeAttachment(s)" in str(
        written(decide(NAME, new, more, CONFIG, POLICY)).to_dict()
    )
    # detached: recovery starts
    gone = observe(node_ready=True, not_ready_since=None, taint_present=True, left_on_node=LeftOnNode())
    started = written(decide(NAME, new, gone, CONFIG, POLICY))
    assert started.current_run == run_ref("Recovery") and started.step == "Recovery"


def test_recovery_never_starts_blind_and_not_tainted_means_nothing_to_wait_for() -> None:
    s = status("Done", "PowerManagement", start_time=START)
    blind = decide(NAME, s, observe(node_ready=True, taint_present=True), CONFIG, POLICY)
    assert (blind.kind, blind.reason) == ("wait", WAITING_FOR_DETACH)
    # no taint: nothing was released, pods on the node are its own (no observation needed)
    untainted = written(decide(NAME, s, observe(node_ready=True), CONFIG, POLICY))
    assert untainted.current_run == run_ref("Recovery")


def test_the_taint_stays_after_recovery_until_nothing_is_left() -> None:
    s = status("Done", "Recovery", start_time=START)
    held = decide(NAME, s, observe(node_ready=True, taint_present=True, left_on_node=LEFT), CONFIG, POLICY)
    assert held.kind == "write_status" and held.reason == WAITING_FOR_DETACH
    go = decide(
        NAME, s, observe(node_ready=True, taint_present=True, left_on_node=LeftOnNode()), CONFIG, POLICY
    )
    assert go.kind == "untaint_out_of_service"
    # no recovery methods: the same wait before the taint goes
    no_recovery = replace(fence_config(), recovery=())
    s2 = status("Done", "PowerManagement", start_time=START)
    obs = observe(node_ready=True, taint_present=True, left_on_node=LEFT)
    assert decide(NAME, s2, obs, no_recovery, POLICY).reason == WAITING_FOR_DETACH


# --- the machine: a release held by the rate limit -----------------------------------------------------
HOLD = RateHold("the release of node worker-1 (4 pods) waits", 30.0)


def test_a_held_release_is_said_once_and_the_fencing_goes_on() -> None:
    s = status("Running", "Isolation", start_time=START)
    obs = observe(fence=VERIFIED, release_hold=HOLD)
    new = written(decide(NAME, s, obs, CONFIG, POLICY))
    assert cstat(new, WORKLOADS_RELEASED) == ("False", RELEASE_RATE_LIMITED)
    # said: the flow goes on to PowerManagement, which runs without releasing
    nxt = written(decide(NAME, new, obs, CONFIG, POLICY))
    assert nxt.current_run is not None and nxt.current_run.step == "PowerManagement"
    run = decide(NAME, nxt, obs, CONFIG, POLICY)
    assert run.kind == "run_step" and run.extravars["release_workloads"] is False
    without_hold = decide(NAME, nxt, observe(fence=VERIFIED), CONFIG, POLICY)
    assert without_hold.kind == "run_step" and without_hold.extravars["release_workloads"] is True


def test_a_held_release_caps_every_wait_then_releases_and_says_so() -> None:
    s = status("Done", "PowerManagement", start_time=START, last_transition_time=NOW - 10)
    s = written(decide(NAME, s, observe(fence=VERIFIED, release_hold=HOLD), CONFIG, POLICY))
    waiting = decide(NAME, s, observe(fence=VERIFIED, release_hold=HOLD), CONFIG, POLICY)
    assert (waiting.kind, waiting.seconds) == ("wait", 30.0)  # not the 590 s until the recovery timeout
    released = decide(NAME, s, observe(fence=VERIFIED), CONFIG, POLICY)
    assert released.kind == "taint_out_of_service"
    after = written(decide(NAME, s, observe(taint_present=True), CONFIG, POLICY))
    assert cstat(after, WORKLOADS_RELEASED) == ("True", "Released")


def test_an_admin_confirmation_waits_for_the_rate_limit_too() -> None:
    s = status("Running", "PowerManagement", start_time=START)
    first = decide(NAME, s, observe(down_confirmed=True, release_hold=HOLD), CONFIG, POLICY)
    s2 = written(first)
    assert cstat(s2, WORKLOADS_RELEASED) == ("False", RELEASE_RATE_LIMITED)
    again = decide(NAME, s2, observe(down_confirmed=True, release_hold=HOLD), CONFIG, POLICY)
    assert (again.kind, again.seconds) == ("wait", 30.0)
    assert decide(NAME, s2, observe(down_confirmed=True), CONFIG, POLICY).kind == "taint_out_of_service"


def test_a_node_back_before_its_release_ends_not_released() -> None:
    held = Condition(WORKLOADS_RELEASED, "False", RELEASE_RATE_LIMITED, "waits", float(T0), 1)
    s = status("Done", "Recovery", conditions=(held,))
    final = written(decide(NAME, s, observe(node_ready=True), CONFIG, POLICY))
    assert final.status == "Final" and cstat(final, WORKLOADS_RELEASED) == ("False", "NotReleased")


# --- the reconciler's ledger ------------------------------------------------------------------------
class Pods:
    """The one KubeIO call the ledger makes."""

    def __init__(self, pods: dict[str, int]) -> None:
        self.pods = pods
        self.calls = 0

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        self.calls += 1
        return [pod(f"{node}-{i}", node=node) for i in range(self.pods[node])]


def test_ledger_counts_the_pods_at_release_and_holds_the_next_node() -> None:
    kube: Any = Pods({"a": 3, "b": 2})
    ledger = ReleaseLedger(4)
    assert ledger.hold(kube, "a", 1000.0) is None  # 3 of 4
    assert ledger.hold(kube, "a", 1001.0) is None  # the same node again: not counted twice
    hold = ledger.hold(kube, "b", 1010.0)
    assert hold is not None and hold.retry_seconds == pytest.approx(50.0)
    assert hold.message == (
        "the release of node b (2 pods) waits: 3 pods released in the last 60 s, limit 4 per minute "
        "(--max-pods-released-per-minute); next try in 50 s. The fencing goes on meanwhile"
    )
    assert ledger.hold(kube, "b", 1060.5) is None  # a's release left the window
    assert ReleaseLedger(0).hold(kube, "a", 0.0) is None and kube.calls == 4  # no limit: no listing
    with pytest.raises(ValueError, match="max pods released per minute = -1"):
        ReleaseLedger(-1)


# --- a storage-only release: recovery waits for the kubelet to stop the released pods -----------------
def pod_of(name: str, uid: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "demo", "uid": uid, "annotations": annotations}}


def test_stale_pods_are_those_the_kubelet_runs_and_the_api_deleted() -> None:
    from noderemedy_runner.machines.release import stale_pods

    running = [pod_of("web-0", "u-old"), pod_of("cache-0", "u-c"), pod_of("etcd-n1", "static-hash")]
    api = [
        pod_of("cache-0", "u-c"),
        pod_of("etcd-n1", "mirror-uid", **{"kubernetes.io/config.mirror": "static-hash"}),
    ]
    assert stale_pods(running, api) == ("demo/web-0",)
    assert stale_pods(running, [*api, pod_of("web-0", "u-old")]) == ()
    assert stale_pods([], api) == ()


def test_a_storage_only_release_keeps_the_storage_fenced_until_the_kubelet_stopped_its_pods() -> None:
    from noderemedy_runner.machines.actions import FenceReading
    from noderemedy_runner.machines.nodefence import FENCED_STORAGE_RELEASED, WAITING_FOR_KUBELET, StepResult

    storage = FenceReading(NODE, True, "storage_isolated", "fc-off", NOW)
    run = run_ref("Isolation")
    s = status("New", "Isolation", current_run=run, start_time=START)
    result = StepResult(run.ident, True, fence=storage, released_storage=("demo/web-0",))
    s = written(decide(NAME, s, observe(result=result, fence=storage), CONFIG, POLICY))
    assert cstat(s, WORKLOADS_RELEASED) == ("True", FENCED_STORAGE_RELEASED)
    # no power step: Done, then the node comes back Ready (a healed partition)
    done = replace(s, status="Done", step="PowerManagement", current_run=None, last_transition_time=NOW - 10)
    back = {"node_ready": True, "fence": storage}  # the storage fence still reads back disabled
    not_looked = decide(NAME, done, observe(**back), CONFIG, POLICY)
    assert (not_looked.kind, not_looked.reason) == ("wait", WAITING_FOR_KUBELET)
    waiting = written(decide(NAME, done, observe(**back, stale_on_node=("demo/web-0",)), CONFIG, POLICY))
    processing = next(c for c in waiting.conditions if c.type == "Processing")
    assert (processing.status, processing.reason) == ("True", WAITING_FOR_KUBELET)
    assert "1 still running (demo/web-0)" in processing.message
    again = decide(NAME, waiting, observe(**back, stale_on_node=("demo/web-0",)), CONFIG, POLICY)
    assert (again.kind, again.reason) == ("wait", WAITING_FOR_KUBELET)  # said once
    stopped = written(decide(NAME, waiting, observe(**back, stale_on_node=()), CONFIG, POLICY))
    assert stopped.step == "Recovery" and stopped.current_run is not None  # the storage may come back


def test_a_release_stamped_after_the_askers_clock_reading_still_counts() -> None:
    """Two NodeFences reconciled at once each read the clock, then ask the ledger; the second to
    ask may hold the earlier reading. The first one's release must still count against it (and
    must not be pruned by it): both at once would pass the limit."""
    t = 1000.0
    late = admit([Release("a", t + 0.02, 2)], "b", 2, t, 3)
    assert not late.allowed and late.used == 2 and late.retry_seconds == pytest.approx(60.02)
    ledger = ReleaseLedger(3)
    assert ledger.ask("a", 2, t + 0.02).allowed  # asked first, with the later clock reading
    held = ledger.ask("b", 2, t)  # asked second, with the earlier one
    assert not held.allowed and held.used == 2
    assert ledger.ask("a", 2, t).allowed, "a's own release is still on record"
