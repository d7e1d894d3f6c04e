"""noderemedy.core.node_release against the lab: one module call releases several fenced nodes,
each on its own evidence, and refuses a node whose own guard says no while the others go on.

lab-node-1 and lab-node-2 are powered off through their real BMCs (``ipmi_power``, read back), and
marked unreachable as the node lifecycle controller would; lab-node-0 stays Ready. One call with
the three nodes: 1 and 2 get the out-of-service taint, each with its own BMC's evidence; 0 is
refused (``conflict``: Ready) and keeps no taint; an entry whose evidence is not verified is
refused (``invalid``). Teardown removes the taints and powers the nodes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_helpers import fence_task, kjson

pytestmark = [pytest.mark.lab, pytest.mark.kube]

OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
DEAD = ["lab-node-1", "lab-node-2"]
READY = "lab-node-0"


def oos(lab: Any, node: str) -> bool:
    return any(t["key"] == OOS["key"] for t in kjson(lab, "get", "node", node)["spec"].get("taints") or [])


@pytest.fixture
def dead(lab_kube: Any) -> Iterator[list[str]]:
    """lab-node-1 and -2 to be powered off; afterwards untainted, powered on and Ready."""
    yield DEAD
    for node in [*DEAD, READY]:
        lab_kube.kubectl("taint", "node", node, f"{OOS['key']}-")
    for node in DEAD:
        lab_kube.power_on(node)
    lab_kube.wait_nodes([*DEAD, READY], "True", 120)


def test_one_call_releases_each_fenced_node_on_its_own_evidence_and_refuses_the_others(
    lab_kube: Any, dead: list[str], run_playbook: Any
) -> None:
    evidence = {}
    for node in dead:
        fenced = run_playbook([fence_task(lab_kube, node)]).task("fence")
        assert not fenced.get("failed") and fenced["fence"]["verified"] is True, fenced
        evidence[node] = fenced["fence"]
        lab_kube.mark_unreachable(node)
    unverified = {**evidence[dead[1]], "verified": False}
    task = {
        "name": "release",
        "noderemedy.core.node_release": {
            "kubeconfig": str(lab_kube.kubeconfig),
            "nodes": [
                {"name": dead[0], "fence_evidence": evidence[dead[0]]},
                {"name": READY, "fence_evidence": evidence[dead[0]]},
                {"name": dead[1], "fence_evidence": unverified},
            ],
            "taints": [OOS],
            "force_delete_pods": True,
        },
    }
    res = run_playbook([task]).task("release")
    assert not res.get("failed") and res["changed"] is True, res
    assert res["released"] == [dead[0]] and res["refused"] == [READY, dead[1]], res
    by_node = {r["node"]: r for r in res["nodes"]}
    assert [a["key"] for a in by_node[dead[0]]["added"]] == [OOS["key"]], by_node[dead[0]]
    assert by_node[dead[0]]["fence"]["target"] == evidence[dead[0]]["target"], by_node[dead[0]]
    assert by_node[READY]["reason"] == "conflict" and "Ready is True" in by_node[READY]["msg"], by_node
    assert by_node[dead[1]]["reason"] == "invalid", by_node[dead[1]]
    assert oos(lab_kube, dead[0]) and not oos(lab_kube, READY) and not oos(lab_kube, dead[1])

    # the same call with each node's own evidence: both released, the first one again (idempotent)
    task["noderemedy.core.node_release"]["nodes"] = [{"name": n, "fence_evidence": evidence[n]} for n in dead]
    again = run_playbook([task]).task("release")
    assert again["released"] == dead and again["refused"] == [], again
    assert [r["changed"] for r in again["nodes"]] == [False, True], again
    assert all(oos(lab_kube, n) for n in dead) and not oos(lab_kube, READY)


def test_a_node_named_twice_fails_the_call_and_releases_nothing(lab_kube: Any, run_playbook: Any) -> None:
    task = {
        "name": "release",
        "noderemedy.core.node_release": {
            "kubeconfig": str(lab_kube.kubeconfig),
            "nodes": [{"name": READY, "fence_evidence": {}}, {"name": READY, "fence_evidence": {}}],
            "taints": [OOS],
        },
        "ignore_errors": True,
    }
    res = run_playbook([task]).task("release")
    assert res["failed"] and res["reason"] == "invalid" and "nodes[1].name" in res["msg"], res
    assert not oos(lab_kube, READY)
