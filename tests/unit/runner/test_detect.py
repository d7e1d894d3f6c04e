"""Detection (pure): thresholds for their period, flapping, exclusions, pause, one NodeFence per
node, cancel of a not-yet-started NodeFence, storm guard and other remediators' Leases."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.config.remedy import (
    ConfigurationSet,
    IntOrPercent,
    RemedyConfiguration,
    StormGuard,
    Threshold,
    parse_configurations,
)
from noderemedy_runner.machines.detection import (
    EXCLUDE_LABEL,
    MEDIK8S_EXCLUDE_LABEL,
    PAUSE_ANNOTATION,
    FenceInfo,
    NodeCondition,
    NodeInfo,
    assess,
    plan,
)

NOW = 1_000_000.0
READY_DOWN = Threshold("Ready", frozenset({"False", "Unknown"}), 30.0)
OPEN_GUARD = StormGuard(max_unhealthy=IntOrPercent(100, True), cooldown=0)


def cfgs(
    guard: StormGuard = OPEN_GUARD, pause: tuple[str, ...] = (), selector_text: str | None = None
) -> ConfigurationSet:
    cfg = RemedyConfiguration("test", None, (READY_DOWN,), guard, pause)
    if selector_text is not None:
        from noderemedy_runner.config.remedy import parse_selector_string

        cfg = RemedyConfiguration(
            "test", parse_selector_string(selector_text, "t"), (READY_DOWN,), guard, pause
        )
    return ConfigurationSet((cfg,))


def node(
    name: str, status: str = "True", since: float | None = NOW - 3600, labels=None, annotations=None
) -> NodeInfo:
    return NodeInfo(name, labels or {}, annotations or {}, (NodeCondition("Ready", status, since),))


def fence(
    name: str, phase: str = "New", started: bool = False, terminal: bool = False, finished_at=None
) -> FenceInfo:
    return FenceInfo(name, name, phase, started, terminal, finished_at)


def test_not_ready_for_period_gets_a_nodefence() -> None:
    p = plan([node("a", "False", NOW - 30), node("b")], cfgs(), [], NOW)
    assert [a.node for a in p.create] == ["a"]
    assert p.create[0].threshold == READY_DOWN and p.create[0].since == NOW - 30


def test_before_period_nothing_and_next_check_is_the_remaining_time() -> None:
    p = plan([node("a", "Unknown", NOW - 20)], cfgs(), [], NOW)
    assert p.create == () and p.next_check == 10.0
    assert p.assessments["a"].matching and not p.assessments["a"].unhealthy


def test_flapping_restarts_the_period() -> None:
    # lastTransitionTime moved by the last Ready→NotReady change, 5 s ago
    assert plan([node("a", "False", NOW - 5)], cfgs(), [], NOW).create == ()
    # the API says NotReady since long ago, but we saw it Ready 10 s ago (coalesced flap)
    p = plan([node("a", "False", NOW - 300)], cfgs(), [], NOW, last_healthy={"a": NOW - 10})
    assert p.create == () and p.assessments["a"].since == NOW - 10
    # a last healthy sighting older than the transition does not matter
    assert (
        len(plan([node("a", "False", NOW - 300)], cfgs(), [], NOW, last_healthy={"a": NOW - 900}).create) == 1
    )


def test_missing_transition_time_counts_from_now() -> None:
    assert plan([node("a", "False", None)], cfgs(), [], NOW).create == ()


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["True", "False", "Unknown"]), st.floats(0, 120)), min_size=1, max_size=12
    ),
    st.dictionaries(st.integers(0, 11), st.floats(0, 120), max_size=12),
)
def test_property_no_fence_for_a_node_healthy_within_its_period(conds, seen) -> None:
    nodes = [node(f"n{i}", s, NOW - age) for i, (s, age) in enumerate(conds)]
    last_healthy = {f"n{i}": NOW - age for i, age in seen.items()}
    p = plan(nodes, cfgs(), [], NOW, last_healthy=last_healthy)
    created = {a.node for a in p.create}
    assert len(created) == len(p.create)  # at most one per node
    for i, (status, age) in enumerate(conds):
        name = f"n{i}"
        healthy_recently = (
            status == "True" or age < 30 or (name in last_healthy and NOW - last_healthy[name] < 30)
        )
        if healthy_recently:
            assert name not in created
        else:
            assert name in created


def test_exclude_labels_and_pause() -> None:
    nodes = [
        node("ours", "False", NOW - 60, labels={EXCLUDE_LABEL: "true"}),
        node("medik8s", "False", NOW - 60, labels={MEDIK8S_EXCLUDE_LABEL: "true"}),
        node("paused", "False", NOW - 60, annotations={PAUSE_ANNOTATION: "firmware upgrade"}),
        node("other", "False", NOW - 60, labels={EXCLUDE_LABEL: "false"}),
    ]
    p = plan(nodes, cfgs(), [], NOW)
    assert [a.node for a in p.create] == ["other"]
    reasons = {r.node: r.reason for r in p.refused}
    assert reasons == {"ours": "Excluded", "medik8s": "Excluded", "paused": "Paused"}
    assert MEDIK8S_EXCLUDE_LABEL in next(r.message for r in p.refused if r.node == "medik8s")
    p = plan([node("a", "False", NOW - 60)], cfgs(pause=("maintenance window",)), [], NOW)
    assert p.create == () and p.refused[0].reason == "Paused" and "maintenance window" in p.refused[0].message


def test_one_nodefence_per_node() -> None:
    down = node("a", "False", NOW - 60)
    for f in (fence("a"), fence("a", "Running", True), fence("a", "Error", True)):
        assert plan([down], cfgs(), [f], NOW).create == ()
    # finished after the node went down: that fence was for this failure
    assert plan([down], cfgs(), [fence("a", "Final", True, True, NOW - 10)], NOW).create == ()
    # finished before this failure began: replaced by a new one
    p = plan([down], cfgs(), [fence("a", "Final", True, True, NOW - 600)], NOW)
    assert [a.node for a in p.create] == ["a"] and p.replace == ("a",)
    # Error with its restart limit reached stays for the admin
    p = plan([down], cfgs(), [fence("a", "Error", True, True, NOW - 600)], NOW)
    assert p.create == () and p.refused[0].reason == "RestartLimitReached"


def test_cancel_only_unstarted_new_fence_of_a_ready_node() -> None:
    assert plan([node("a")], cfgs(), [fence("a")], NOW).cancel == (fence("a"),)
    assert plan([node("a")], cfgs(), [fence("a", started=True)], NOW).cancel == ()
    assert plan([node("a")], cfgs(), [fence("a", "Running", True)], NOW).cancel == ()
    # still NotReady (even inside the period): not cancelled
    assert plan([node("a", "False", NOW - 5)], cfgs(), [fence("a")], NOW).cancel == ()


def test_storm_guard_blocks_new_fencing_with_reason() -> None:
    guard = StormGuard(max_unhealthy=IntOrPercent(40, True), cooldown=60)
    nodes = [node("a", "False", NOW - 60), node("b", "Unknown", NOW - 60), node("c")]
    p = plan(nodes, cfgs(guard), [fence("a", "Running", True)], NOW)
    assert p.create == ()
    assert [(r.node, r.reason) for r in p.refused] == [("b", "StormGuard")]
    st_ = p.storms["test"]
    assert st_.active and st_.unhealthy == 2 and st_.total == 3 and st_.allowed == 1
    assert "2 of 3 nodes unhealthy" in p.refused[0].message
    # share drops: cooldown, then resume
    nodes2 = [node("a", "False", NOW - 60), node("b", "Unknown", NOW - 60), node("c")]
    p2 = plan(nodes2[:1] + [node("b")] + nodes2[2:], cfgs(guard), [], NOW + 10, p.storms)
    assert p2.storms["test"].reason == "Cooldown" and p2.create == () and p2.next_check == 60.0
    p3 = plan(nodes2[:1] + [node("b")] + nodes2[2:], cfgs(guard), [], NOW + 70, p2.storms)
    assert [a.node for a in p3.create] == ["a"]


def test_storm_counts_nodes_before_their_period() -> None:
    """b dropped 5 s ago (not due) but is counted: a, due, is not fenced ahead of the storm."""
    guard = StormGuard(max_unhealthy=IntOrPercent(40, True), cooldown=60)
    p = plan([node("a", "False", NOW - 60), node("b", "False", NOW - 5), node("c")], cfgs(guard), [], NOW)
    assert p.create == () and [(r.node, r.reason) for r in p.refused] == [("a", "StormGuard")]
    assert p.unhealthy["test"] == ("a", "b")


def test_other_remediator_lease() -> None:
    p = plan([node("a", "False", NOW - 60)], cfgs(), [], NOW, foreign_leases={"a": "self-node-remediation"})
    assert p.create == () and p.refused[0].reason == "LeaseHeld"


def test_selector_limits_the_nodes() -> None:
    nodes = [node("a", "False", NOW - 60, labels={"type": "compute"}), node("b", "False", NOW - 60)]
    p = plan(nodes, cfgs(selector_text="type=compute"), [], NOW)
    assert [a.node for a in p.create] == ["a"]
    assert p.storms["test"].total == 1
    assert assess(nodes[1], None, NOW).config is None


def test_other_condition_threshold() -> None:
    cs = parse_configurations(
        "apiVersion: node-remedy/v1alpha\nkind: Configuration\nthresholdConfigs:\n"
        "- {nodeConditionType: DiskPressure, nodeConditionStatus: true, nodeConditionPeriod: 10m}\n"
        "stormGuard: {maxUnhealthy: 1}\n",
        "t",
    )
    n = NodeInfo(
        "a", {}, {}, (NodeCondition("Ready", "True", 0), NodeCondition("DiskPressure", "True", NOW - 601))
    )
    assert [a.node for a in plan([n], cs, [], NOW).create] == ["a"]


def test_default_guard_on_a_single_node() -> None:
    """minHealthy 51% of 1 node needs 1 healthy node: a lone node is never fenced by default."""
    p = plan([node("a", "False", NOW - 600)], ConfigurationSet((RemedyConfiguration("d"),)), [], NOW)
    assert p.create == () and p.refused[0].reason == "StormGuard"


def test_from_objects() -> None:
    obj = {
        "metadata": {"name": "n1", "uid": "u", "labels": {"x": "y"}, "annotations": {PAUSE_ANNOTATION: "r"}},
        "spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "X", "status": "True", "lastTransitionTime": "garbage"},
            ]
        },
    }
    n = NodeInfo.from_object(obj)
    assert (
        n.out_of_service
        and n.uid == "u"
        and n.condition("Ready") == NodeCondition("Ready", "Unknown", 1767225600.0)
    )
    assert n.condition("X") == NodeCondition("X", "True", None)
    f = FenceInfo.from_object({"metadata": {"name": "n1"}, "spec": {"node": "n1"}})
    assert (f.phase, f.started, f.terminal) == ("New", False, False)
    f = FenceInfo.from_object(
        {
            "metadata": {"name": "n1"},
            "spec": {"node": "n1"},
            "status": {"status": "New", "currentRun": {"ident": "x"}},
        }
    )
    assert f.started
    err = {
        "status": "Error",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Succeeded", "status": "False", "reason": "RestartLimitReached"}],
    }
    f = FenceInfo.from_object({"metadata": {"name": "n1"}, "spec": {"node": "n1"}, "status": err})
    assert f.terminal and f.finished_at == 1767225600.0
    f = FenceInfo.from_object(
        {"metadata": {"name": "n1"}, "spec": {"node": "n1"}, "status": {"status": "Error"}}
    )
    assert not f.terminal
