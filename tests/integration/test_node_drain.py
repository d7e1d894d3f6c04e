"""noderemedy.core.node_drain against the lab's real control plane (kube-apiserver v1.34.4,
controller-manager with the disruption controller, kwok nodes), run through ansible-playbook.

Nodes used: lab-node-0 (kubectl's filters, bad input), lab-node-2 (PodDisruptionBudgets). Every test
restores the node it touched (uncordon) and deletes its namespace.
"""

from __future__ import annotations

import socket
import threading
import uuid
from pathlib import Path

import pytest
from kube_helpers import apply, identity, kjson, statefulset, wait_for
from kube_helpers import namespace as kube_namespace
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.lab, pytest.mark.kube]

FILTER_NODE = "lab-node-0"
PDB_NODE = "lab-node-2"
IMAGE = "registry.invalid/app:1"


# -- helpers ----------------------------------------------------------------------------------


def pods_on(lab, node: str, namespace: str) -> dict[str, dict]:
    """Pods bound to ``node`` in ``namespace``, by name."""
    doc = kjson(lab, "get", "pods", "-n", namespace, "--field-selector", f"spec.nodeName={node}")
    return {p["metadata"]["name"]: p for p in doc["items"]}


def running(pods: dict[str, dict]) -> bool:
    return all(p.get("status", {}).get("phase") == "Running" for p in pods.values())


def unschedulable(lab, node: str) -> bool:
    return bool(kjson(lab, "get", "node", node)["spec"].get("unschedulable"))


def pinned(node: str) -> dict:
    return {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 30}


def container() -> list[dict]:
    return [{"name": "app", "image": IMAGE}]


def deployment(ns: str, name: str, node: str, replicas: int = 1, volumes: list | None = None) -> dict:
    spec = {**pinned(node), "containers": container()}
    if volumes:
        spec["volumes"] = volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def drain_task(name: str, node: str, kubeconfig, **opts) -> dict:
    return {
        "name": name,
        "noderemedy.core.node_drain": {"name": node, "kubeconfig": str(kubeconfig), **opts},
        "ignore_errors": True,
    }


@pytest.fixture
def namespace(lab_kube):
    with kube_namespace(lab_kube, "drain") as name:
        yield name


@pytest.fixture
def restore_node(lab_kube):
    """Uncordon the nodes a test names, whatever happened."""
    touched: list[str] = []
    yield touched.append
    for node in touched:
        lab_kube.kubectl("uncordon", node)


# -- kubectl's filters --------------------------------------------------------------------------


@pytest.fixture
def mixed_node(lab_kube, namespace, restore_node, tmp_path):
    """lab-node-0 holding Deployment, StatefulSet, DaemonSet, bare, emptyDir and mirror pods."""
    ns, node = namespace, FILTER_NODE
    restore_node(node)
    apply(
        lab_kube,
        tmp_path,
        deployment(ns, "web", node, replicas=2),
        deployment(ns, "scratch", node, volumes=[{"name": "tmp", "emptyDir": {}}]),
        statefulset(ns, "db", {**pinned(node), "containers": container()}),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {**pinned(node), "containers": container()},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bare", "namespace": ns},
            "spec": {"nodeName": node, "containers": container()},
        },
        {
            # what the kubelet creates for a static pod: the mirror annotation, bound to the node
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"static-{node}",
                "namespace": ns,
                "annotations": {"kubernetes.io/config.mirror": "hash", "kubernetes.io/config.source": "file"},
            },
            "spec": {"nodeName": node, "automountServiceAccountToken": False, "containers": container()},
        },
    )
    pods = wait_for(
        lambda: (p := pods_on(lab_kube, node, ns)) and len(p) == 7 and running(p) and p, 90, "7 Running pods"
    )
    return ns, node, pods


def mine(ns: str, refs: list[str]) -> list[str]:
    """The ``namespace/name`` entries of ``refs`` in ``ns`` (the lab is shared with other tests)."""
    return sorted(r for r in refs if r.startswith(f"{ns}/"))


def by_prefix(pods: dict[str, dict], prefix: str) -> list[str]:
    return sorted(n for n in pods if n.startswith(prefix))


def test_drain_refuses_pods_kubectl_would_refuse_and_changes_nothing(lab_kube, mixed_node, run_playbook):
    ns, node, pods = mixed_node
    res = run_playbook([drain_task("drain", node, lab_kube.kubeconfig)]).task("drain")
    assert res["failed"] and res["reason"] == "invalid"
    msg = res["msg"]
    assert "DaemonSet-managed Pods (use ignore_daemonsets to ignore)" in msg
    assert "Pods with local storage (use delete_emptydir_data to override)" in msg
    assert "cannot delete Pods that declare no controller (use force to override)" in msg
    for name in [*by_prefix(pods, "agent-"), *by_prefix(pods, "scratch-"), "bare"]:
        assert f"{ns}/{name}" in msg, (name, msg)
    for name in [*by_prefix(pods, "web-"), "db-0", f"static-{node}"]:
        assert f"{ns}/{name}" not in msg, (name, msg)
    assert "uncordoned again" in msg
    assert not unschedulable(lab_kube, node)
    assert res["evicted"] == [] and res["changed"] is False
    now = pods_on(lab_kube, node, ns)
    assert {n: p["metadata"]["uid"] for n, p in now.items()} == {
        n: p["metadata"]["uid"] for n, p in pods.items()
    }


def test_drain_check_mode_predicts_and_changes_nothing(lab_kube, mixed_node, run_playbook):
    ns, node, pods = mixed_node
    flags = {"ignore_daemonsets": True, "delete_emptydir_data": True, "force": True}
    res = run_playbook([drain_task("drain", node, lab_kube.kubeconfig, **flags)], check=True).task("drain")
    assert not res.get("failed"), res
    assert res["changed"] is True
    expected = sorted(
        f"{ns}/{n}" for n in [*by_prefix(pods, "web-"), *by_prefix(pods, "scratch-"), "db-0", "bare"]
    )
    assert mine(ns, res["evicted"]) == expected
    assert {s["pod"] for s in res["skipped_pods"]} >= {
        f"{ns}/{n}" for n in [*by_prefix(pods, "agent-"), f"static-{node}"]
    }
    assert not unschedulable(lab_kube, node)
    now = pods_on(lab_kube, node, ns)
    assert {n: p["metadata"]["uid"] for n, p in now.items()} == {
        n: p["metadata"]["uid"] for n, p in pods.items()
    }
    assert not any(p["metadata"].get("deletionTimestamp") for p in now.values())


def test_drain_evicts_the_right_pods_and_cordons(lab_kube, mixed_node, run_playbook):
    ns, node, pods = mixed_node
    flags = {"ignore_daemonsets": True, "delete_emptydir_data": True, "force": True, "timeout": 120}
    run = run_playbook(
        [
            drain_task("drain", node, lab_kube.kubeconfig, **flags),
            drain_task("again", node, lab_kube.kubeconfig, **flags),
        ]
    )
    res = run.task("drain")
    assert not res.get("failed"), res
    assert res["changed"] is True and res["cordoned"] is True and res["method"] == "eviction"
    evicted = sorted(
        f"{ns}/{n}" for n in [*by_prefix(pods, "web-"), *by_prefix(pods, "scratch-"), "db-0", "bare"]
    )
    assert mine(ns, res["evicted"]) == evicted
    skipped = {s["pod"]: s["reason"] for s in res["skipped_pods"]}
    (agent,) = by_prefix(pods, "agent-")
    assert skipped[f"{ns}/{agent}"] == "ignoring DaemonSet-managed Pods"
    assert "mirror" in skipped[f"{ns}/static-{node}"]
    assert res["pending"] == []
    assert any(w.startswith("deleting Pods with local storage") for w in res["warnings"])
    assert any(w.startswith("deleting Pods that declare no controller") for w in res["warnings"])
    assert unschedulable(lab_kube, node)
    left = pods_on(lab_kube, node, ns)
    # the evicted pods are gone from the node (replacements cannot land on a cordoned node)
    old_uids = {pods[n]["metadata"]["uid"] for n in pods if f"{ns}/{n}" in evicted}
    assert not old_uids & {p["metadata"]["uid"] for p in left.values()}
    assert set(left) == {agent, f"static-{node}"}
    # idempotent: a second drain finds nothing to do
    again = run.task("again")
    assert not again.get("failed"), again
    assert again["changed"] is False and again["evicted"] == [] and again["cordoned"] is False


def test_cordon_and_uncordon_are_idempotent_and_check_mode_is_honest(lab_kube, restore_node, run_playbook):
    node = FILTER_NODE
    restore_node(node)
    kc = lab_kube.kubeconfig
    check = run_playbook([drain_task("cordon", node, kc, state="cordon")], check=True, diff=True).task(
        "cordon"
    )
    assert check["changed"] is True and check["diff"] == {
        "before": {"unschedulable": False},
        "after": {"unschedulable": True},
    }
    assert not unschedulable(lab_kube, node)
    run = run_playbook(
        [
            drain_task("cordon", node, kc, state="cordon"),
            drain_task("cordon again", node, kc, state="cordon"),
        ]
    )
    assert run.task("cordon")["changed"] is True
    assert run.task("cordon again")["changed"] is False
    assert unschedulable(lab_kube, node)
    run = run_playbook(
        [
            drain_task("uncordon", node, kc, state="uncordon"),
            drain_task("uncordon again", node, kc, state="uncordon"),
        ]
    )
    assert run.task("uncordon")["changed"] is True and run.task("uncordon again")["changed"] is False
    assert not unschedulable(lab_kube, node)


# -- PodDisruptionBudgets -----------------------------------------------------------------------


@pytest.fixture
def guarded(lab_kube, namespace, restore_node, tmp_path):
    """Two replicas on lab-node-2 behind a PDB that allows no disruption (maxUnavailable 0)."""
    ns, node = namespace, PDB_NODE
    restore_node(node)
    apply(
        lab_kube,
        tmp_path,
        deployment(ns, "guarded", node, replicas=2),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "namespace": ns},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    pods = wait_for(
        lambda: (p := pods_on(lab_kube, node, ns)) and len(p) == 2 and running(p) and p, 90, "2 Running pods"
    )

    def pdb_observed() -> bool:
        pdb = kjson(lab_kube, "get", "pdb", "guarded", "-n", ns)
        st = pdb.get("status", {})
        return st.get("observedGeneration") == pdb["metadata"]["generation"] and st.get("currentHealthy") == 2

    wait_for(pdb_observed, 60, "the disruption controller to observe the PDB")
    return ns, node, pods


def eviction_refusals(lab) -> int:
    """How many evictions the API server has refused with 429 (a disruption budget), from its own
    ``apiserver_request_total`` counter (read with prometheus_client's parser)."""
    out = lab.kubectl("get", "--raw", "/metrics")
    assert out.returncode == 0, out.stderr
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(out.stdout)
            for sample in family.samples
            if sample.name == "apiserver_request_total"
            and sample.labels.get("subresource") == "eviction"
            and sample.labels.get("code") == "429"
        )
    )


def test_drain_waits_for_a_pdb_then_succeeds(lab_kube, guarded, run_playbook):
    ns, node, pods = guarded
    refused_before = eviction_refusals(lab_kube)

    # while the module is retrying 429s, the budget is relaxed (as an operator would): once the API
    # server has refused one of its evictions (its next try comes after kubectl's 5 s retry delay),
    # whatever the module's start-up took
    def relax_after_cordon() -> None:
        wait_for(lambda: unschedulable(lab_kube, node), 120, f"{node} cordoned by the drain")
        wait_for(lambda: eviction_refusals(lab_kube) > refused_before, 120, "an eviction refused with 429")
        lab_kube.kubectl(
            "patch", "pdb", "guarded", "-n", ns, "--type=merge", "-p", '{"spec":{"maxUnavailable":2}}'
        )

    relax = threading.Thread(target=relax_after_cordon, daemon=True)
    relax.start()
    try:
        res = run_playbook([drain_task("drain", node, lab_kube.kubeconfig, timeout=120)]).task("drain")
    finally:
        relax.join()
    assert not res.get("failed"), res
    assert mine(ns, res["evicted"]) == sorted(f"{ns}/{n}" for n in pods)
    assert res["retries"] >= 1, res
    assert res["pending"] == []
    assert unschedulable(lab_kube, node)
    assert not set(pods) & set(pods_on(lab_kube, node, ns))


def test_drain_with_short_timeout_fails_naming_blocked_pods_and_restores_the_node(
    lab_kube, guarded, run_playbook
):
    ns, node, pods = guarded
    res = run_playbook([drain_task("drain", node, lab_kube.kubeconfig, timeout=7)]).task("drain")
    assert res["failed"] and res["reason"] == "timeout", res
    assert "timed out after 7 s" in res["msg"]
    for name in pods:
        assert f"{ns}/{name}" in res["msg"]
    assert "disruption budget" in res["msg"].lower()
    assert "uncordoned again" in res["msg"]
    assert res["evicted"] == [] and res["cordoned"] is False
    assert mine(ns, [p["pod"] for p in res["pending"]]) == sorted(f"{ns}/{n}" for n in pods)
    # as found: schedulable, same pods
    assert not unschedulable(lab_kube, node)
    now = pods_on(lab_kube, node, ns)
    assert {n: p["metadata"]["uid"] for n, p in now.items()} == {
        n: p["metadata"]["uid"] for n, p in pods.items()
    }


# -- bad input ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_that_does_not_exist(lab_kube, run_playbook):
    res = run_playbook([drain_task("drain", "no-such-node", lab_kube.kubeconfig)]).task("drain")
    assert res["failed"] and res["reason"] == "not_found"
    assert res["msg"] == "node 'no-such-node' not found"


def test_unreachable_api_server(lab_kube, run_playbook):
    task = {
        "name": "drain",
        "noderemedy.core.node_drain": {
            "name": FILTER_NODE,
            "host": f"https://127.0.0.1:{free_port()}",
            "ca_cert": str(Path(lab_kube.info["kube"]["pki"]) / "ca.crt"),
        },
        "ignore_errors": True,
    }
    res = run_playbook([task]).task("drain")
    assert res["failed"] and res["reason"] == "unreachable"
    assert "API server unreachable" in res["msg"]
    assert not unschedulable(lab_kube, FILTER_NODE)


def test_kubeconfig_without_rights(lab_kube, run_playbook, tmp_path):
    kc = identity(lab_kube, tmp_path, f"nobody-{uuid.uuid4().hex[:6]}")
    res = run_playbook([drain_task("drain", FILTER_NODE, kc)]).task("drain")
    assert res["failed"] and res["reason"] == "forbidden", res
    assert "forbidden" in res["msg"] and FILTER_NODE in res["msg"]
    assert not unschedulable(lab_kube, FILTER_NODE)


def test_rights_to_cordon_but_not_to_evict_leave_the_node_as_found(
    lab_kube, run_playbook, tmp_path, restore_node
):
    """Cordoning works, listing pods is forbidden: the drain fails and the cordon is undone."""
    restore_node(FILTER_NODE)
    user = f"cordoner-{uuid.uuid4().hex[:6]}"
    kc = identity(lab_kube, tmp_path, user)
    role = f"nr-test-{user}"
    apply(
        lab_kube,
        tmp_path,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    try:
        res = run_playbook([drain_task("drain", FILTER_NODE, kc)]).task("drain")
    finally:
        lab_kube.kubectl("delete", "clusterrolebinding,clusterrole", role)
    assert res["failed"] and res["reason"] == "forbidden", res
    assert "pods is forbidden" in res["msg"]
    assert "uncordoned again" in res["msg"]
    assert not unschedulable(lab_kube, FILTER_NODE)


def test_bad_option_names_the_field(lab_kube, run_playbook):
    res = run_playbook([drain_task("drain", FILTER_NODE, lab_kube.kubeconfig, grace_period=-5)]).task("drain")
    assert res["failed"] and res["reason"] == "invalid"
    assert res["msg"].startswith("grace_period:")
    res = run_playbook([drain_task("drain", FILTER_NODE, lab_kube.kubeconfig, pod_selector="app in (")]).task(
        "drain"
    )
    assert res["failed"] and res["msg"].startswith("pod_selector:"), res
    assert not unschedulable(lab_kube, FILTER_NODE)


def test_credentials_from_k8s_auth_environment(lab_kube, run_playbook):
    """kubernetes.core users set K8S_AUTH_KUBECONFIG once; the modules honour it."""
    task = {
        "name": "cordon",
        "noderemedy.core.node_drain": {"name": FILTER_NODE, "state": "cordon"},
        "ignore_errors": True,
    }
    res = run_playbook([task], check=True, extra_env={"K8S_AUTH_KUBECONFIG": str(lab_kube.kubeconfig)}).task(
        "cordon"
    )
    assert not res.get("failed"), res
    assert res["changed"] is True and res["unschedulable"] is True
    assert not unschedulable(lab_kube, FILTER_NODE)
