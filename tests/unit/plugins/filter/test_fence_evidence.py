"""The fence evidence rule (filter ``noderemedy.core.fence_evidence``): pure logic, no network. The
same rule run through a real ``ansible-playbook`` and read back from its job events:
tests/unit/runner/test_evidence.py."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.noderemedy.core.plugins.filter.fence_evidence import FilterModule, fence_evidence


def method(name: str, device_type: str, action: str, verified: Any) -> dict[str, Any]:
    return {
        "name": name,
        "device_type": device_type,
        "action": action,
        "fence": {"verified": verified, "method": device_type, "target": f"{name}:1", "verified_at": 5.0},
    }


@pytest.mark.parametrize("device_type", ["ipmi", "redfish", "aws", "vmware", "kdump", "pdu"])
def test_a_verified_power_off_is_a_power_fence(device_type: str) -> None:
    got = fence_evidence([method("m", device_type, "off", True)])
    assert got["reading"] == {"fenced": True, "kind": "power_off", "source": "m"}
    assert got["evidence"]["target"] == "m:1"


def test_the_first_verified_power_off_is_the_evidence_and_a_power_fence_beats_ports() -> None:
    got = fence_evidence(
        [
            method("f", "fc", "off", False),
            method("i", "ipmi", "off", False),
            method("p", "pdu", "off", True),
            method("a", "aws", "off", True),
        ]
    )
    assert got["reading"]["source"] == "p"
    assert got["evidence"]["target"] == "p:1"


@pytest.mark.parametrize(
    "results",
    [
        [],
        [method("i", "ipmi", "off", False)],
        [method("p", "pdu", "reboot", True)],
        [method("p", "pdu", "on", True)],
        [method("c", "node", "off", True)],
        [method("f", "fc", "on", True)],
        # only the boolean true verifies
        [method("i", "ipmi", "off", "true")],
        [method("i", "ipmi", "off", 1)],
        [{"name": "i", "device_type": "ipmi", "action": "off"}],
        [{"name": "i", "device_type": "ipmi", "action": "off", "fence": None}],
    ],
)
def test_what_proves_no_fence(results: list[dict[str, Any]]) -> None:
    assert fence_evidence(results) == {"reading": {}, "evidence": {}}


def test_fc_ports_isolate_storage_only_when_every_one_read_back_disabled() -> None:
    down = fence_evidence([method("f1", "fc", "off", True), method("f2", "fc", "off", True)])
    assert down["reading"] == {"fenced": True, "kind": "storage_isolated", "source": "f1,f2"}
    assert down["evidence"]["target"] == "f1:1"
    one_up = fence_evidence([method("f1", "fc", "off", True), method("f2", "fc", "off", False)])
    assert one_up["reading"] == {"fenced": False, "kind": "storage_isolated", "source": "f1,f2"}
    assert one_up["evidence"] == {}


def test_the_evidence_is_a_copy() -> None:
    results = [method("p", "pdu", "off", True)]
    got = fence_evidence(results)
    got["evidence"]["verified"] = False
    assert results[0]["fence"]["verified"] is True


@pytest.mark.parametrize("bad", [None, {}, "pdu", [["p"]], [None]])
def test_bad_input_is_refused(bad: Any) -> None:
    with pytest.raises(AnsibleFilterError, match="fence_evidence: expected a list of dicts"):
        fence_evidence(bad)


def test_the_filter_is_registered() -> None:
    assert FilterModule().filters() == {"fence_evidence": fence_evidence}
