"""The out-of-service guard (KEP-2268) and taint list arithmetic: pure logic, no network."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError
from ansible_collections.noderemedy.core.plugins.module_utils._taint import (
    OUT_OF_SERVICE_KEY,
    check_node_not_ready,
    desired_taints,
    is_out_of_service,
    ready_status,
    tolerates,
    validate_fence_evidence,
)

NOW = 1_800_000_000.0
OOS = {"key": OUT_OF_SERVICE_KEY, "value": "nodeshutdown", "effect": "NoExecute"}


def evidence(**over) -> dict:
    base = {
        "verified": True,
        "method": "ipmi",
        "target": "127.0.0.1:24100",
        "state": "off",
        "verified_at": NOW - 10,
    }
    base.update(over)
    return base


def test_valid_evidence_is_accepted_with_its_age():
    assert validate_fence_evidence(evidence(), 300, NOW)["age"] == 10
    assert validate_fence_evidence(evidence(method="fc", state="disabled"), 300, NOW)["method"] == "fc"
    assert validate_fence_evidence(evidence(method="pdu", plugs=["3"]), 300, NOW)["plugs"] == ["3"]
    # an admin's confirmation that the machine is down (stonith_admin --confirm)
    admin = evidence(method="admin", state="confirmed-down", target="annotation on NodeFence nf-1")
    assert validate_fence_evidence(admin, 300, NOW)["method"] == "admin"


@pytest.mark.parametrize(
    ("ev", "field"),
    [
        (None, "fence_evidence:"),
        ({}, "fence_evidence:"),
        (evidence(verified=False), "fence_evidence.verified"),
        (evidence(verified="true"), "fence_evidence.verified"),
        (evidence(method="ssh"), "fence_evidence.method"),
        (evidence(target=""), "fence_evidence.target"),
        (evidence(state="on"), "fence_evidence.state"),
        (evidence(state=None), "fence_evidence.state"),
        (evidence(method="fc", state="off"), "fence_evidence.state"),
        (evidence(method="admin", state="off"), "fence_evidence.state"),
        (evidence(method="admin", state="confirmed-down", verified=False), "fence_evidence.verified"),
        (evidence(verified_at=None), "fence_evidence.verified_at"),
        (evidence(verified_at=True), "fence_evidence.verified_at"),
        (evidence(verified_at="yesterday"), "fence_evidence.verified_at"),
        (evidence(verified_at=NOW - 301), "fence_evidence.verified_at"),
        (evidence(verified_at=NOW + 60), "fence_evidence.verified_at"),
    ],
)
def test_bad_evidence_is_refused_naming_the_field(ev, field):
    with pytest.raises(KubeError) as info:
        validate_fence_evidence(ev, 300, NOW)
    assert info.value.reason == "invalid"
    assert info.value.message.startswith(field), info.value.message


def node(ready: str | None) -> dict:
    conds = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conds.append({"type": "Ready", "status": ready})
    return {"metadata": {"name": "n1"}, "status": {"conditions": conds}}


def test_only_a_notready_node_may_be_taken_out_of_service():
    check_node_not_ready(node("False"))
    check_node_not_ready(node("Unknown"))
    for status in ("True", None):
        with pytest.raises(KubeError, match="n1: Ready is") as info:
            check_node_not_ready(node(status))
        assert info.value.reason == "conflict"
    assert ready_status(node(None)) == "Missing"


def test_adding_a_taint_sets_time_added_for_noexecute_and_is_idempotent():
    new, added, removed = desired_taints([], [OOS], "present", NOW)
    assert added == new == [{**OOS, "timeAdded": "2027-01-15T08:00:00Z"}]
    assert removed == []
    again = desired_taints(new, [OOS], "present", NOW + 100)
    assert again == (new, [], [])


def test_same_key_and_effect_replaces_the_value():
    current = [{"key": "k", "value": "a", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}]
    new, added, removed = desired_taints(
        current, [{"key": "k", "value": "b", "effect": "NoSchedule"}], "present", NOW
    )
    assert removed == [current[0]]
    assert added == [{"key": "k", "value": "b", "effect": "NoSchedule"}]
    assert current[1] in new and len(new) == 2


def test_removing_without_effect_removes_every_effect_of_the_key():
    current = [
        {"key": "k", "effect": "NoSchedule"},
        {"key": "k", "effect": "NoExecute"},
        {"key": "x", "effect": "NoSchedule"},
    ]
    new, added, removed = desired_taints(current, [{"key": "k"}], "absent", NOW)
    assert new == [current[2]] and added == [] and removed == current[:2]
    assert desired_taints(new, [{"key": "k"}], "absent", NOW) == (new, [], [])


def test_adding_without_effect_is_refused_naming_the_field():
    with pytest.raises(KubeError, match=r"taints\[0\].effect"):
        desired_taints([], [{"key": "k"}], "present", NOW)


def test_out_of_service_is_key_and_noexecute():
    assert is_out_of_service(OOS)
    assert not is_out_of_service({**OOS, "effect": "NoSchedule"})


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([], False),
        ([{"operator": "Exists"}], True),
        ([{"operator": "Exists", "effect": "NoSchedule"}], False),
        ([{"key": OUT_OF_SERVICE_KEY, "operator": "Exists"}], True),
        ([{"key": OUT_OF_SERVICE_KEY, "value": "nodeshutdown", "effect": "NoExecute"}], True),
        ([{"key": OUT_OF_SERVICE_KEY, "value": "other"}], False),
        ([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_tolerations_match_like_the_api(tolerations, expected):
    assert tolerates({"spec": {"tolerations": tolerations}}, OOS) is expected


@settings(deadline=None)
@given(
    keys=st.lists(st.sampled_from(["a", "b", "c"]), max_size=4),
    effects=st.lists(
        st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]), min_size=4, max_size=4
    ),
    values=st.lists(st.sampled_from(["", "x", "y"]), min_size=4, max_size=4),
)
def test_add_then_remove_round_trip(keys, effects, values):
    wanted = [{"key": k, "value": values[i], "effect": effects[i]} for i, k in enumerate(keys)]
    start = [{"key": "keep", "effect": "NoSchedule"}]
    added_list, _added, _removed = desired_taints(start, wanted, "present", NOW)
    # every (key, effect) appears once, and the last wanted value wins
    pairs = [(t["key"], t["effect"]) for t in added_list]
    assert len(pairs) == len(set(pairs))
    back, _added2, _removed2 = desired_taints(added_list, [{"key": k} for k in keys], "absent", NOW)
    assert back == start
