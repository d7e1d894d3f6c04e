"""StorageVersion on an HA control plane, against the lab's real kube-apiserver (KEP-2339, KEP-1965).

The lab's kube-apiserver runs with the StorageVersionAPI and APIServerIdentity feature gates, so it keeps its
own identity Lease in kube-system and writes its ID into every StorageVersion object. The test reads that
Lease through the modules (run with the real ``ansible`` CLI), then makes the control plane look like an HA
one through the real API: two more identity Leases (peers on other hosts, as their kube-apiservers would
write them), and a StorageVersion object with entries of the lab's apiserver, of those peers and of an
apiserver whose Lease is gone. The lab's kube-controller-manager runs without the StorageVersionAPI gate, so
its storageversiongc does not remove the stale entry while the test reads it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import pytest
import yaml
from kube_helpers import wait_for
from kubernetes import client
from test_static_pod_fallback import FALLBACK, INFO, operand_pod, run_module

from ansible_collections.noderemedy.core.plugins.module_utils import _apiserver_identity as ai
from ansible_collections.noderemedy.core.plugins.module_utils._kube import request

pytestmark = [pytest.mark.lab, pytest.mark.kube]

GROUP, VERSION, PLURAL = "internal.apiserver.k8s.io", "v1alpha1", "storageversions"


def peer_lease(host: str) -> dict:
    """An identity Lease as a kube-apiserver on ``host`` writes it (pkg/controlplane/apiserver/server.go)."""
    sid = ai.expected_id(host)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": sid,
            "namespace": ai.NAMESPACE,
            "labels": {ai.IDENTITY_LABEL: ai.KUBE_APISERVER, ai.HOSTNAME_LABEL: host},
        },
        "spec": {
            "holderIdentity": f"{sid}_{uuid.uuid4()}",
            "leaseDurationSeconds": 3600,
            "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
        },
    }


def entry(sid: str, enc: str, dec: list[str]) -> dict:
    return {"apiServerID": sid, "encodingVersion": enc, "decodableVersions": dec, "servedVersions": [enc]}


@pytest.fixture
def ha(lab_kube):
    """Two peer identity Leases and a StorageVersion object ``<group>.<resource>`` with four entries: the
    lab's apiserver and the peers encode ``<group>/v1``; the entry of an apiserver without a Lease
    (stale) encodes ``<group>/v1beta1``. Removed afterwards."""
    api = lab_kube.api_client()
    coord, custom = client.CoordinationV1Api(api), client.CustomObjectsApi(api)
    host = socket.gethostname()

    def own_lease():
        leases = coord.list_namespaced_lease(
            ai.NAMESPACE, label_selector=f"{ai.IDENTITY_LABEL}={ai.KUBE_APISERVER},{ai.HOSTNAME_LABEL}={host}"
        ).items
        return leases[0] if leases else None

    lease = wait_for(own_lease, 60, f"the lab kube-apiserver's identity Lease labelled {host}")
    tag = uuid.uuid4().hex[:6]
    peers = [f"nr-peer-{tag}-{i}" for i in (1, 2)]
    gone = ai.expected_id(f"nr-gone-{tag}")
    group = f"sv-{tag}.noderemedy.io"
    name = f"{group}.widgets"
    v1, v1beta1 = f"{group}/v1", f"{group}/v1beta1"
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{ai.NAMESPACE}/leases"
    for peer in peers:  # raw JSON: the client's models would rewrite renewTime without its microseconds
        request(api, "POST", leases, body=peer_lease(peer))
    obj = custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "StorageVersion",
            "metadata": {"name": name},
            "spec": {},
        },
    )
    obj["status"] = {
        "storageVersions": [
            entry(lease.metadata.name, v1, [v1]),
            *(entry(ai.expected_id(p), v1, [v1, v1beta1]) for p in peers),
            entry(gone, v1beta1, [v1beta1]),
        ],
        "conditions": [
            {
                "type": "AllEncodingVersionsEqual",
                "status": "False",
                "reason": "CommonEncodingVersionUnset",
                "message": "Common encoding version unset",
            }
        ],
    }
    custom.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, obj)
    try:
        yield {"lease": lease, "peers": peers, "gone": gone, "name": name, "v1": v1, "v1beta1": v1beta1}
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        for peer in peers:
            coord.delete_namespaced_lease(ai.expected_id(peer), ai.NAMESPACE)


def test_the_lab_apiserver_is_found_by_its_identity_lease(lab_kube, ha, tmp_path, collections_path):
    """The lab kube-apiserver's own Lease names it; its StorageVersion entries carry that ID. With three
    identities and one stale entry: mark_good records this node's apiserver and names the stale entry, a
    mark_good naming a stale apiserver is refused with the link as it was, and the fallback gate leaves
    the stale entry out."""
    own = ha["lease"].metadata.name
    kubeconfig = str(lab_kube.kubeconfig)
    info = run_module(collections_path, INFO, {"kubeconfig": kubeconfig})
    assert info["available"] is True, info
    # the Lease the lab's apiserver wrote: its name is the ID kube-apiserver derives from its host name,
    # and the ID under which it reports its StorageVersions
    assert info["this_apiserver_id"] == own == ai.expected_id(socket.gethostname())
    mine = info["identities"][own]
    assert (mine["component"], mine["hostname"]) == ("kube-apiserver", socket.gethostname())
    assert mine["holderIdentity"].startswith(own + "_") and mine["expired"] is False
    assert info["apiservers"][own]["core.pods"]["encodingVersion"] == "v1"
    assert sorted(i for i, d in info["identities"].items() if d["hostname"] in ha["peers"]) == sorted(
        ai.expected_id(p) for p in ha["peers"]
    )
    assert info["stale_apiservers"] == {ha["gone"]: {"reason": "NoIdentityLease", "resources": [ha["name"]]}}
    assert info["encodings"][ha["name"]] == [ha["v1"]]
    assert sorted(info["resources"][ha["name"]]["servers"]) == sorted(
        [own, *(ai.expected_id(p) for p in ha["peers"])]
    )

    manifests, resources = tmp_path / "manifests", tmp_path / "resources"
    manifests.mkdir()
    for rev in (1, 2):
        d = resources / f"kube-apiserver-pod-{rev}"
        d.mkdir(parents=True)
        (d / "kube-apiserver-pod.yaml").write_text(
            yaml.safe_dump(operand_pod(["kube-apiserver", f"--v={rev}"], rev))
        )
    live = manifests / "kube-apiserver-pod.yaml"
    live.write_text((resources / "kube-apiserver-pod-2" / "kube-apiserver-pod.yaml").read_text())
    link = resources / "kube-apiserver-last-known-good"
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(manifests),
        "resources_dir": str(resources),
        "lock_file": str(tmp_path / "lock"),
        "kubeconfig": kubeconfig,
        "storage_version_check": "always",
    }

    out: dict = {}
    good = run_module(collections_path, FALLBACK, {**params, "state": "mark_good", "revision": 1}, output=out)
    assert good["action"] == "mark_good", good
    assert good["storage_version"]["apiserver_id"] == own
    assert list(good["storage_version"]["stale_apiservers"]) == [ha["gone"]]
    # the warning the module gives (module.warn), as the ansible CLI prints it
    assert "[WARNING]" in out["stderr"] and ha["gone"] in out["stderr"], out["stderr"]
    record = json.loads((resources / "kube-apiserver-pod-1" / "storage-versions.json").read_text())
    assert record["apiServerID"] == own and record["resources"][ha["name"]] == [ha["v1"]]
    assert os.readlink(link) == str(resources / "kube-apiserver-pod-1" / "kube-apiserver-pod.yaml")

    # the apiserver whose Lease is gone cannot be marked good for: refused, nothing written
    before = {p: p.read_bytes() for p in resources.rglob("*") if p.is_file() and not p.is_symlink()}
    refused = run_module(
        collections_path,
        FALLBACK,
        {**params, "state": "mark_good", "revision": 2, "apiserver_id": ha["gone"]},
    )
    assert refused.get("failed") is True, refused
    assert (refused["field"], refused["reason"], refused["action"]) == ("apiserver_id", "NotFound", "refused")
    assert "nothing was written" in refused["msg"] and refused["files_written"] == []
    assert os.readlink(link) == str(resources / "kube-apiserver-pod-1" / "kube-apiserver-pod.yaml")
    assert {p: p.read_bytes() for p in resources.rglob("*") if p.is_file() and not p.is_symlink()} == before
    assert not (resources / "kube-apiserver-pod-2" / "storage-versions.json").exists()

    # revision 1 decodes only <group>/v1; the stale entry's <group>/v1beta1 is not what the cluster stores
    back = run_module(collections_path, FALLBACK, {**params, "state": "fallback", "reason": "NotReady"})
    assert (back["action"], back["fallback_revision"]) == ("fallback", 1), back
    gate = back["storage_version"]
    assert gate["checked"] is True and gate["skew"] == [], gate
    assert list(gate["stale_apiservers"]) == [ha["gone"]]
    assert yaml.safe_load(live.read_text())["metadata"]["labels"]["revision"] == "1"
