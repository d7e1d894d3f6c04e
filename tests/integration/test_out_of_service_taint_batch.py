"""``playbooks/out_of_service_taint.yml`` run as the runner's batches run it (one inventory host per
node, ``noderemedy_hosts``) against the lab's API server: the hosts that remove the taint share one
``noderemedy.core.node_release`` call (``state: absent``); each host's own result says whether its
own node's taint is gone.

Four hosts: two remove the taint from lab-node-1 and lab-node-2 (tainted here with kubectl), one
removes it from a node the cluster does not have, and one asks to add it without evidence. The call
runs once, for the three that remove; the two real nodes lose the taint, the unknown node's host
fails with the API's answer, and the host without evidence fails at the play's own check. No other
host is failed by them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import kjson
from test_fence_step_shared import batch_env, play_batch

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "out_of_service_taint.yml"
OOS = "node.kubernetes.io/out-of-service"
NODES = ["lab-node-1", "lab-node-2"]
REMOVE = "Remove the out-of-service taint from the nodes of every host that asks for it, in one call"
CHECK = "Check that the call removed this node's taint"
DONE = "Mark this node's run done (the runner's batches deliver each host's result at this task)"


def tainted(lab: Any, node: str) -> bool:
    return any(t["key"] == OOS for t in kjson(lab, "get", "node", node)["spec"].get("taints") or [])


@pytest.fixture
def oos_tainted(lab_kube: Any) -> Iterator[list[str]]:
    """lab-node-1 and -2 with the out-of-service taint; afterwards without it."""
    for node in NODES:
        lab_kube.kubectl("taint", "node", node, f"{OOS}=nodeshutdown:NoExecute", "--overwrite")
    yield NODES
    for node in [*NODES, "lab-node-0"]:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")


def run_batch(
    lab: Any, tmp_path: Path, collections: Path, hosts: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The playbook for ``hosts`` (host -> its variables) as one batch: task name -> host -> result,
    and the exit code under ``rc``."""
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    # as the runner's batches run it (the play asks for linear itself)
    env = batch_env(lab, collections, ANSIBLE_STRATEGY="free", ANSIBLE_FORKS=str(len(hosts)))
    proc, doc = play_batch(PLAYBOOK, inventory, {"noderemedy_hosts": "all"}, env)
    out: dict[str, Any] = {"rc": proc.returncode}
    for play in doc["plays"]:
        for task in play["tasks"]:
            out.setdefault(task["task"]["name"], {}).update(task["hosts"])
    return out


def test_one_call_removes_the_taint_of_every_host_asking_and_fails_only_the_host_it_did_not_answer_for(
    lab_kube: Any, oos_tainted: list[str], tmp_path: Path, collections_path: Path
) -> None:
    hosts = {
        "h1": {"node": oos_tainted[0], "state": "absent"},
        "h2": {"node": oos_tainted[1], "state": "absent"},
        "h3": {"node": "no-such-node", "state": "absent"},
        "h4": {"node": "lab-node-0"},  # adds the taint, but with no evidence
    }
    assert all(tainted(lab_kube, n) for n in oos_tainted)
    res = run_batch(lab_kube, tmp_path, collections_path, hosts)

    call = res[REMOVE]
    assert list(call) == ["h1"], f"the removal ran once, for the play's first host: {call}"
    one = call["h1"]
    assert one["released"] == oos_tainted and one["refused"] == ["no-such-node"], one
    assert [r["node"] for r in one["nodes"]] == [*oos_tainted, "no-such-node"], one
    assert not any(tainted(lab_kube, n) for n in oos_tainted)

    check = res[CHECK]
    assert not check["h1"].get("failed") and not check["h2"].get("failed"), check
    assert check["h3"].get("failed") is True and "no-such-node" in check["h3"]["msg"], check["h3"]
    assert set(res[DONE]) == {"h1", "h2"}, res[DONE]
    assert res["Check the references"]["h4"].get("failed") is True, res["Check the references"]
    assert "h4" not in check and not tainted(lab_kube, "lab-node-0")
    assert res["rc"] == 2, "a failed host fails the run"

    # again: nothing left to remove, each host still done on its own node's answer
    again = run_batch(lab_kube, tmp_path, collections_path, {h: hosts[h] for h in ("h1", "h2")})
    assert [r["changed"] for r in again[REMOVE]["h1"]["nodes"]] == [False, False], again[REMOVE]
    assert set(again[DONE]) == {"h1", "h2"} and again["rc"] == 0, again
