"""Static-pod fallback (``_static_pod``) under a temporary root: the StorageVersion gate of a
fallback (data in, decision out) and of mark-good, input validation naming the field, the etcd
check of a kube-apiserver that does not serve, and the installer (the revision, then the live
manifest; idempotent; waiting for the lock; bad input).

No network. Behaviour sources: openshift/library-go ``pkg/operator/staticpod/startupmonitor`` and the
OpenShift enhancement "Fallback on failing revisions of static pods".
"""

from __future__ import annotations

import json

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    ETCD_UNHEALTHY,
    NOT_READY,
    STORAGE_VERSION_SKEW,
    Layout,
    Options,
    StaticPodError,
)
from ansible_collections.noderemedy.core.tests.unit.plugins.module_utils._static_pod_helpers import (
    live,
    make_layout,
    pod,
)

# --- StorageVersion gate (data in, decision out) --------------------------------------------------


class Encodings:
    """Supplies fixed StorageVersion data to the gate (no API involved: the gate's decision is pure)."""

    def __init__(self, current, decodable=None, unavailable=False):
        self.current, self._decodable, self.unavailable = current, decodable, unavailable

    def encodings(self):
        from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
            StorageVersionUnavailable,
        )

        if self.unavailable:
            raise StorageVersionUnavailable("not served (HTTP 404)")
        return self.current

    def decodable(self):
        return self._decodable


def write_record(layout: Layout, rev: int, resources: dict) -> None:
    (layout.revision_dir(rev) / sp.STORAGE_VERSIONS_FILE).write_text(
        json.dumps({"kind": "StorageVersionRecord", "revision": rev, "resources": resources})
    )


def test_fallback_refuses_on_storage_version_skew_and_names_the_resources(root):
    layout = make_layout(root, live=3, lkg=2)
    write_record(
        layout, 2, {"apps.deployments": ["apps/v1"], "batch.jobs": ["batch/v1"], "core.pods": ["v1"]}
    )
    before = layout.live_manifest.read_bytes()
    current = {
        "apps.deployments": ["apps/v2"],
        "batch.jobs": ["batch/v1"],
        "core.pods": ["v1"],
        "x.new": ["x/v1"],
    }
    with pytest.raises(StaticPodError) as err:
        sp.fallback(layout, Options(storage_versions=Encodings(current)), NOT_READY, "")
    assert err.value.reason == STORAGE_VERSION_SKEW
    assert "apps.deployments" in str(err.value) and "batch.jobs" not in str(err.value)
    assert err.value.result["skewed_resources"] == ["apps.deployments"]
    assert err.value.result["storage_version"]["unknown_to_revision"] == ["x.new"]
    assert layout.live_manifest.read_bytes() == before
    forced = sp.fallback(layout, Options(storage_versions=Encodings(current), force=True), NOT_READY, "")
    assert forced["action"] == "fallback" and forced["storage_version"]["forced"] is True


def test_fallback_passes_the_gate_when_everything_is_decodable(root):
    layout = make_layout(root, live=3, lkg=2)
    write_record(layout, 2, {"apps.deployments": ["apps/v1", "apps/v1beta1"]})
    res = sp.fallback(
        layout, Options(storage_versions=Encodings({"apps.deployments": ["apps/v1"]})), NOT_READY, ""
    )
    assert res["action"] == "fallback" and res["storage_version"]["skew"] == []


@pytest.mark.parametrize(("choice", "refused"), [("proceed", False), ("refuse", True)])
def test_unserved_storage_version_api_is_reported_and_the_operator_chooses(root, choice, refused):
    layout = make_layout(root, live=3, lkg=2)
    opts = Options(storage_versions=Encodings({}, unavailable=True), storage_version_unavailable=choice)
    if refused:
        with pytest.raises(StaticPodError) as err:
            sp.fallback(layout, opts, NOT_READY, "")
        assert err.value.reason == "StorageVersionUnavailable"
        assert live(layout)["metadata"]["labels"]["revision"] == "3"
    else:
        res = sp.fallback(layout, opts, NOT_READY, "")
        assert res["action"] == "fallback"
        assert (
            res["storage_version"]["available"] is False and "not served" in res["storage_version"]["message"]
        )


def test_mark_good_records_the_decodable_versions(root):
    layout = make_layout(root, live=3)
    dec = {"apiServerID": "apiserver-abc", "resources": {"apps.deployments": ["apps/v1"]}}
    res = sp.mark_good(layout, Options(storage_versions=Encodings({}, dec)))
    path = layout.revision_dir(3) / sp.STORAGE_VERSIONS_FILE
    assert str(path) in res["files_written"]
    doc = json.loads(path.read_text())
    assert (doc["revision"], doc["apiServerID"], doc["resources"]) == (3, "apiserver-abc", dec["resources"])
    assert sp.mark_good(layout, Options(storage_versions=Encodings({}, dec)))["changed"] is False


def test_execute_validates_input_and_names_the_field(root):
    layout = make_layout(root, live=3)
    base = {
        "operand": "kube-apiserver",
        "manifests_dir": str(layout.manifests_dir),
        "resources_dir": str(layout.resources_dir),
        "lock_file": str(layout.lock_file),
        "storage_version_check": "never",
    }
    for bad, field in (
        ({"state": "explode"}, "state"),
        ({"state": "monitor", "timeout": -1}, "timeout"),
        ({"state": "fallback", "reason": "Bored"}, "reason"),
        ({"state": "fallback", "retry_base": 10, "retry_cap": 1}, "retry_base"),
        ({"state": "monitor", "probe_url": "ftp://x"}, "probe_url"),
    ):
        with pytest.raises(StaticPodError) as err:
            sp.execute({**base, **bad})
        assert err.value.field == field, bad
    assert live(layout)["metadata"]["labels"]["revision"] == "3"


# --- the etcd check of a kube-apiserver that does not serve ---------------------------------------


def test_etcd_flags_reads_both_flag_forms():
    p = pod(3)
    p["spec"]["containers"][0]["command"] = [
        "kube-apiserver",
        "--etcd-servers=http://127.0.0.1:1,http://127.0.0.1:2",
    ]
    p["spec"]["containers"][0]["args"] = ["--etcd-cafile", "/ca.crt", "--secure-port=6443"]
    assert sp.etcd_flags(p) == {
        "etcd-servers": "http://127.0.0.1:1,http://127.0.0.1:2",
        "etcd-cafile": "/ca.crt",
    }
    assert sp.etcd_flags({"spec": {}}) == {}
    assert sp.etcd_direct_check(pod(3), 0.5) is None  # no --etcd-servers: no verdict


def test_unreachable_etcd_of_a_silent_apiserver_is_etcd_unhealthy(root):
    """Nothing listens on the apiserver port nor on its etcd: the verdict is EtcdUnhealthy, not CrashLooping."""
    layout = make_layout(root, live=None)
    p = pod(3)
    p["spec"]["containers"][0]["command"] = ["kube-apiserver", "--etcd-servers=http://127.0.0.1:1"]
    layout.live_manifest.write_text(yaml.safe_dump(p))
    layout.termination_log.write_text(
        "".join(json.dumps({"event": "start", "time": t, "revision": 3}) + "\n" for t in (1, 2))
    )
    o = sp.observe(layout, 3, sp.HttpProber("https://127.0.0.1:1", request_timeout=0.2), 0.0)
    assert (o.healthz.answered, o.etcd.answered, o.etcd.ok) == (False, True, False)
    assert "--etcd-servers" in o.etcd.error and "127.0.0.1:1" in o.etcd.error
    verdict = sp.final_readiness(3, [o, o])
    assert verdict.reason == ETCD_UNHEALTHY


def test_a_bad_kubeconfig_for_the_storage_version_check_fails_naming_it(root):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()
    params = {
        "operand": "kube-apiserver",
        "state": "fallback",
        "manifests_dir": str(layout.manifests_dir),
        "resources_dir": str(layout.resources_dir),
        "lock_file": str(layout.lock_file),
        "storage_version_check": "always",
        "kubeconfig": str(root / "no-such-kubeconfig"),
    }
    write_record(layout, 2, {"core.pods": ["v1"]})
    with pytest.raises(StaticPodError) as err:
        sp.execute(params)
    assert err.value.field == "kubeconfig" and "no-such-kubeconfig" in str(err.value)
    assert layout.live_manifest.read_bytes() == before


# --- the installer ------------------------------------------------------------------------------------


def test_install_writes_the_revision_then_the_live_manifest_and_is_idempotent(root):
    layout = make_layout(root, live=3, lkg=3)
    manifest = dict(pod(4))
    manifest["metadata"] = {"name": "kube-apiserver", "namespace": "kube-system"}  # no revision label yet
    res = sp.install(layout, Options(revision=4), manifest, {"audit-policy.yaml": "rules: []\n"})
    assert res["action"] == "install" and res["changed"] is True and res["revision"] == 4
    assert live(layout)["metadata"]["labels"]["revision"] == "4"
    assert yaml.safe_load(layout.revision_manifest(4).read_text()) == live(layout)
    assert (layout.revision_dir(4) / "audit-policy.yaml").read_text() == "rules: []\n"
    assert str(layout.live_manifest) in res["files_written"]
    again = sp.install(layout, Options(revision=4), manifest, {"audit-policy.yaml": "rules: []\n"})
    assert again["changed"] is False and again["files_written"] == []
    # a revision is immutable: other content is refused, nothing written
    before = layout.live_manifest.read_bytes()
    with pytest.raises(StaticPodError) as err:
        sp.install(layout, Options(revision=4), manifest, {"audit-policy.yaml": "rules: [changed]\n"})
    assert err.value.field == "revision" and "immutable" in str(err.value)
    assert layout.live_manifest.read_bytes() == before


def test_install_leaves_no_non_dot_file_but_the_manifest_and_no_temp_dir(root):
    layout = make_layout(root, live=3)
    seen: list[set[str]] = []

    def look() -> None:  # between the temp write and the rename of the live manifest
        seen.append({p.name for p in layout.manifests_dir.iterdir()})

    sp.install(layout, Options(revision=4, extra={"before_rename": look}), pod(4))
    assert seen and all(n == layout.live_manifest.name or n.startswith(".") for names in seen for n in names)
    assert [p.name for p in layout.manifests_dir.iterdir()] == [layout.live_manifest.name]
    assert not [p for p in layout.resources_dir.iterdir() if p.name.startswith(".")]


def test_install_waits_for_the_lock_and_writes_nothing_while_another_installer_holds_it(root, lock_holder):
    layout = make_layout(root, live=3)
    before = layout.live_manifest.read_bytes()
    holder = lock_holder(layout.lock_file)
    with pytest.raises(StaticPodError) as err:
        sp.install(layout, Options(revision=4, extra={"lock_timeout": 0.3}), pod(4))
    assert err.value.reason == "LockBusy" and "held by another process" in str(err.value)
    assert layout.live_manifest.read_bytes() == before and not layout.revision_dir(4).exists()
    holder.stdin.close()
    holder.wait(timeout=10)
    assert sp.install(layout, Options(revision=4, extra={"lock_timeout": 0.3}), pod(4))["changed"] is True


@pytest.mark.parametrize(
    ("manifest", "files", "field"),
    [
        ("kind: [", None, "manifest"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, None, "manifest"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}}, None, "manifest"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"revision": "9"}},
          "spec": {"containers": []}}, None, "manifest"),
        (None, {"../escape": "x"}, "files"),
        (None, {"kube-apiserver-pod.yaml": "x"}, "files"),
    ],
)  # fmt: skip
def test_install_bad_input_names_the_field_and_writes_nothing(root, manifest, files, field):
    layout = make_layout(root, live=3)
    before = sorted(p.name for p in layout.resources_dir.iterdir())
    with pytest.raises(StaticPodError) as err:
        sp.install(layout, Options(revision=4), pod(4) if manifest is None else manifest, files)
    assert err.value.field == field, err.value
    assert sorted(p.name for p in layout.resources_dir.iterdir()) == before
    assert live(layout)["metadata"]["labels"]["revision"] == "3"
