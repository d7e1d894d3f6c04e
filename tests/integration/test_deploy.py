"""``kubectl apply -k deploy/`` against the lab's real API server (server-side apply, so the server
validates every object), and the ServiceAccount's rights checked by the server's own authorizer
(``kubectl auth can-i --as``): what the runner needs is allowed, nothing more."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
SA = "system:serviceaccount:noderemedy-system:noderemedy-runner"


@pytest.fixture(scope="module")
def deployed(lab_kube):
    # the cluster-api / Metal3 CRDs a real cluster already has (shipped for the lab in deploy/crds)
    crds = lab_kube.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "crds"))
    assert crds.returncode == 0, crds.stderr
    out = lab_kube.kubectl("apply", "-k", str(ROOT / "deploy"), "--server-side")
    assert out.returncode == 0, out.stderr
    # applying again, validated by the server without persisting, is accepted as it is
    dry = lab_kube.kubectl("apply", "-k", str(ROOT / "deploy"), "--server-side", "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    yield lab_kube
    lab_kube.kubectl("delete", "-k", str(ROOT / "deploy"), "--wait=false", "--ignore-not-found")


def test_every_object_is_created(deployed):
    for args in (
        ("get", "namespace", "noderemedy-system"),
        ("get", "crd", "nodefences.remediation.noderemedy.io"),
        ("-n", "noderemedy-system", "get", "serviceaccount", "noderemedy-runner"),
        ("get", "clusterrole", "noderemedy-runner"),
        ("get", "clusterrolebinding", "noderemedy-runner"),
        ("-n", "noderemedy-system", "get", "role", "noderemedy-runner"),
        ("-n", "noderemedy-system", "get", "rolebinding", "noderemedy-runner"),
        ("-n", "noderemedy-system", "get", "configmap", "noderemedy-config"),
        ("-n", "noderemedy-system", "get", "service", "noderemedy-runner-metrics"),
    ):
        res = deployed.kubectl(*args)
        assert res.returncode == 0, f"{args}: {res.stderr}"
    dep = json.loads(
        deployed.kubectl(
            "-n", "noderemedy-system", "get", "deployment", "noderemedy-runner", "-o", "json"
        ).stdout
    )
    assert dep["spec"]["replicas"] == 2
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--leader-elect" in container["args"]
    assert {p["name"] for p in container["ports"]} == {"metrics"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_deployment_schedules_its_two_replicas(deployed):
    deadline = time.monotonic() + 90
    while True:
        pods = json.loads(
            deployed.kubectl(
                "-n",
                "noderemedy-system",
                "get",
                "pods",
                "-l",
                "app.kubernetes.io/name=noderemedy-runner",
                "-o",
                "json",
            ).stdout
        )["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        if len(running) == 2:
            break
        assert time.monotonic() < deadline, [p["status"] for p in pods]
        time.sleep(0.5)
    assert all(p["spec"]["serviceAccountName"] == "noderemedy-runner" for p in running)


ALLOWED = [
    ("create", "nodefences.remediation.noderemedy.io", None),
    ("update", "nodefences.remediation.noderemedy.io", None, "status"),
    ("patch", "nodefences.remediation.noderemedy.io", None),  # its finalizer
    ("update", "nodefences.remediation.noderemedy.io", None, "finalizers"),
    ("patch", "nodes", None),
    ("create", "pods", None, "eviction"),
    ("delete", "pods", None),
    ("list", "volumeattachments.storage.k8s.io", None),
    ("update", "metal3remediations.infrastructure.cluster.x-k8s.io", None, "status"),
    ("patch", "machines.cluster.x-k8s.io", None, "status"),
    ("create", "events", "default"),
    ("get", "secrets", "noderemedy-system"),
    ("get", "configmaps", "noderemedy-system"),
    ("create", "configmaps", "noderemedy-system"),  # the status ConfigMap, once
    ("update", "configmaps/noderemedy-status", "noderemedy-system"),
    ("update", "leases.coordination.k8s.io", "noderemedy-system"),
    ("update", "leases.coordination.k8s.io", "medik8s-leases"),  # medik8s' node Lease convention
]
DENIED = [
    ("get", "secrets", "default"),  # credentials only in its own namespace
    ("list", "secrets", "noderemedy-system"),  # by name, never listed
    ("delete", "nodes", None),
    ("create", "pods", "default"),
    ("update", "leases.coordination.k8s.io", "kube-node-lease"),
    ("create", "clusterroles.rbac.authorization.k8s.io", None),
    ("update", "configmaps", "noderemedy-system"),  # only noderemedy-status
    ("update", "configmaps/noderemedy-config", "noderemedy-system"),
]


def _can_i(lab, verb: str, resource: str, namespace: str | None, sub: str | None = None) -> str:
    args = ["auth", "can-i", verb, resource, "--as", SA]
    if sub:
        args += ["--subresource", sub]
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    return lab.kubectl(*args).stdout.strip()


@pytest.mark.parametrize("rule", ALLOWED, ids=lambda r: " ".join(x for x in r if x))
def test_runner_may(deployed, rule):
    assert _can_i(deployed, *rule) == "yes"


@pytest.mark.parametrize("rule", DENIED, ids=lambda r: " ".join(x for x in r if x))
def test_runner_may_not(deployed, rule):
    assert _can_i(deployed, *rule) == "no"
