"""Start guards (pure): maintenance, another remediator's medik8s Lease, etcd quorum, one
control-plane node at a time, the power fencing limit; and how the NodeFence machine holds on them."""

from __future__ import annotations

from typing import Any

import pytest
from nodefence_world import NAME, NODE, T0, fence_config

from noderemedy_runner.machines.conditions import find_condition
from noderemedy_runner.machines.guards import (
    LEASE_HOLDER,
    Fleet,
    Hold,
    Peer,
    foreign_holder,
    is_control_plane,
    lease_valid,
    maintenance_of,
    medik8s_lease_name,
    start_hold,
)
from noderemedy_runner.machines.nodefence import (
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    decide,
)

CP = frozenset({"cp-0", "cp-1", "cp-2"})


def peer(node: str, created: float, **kw: Any) -> Peer:
    return Peer(node=node, created=created, name=f"nf-{node}", control_plane=node in CP, **kw)


def test_maintenance_by_nodemaintenance_or_annotation() -> None:
    node = {"metadata": {"name": "w1", "annotations": {}}}
    nm = {"metadata": {"name": "nm-w1"}, "spec": {"nodeName": "w1", "reason": "new DIMM"}}
    assert maintenance_of(node, [nm]) == "NodeMaintenance nm-w1: new DIMM"
    assert (
        maintenance_of(node, [{**nm, "metadata": {"name": "x", "deletionTimestamp": "2024-01-01T00:00:00Z"}}])
        is None
    )
    assert maintenance_of(node, [{"metadata": {"name": "o"}, "spec": {"nodeName": "w2"}}]) is None
    annotated = {"metadata": {"name": "w1", "annotations": {"remediation.noderemedy.io/maintenance": "True"}}}
    assert maintenance_of(annotated, []) == "annotation remediation.noderemedy.io/maintenance=true"
    hold = start_hold("w1", "nf", T0, "Isolation", Fleet(maintenance={"w1": "NodeMaintenance nm-w1"}))
    assert hold == Hold(
        "NodeUnderMaintenance", "node w1 is under maintenance (NodeMaintenance nm-w1): it is not fenced"
    )


def test_medik8s_lease_convention() -> None:
    assert medik8s_lease_name("Worker-1") == "node-worker-1"
    lease = {
        "spec": {
            "holderIdentity": "NodeHealthCheck",
            "renewTime": "2023-11-14T22:13:20.000000Z",
            "leaseDurationSeconds": 60,
        }
    }
    renew = 1_700_000_000.0
    assert lease_valid(lease, renew + 30) and not lease_valid(lease, renew + 61)
    assert not lease_valid(lease, renew - 1)  # renewed in the future: not valid (medik8s)
    assert foreign_holder(lease, renew + 1) == "NodeHealthCheck"
    ours = {"spec": {**lease["spec"], "holderIdentity": LEASE_HOLDER}}
    assert foreign_holder(ours, renew + 1) is None and foreign_holder(None, renew) is None
    assert not lease_valid({"spec": {"holderIdentity": "x"}}, renew)
    hold = start_hold("w1", "nf", T0, "Isolation", Fleet(foreign_leases={"w1": "NodeHealthCheck"}))
    assert hold is not None and hold.reason == "LeaseHeld" and "medik8s-leases/node-w1" in hold.message


@pytest.mark.parametrize(
    ("ready", "expect"),
    [
        ({"cp-1", "cp-2"}, None),  # one of three down: quorum holds without it
        ({"cp-1"}, "EtcdQuorumGuard"),  # two down: cp-0's member may be the quorum's second
        (set(), None),  # all down: quorum is lost whatever cp-0 does; fencing one at a time helps
    ],
)
def test_etcd_quorum_guard(ready: set[str], expect: str | None) -> None:
    fleet = Fleet(control_plane=CP, ready=frozenset(ready))
    hold = start_hold("cp-0", "nf-cp-0", T0, "Isolation", fleet)
    assert (hold.reason if hold else None) == expect


def test_three_control_plane_nodes_failing_at_once_one_goes_first() -> None:
    """Each NodeFence sees the other two waiting; only the oldest may start, whatever the order
    in which the three are decided, and once it started the others wait for it."""
    peers = (peer("cp-0", T0 + 1, waiting_for="Isolation"), peer("cp-1", T0 + 2, waiting_for="Isolation"),
             peer("cp-2", T0 + 3, waiting_for="Isolation"))  # fmt: skip
    fleet = Fleet(control_plane=CP, peers=peers)
    decided = {p.node: start_hold(p.node, p.name, p.created, "Isolation", fleet) for p in peers}
    assert decided["cp-0"] is None
    for node in ("cp-1", "cp-2"):
        assert decided[node] == Hold(
            "ControlPlaneRemediationInProgress",
            "control-plane node cp-0 goes first: one control-plane node at a time",
        )
    started = Fleet(control_plane=CP, peers=(peer("cp-0", T0 + 1, started=True), *peers[1:]))
    hold = start_hold("cp-1", "nf-cp-1", T0 + 2, "Isolation", started)
    assert (
        hold is not None
        and hold.message == "control-plane node cp-0 is being remediated: one control-plane node at a time"
    )
    # workers are not affected by control-plane remediations
    assert start_hold("w1", "nf-w1", T0, "Isolation", started) is None


def test_power_fencing_limit() -> None:
    busy = Fleet(peers=(peer("w2", T0, power=True),))
    hold = start_hold("w1", "nf-w1", T0 + 5, "PowerManagement", busy)
    assert hold == Hold("PowerFencingLimit", "at most 1 node(s) power-fenced at a time: w2 first")
    assert start_hold("w1", "nf-w1", T0 + 5, "PowerManagement", busy, max_power_fencing=2) is None
    assert start_hold("w1", "nf-w1", T0 + 5, "Isolation", busy) is None  # isolation is not power fencing
    queued = Fleet(
        peers=(
            peer("w2", T0, waiting_for="PowerManagement"),
            peer("w3", T0 + 9, waiting_for="PowerManagement"),
        )
    )
    assert start_hold("w1", "nf-w1", T0 + 5, "PowerManagement", queued) is not None  # w2 is older
    assert start_hold("w2", "nf-w2", T0, "PowerManagement", queued) is None
    with pytest.raises(ValueError, match="max_power_fencing = 0"):
        start_hold("w1", "nf", T0, "PowerManagement", Fleet(), max_power_fencing=0)
    with pytest.raises(ValueError, match="NodeFencePolicy.max_power_fencing = 0"):
        NodeFencePolicy(max_power_fencing=0)


def test_is_control_plane() -> None:
    assert is_control_plane({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}})
    assert not is_control_plane({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}})


# --- the machine holds before starting a step, never touching a device -----------------------
HOLD = Hold("NodeUnderMaintenance", "node worker-1 is under maintenance (x): it is not fenced")


def obs(**kw: Any) -> NodeFenceObservations:
    base: dict[str, Any] = {
        "node": NODE,
        "now": float(T0 + 1000),
        "node_ready": False,
        "not_ready_since": float(T0),
        "generation": 1,
    }
    base.update(kw)
    return NodeFenceObservations(**base)


@pytest.mark.parametrize(("phase", "step"), [("New", "Isolation"), ("Running", "PowerManagement")])
def test_a_held_step_is_not_started_and_the_reason_is_in_processing(phase: str, step: str) -> None:
    cfg, policy = fence_config(), NodeFencePolicy()
    s = NodeFenceStatus(status=phase, observed_generation=1)  # type: ignore[arg-type]
    action = decide(NAME, s, obs(start_holds={step: HOLD}), cfg, policy)
    assert action.kind == "write_status" and action.reason == "NodeUnderMaintenance"
    held = NodeFenceStatus.from_dict(action.status)
    cond = find_condition(held.conditions, "Processing")
    assert cond is not None and (cond.status, cond.reason, cond.message) == (
        "False",
        HOLD.reason,
        HOLD.message,
    )
    assert held.current_run is None and held.status == phase
    again = decide(NAME, held, obs(start_holds={step: HOLD}), cfg, policy)
    assert again.kind == "wait" and again.reason == "NodeUnderMaintenance"
    released = decide(NAME, held, obs(), cfg, policy)
    assert (
        released.kind == "write_status" and NodeFenceStatus.from_dict(released.status).current_run is not None
    )
    # a held NodeFence whose node comes back goes on as usual (Final / Done), held or not
    back = decide(
        NAME, held, obs(node_ready=True, not_ready_since=None, start_holds={step: HOLD}), cfg, policy
    )
    assert back.kind == "write_status" and back.reason in ("NodeHealthy", "NodeReady")


def test_a_released_node_no_longer_counts_as_power_fenced() -> None:
    """peer_of: a NodeFence in its PowerManagement step counts against the limit until its node
    carries the out-of-service taint (it is then verifiably off; its power-on disrupts nothing)."""
    from noderemedy_runner.loops.interop import peer_of
    from noderemedy_runner.machines.nodefence import RunRef

    def nodefence(node: str, status: NodeFenceStatus) -> dict[str, Any]:
        meta = {"name": f"nf-{node}", "uid": f"u-{node}", "creationTimestamp": "2026-11-28T10:00:00Z"}
        return {"metadata": meta, "spec": {"node": node}, "status": status.to_dict()}

    run = RunRef("nf-w2-r0-power-management-a0-s1", "PowerManagement", 0, 0.0, segment=1, segments=2)
    powering = nodefence("w2", NodeFenceStatus(status="Running", current_run=run, observed_generation=1))
    before = peer_of(powering, frozenset(), max_restarts=3)
    after = peer_of(powering, frozenset(), max_restarts=3, released=frozenset({"w2"}))
    assert before is not None and before.power and before.started
    assert after is not None and not after.power and after.started
    fleet = Fleet(peers=(before,))
    assert start_hold("w1", "nf-w1", T0, "PowerManagement", fleet) is not None
    assert start_hold("w1", "nf-w1", T0, "PowerManagement", Fleet(peers=(after,))) is None
    # another node's taint does not free this one's slot
    other = peer_of(powering, frozenset(), max_restarts=3, released=frozenset({"w9"}))
    assert other is not None and other.power
    # a NodeFence waiting for its power step still queues ahead, released nodes or not
    waiting = nodefence("w3", NodeFenceStatus(status="Running", observed_generation=1))
    queued = peer_of(waiting, frozenset(), max_restarts=3, released=frozenset({"w3"}))
    assert queued is not None and queued.waiting_for == "PowerManagement" and not queued.power


@pytest.mark.parametrize(
    ("holds", "holder", "expect"),
    [
        ({}, None, {}),
        ({}, "NodeHealthCheck", {"Isolation": "LeaseHeld", "PowerManagement": "LeaseHeld"}),
        ({"Isolation": HOLD}, None, {"Isolation": "NodeUnderMaintenance"}),
    ],
)
def test_a_step_start_reads_the_medik8s_lease_once_for_its_guard_and_its_write(
    monkeypatch: pytest.MonkeyPatch, holds: dict[str, Hold], holder: str | None, expect: dict[str, str]
) -> None:
    """claim_start reads the node's medik8s Lease once and hands that read to both the guard
    (start_holds) and the write (take_medik8s_lease, conditional on it); a held step writes
    nothing. The write's conditions against a real API server: tests/integration/test_runner_guards.py."""
    from noderemedy_runner.loops import interop

    lease = {"metadata": {"resourceVersion": "7"}, "spec": {"holderIdentity": "noderemedy-runner"}}
    calls: list[tuple[str, Any]] = []

    def read(api: Any, node: str) -> dict[str, Any]:
        calls.append(("read", node))
        return lease

    def guard(
        kube: Any, obj: Any, node: str, now: float, restarts: int, limit: int, seen: Any
    ) -> dict[str, Hold]:
        calls.append(("guard", seen))
        return holds

    def take(api: Any, node_obj: Any, now: float, current: Any) -> str | None:
        calls.append(("take", current))
        return holder

    monkeypatch.setattr(interop, "read_medik8s_lease", read)
    monkeypatch.setattr(interop, "start_holds", guard)
    monkeypatch.setattr(interop, "take_medik8s_lease", take)
    kube: Any = type("Kube", (), {"api": object()})()
    obj = {"metadata": {"name": NAME}, "spec": {"node": NODE}}
    got = interop.claim_start(kube, obj, {"metadata": {"name": NODE}}, T0, 3, 48)
    assert {step: h.reason for step, h in got.items()} == expect
    assert calls[:2] == [("read", NODE), ("guard", lease)]
    assert calls[2:] == ([] if holds else [("take", lease)])
    if holder:
        assert holder in got["Isolation"].message
    # no Node: nothing to own the Lease, so none is written
    calls.clear()
    assert interop.claim_start(kube, obj, None, T0, 3, 48) == holds
    assert [c[0] for c in calls] == ["read", "guard"]
