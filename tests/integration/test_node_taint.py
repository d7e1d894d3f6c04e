"""noderemedy.core.node_taint against the lab: the out-of-service taint (KEP-2268) on a node powered
off through its real BMC releases its pods through the real kube-controller-manager, and a
StatefulSet pod comes back Running on another node; the guard refuses a Ready node or missing,
unverified or stale fence evidence.

Nodes used: lab-node-1 (powered off, then on again), lab-node-0 (Ready refusals), lab-node-2 (the
StatefulSet's other allowed node). Teardown removes the taint and powers the node on.
"""

from __future__ import annotations

import pytest
from kube_helpers import apply, fence_task, kjson, statefulset, wait_for
from kube_helpers import namespace as kube_namespace

from noderemedy_lab.workload import prefer_node

pytestmark = [pytest.mark.lab, pytest.mark.kube]

DEAD = "lab-node-1"
OTHER = "lab-node-2"
READY = "lab-node-0"
OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def taints(lab, node: str) -> list[dict]:
    return kjson(lab, "get", "node", node)["spec"].get("taints") or []


def taint_task(name: str, node: str, kubeconfig, **opts) -> dict:
    return {
        "name": name,
        "noderemedy.core.node_taint": {"name": node, "kubeconfig": str(kubeconfig), **opts},
        "ignore_errors": True,
    }


@pytest.fixture
def namespace(lab_kube):
    with kube_namespace(lab_kube, "oos") as name:
        yield name


@pytest.fixture
def dead_node(lab_kube):
    """lab-node-1 to be powered off; afterwards the taint is removed and the node is powered on, Ready."""
    yield DEAD
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS['key']}-")
    lab_kube.power_on(DEAD)
    lab_kube.wait_nodes([DEAD], "True", 120)


def test_out_of_service_on_a_fenced_node_releases_its_pods(
    lab_kube, namespace, dead_node, run_playbook, tmp_path
):
    ns, kc = namespace, lab_kube.kubeconfig
    affinity = prefer_node(DEAD, [DEAD, OTHER])
    pod = {"affinity": affinity, "containers": [{"name": "db", "image": "registry.invalid/db:1"}]}
    apply(lab_kube, tmp_path, statefulset(ns, "db", pod))

    def db0():
        doc = kjson(lab_kube, "get", "pods", "-n", ns, "-l", "app=db")["items"]
        return doc[0] if doc else None

    first = wait_for(lambda: (p := db0()) and p["status"].get("phase") == "Running" and p, 90, "db-0 Running")
    assert first["spec"]["nodeName"] == DEAD, "the scheduler did not honour the preferred node"

    # a Ready node is refused, even with evidence
    fenced = run_playbook([fence_task(lab_kube, DEAD)]).task("fence")
    assert not fenced.get("failed"), fenced
    evidence = fenced["fence"]
    assert evidence["verified"] is True and evidence["state"] == "off", evidence
    res = run_playbook([taint_task("oos", READY, kc, taints=[OOS], fence_evidence=evidence)]).task("oos")
    assert res["failed"] and res["reason"] == "conflict", res
    assert f"node {READY}: Ready is True" in res["msg"]
    assert not any(t["key"] == OOS["key"] for t in taints(lab_kube, READY))

    # powered off: what the node lifecycle controller would write after its grace period, written
    # now (that controller is not what this test is about)
    lab_kube.mark_unreachable(DEAD)
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)

    # NotReady but no / unverified / stale evidence: refused
    stale = {**evidence, "verified_at": evidence["verified_at"] - 900}
    run = run_playbook(
        [
            taint_task("no evidence", DEAD, kc, taints=[OOS]),
            taint_task("unverified", DEAD, kc, taints=[OOS], fence_evidence={**evidence, "verified": False}),
            taint_task("stale", DEAD, kc, taints=[OOS], fence_evidence=stale, fence_max_age=300),
        ]
    )
    assert run.task("no evidence")["msg"].startswith("fence_evidence:")
    assert run.task("unverified")["msg"].startswith("fence_evidence.verified:")
    assert run.task("stale")["msg"].startswith("fence_evidence.verified_at:")
    assert not any(t["key"] == OOS["key"] for t in taints(lab_kube, DEAD))

    # check mode predicts the change and does nothing
    check = run_playbook(
        [taint_task("oos", DEAD, kc, taints=[OOS], fence_evidence=evidence, wait=True)], check=True
    ).task("oos")
    assert not check.get("failed"), check
    assert check["changed"] is True and "waited" not in check
    assert not any(t["key"] == OOS["key"] for t in taints(lab_kube, DEAD))

    # the real thing: taint, then the controller-manager releases the pods
    res = run_playbook(
        [taint_task("oos", DEAD, kc, taints=[OOS], fence_evidence=evidence, wait=True, wait_timeout=240)]
    ).task("oos")
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["fence"]["method"] == "ipmi" and res["fence"]["verified"] is True
    assert f"{ns}/db-0" in res["waited"]["pods"]
    assert res["waited"]["volume_attachments"] == []
    oos = [t for t in taints(lab_kube, DEAD) if t["key"] == OOS["key"]]
    assert oos and oos[0]["effect"] == "NoExecute" and oos[0]["value"] == "nodeshutdown"
    assert not kjson(lab_kube, "get", "pods", "-A", "--field-selector", f"spec.nodeName={DEAD}")["items"]

    # the StatefulSet controller recreates db-0, and it runs on the other node
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

    # idempotent, and removal needs no evidence
    run = run_playbook(
        [
            taint_task("again", DEAD, kc, taints=[OOS], fence_evidence=evidence),
            taint_task("remove", DEAD, kc, state="absent", taints=[{"key": OOS["key"]}]),
        ]
    )
    assert run.task("again")["changed"] is False
    assert run.task("remove")["changed"] is True
    assert not any(t["key"] == OOS["key"] for t in taints(lab_kube, DEAD))


def test_plain_taints_add_and_remove_idempotently(lab_kube, run_playbook):
    kc = lab_kube.kubeconfig
    t = {"key": "noderemedy.io/test", "value": "x", "effect": "NoSchedule"}
    try:
        run = run_playbook(
            [
                taint_task("add", READY, kc, taints=[t]),
                taint_task("add again", READY, kc, taints=[t]),
                taint_task("change", READY, kc, taints=[{**t, "value": "y"}]),
                taint_task("remove", READY, kc, state="absent", taints=[{"key": t["key"]}]),
                taint_task("remove again", READY, kc, state="absent", taints=[{"key": t["key"]}]),
            ]
        )
        assert run.task("add")["changed"] is True
        assert run.task("add")["added"] == [t]
        assert run.task("add again")["changed"] is False
        change = run.task("change")
        assert (
            change["changed"] is True
            and change["removed"] == [t]
            and change["added"] == [{**t, "value": "y"}]
        )
        assert run.task("remove")["changed"] is True
        assert run.task("remove again")["changed"] is False
        assert not any(x["key"] == t["key"] for x in taints(lab_kube, READY))
    finally:
        lab_kube.kubectl("taint", "node", READY, f"{t['key']}-")


def test_taint_on_missing_node(lab_kube, run_playbook):
    res = run_playbook([taint_task("t", "no-such-node", lab_kube.kubeconfig, taints=[OOS])]).task("t")
    assert res["failed"] and res["reason"] == "not_found"
    assert res["msg"] == "node 'no-such-node' not found"


def test_force_delete_pods_releases_at_once_what_the_taint_releases_and_only_on_a_verified_fence(
    lab_kube, namespace, dead_node, run_playbook, tmp_path
):
    """force_delete_pods: with the out-of-service taint the node's pods are force-deleted in the
    same task (not on the pod garbage collector's next pass), except a pod that tolerates the
    taint; without verified evidence nothing is deleted."""
    ns, kc = namespace, lab_kube.kubeconfig
    pod = {
        "affinity": prefer_node(DEAD, [DEAD, OTHER]),
        "containers": [{"name": "db", "image": "registry.invalid/db:1"}],
    }
    apply(lab_kube, tmp_path, statefulset(ns, "db", pod))
    tolerant = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tolerant", "namespace": ns},
        "spec": {
            "nodeName": DEAD,
            "tolerations": [{"key": OOS["key"], "operator": "Exists", "effect": "NoExecute"}],
            "containers": [{"name": "t", "image": "registry.invalid/t:1"}],
        },
    }
    apply(lab_kube, tmp_path, tolerant)

    def on_dead() -> dict[str, str]:
        items = kjson(lab_kube, "get", "pods", "-n", ns, "--field-selector", f"spec.nodeName={DEAD}")["items"]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}

    before = wait_for(
        lambda: (p := on_dead()) and {"db-0", "tolerant"} <= set(p) and p, 90, "both pods on the node"
    )
    fenced = run_playbook([fence_task(lab_kube, DEAD)]).task("fence")
    assert not fenced.get("failed"), fenced
    lab_kube.mark_unreachable(DEAD)
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)

    refused = run_playbook(
        [
            taint_task(
                "oos",
                DEAD,
                kc,
                taints=[OOS],
                force_delete_pods=True,
                fence_evidence={**fenced["fence"], "verified": False},
            )
        ]
    ).task("oos")
    assert refused["failed"] and refused["msg"].startswith("fence_evidence.verified:"), refused
    assert "deleted_pods" not in refused
    assert on_dead() == before, "a pod was deleted without a verified fence"

    res = run_playbook(
        [taint_task("oos", DEAD, kc, taints=[OOS], force_delete_pods=True, fence_evidence=fenced["fence"])]
    ).task("oos")
    after = on_dead()  # read right after the task: no pass of the pod garbage collector waited for
    assert not res.get("failed"), res
    assert res["deleted_pods"] == [f"{ns}/db-0"], res
    assert after.get("db-0") != before["db-0"], "the old db-0 is still there"
    assert after.get("tolerant") == before["tolerant"], "the pod tolerating the taint was deleted"


def fc_task(lab, node: str, state: str) -> dict:
    """A task switching ``node``'s port on the lab's FC switch (snmpd, IF-MIB) with
    noderemedy.core.fc_port, verified by read-back, named ``fc``."""
    fc = lab.info["devices"]["snmp"]["fc"]
    return {
        "name": "fc",
        "noderemedy.core.fc_port": {
            "ipaddr": fc["host"],
            "ipport": fc["port"],
            "community": fc["community"],
            "plug": [lab.info["devices"]["fc_ports"][node]],
            "state": state,
        },
        "ignore_errors": True,
    }


def test_a_storage_only_fence_releases_the_pods_on_fenced_storage_and_never_taints(
    lab_kube, namespace, dead_node, run_playbook, tmp_path
):
    """FC port of lab-node-1 disabled and read back (storage-only evidence), the node NotReady:
    node_taint refuses without ``fenced_storage``; with it, it force-deletes exactly the pod whose
    volume is on that storage (a hostPath under the SAN mount), leaves the pod without one running,
    and never adds the out-of-service taint (the node may still run that pod)."""
    ns, kc = namespace, lab_kube.kubeconfig

    def bare(name: str, volumes: list[dict]) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": DEAD,
                "containers": [{"name": name, "image": f"registry.invalid/{name}:1"}],
                "volumes": volumes,
            },
        }

    apply(lab_kube, tmp_path, bare("db", [{"name": "san", "hostPath": {"path": "/mnt/san/db"}}]))
    apply(lab_kube, tmp_path, bare("cache", [{"name": "tmp", "emptyDir": {}}]))

    def on_dead() -> dict[str, str]:
        items = kjson(lab_kube, "get", "pods", "-n", ns, "--field-selector", f"spec.nodeName={DEAD}")["items"]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}

    before = wait_for(lambda: (p := on_dead()) and {"db", "cache"} <= set(p) and p, 60, "both pods bound")
    try:
        fenced = run_playbook([fc_task(lab_kube, DEAD, "disabled")]).task("fc")
        assert not fenced.get("failed") and fenced["fence"]["verified"] is True, fenced
        lab_kube.power_off(
            DEAD
        )  # only its heartbeats stop, as for a partitioned node: the evidence is the FC port's
        lab_kube.mark_unreachable(DEAD)
        lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)

        refused = run_playbook(
            [
                taint_task(
                    "oos", DEAD, kc, taints=[OOS], force_delete_pods=True, fence_evidence=fenced["fence"]
                )
            ]
        ).task("oos")
        assert refused["failed"] and refused["reason"] == "invalid", refused
        assert refused["msg"].startswith("fenced_storage: a storage-only fence"), refused["msg"]
        assert on_dead() == before, "a pod was deleted without knowing which storage the fence cut off"

        res = run_playbook(
            [
                taint_task(
                    "oos",
                    DEAD,
                    kc,
                    taints=[OOS],
                    force_delete_pods=True,
                    fence_evidence=fenced["fence"],
                    fenced_storage=[{"host_path": "/mnt/san"}],
                )
            ]
        ).task("oos")
        after = on_dead()
        assert not res.get("failed"), res
        assert res["released"] == "fenced_storage" and res["added"] == [], res
        assert res["deleted_pods"] == [f"{ns}/db"] and res["kept_pods"] == [f"{ns}/cache"], res
        assert set(after) == {"cache"} and after["cache"] == before["cache"], after
        assert not [t for t in taints(lab_kube, DEAD) if t["key"] == OOS["key"]], "tainted on a storage fence"
    finally:
        run_playbook([fc_task(lab_kube, DEAD, "enabled")])


def test_release_ready_node_lets_a_storage_fence_release_on_a_ready_node_never_taint(
    lab_kube, namespace, run_playbook, tmp_path
):
    """lab-node-0 stays Ready (a threshold on another condition than Ready, e.g. DiskPressure, made
    its NodeFence); its FC port disabled and read back: without ``release_ready_node`` node_taint
    refuses (Ready is True); with it, it force-deletes the pod on the fenced storage, keeps the
    other, never taints. The out-of-service taint on a Ready node stays refused with it too."""
    ns, kc = namespace, lab_kube.kubeconfig

    def bare(name: str, volumes: list[dict]) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "nodeName": READY,
                "containers": [{"name": name, "image": f"registry.invalid/{name}:1"}],
                "volumes": volumes,
            },
        }

    apply(lab_kube, tmp_path, bare("db", [{"name": "san", "hostPath": {"path": "/mnt/san/db"}}]))
    apply(lab_kube, tmp_path, bare("cache", [{"name": "tmp", "emptyDir": {}}]))

    def on_node() -> dict[str, str]:
        items = kjson(lab_kube, "get", "pods", "-n", ns, "--field-selector", f"spec.nodeName={READY}")[
            "items"
        ]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}

    before = wait_for(lambda: (p := on_node()) and {"db", "cache"} <= set(p) and p, 60, "both pods bound")
    san = [{"host_path": "/mnt/san"}]
    try:
        fenced = run_playbook([fc_task(lab_kube, READY, "disabled")]).task("fc")
        assert not fenced.get("failed") and fenced["fence"]["verified"] is True, fenced
        opts = {
            "taints": [OOS],
            "force_delete_pods": True,
            "fence_evidence": fenced["fence"],
            "fenced_storage": san,
        }
        refused = run_playbook([taint_task("oos", READY, kc, **opts)]).task("oos")
        assert refused["failed"] and f"node {READY}: Ready is True" in refused["msg"], refused
        assert on_node() == before
        res = run_playbook([taint_task("oos", READY, kc, release_ready_node=True, **opts)]).task("oos")
        assert not res.get("failed"), res
        assert res["released"] == "fenced_storage" and res["added"] == [], res
        assert res["deleted_pods"] == [f"{ns}/db"] and res["kept_pods"] == [f"{ns}/cache"], res
        assert set(on_node()) == {"cache"}
        assert not [t for t in taints(lab_kube, READY) if t["key"] == OOS["key"]], (
            "tainted on a storage fence"
        )
        power = {
            "verified": True,
            "method": "ipmi",
            "state": "off",
            "target": "bmc",
            "verified_at": fenced["fence"]["verified_at"],
        }
        power_opts = {"taints": [OOS], "fence_evidence": power, "release_ready_node": True}
        still = run_playbook([taint_task("oos", READY, kc, **power_opts)]).task("oos")
        assert still["failed"] and f"node {READY}: Ready is True" in still["msg"], still
        assert not [t for t in taints(lab_kube, READY) if t["key"] == OOS["key"]]
    finally:
        run_playbook([fc_task(lab_kube, READY, "enabled")])
