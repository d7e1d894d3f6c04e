"""Which pods a storage-only fence releases (``fenced_storage``): pure matching, no network."""

from __future__ import annotations

import pytest

from ansible_collections.noderemedy.core.plugins.module_utils._fenced_storage import (
    uses_fenced_storage,
    volume_kinds,
)


def pod(*volumes: dict, namespace: str = "demo") -> dict:
    return {"metadata": {"name": "p", "namespace": namespace}, "spec": {"volumes": list(volumes)}}


def claim(name: str) -> dict:
    return {"name": "data", "persistentVolumeClaim": {"claimName": name}}


def pv(**spec: object) -> dict:
    return {"spec": spec, "status": {"phase": "Bound"}}


PVS = {
    "demo/san": pv(csi={"driver": "san.example.com", "volumeHandle": "v1"}, storageClassName="gold"),
    "demo/nfs": pv(csi={"driver": "nfs.csi.k8s.io", "volumeHandle": "v2"}, storageClassName="shared"),
    "demo/legacy": pv(fc={"targetWWNs": ["500a0981891b8dc5"], "lun": 0}),
}


@pytest.mark.parametrize(
    ("the_pod", "matchers", "expected"),
    [
        (pod(claim("san")), [{"csi_driver": "san.example.com"}], True),
        (pod(claim("nfs")), [{"csi_driver": "san.example.com"}], False),
        (pod(claim("nfs")), [{"storage_class": "shared"}], True),
        (pod(claim("legacy")), [{"fc": True}], True),
        (pod(claim("legacy")), [{"csi_driver": "san.example.com"}], False),
        (pod({"name": "h", "hostPath": {"path": "/mnt/san/db"}}), [{"host_path": "/mnt/san"}], True),
        (pod({"name": "h", "hostPath": {"path": "/mnt/san"}}), [{"host_path": "/mnt/san/"}], True),
        (pod({"name": "h", "hostPath": {"path": "/mnt/sanity"}}), [{"host_path": "/mnt/san"}], False),
        (pod({"name": "e", "emptyDir": {}}), [{"host_path": "/mnt/san"}, {"fc": True}], False),
        (pod(), [{"fc": True}], False),  # no volume at all: a storage fence does not cover it
        (pod(claim("unbound")), [{"csi_driver": "san.example.com"}], False),
        (
            pod(claim("san"), namespace="other"),
            [{"csi_driver": "san.example.com"}],
            False,
        ),  # claims are per namespace
        (pod({"name": "c", "csi": {"driver": "san.example.com"}}), [{"csi_driver": "san.example.com"}], True),
        (pod({"name": "e", "emptyDir": {}}, claim("san")), [{"storage_class": "gold"}], True),  # any volume
    ],
)
def test_a_pod_is_on_fenced_storage_when_one_of_its_volumes_matches(the_pod, matchers, expected):
    assert uses_fenced_storage(the_pod, PVS, matchers) is expected


def test_volume_kinds_reads_the_bound_volume_not_the_claim():
    assert volume_kinds(claim("san"), PVS["demo/san"]) == {
        "csi_driver": "san.example.com",
        "storage_class": "gold",
    }
    assert volume_kinds({"name": "h", "hostPath": {"path": "/srv"}}, None) == {"host_path": "/srv"}
    assert volume_kinds({"name": "e", "emptyDir": {}}, None) == {}
