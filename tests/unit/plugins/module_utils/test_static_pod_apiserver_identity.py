"""StorageVersion on an HA control plane: this node's apiserver is found by its identity Lease, entries of
apiservers whose Lease is gone are stale and left out, and a refused mark_good writes nothing. Pure logic on
objects shaped as a v1.34 kube-apiserver returns them (no network: the two list calls are replaced by the
objects they would return; the real Leases are read in tests/integration/test_static_pod_fallback.py)."""

from __future__ import annotations

import calendar
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils import _apiserver_identity as ai
from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
from ansible_collections.noderemedy.core.plugins.module_utils import _storage_version as sv
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    Layout,
    Options,
    StaticPodError,
)

NOW = float(calendar.timegm((2026, 11, 25, 12, 0, 0, 0, 0, 0)))


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + ".123456Z"


def lease(host: str, renewed_ago: float = 5.0, component: str = "kube-apiserver") -> dict:
    """An identity Lease as kube-apiserver writes it (pkg/controlplane/apiserver/server.go)."""
    sid = ai.expected_id(host)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": sid,
            "namespace": "kube-system",
            "labels": {ai.IDENTITY_LABEL: component, ai.HOSTNAME_LABEL: host},
        },
        "spec": {
            "holderIdentity": f"{sid}_5c0e9b7a-1f5e-4c2b-9a53-0d6c1b1e2f3a",
            "leaseDurationSeconds": 3600,
            "renewTime": rfc3339(NOW - renewed_ago),
        },
    }


def storage_version(name: str, servers: list[tuple[str, str, list[str]]]) -> dict:
    """A StorageVersion object with one entry per (apiServerID, encodingVersion, decodableVersions)."""
    encs = {enc for _sid, enc, _dec in servers}
    common = next(iter(encs)) if len(encs) == 1 else None
    return {
        "apiVersion": "internal.apiserver.k8s.io/v1alpha1",
        "kind": "StorageVersion",
        "metadata": {"name": name},
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
            "conditions": [{"type": "AllEncodingVersionsEqual", "status": "True" if common else "False"}],
        },
    }


A, B, C, GONE = (ai.expected_id(h) for h in ("cp-1", "cp-2", "cp-3", "cp-old"))
LEASES = [lease("cp-1"), lease("cp-2"), lease("cp-3")]
# three live apiservers agree on apps/v1; the entry of an apiserver whose Lease is gone (an old
# revision on a decommissioned node) still says apps/v1beta2, so the apiserver set no common version
ITEMS = [
    storage_version(
        "apps.deployments",
        [
            (A, "apps/v1", ["apps/v1", "apps/v1beta2"]),
            (B, "apps/v1", ["apps/v1", "apps/v1beta2"]),
            (C, "apps/v1", ["apps/v1"]),
            (GONE, "apps/v1beta2", ["apps/v1beta2"]),
        ],
    ),
    storage_version("core.pods", [(A, "v1", ["v1"]), (B, "v1", ["v1"]), (C, "v1", ["v1"])]),
    storage_version("legacy.widgets", [(GONE, "legacy/v1", ["legacy/v1"])]),
]


def source(hostname: str, monkeypatch, items=None, leases=None, apiserver_id=None) -> sv.StorageVersionSource:
    """A StorageVersionSource whose two list calls return ``items`` and ``leases`` (default ITEMS, LEASES)."""
    items = ITEMS if items is None else items
    leases = LEASES if leases is None else leases
    monkeypatch.setattr(sv, "list_storage_versions", lambda client, timeout: items)
    monkeypatch.setattr(ai, "list_identity_leases", lambda client, timeout: leases)
    return sv.StorageVersionSource(object, apiserver_id, hostname=hostname, clock=lambda: NOW)


def test_the_id_is_the_one_kube_apiserver_derives_from_its_host_name():
    # k8s.io/apiserver pkg/server/config.go: 26 lower-case base32 characters of 16 SHA-256 bytes
    sid = ai.expected_id("cp-1")
    assert sid.startswith("apiserver-") and len(sid) == len("apiserver-") + 26
    assert sid == sid.lower() and sid != ai.expected_id("cp-2")
    assert sid != ai.expected_id("cp-1", "sample-apiserver")


def test_identities_read_name_host_holder_and_expiry():
    old = lease("cp-old", renewed_ago=3601)
    other = {"metadata": {"name": "kube-scheduler", "labels": {}}, "spec": {}}
    ids = ai.identities([*LEASES, old, other], NOW)
    assert sorted(ids) == sorted([A, B, C, GONE])
    assert ids[A]["hostname"] == "cp-1" and ids[A]["component"] == "kube-apiserver"
    assert ids[A]["holderIdentity"].startswith(A + "_")
    assert ids[A]["expired"] is False and ids[GONE]["expired"] is True


def test_three_identities_and_one_stale_entry(monkeypatch):
    """HA: three live kube-apiservers and the entries of a fourth whose identity Lease is gone."""
    src = source("cp-2", monkeypatch)
    summary = src.summary()
    assert sorted(summary["apiservers"]) == sorted([A, B, C])
    assert src.stale() == {
        GONE: {"reason": "NoIdentityLease", "resources": ["apps.deployments", "legacy.widgets"]}
    }
    dep = summary["resources"]["apps.deployments"]
    # the live servers agree: the stale entry no longer keeps the common version unset
    assert dep["encodingVersions"] == ["apps/v1"] and dep["commonEncodingVersion"] == "apps/v1"
    assert dep["allEncodingVersionsEqual"] is True and sorted(dep["servers"]) == sorted([A, B, C])
    assert "legacy.widgets" not in summary["resources"]
    assert src.encodings() == {"apps.deployments": ["apps/v1"], "core.pods": ["v1"]}
    # this node's apiserver is the one whose Lease carries this host name
    dec = src.decodable()
    assert dec["apiServerID"] == B
    assert dec["resources"] == {"apps.deployments": ["apps/v1", "apps/v1beta2"], "core.pods": ["v1"]}
    assert list(dec["stale"]) == [GONE]
    # with the stale entry, the rollback comparison would see apps/v1beta2 stored and refuse a
    # revision that decodes only apps/v1; without it, nothing is skewed
    record = {"resources": {"apps.deployments": ["apps/v1"], "core.pods": ["v1"]}}
    assert sv.check_rollback(sv.encodings(sv.summarize(ITEMS)), record) != []
    assert sv.check_rollback(src.encodings(), record) == []
    assert GONE in sv.stale_message(src.stale())


def test_an_expired_lease_makes_its_entries_stale(monkeypatch):
    src = source("cp-1", monkeypatch, leases=[*LEASES, lease("cp-old", renewed_ago=7200)])
    assert src.summary() and src.stale()[GONE]["reason"] == "IdentityLeaseExpired"


def test_this_node_must_have_a_live_identity_lease(monkeypatch):
    src = source("cp-9", monkeypatch)
    with pytest.raises(sv.StorageVersionError) as err:
        src.decodable()
    assert err.value.field == "apiserver_id" and err.value.reason == "NotFound"
    assert "kubernetes.io/hostname=cp-9" in str(err.value) and f"{A} (cp-1)" in str(err.value)
    expired = source("cp-1", monkeypatch, leases=[lease("cp-1", renewed_ago=4000), lease("cp-2")])
    with pytest.raises(sv.StorageVersionError, match="has expired"):
        expired.decodable()


def test_a_given_apiserver_id_wins_but_not_a_stale_one(monkeypatch):
    assert source("cp-9", monkeypatch, apiserver_id=C).decodable()["apiServerID"] == C
    with pytest.raises(sv.StorageVersionError) as err:
        source("cp-1", monkeypatch, apiserver_id=GONE).decodable()
    assert err.value.field == "apiserver_id" and "stale" in str(err.value)


def make_layout(root: Path) -> Layout:
    """kube-apiserver revisions 1-3 on disk, 3 live, last-known-good -> 2 with a record."""
    layout = Layout.from_params(
        {
            "operand": "kube-apiserver",
            "manifests_dir": str(root / "manifests"),
            "resources_dir": str(root / "resources"),
            "lock_file": str(root / "kube-apiserver-installer.lock"),
            "termination_log": str(root / "termination.log"),
        }
    )
    layout.manifests_dir.mkdir(parents=True)
    for rev in (1, 2, 3):
        layout.revision_dir(rev).mkdir(parents=True)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "kube-apiserver", "labels": {"revision": str(rev)}},
        }
        layout.revision_manifest(rev).write_text(yaml.safe_dump(pod))
    layout.live_manifest.write_text(layout.revision_manifest(3).read_text())
    os.symlink(layout.revision_manifest(2), layout.lkg_link)
    (layout.revision_dir(2) / sp.STORAGE_VERSIONS_FILE).write_text('{"resources": {"core.pods": ["v1"]}}\n')
    return layout


def snapshot(layout: Layout) -> dict:
    files = {
        p: p.read_bytes()
        for p in sorted(layout.resources_dir.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }
    return {"link": os.readlink(layout.lkg_link), "files": files}


def test_a_refused_mark_good_leaves_the_link_as_it_was(tmp_path, monkeypatch):
    layout = make_layout(tmp_path)
    before = snapshot(layout)
    # several apiservers report and none has this host's Lease: which one is ours cannot be told
    opts = Options(storage_versions=source("cp-9", monkeypatch))
    with pytest.raises(StaticPodError) as err:
        sp.mark_good(layout, opts)
    assert err.value.field == "apiserver_id" and err.value.reason == "NotFound"
    assert "nothing was written" in str(err.value)
    assert err.value.result["action"] == "refused" and err.value.result["files_written"] == []
    assert snapshot(layout) == before
    assert not (layout.revision_dir(3) / sp.STORAGE_VERSIONS_FILE).exists()
    assert sp.execute({**layout_params(layout), "state": "status"})["last_known_good_revision"] == 2


def layout_params(layout: Layout) -> dict:
    return {
        "operand": "kube-apiserver",
        "manifests_dir": str(layout.manifests_dir),
        "resources_dir": str(layout.resources_dir),
        "lock_file": str(layout.lock_file),
        "termination_log": str(layout.termination_log),
    }


def test_mark_good_on_ha_records_this_nodes_apiserver_and_names_the_stale_one(tmp_path, monkeypatch):
    layout = make_layout(tmp_path)
    res = sp.mark_good(layout, Options(storage_versions=source("cp-3", monkeypatch)))
    assert os.readlink(layout.lkg_link) == str(layout.revision_manifest(3))
    record = json.loads((layout.revision_dir(3) / sp.STORAGE_VERSIONS_FILE).read_text())
    assert record["apiServerID"] == C and record["resources"]["apps.deployments"] == ["apps/v1"]
    assert "legacy.widgets" not in record["resources"]
    assert res["storage_version"]["apiserver_id"] == C
    assert list(res["storage_version"]["stale_apiservers"]) == [GONE]
    assert any(GONE in w for w in res["warnings"])
