"""``kubectl apply -k deploy/`` against the lab's real API server (server-side apply, so the server
validates every object), and the ServiceAccount's rights checked by the server's own authorizer
(``kubectl auth can-i --as``): what the runner needs is allowed, nothing more. The runner's own
availability (docs/operations.md "Availability of the runner itself"): three replicas that the
real scheduler spreads over the lab's three kwok nodes, and a PodDisruptionBudget whose status,
computed by the disruption controller, allows one voluntary disruption at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kube_helpers import wait_for

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
        ("-n", "noderemedy-system", "get", "poddisruptionbudget", "noderemedy-runner"),
    ):
        res = deployed.kubectl(*args)
        assert res.returncode == 0, f"{args}: {res.stderr}"
    dep = json.loads(
        deployed.kubectl(
            "-n", "noderemedy-system", "get", "deployment", "noderemedy-runner", "-o", "json"
        ).stdout
    )
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["template"]["spec"]["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "noderemedy-runner"}},
        }
    ]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--leader-elect" in container["args"]
    assert {p["name"] for p in container["ports"]} == {"metrics"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def runner_pods(lab) -> list[dict]:
    out = lab.kubectl(
        "-n", "noderemedy-system", "get", "pods", "-l", "app.kubernetes.io/name=noderemedy-runner", "-o", "json"
    )  # fmt: skip
    return list(json.loads(out.stdout)["items"]) if out.returncode == 0 else []


def test_the_deployment_spreads_its_three_replicas_over_nodes(deployed):
    def three_running() -> list[dict] | None:
        running = [p for p in runner_pods(deployed) if p["status"].get("phase") == "Running"]
        return running if len(running) == 3 else None

    running = wait_for(three_running, 90, "three Running runner pods")
    assert all(p["spec"]["serviceAccountName"] == "noderemedy-runner" for p in running)
    # the scheduler's PodTopologySpread: one per node while there are nodes enough (three kwok nodes)
    assert len({p["spec"]["nodeName"] for p in running}) == 3, [p["spec"]["nodeName"] for p in running]


def test_the_disruption_budget_allows_one_replica_down_at_a_time(deployed):
    pdb = json.loads(
        deployed.kubectl("-n", "noderemedy-system", "get", "pdb", "noderemedy-runner", "-o", "json").stdout
    )
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "noderemedy-runner"}}

    def status() -> dict | None:
        out = deployed.kubectl("-n", "noderemedy-system", "get", "pdb", "noderemedy-runner", "-o", "json")
        st = json.loads(out.stdout).get("status") or {}
        return st if st.get("expectedPods") == 3 and st.get("currentHealthy") == 3 else None

    # the disruption controller's reading: three expected and healthy, so one may go (a drain or
    # an eviction of a second one waits until the first is replaced and Ready)
    st = wait_for(status, 90, "the PodDisruptionBudget's status over three healthy replicas")
    assert st["disruptionsAllowed"] == 1 and st["desiredHealthy"] == 2, st


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
