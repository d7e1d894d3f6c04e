"""The leader keeps its own replicas spread: the pure decision (which replica to evict, if any:
``machines/spread.py``) and its loop (``loops/respread.py``) against a fake CoreV1Api: the
Eviction it asks for, the wait for the Deployment to settle again, a 429 from the
PodDisruptionBudget asked again, the Event and the counter."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from noderemedy_runner.arguments import parse_args
from noderemedy_runner.kube.errors import classify
from noderemedy_runner.loops import respread
from noderemedy_runner.loops.respread import Respreader, in_cluster
from noderemedy_runner.machines.spread import (
    Eviction,
    NodeView,
    Placement,
    RunnerPod,
    Taint,
    Toleration,
    choose_eviction,
    eligible,
    node_view,
    placement_of,
    pod_view,
    settled,
)
from noderemedy_runner.metrics import Metrics

REAL = {"lab.noderemedy.io/real": "true"}
#: deploy/'s tolerations (+ the lab overlay's): unreachable/not-ready for 30 s, the lab's own taint
PLACEMENT = Placement(
    REAL,
    (
        Toleration("node.kubernetes.io/unreachable", "Exists", effect="NoExecute", seconds=30),
        Toleration("node.kubernetes.io/not-ready", "Exists", effect="NoExecute", seconds=30),
        Toleration("lab.noderemedy.io/real", "Equal", "true", "NoSchedule"),
    ),
)


def pod(name: str, node: str | None, created: float = 0.0, **kw: Any) -> RunnerPod:
    return RunnerPod(name, node, kw.pop("ready", True), created=created, **kw)


def node(name: str, **kw: Any) -> NodeView:
    return NodeView(name, kw.pop("ready", True), labels=kw.pop("labels", REAL), **kw)


NODES = [node("n0"), node("n1")]
SHARED = [pod("leader", "n1", 1.0), pod("old", "n1", 2.0)]


def decide(pods: list[RunnerPod], nodes: list[NodeView] = NODES, leader: str = "leader") -> Eviction | None:
    return choose_eviction(pods, nodes, leader=leader, placement=PLACEMENT)


def test_two_replicas_on_one_node_and_a_free_node_evict_the_standby() -> None:
    ev = decide(SHARED)
    assert ev == Eviction("old", "n1", 2, ("n0",))
    assert "old" in ev.describe() and "n1" in ev.describe() and "n0" in ev.describe()


def test_nothing_to_do_when_spread() -> None:
    assert decide([pod("leader", "n0"), pod("other", "n1")]) is None


def test_the_leader_is_never_evicted_even_when_newest() -> None:
    assert decide([pod("standby", "n1", 1.0), pod("leader", "n1", 9.0)]) == Eviction(
        "standby", "n1", 2, ("n0",)
    )


def test_only_the_leader_on_a_crowded_node_and_nobody_else_there_is_impossible_but_safe() -> None:
    # the leader alone on its node, two standbys elsewhere: the newest standby goes
    pods = [pod("leader", "n2"), pod("a", "n1", 1.0), pod("b", "n1", 5.0)]
    assert decide(pods, [*NODES, node("n2")]) == Eviction("b", "n1", 2, ("n0",))


def test_the_newest_pod_of_the_most_crowded_node() -> None:
    pods = [
        pod("leader", "n1"),
        pod("a", "n2", 3.0),
        pod("b", "n2", 7.0),
        pod("c", "n2", 5.0),
        pod("d", "n1", 9.0),
    ]
    ev = decide(pods, [*NODES, node("n2")])
    assert ev == Eviction("b", "n2", 3, ("n0",))


@pytest.mark.parametrize(
    "change",
    [
        {"ready": False},  # not Ready yet (or any more)
        {"terminating": True},  # an eviction or a rollout under way
        {"node": None, "ready": False, "phase": "Pending"},  # not scheduled yet
    ],
)
def test_nothing_while_the_deployment_is_not_settled(change: dict[str, Any]) -> None:
    pods = [*SHARED, replace(pod("third", "n0"), **change)]
    assert not settled(pods)
    assert decide([*SHARED[:1], replace(SHARED[1], **change), pod("x", "n1")]) is None
    # a pod that ended (kubelet eviction, phase Failed) is ignored: it runs nowhere
    ended = [*SHARED, pod("gone", "n0", ready=False, phase="Failed")]
    assert settled(ended) and decide(ended) == Eviction("old", "n1", 2, ("n0",))


@pytest.mark.parametrize(
    "n0",
    [
        node("n0", ready=False),
        node("n0", unschedulable=True),
        node("n0", taints=(Taint("node.kubernetes.io/out-of-service", "NoExecute", "nodeshutdown"),)),
        # tolerated for 30 s only: that delays an eviction, it does not make the node a place to run
        node("n0", ready=True, taints=(Taint("node.kubernetes.io/unreachable", "NoExecute"),)),
        node("n0", taints=(Taint("node.kubernetes.io/not-ready", "NoExecute"),)),
        node("n0", taints=(Taint("node.kubernetes.io/unschedulable", "NoSchedule"),)),
        node("n0", taints=(Taint("lab.noderemedy.io/real", "NoSchedule", "false"),)),  # other value
        node("n0", labels={}),  # the nodeSelector does not match
        node("n0", labels={"lab.noderemedy.io/real": "false"}),
    ],
)
def test_a_node_the_pod_may_not_run_on_is_not_a_place_to_go(n0: NodeView) -> None:
    assert not eligible(n0, PLACEMENT)
    assert decide(SHARED, [n0, node("n1")]) is None


@pytest.mark.parametrize(
    "taint",
    [
        Taint("lab.noderemedy.io/real", "NoSchedule", "true"),  # tolerated (Equal)
        Taint("example.com/soft", "PreferNoSchedule"),  # only a preference
    ],
)
def test_a_tolerated_or_soft_taint_leaves_a_node_eligible(taint: Taint) -> None:
    n0 = node("n0", taints=(taint,))
    assert eligible(n0, PLACEMENT)
    assert decide(SHARED, [n0, node("n1")]) == Eviction("old", "n1", 2, ("n0",))


def test_tolerations_match_as_kubernetes_matches_them() -> None:
    t = Taint("k", "NoSchedule", "v")
    assert Toleration(operator="Exists").tolerates(t)  # empty key + Exists: every taint
    assert not Toleration(operator="Equal").tolerates(t)
    assert Toleration("k", "Exists").tolerates(t)  # any effect, any value
    assert not Toleration("k", "Equal", "w").tolerates(t)
    assert not Toleration("k", "Exists", effect="NoExecute").tolerates(t)
    assert Toleration("k", "Exists", effect="NoExecute").tolerates(Taint("k", "NoExecute"))
    assert not Toleration("k", "Exists", effect="NoExecute", seconds=30).tolerates(Taint("k", "NoExecute"))


def test_nothing_when_no_free_eligible_node() -> None:
    # the only other node hosts a replica already: three on two nodes, as spread as they can be
    assert decide([*SHARED, pod("c", "n0")]) is None
    assert decide(SHARED, [node("n1")]) is None


def test_api_json_is_read() -> None:
    p = pod_view(
        {
            "metadata": {
                "name": "r-1",
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "deletionTimestamp": "x",
            },
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    assert (p.name, p.node, p.ready, p.terminating, p.phase) == ("r-1", "n1", True, True, "Running")
    assert p.created > 1.7e9
    n = node_view(
        {
            "metadata": {"name": "n1", "labels": REAL},
            "spec": {"unschedulable": True, "taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
        }
    )
    assert n == NodeView("n1", False, True, (Taint("a", "NoSchedule"),), REAL)
    pl = placement_of(
        {
            "spec": {
                "nodeSelector": REAL,
                "tolerations": [
                    {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
                ],
            }
        }
    )
    assert pl == Placement(REAL, (Toleration("k", "Exists", "", "NoExecute", 30.0),))


# --- the loop ---------------------------------------------------------------------------------------


def pod_json(
    name: str, node_name: str, created: str, ready: bool = True, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "creationTimestamp": created,
        "labels": {respread.NAME_LABEL: "runner"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node_name, "nodeSelector": REAL},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node_json(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": REAL},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


class FakeCore:
    """CoreV1Api's calls the loop makes, answering raw JSON as ``_preload_content=False`` does."""

    def __init__(self) -> None:
        self.pods = [
            pod_json("leader", "n1", "2026-11-27T10:00:00Z"),
            pod_json("standby", "n1", "2026-11-27T10:05:00Z"),
        ]
        self.nodes = [node_json("n0"), node_json("n1")]
        self.calls: list[tuple[str, Any]] = []
        self.refuse: int | None = None

    @staticmethod
    def raw(doc: Any) -> Any:
        return SimpleNamespace(data=json.dumps(doc).encode())

    def read_namespaced_pod(self, name: str, namespace: str, **kw: Any) -> Any:
        return self.raw(next(p for p in self.pods if p["metadata"]["name"] == name))

    def list_namespaced_pod(self, namespace: str, **kw: Any) -> Any:
        self.calls.append(("list pods", kw.get("label_selector")))
        return self.raw({"items": self.pods})

    def list_node(self, **kw: Any) -> Any:
        self.calls.append(("list nodes", kw.get("label_selector")))
        return self.raw({"items": self.nodes})

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any, **kw: Any) -> Any:
        self.calls.append(("evict", (name, namespace, body["apiVersion"], body["kind"])))
        if self.refuse:
            raise classify(ApiException(status=self.refuse, reason="Too Many Requests"), f"evict {name}")
        return self.raw({})


class FakeEvents:
    def __init__(self) -> None:
        self.recorded: list[tuple[Any, ...]] = []

    def record(self, obj: Any, type_: str, reason: str, message: str, **kw: Any) -> None:
        self.recorded.append((obj["kind"], obj["name"], type_, reason, message))


@pytest.fixture
def loop() -> tuple[Respreader, FakeCore, FakeEvents, Metrics]:
    core, events, metrics = FakeCore(), FakeEvents(), Metrics()
    r = Respreader(object(), pod_name="leader", namespace="ns", observer=metrics, events=events)  # type: ignore[arg-type]
    r.core = core  # type: ignore[assignment]
    return r, core, events, metrics


def test_the_loop_evicts_through_the_eviction_api_then_waits_for_the_deployment(loop: Any) -> None:
    r, core, events, metrics = loop
    assert r.once() == Eviction("standby", "n1", 2, ("n0",))
    assert ("list pods", "app.kubernetes.io/name=runner") in core.calls
    assert ("list nodes", "lab.noderemedy.io/real=true") in core.calls
    assert ("evict", ("standby", "ns", "policy/v1", "Eviction")) in core.calls
    assert events.recorded == [("Pod", "standby", "Normal", "ReplicaRespread", events.recorded[0][4])]
    assert metrics.registry.get_sample_value("noderemedy_replica_respreads_total", {"result": "evicted"}) == 1
    # the evicted pod terminating, then gone with its replacement not Ready yet: nothing more
    core.calls.clear()
    core.pods[1] = pod_json("standby", "n1", "2026-11-27T10:05:00Z", deleting=True)
    assert r.once() is None
    core.pods[1] = pod_json("new", "n1", "2026-11-27T10:06:00Z", ready=False)
    assert r.once() is None
    assert not [c for c in core.calls if c[0] != "list pods"]
    # settled and spread: done, nodes not even listed
    core.pods[1] = pod_json("new", "n0", "2026-11-27T10:06:00Z")
    assert r.once() is None
    assert not [c for c in core.calls if c[0] != "list pods"]


def test_a_refusal_of_the_pdb_is_asked_again_at_the_next_period(loop: Any) -> None:
    r, core, events, metrics = loop
    core.refuse = 429
    assert r.once() is None
    assert metrics.registry.get_sample_value("noderemedy_replica_respreads_total", {"result": "refused"}) == 1
    assert not events.recorded and r.waiting is None
    core.refuse = None
    assert r.once() is not None and len(events.recorded) == 1


def test_an_eviction_that_did_not_spread_backs_off(loop: Any) -> None:
    r, core, events, metrics = loop
    now = [100.0]
    r.clock = lambda: now[0]
    assert r.once() is not None  # first: at once
    core.pods[1] = pod_json("new", "n1", "2026-11-27T10:06:00Z")  # the replacement came back to n1
    assert r.once() is not None  # second: the backoff starts from here
    core.pods[1] = pod_json("newer", "n1", "2026-11-27T10:07:00Z")
    assert r.once() is None  # within the backoff
    now[0] += respread.PERIOD
    assert r.once() is not None  # third: one period after the second, the next two periods after it
    assert r.not_before == now[0] + 2 * respread.PERIOD
    # spread at last: the backoff is forgotten
    core.pods[1] = pod_json("newest", "n0", "2026-11-27T10:08:00Z")
    assert r.once() is None and r.backoff == 0


def test_dry_run_decides_and_evicts_nothing(loop: Any) -> None:
    r, core, events, metrics = loop
    r.dry_run = True
    assert r.once() == Eviction("standby", "n1", 2, ("n0",))
    assert not [c for c in core.calls if c[0] == "evict"] and not events.recorded


def test_it_runs_only_in_a_pod_and_the_flag_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.setenv("POD_NAMESPACE", "ns")
    assert in_cluster() is None
    monkeypatch.setenv("POD_NAME", "p")
    assert in_cluster() == ("p", "ns")
    assert parse_args(["--leader-elect"]).respread is True
    assert parse_args(["--leader-elect", "--no-respread"]).respread is False


def test_the_wait_for_the_deployment_ends_after_max_backoff(loop: Any) -> None:
    r, core, events, metrics = loop
    now = [100.0]
    r.clock = lambda: now[0]
    assert r.once() is not None
    # scaled down meanwhile: never as many pods as before; one pod left, nothing to spread
    core.pods = core.pods[:1]
    assert r.once() is None and r.waiting is not None
    now[0] += respread.MAX_BACKOFF
    assert r.once() is None and r.waiting is None
