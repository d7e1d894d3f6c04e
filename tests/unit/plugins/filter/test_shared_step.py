"""The filter ``noderemedy.core.shared_step``: which hosts of one shared PDU or FC switch call have
their whole fence step settled by it, each with its own plug's reading and evidence, and which of
them one ``node_release`` call releases. Pure logic, no network; the filter run by
``playbooks/fence_step.yml`` against the lab's devices: tests/integration/test_fence_step_shared.py
and test_fence_step_shared_release.py."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.noderemedy.core.plugins.filter.shared_step import FilterModule, shared_step

FENCE = {"verified": True, "method": "pdu", "target": "127.0.0.1:1161", "state": "off", "verified_at": 5.0,
         "plugs": ["1", "2", "3"]}  # fmt: skip
DEVICE = {"method": {"device_type": "pdu"}, "hosts": ["a", "b", "c"], "plugs": ["1", "2", "3"]}


def call(states: dict[str, str], **extra: Any) -> dict[str, Any]:
    """A pdu_outlet result for outlets plug -> read-back state."""
    return {"changed": True, "fence": dict(FENCE), "outlets": [{"plug": p, "state": s} for p, s in states.items()],
            **extra}  # fmt: skip


def host(node: str, plug: str, **extra: Any) -> dict[str, Any]:
    method = {"name": "pdu-off", "device_type": "pdu", "action": "off", "state": "off", "plug": plug}
    return {"node": node, "methods": [method], "release_workloads": True, **extra}


def test_each_host_whose_own_outlet_read_back_off_is_settled_and_released_on_its_own_plug_only() -> None:
    hv = {"a": host("n-a", "1"), "b": host("n-b", "2", fence_max_age=60), "c": host("n-c", "3")}
    got = shared_step(call({"1": "off", "2": "off", "3": "on"}), DEVICE, hv)
    assert [e["host"] for e in got] == ["a", "b"], "c's outlet read back on: c runs its method itself"
    assert got[0]["reading"] == {"fenced": True, "kind": "power_off", "source": "pdu-off"}
    assert got[0]["evidence"] == {**FENCE, "plugs": ["1"]}
    assert got[0]["release"] == {"name": "n-a", "fence_evidence": {**FENCE, "plugs": ["1"]}}
    assert got[1]["release"]["fence_evidence"]["plugs"] == ["2"] and got[1]["release"]["fence_max_age"] == 60


def test_a_host_whose_run_releases_nothing_is_settled_without_a_release() -> None:
    hv = {"a": host("n-a", "1", release_workloads=False), "b": host("n-b", "2", release_workloads=None)}
    got = shared_step(call({"1": "off", "2": "off"}), {"hosts": ["a", "b"]}, hv)
    assert [(e["host"], e["release"]) for e in got] == [("a", None), ("b", None)]
    assert got[0]["evidence"]["plugs"] == ["1"]


@pytest.mark.parametrize(
    ("why", "vars_of_a"),
    [
        ("a storage release", {"fenced_storage": [{"csi_driver": "x"}]}),
        ("a release of a Ready node", {"release_ready_node": True}),
        ("two methods in its step", {"methods": [host("n", "1")["methods"][0]] * 2}),
        ("no node", {"node": ""}),
    ],
)
def test_a_host_the_call_does_not_settle_is_left_to_its_own_play(why: str, vars_of_a: dict[str, Any]) -> None:
    hv = {"a": {**host("n-a", "1"), **vars_of_a}, "b": host("n-b", "2"), "c": host("n-c", "3")}
    got = shared_step(call({"1": "off", "2": "off", "3": "off"}), DEVICE, hv)
    assert [e["host"] for e in got] == ["b", "c"], why


def test_an_outlet_asked_on_is_settled_and_proves_nothing() -> None:
    method = {**host("n", "1")["methods"][0], "name": "pdu-on", "action": "on", "state": "on"}
    got = shared_step(call({"1": "on"}), {"hosts": ["a"]}, {"a": {**host("n-a", "1"), "methods": [method]}})
    assert got == [{"host": "a", "node": "n-a", "reading": {}, "evidence": {}, "release": None}]


@pytest.mark.parametrize(
    "result",
    [
        call({"1": "off", "2": "off", "3": "off"}, failed=True),
        {"skipped": True},
        "not a result",
    ],
)
def test_no_host_is_settled_by_a_call_that_failed_or_did_not_run(result: Any) -> None:
    hv = {h: host(f"n-{h}", p) for h, p in zip("abc", "123", strict=True)}
    assert shared_step(result, DEVICE, hv) == []


@pytest.mark.parametrize("verified", [False, "true", None])
def test_an_unverified_call_settles_a_host_with_no_fence_and_releases_nothing(verified: Any) -> None:
    hv = {"a": host("n-a", "1")}
    got = shared_step(call({"1": "off"}) | {"fence": {**FENCE, "verified": verified}}, {"hosts": ["a"]}, hv)
    assert got == [{"host": "a", "node": "n-a", "reading": {}, "evidence": {}, "release": None}]


def test_an_fc_call_settles_a_storage_isolation_and_never_licenses_a_taint_release() -> None:
    method = {"name": "fc-off", "device_type": "fc", "action": "off", "state": "disabled", "plug": "5"}
    result = {
        "fence": {**FENCE, "method": "fc", "state": "disabled"},
        "ports": [{"plug": "5", "state": "disabled"}],
    }
    alone = shared_step(result, {"hosts": ["a"]}, {"a": {"node": "n-a", "methods": [method]}})
    assert alone[0]["reading"]["kind"] == "storage_isolated" and alone[0]["release"] is None
    releasing = shared_step(
        result, {"hosts": ["a"]}, {"a": {"node": "n-a", "methods": [method], "release_workloads": True}}
    )
    assert releasing == [], "a storage release is node_taint's (fenced_storage), in the host's own play"


def test_a_device_without_hosts_is_an_error_and_the_filter_is_registered() -> None:
    with pytest.raises(AnsibleFilterError, match="no hosts list"):
        shared_step(call({}), {"plugs": []}, {})
    assert FilterModule().filters()["shared_step"] is shared_step
