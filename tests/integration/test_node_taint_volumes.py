"""noderemedy.core.node_taint ``wait``: the out-of-service taint (KEP-2268) on a powered-off node
releases its VolumeAttachments through the real kube-controller-manager, and the module reports it.

Real here: the kube-apiserver, the controller-manager's attach/detach controller (it creates the
``storage.k8s.io/v1`` VolumeAttachment for a CSI PersistentVolume whose CSIDriver has
``attachRequired: true``, and deletes it on detach), its taint-eviction controller and pod garbage
collector (which delete and force-delete the pods of the out-of-service node), the StatefulSet and
PersistentVolume controllers, the scheduler, the node's BMC (power off through IPMI) and kwok.

Not real: the lab has no CSI driver, so nothing plays the CSI external-attacher sidecar (which calls
the driver's ControllerPublishVolume and sets ``status.attached``). :class:`StandInAttacher`, in this
test only, marks the VolumeAttachments of this test's driver attached; it adds no finalizer, so a
detach (the controller deleting the VolumeAttachment) completes at once, as it would with an
attacher that unpublishes immediately.

The nodes get the annotation ``volumes.kubernetes.io/controller-managed-attach-detach: "true"``
for the test's duration: a kubelet sets it when it registers its node (its default
``--enable-controller-attach-detach``), kwok does not, and without it the attach/detach controller
leaves the node's volumes alone (``addNodeToDswp``).

Nodes used: lab-node-1 (powered off, then on again), lab-node-2 (where the StatefulSet pod comes
back). Teardown deletes the namespace, waits until the test's VolumeAttachments are gone, deletes
the PersistentVolume and CSIDriver, removes the annotation and the taint, and powers the node on.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from kube_helpers import apply, fence_task, kjson, statefulset, wait_for

from noderemedy_lab.workload import prefer_node

pytestmark = [pytest.mark.lab, pytest.mark.kube]

DEAD = "lab-node-1"
OTHER = "lab-node-2"
OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
ADC_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"
DRIVER = "attach.test.noderemedy.io"


def attachments(lab, pv: str) -> list[dict]:
    """VolumeAttachments of PersistentVolume ``pv``."""
    items = kjson(lab, "get", "volumeattachments")["items"]
    return [v for v in items if v["spec"].get("source", {}).get("persistentVolumeName") == pv]


class StandInAttacher(threading.Thread):
    """Stands in for the CSI external-attacher sidecar, which needs a real CSI driver the lab does
    not have: every ``interval`` seconds, marks the VolumeAttachments whose ``spec.attacher`` is
    ``driver`` ``status.attached: true`` (what the sidecar does after ControllerPublishVolume
    succeeds). It adds no finalizer and does nothing on detach.

    Args:
        kubeconfig: the lab's admin kubeconfig (path).
        driver: the CSI driver name to act for.
        interval: seconds between lists.
    """

    def __init__(self, kubeconfig: Path, driver: str, interval: float = 0.25) -> None:
        super().__init__(name="stand-in-external-attacher", daemon=True)
        from kubernetes import client, config

        self.api = client.StorageV1Api(config.new_client_from_config(str(kubeconfig)))
        self.driver = driver
        self.interval = interval
        self.stop = threading.Event()
        self.marked: list[str] = []
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                for va in self.api.list_volume_attachment().items:
                    if va.spec.attacher != self.driver or va.metadata.deletion_timestamp:
                        continue
                    if va.status is not None and va.status.attached:
                        continue
                    self.api.patch_volume_attachment_status(va.metadata.name, {"status": {"attached": True}})
                    self.marked.append(va.metadata.name)
            except Exception as exc:  # a 404/409 race with a detach; keep going
                self.errors.append(repr(exc))


@pytest.fixture
def volume_lab(lab_kube, tmp_path):
    """A namespace, a CSIDriver with ``attachRequired``, a CSI PersistentVolume pre-bound to the
    StatefulSet's claim ``data-db-0``, the attach/detach annotation on both nodes, and the
    stand-in attacher running. Yields ``(namespace, pv_name, attacher)``."""
    lab = lab_kube
    ns = f"oosv-{uuid.uuid4().hex[:8]}"
    pv = f"pv-{ns}"
    assert lab.kubectl("create", "namespace", ns).returncode == 0
    for node in (DEAD, OTHER):
        out = lab.kubectl("annotate", "--overwrite", "node", node, f"{ADC_ANNOTATION}=true")
        assert out.returncode == 0, out.stderr
    apply(
        lab,
        tmp_path,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": DRIVER},
            "spec": {"attachRequired": True, "podInfoOnMount": False},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": ns, "name": "data-db-0"},
                "csi": {"driver": DRIVER, "volumeHandle": f"vol-{ns}"},
            },
        },
    )
    attacher = StandInAttacher(lab.kubeconfig, DRIVER)
    attacher.start()
    try:
        yield ns, pv, attacher
    finally:
        lab.kubectl("delete", "namespace", ns, "--timeout=90s")
        try:
            wait_for(lambda: not attachments(lab, pv), 60, f"the VolumeAttachments of {pv} gone")
        finally:
            attacher.stop.set()
            attacher.join(5)
            lab.kubectl("delete", "pv", pv, "--wait=false")
            lab.kubectl("delete", "csidriver", DRIVER, "--wait=false")
            for node in (DEAD, OTHER):
                lab.kubectl("annotate", "node", node, f"{ADC_ANNOTATION}-")


@pytest.fixture
def dead_node(lab_kube):
    """lab-node-1 to be powered off; afterwards the taint is removed and the node is powered on, Ready."""
    yield DEAD
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS['key']}-")
    lab_kube.power_on(DEAD)
    lab_kube.wait_nodes([DEAD], "True", 120)


def test_out_of_service_wait_reports_released_volume_attachments(
    lab_kube, volume_lab, dead_node, run_playbook, tmp_path
):
    lab, kc = lab_kube, lab_kube.kubeconfig
    ns, pv, attacher = volume_lab
    container = {
        "name": "db",
        "image": "registry.invalid/db:1",
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/db"}],
    }
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    pod = {"affinity": prefer_node(DEAD, [DEAD, OTHER]), "containers": [container]}
    apply(lab, tmp_path, statefulset(ns, "db", pod, volumeClaimTemplates=[claim]))

    def db0():
        items = kjson(lab, "get", "pods", "-n", ns, "-l", "app=db")["items"]
        return items[0] if items else None

    first = wait_for(
        lambda: (p := db0()) and p["status"].get("phase") == "Running" and p, 120, "db-0 Running"
    )
    assert first["spec"]["nodeName"] == DEAD, "the scheduler did not honour the preferred node"

    # the attach/detach controller attached the volume to the node: a VolumeAttachment, attached
    def attached_to(node: str):
        vas = [v for v in attachments(lab, pv) if v["spec"]["nodeName"] == node]
        return vas[0] if vas and (vas[0].get("status") or {}).get("attached") else None

    va = wait_for(lambda: attached_to(DEAD), 120, f"a VolumeAttachment of {pv} on {DEAD}, attached")
    va_name = va["metadata"]["name"]
    assert va["spec"]["attacher"] == DRIVER
    assert va_name in attacher.marked
    wait_for(
        lambda: any(
            v["name"] == f"kubernetes.io/csi/{DRIVER}^vol-{ns}"
            for v in kjson(lab, "get", "node", DEAD)["status"].get("volumesAttached") or []
        ),
        60,
        f"the volume in {DEAD}'s status.volumesAttached",
    )

    # power off through the real BMC; the node turns NotReady; the volume stays attached
    fenced = run_playbook([fence_task(lab, DEAD)]).task("fence")
    assert not fenced.get("failed"), fenced
    # what the node lifecycle controller would write after its grace period, written now (that
    # controller is not what this test is about)
    lab.mark_unreachable(DEAD)
    lab.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    assert [v["metadata"]["name"] for v in attachments(lab, pv)] == [va_name]

    # the out-of-service taint, waiting: the controller-manager force-deletes the pod and detaches.
    # kwok sometimes reports a powered-off node Ready for a moment (a lab artifact); node_taint then
    # rightly refuses (reason conflict, "Ready is True") and nothing is tainted: wait for NotReady
    # again and retry, at most 3 tries
    for _ in range(3):
        lab.wait_nodes([DEAD], {"False", "Unknown"}, 120)
        res = run_playbook(
            [
                {
                    "name": "oos",
                    "noderemedy.core.node_taint": {
                        "name": DEAD,
                        "kubeconfig": str(kc),
                        "taints": [OOS],
                        "fence_evidence": fenced["fence"],
                        "wait": True,
                        "wait_timeout": 240,
                    },
                    "ignore_errors": True,
                }
            ]
        ).task("oos")
        if not (res.get("reason") == "conflict" and "Ready is True" in str(res.get("msg"))):
            break
        assert not any(
            t.get("key") == OOS["key"] for t in kjson(lab, "get", "node", DEAD)["spec"].get("taints") or []
        )
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["waited"]["volume_attachments"] == [va_name], res["waited"]
    assert f"{ns}/db-0" in res["waited"]["pods"], res["waited"]
    out = lab.kubectl("get", "volumeattachment", va_name)
    assert out.returncode != 0 and "NotFound" in out.stderr, out.stdout
    assert not [v for v in attachments(lab, pv) if v["spec"]["nodeName"] == DEAD]

    # the StatefulSet pod comes back on the other node, and the volume is attached there
    second = wait_for(
        lambda: (
            (p := db0())
            and p["metadata"]["uid"] != first["metadata"]["uid"]
            and p["status"].get("phase") == "Running"
            and p
        ),
        120,
        "db-0 Running again",
    )
    assert second["spec"]["nodeName"] == OTHER
    wait_for(lambda: attached_to(OTHER), 120, f"a VolumeAttachment of {pv} on {OTHER}, attached")
