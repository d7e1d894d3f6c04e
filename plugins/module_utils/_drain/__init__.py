# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cordon, uncordon and drain a node with kubectl's semantics.

The rules are those of kubectl's drain package (``k8s.io/kubectl/pkg/drain``):

* ``filters.go`` -- which pods may go, applied in kubectl's order, the first refusal wins:
  skip pods deleted longer than ``skip_wait_for_delete_timeout`` ago; DaemonSet pods need
  ``ignore_daemonsets`` (an orphan, whose DaemonSet is gone, needs ``force``); mirror (static) pods
  are skipped; pods with emptyDir volumes need ``delete_emptydir_data``; pods without a controller
  need ``force``; finished pods (Succeeded/Failed) may always go.
* ``drain.go`` -- evictions run in parallel; a 429 (a PodDisruptionBudget allows no disruption) is
  retried after a delay (kubectl's 5 s) until the overall ``timeout``; a 404 counts as done; DELETE
  is used when the eviction subresource is absent or ``disable_eviction`` is set; each pod is
  waited for until it is gone (404 or a new UID) unless it has been terminating longer than
  ``skip_wait_for_delete_timeout``; ``grace_period`` -1 keeps each pod's own, 0 deletes at once.

Differences from kubectl, all on the side of safety or speed: evictions and deletions carry a UID
precondition (a replacement pod of the same name is never evicted by mistake); deletions are seen
through one watch on the node's pods (kubectl polls each pod every 1 s), with a full list as the
fallback and safety net; an eviction refused because the pod's namespace is being deleted waits for
the namespace controller instead of failing; a failed drain uncordons the node again if this run
cordoned it.

The filters are pure functions on pod dicts (as the API returns them) and are unit-tested without
a cluster; :class:`Drainer` does the I/O through :func:`._kube.request`.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._drain.drainer import (
    Drainer,
    DrainError,
    DrainResult,
)
from ansible_collections.noderemedy.core.plugins.module_utils._drain.filters import (
    DAEMONSET_FATAL,
    DAEMONSET_WARNING,
    DELETED_SKIP,
    DRAIN_ARGSPEC,
    ERROR,
    LOCAL_STORAGE_FATAL,
    LOCAL_STORAGE_WARNING,
    MIRROR_SKIP,
    OKAY,
    SKIP,
    UNMANAGED_FATAL,
    UNMANAGED_WARNING,
    WARNING,
    DrainOptions,
    PodDecision,
    decide,
    refusal_message,
)
from ansible_collections.noderemedy.core.plugins.module_utils._drain.watch import (
    PodWatch,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError


def options_from_params(params: dict[str, Any]) -> DrainOptions:
    """:class:`DrainOptions` from a module's params (keys of :data:`DRAIN_ARGSPEC`).

    Raises:
        KubeError: ``invalid``, the message naming the bad field.
    """
    try:
        return DrainOptions(
            force=bool(params.get("force")),
            ignore_daemonsets=bool(params.get("ignore_daemonsets")),
            delete_emptydir_data=bool(params.get("delete_emptydir_data")),
            disable_eviction=bool(params.get("disable_eviction")),
            grace_period=-1 if params.get("grace_period") is None else int(params["grace_period"]),
            timeout=float(params.get("timeout") or 0),
            skip_wait_for_delete_timeout=int(params.get("skip_wait_for_delete_timeout") or 0),
            pod_selector=params.get("pod_selector") or "",
        )
    except ValueError as exc:
        raise KubeError(str(exc), "invalid") from exc


def run_node_drain(client: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """What ``noderemedy.core.node_drain`` does: cordon, drain or uncordon node ``params["name"]``.

    Args:
        client: ``kubernetes.client.ApiClient``.
        params: the module's params (:data:`DRAIN_ARGSPEC` keys).
        check_mode: server-side dry run; nothing persisted.

    Returns:
        For ``drain`` the :meth:`DrainResult.to_dict` keys; for ``cordon``/``uncordon``
        ``{"node", "changed", "unschedulable"}``; always ``diff`` (``unschedulable`` before/after).

    Raises:
        DrainError: the drain did not finish (``result`` has the partial result).
        KubeError: node not found, API unreachable, forbidden, invalid options.
    """
    opts = options_from_params(params)
    drainer = Drainer(client, params["name"], opts, dry_run=check_mode)
    before = bool((drainer.get_node().get("spec") or {}).get("unschedulable"))
    state = params.get("state") or "drain"
    if state == "drain":
        out = drainer.drain().to_dict()
        after = True
    else:
        want = state == "cordon"
        changed = drainer.cordon() if want else drainer.uncordon()
        out = {"node": drainer.node, "changed": changed, "unschedulable": want}
        after = want
    out["diff"] = {"before": {"unschedulable": before}, "after": {"unschedulable": after}}
    return out


__all__ = [
    "DAEMONSET_FATAL",
    "DAEMONSET_WARNING",
    "DELETED_SKIP",
    "DRAIN_ARGSPEC",
    "DrainError",
    "DrainOptions",
    "DrainResult",
    "Drainer",
    "ERROR",
    "LOCAL_STORAGE_FATAL",
    "LOCAL_STORAGE_WARNING",
    "MIRROR_SKIP",
    "OKAY",
    "PodDecision",
    "PodWatch",
    "SKIP",
    "UNMANAGED_FATAL",
    "UNMANAGED_WARNING",
    "WARNING",
    "decide",
    "options_from_params",
    "refusal_message",
    "run_node_drain",
]
