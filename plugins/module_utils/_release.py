# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Releasing the workloads of several fenced nodes in one module call: ``noderemedy.core.node_release``.

A rack's nodes lose power together, and one ``pdu_outlet`` call reads all their outlets back off.
Releasing them one ``node_taint`` process each costs every node a Python start and the kubernetes
library's import (about 0.5 CPU seconds on this project's 2-core lab machine, where 20 such
processes at once took 15 s to taint the last node). One process releasing every node of the call
costs that once.

The same call with ``state: absent`` removes the taints from every node, one process for a
batch of recovered nodes (``playbooks/out_of_service_taint.yml``), where a ``node_taint`` task
each cost a batch of 20 nodes 15 to 21 s on the loaded lab. Removing needs no evidence.

Nothing of the safety rule is shared between the nodes: each node goes through
:func:`._taint.run_node_taint` on its own, with its own ``fence_evidence`` (the read-back of its own
plug) and its own ``fence_max_age``, so its guard (node NotReady, evidence verified and fresh,
a power fence for the out-of-service taint; DESIGN.md, safety invariant 1) is the one a
``node_taint`` call of its own would apply. A node that is refused or fails fails only its own
entry; the others are released.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError
from ansible_collections.noderemedy.core.plugins.module_utils._taint import TAINT_ARGSPEC, run_node_taint

#: Nodes released at the same time (threads, each a few API calls in turn): the runner's batch of
#: 20 hosts at once, within the client's pool of connections (``_kube.CONNECTION_POOL_MAXSIZE``).
PARALLEL = 20

RELEASE_ARGSPEC: dict[str, dict[str, Any]] = {
    "nodes": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "name": {"type": "str", "required": True},
            "fence_evidence": {"type": "dict"},
            "fence_max_age": {"type": "int", "default": 300},
        },
    },
    "taints": TAINT_ARGSPEC["taints"],
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "force_delete_pods": {"type": "bool", "default": False},
}


def release_one(
    client: Any, entry: dict[str, Any], params: dict[str, Any], check_mode: bool
) -> dict[str, Any]:
    """One node of :func:`run_release`: ``node_taint``'s result for ``entry``
    (``{"name", "fence_evidence", "fence_max_age"}``) with the call's ``taints``, ``state`` and
    ``force_delete_pods`` (with ``state`` ``present`` only), or
    ``{"node", "failed": True, "reason", "msg"}`` when it was refused or failed (a
    :class:`._kube.KubeError`: ``invalid`` evidence, ``conflict`` for a Ready node, API errors).
    The ``diff`` is left out."""
    state = params.get("state") or "present"
    one = {
        "name": entry["name"],
        "state": state,
        "taints": params["taints"],
        "fence_evidence": entry.get("fence_evidence"),
        "fence_max_age": entry.get("fence_max_age"),
        "force_delete_pods": state == "present" and bool(params.get("force_delete_pods")),
    }
    try:
        out = run_node_taint(client, one, check_mode=check_mode)
    except KubeError as exc:
        return {
            "node": entry["name"],
            "failed": True,
            "changed": False,
            "reason": exc.reason,
            "msg": exc.message,
        }
    out.pop("diff", None)
    return out


def run_release(client: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """What ``noderemedy.core.node_release`` does: each of ``params["nodes"]`` released as
    :func:`release_one` says, up to :data:`PARALLEL` at a time.

    Returns:
        ``{"changed": any node changed, "nodes": [one result per entry, in their order],
        "released": names of the nodes whose release was done, "refused": names of the others}``.

    Raises:
        KubeError: ``invalid`` when ``nodes`` names a node twice (``nodes[i].name``).
    """
    nodes = list(params.get("nodes") or [])
    seen: set[str] = set()
    for i, entry in enumerate(nodes):
        if entry["name"] in seen:
            raise KubeError(f"nodes[{i}].name: {entry['name']!r} is named twice", "invalid")
        seen.add(entry["name"])
    if not nodes:
        return {"changed": False, "nodes": [], "released": [], "refused": []}
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(nodes))) as pool:
        results = list(pool.map(lambda e: release_one(client, e, params, check_mode), nodes))
    return {
        "changed": any(r.get("changed") for r in results),
        "nodes": results,
        "released": [r["node"] for r in results if not r.get("failed")],
        "refused": [r["node"] for r in results if r.get("failed")],
    }
