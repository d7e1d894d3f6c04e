"""StorageVersion (KEP-2339) summaries and the rollback comparison: pure logic on object dicts shaped as a
v1.34 kube-apiserver returns them (no network; the real API is exercised in tests/integration)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.noderemedy.core.plugins.module_utils import _storage_version as sv


def storage_version(name: str, servers: list[tuple[str, str, list[str]]], common: str | None) -> dict:
    equal = common is not None
    return {
        "apiVersion": "internal.apiserver.k8s.io/v1alpha1",
        "kind": "StorageVersion",
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "storageVersions": [
                {
                    "apiServerID": sid,
                    "encodingVersion": enc,
                    "decodableVersions": dec,
                    "servedVersions": [enc],
                }
                for sid, enc, dec in servers
            ],
            **({"commonEncodingVersion": common} if common else {}),
            "conditions": [
                {
                    "type": "AllEncodingVersionsEqual",
                    "status": "True" if equal else "False",
                    "reason": "CommonEncodingVersionSet" if equal else "CommonEncodingVersionUnset",
                }
            ],
        },
    }


ITEMS = [
    storage_version(
        "apps.deployments",
        [("apiserver-a", "apps/v1", ["apps/v1", "apps/v1beta2", "apps/v1beta1"])],
        "apps/v1",
    ),
    storage_version("core.pods", [("apiserver-a", "v1", ["v1"])], "v1"),
    # mid-upgrade: two apiservers encode differently, no common version
    storage_version(
        "flowcontrol.apiserver.k8s.io.flowschemas",
        [
            ("apiserver-a", "flowcontrol.apiserver.k8s.io/v1", ["flowcontrol.apiserver.k8s.io/v1"]),
            (
                "apiserver-b",
                "flowcontrol.apiserver.k8s.io/v1beta3",
                ["flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3"],
            ),
        ],
        None,
    ),
]


def test_summarize_per_resource_and_per_apiserver():
    s = sv.summarize(ITEMS)
    dep = s["resources"]["apps.deployments"]
    assert (dep["group"], dep["resource"], dep["commonEncodingVersion"]) == ("apps", "deployments", "apps/v1")
    assert dep["allEncodingVersionsEqual"] is True
    assert dep["servers"]["apiserver-a"]["decodableVersions"] == ["apps/v1", "apps/v1beta1", "apps/v1beta2"]
    assert s["resources"]["core.pods"]["group"] == "core"
    fs = s["resources"]["flowcontrol.apiserver.k8s.io.flowschemas"]
    assert (fs["group"], fs["resource"]) == ("flowcontrol.apiserver.k8s.io", "flowschemas")
    assert fs["allEncodingVersionsEqual"] is False
    assert fs["encodingVersions"] == [
        "flowcontrol.apiserver.k8s.io/v1",
        "flowcontrol.apiserver.k8s.io/v1beta3",
    ]
    assert sorted(s["apiservers"]) == ["apiserver-a", "apiserver-b"]
    assert list(s["apiservers"]["apiserver-b"]) == ["flowcontrol.apiserver.k8s.io.flowschemas"]


def test_encodings_use_the_common_version_else_every_servers():
    enc = sv.encodings(sv.summarize(ITEMS))
    assert enc["apps.deployments"] == ["apps/v1"]
    assert len(enc["flowcontrol.apiserver.k8s.io.flowschemas"]) == 2


def test_decodable_for_needs_an_identity_when_several_report():
    s = sv.summarize(ITEMS)
    with pytest.raises(sv.StorageVersionError) as err:
        sv.decodable_for(s)
    assert err.value.field == "apiserver_id" and "apiserver-a, apiserver-b" in str(err.value)
    dec = sv.decodable_for(s, "apiserver-a")
    assert dec["apiServerID"] == "apiserver-a"
    assert dec["resources"]["core.pods"] == ["v1"]
    with pytest.raises(sv.StorageVersionError, match="apiserver_id: 'apiserver-z'"):
        sv.decodable_for(s, "apiserver-z")
    only_a = sv.summarize(ITEMS[:2])
    assert sv.decodable_for(only_a)["apiServerID"] == "apiserver-a"


def test_check_rollback_names_every_resource_the_revision_cannot_decode():
    current = sv.encodings(sv.summarize(ITEMS))
    record = {
        "resources": {
            "apps.deployments": ["apps/v1beta2"],  # an old revision that cannot read apps/v1
            "core.pods": ["v1"],
            "flowcontrol.apiserver.k8s.io.flowschemas": ["flowcontrol.apiserver.k8s.io/v1"],
        }
    }
    skew = sv.check_rollback(current, record)
    assert skew == [
        {"resource": "apps.deployments", "encodingVersion": "apps/v1", "decodableVersions": ["apps/v1beta2"]},
        {
            "resource": "flowcontrol.apiserver.k8s.io.flowschemas",
            "encodingVersion": "flowcontrol.apiserver.k8s.io/v1beta3",
            "decodableVersions": ["flowcontrol.apiserver.k8s.io/v1"],
        },
    ]
    assert sv.check_rollback({"core.pods": ["v1"]}, record) == []
    assert sv.unknown_to_record({"core.pods": ["v1"], "x.new": ["x/v1"]}, record) == ["x.new"]


def test_record_round_trip_and_invalid_records(tmp_path):
    dec = sv.decodable_for(sv.summarize(ITEMS[:2]))
    path = tmp_path / "storage-versions.json"
    path.write_bytes(sv.record_bytes(4, dec))
    doc = sv.load_record(path)
    assert (doc["kind"], doc["revision"], doc["apiServerID"]) == ("StorageVersionRecord", 4, "apiserver-a")
    assert doc["resources"] == dec["resources"]
    assert sv.load_record(tmp_path / "absent.json") is None
    path.write_text("{not json")
    with pytest.raises(sv.StorageVersionError, match="not JSON"):
        sv.load_record(path)
    path.write_text(json.dumps({"resources": {"core.pods": "v1"}}))
    with pytest.raises(sv.StorageVersionError, match="lists of versions"):
        sv.load_record(path)
