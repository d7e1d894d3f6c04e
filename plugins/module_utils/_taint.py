# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node taints, and the out-of-service taint done safely.

The out-of-service taint (``node.kubernetes.io/out-of-service``, effect ``NoExecute``; KEP-2268,
non-graceful node shutdown, GA in Kubernetes 1.28) tells the control plane that the node is gone
for good: the taint-eviction controller deletes the pods that do not tolerate it, the pod garbage
collector force-deletes those stuck terminating on the NotReady node, and the attach/detach
controller detaches their volumes without waiting. Doing that to a node that is still running its
workloads corrupts data, so adding it is guarded (DESIGN.md, safety invariant 1):

* the node must be NotReady (condition ``Ready`` is ``False`` or ``Unknown``);
* the caller passes the fencing modules' evidence of a verified fence,
  ``{"verified": true, "method": "ipmi"|"redfish"|"pdu"|"fc", "target": str, "state": "off"|"disabled",
  "verified_at": epoch seconds}``, not older than ``fence_max_age`` seconds.

**What a fence releases.** A power fence (the node read back off: ipmi, redfish, aws, vmware,
kdump, pdu; or an admin's confirmation) stops everything on the node, so it licenses the
out-of-service taint. A storage-only fence (``fc``: the node's FC switch ports read back disabled)
stops only what the node reaches through those ports: a partitioned node may go on running its
other pods. It never licenses the taint; it licenses force-deleting the node's pods whose volumes
are that storage (``fenced_storage``: CSI drivers, StorageClasses, hostPath directories, the
in-tree ``fc`` volume source), and nothing else (:func:`._fenced_storage.uses_fenced_storage`).

Removing the taint (recovery) is not guarded. Pure decisions (evidence, readiness, taint lists,
tolerations) are unit-tested without a cluster; :func:`run_node_taint` does the I/O.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from ansible_collections.noderemedy.core.plugins.module_utils._fenced_storage import (
    uses_fenced_storage,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import (
    NODE_ARGSPEC,
    KubeError,
    KubeNode,
    request,
)

OUT_OF_SERVICE_KEY = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_EFFECT = "NoExecute"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

#: method -> the read-back state that proves the fence (power off; storage/network port disabled).
#: ``admin``/``confirmed-down``: an admin checked the machine by hand and confirmed it is down
#: (Pacemaker's ``stonith_admin --confirm``); the runner records that act in an Event.
FENCE_STATES = {
    "ipmi": "off",
    "redfish": "off",
    "aws": "off",
    "vmware": "off",
    "kdump": "kdump",
    "pdu": "off",
    "fc": "disabled",
    "admin": "confirmed-down",
}

#: Fence methods that isolate the node's storage only: their evidence never licenses the
#: out-of-service taint, only the release of the pods on the fenced storage.
STORAGE_METHODS = ("fc",)
#: Kubelet annotation on the mirror pod of a static pod (the kubelet re-creates them; never released).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

#: Seconds a fence's ``verified_at`` may lie in the future (clock skew between hosts).
CLOCK_SKEW = 5.0

TAINT_ARGSPEC: dict[str, dict[str, Any]] = {
    **NODE_ARGSPEC,
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
    "taints": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "key": {"type": "str", "required": True, "no_log": False},
            "value": {"type": "str", "default": ""},
            "effect": {"type": "str", "choices": list(EFFECTS)},
        },
    },
    "fence_evidence": {"type": "dict"},
    "fence_max_age": {"type": "int", "default": 300},
    "force_delete_pods": {"type": "bool", "default": False},
    "fenced_storage": {
        "type": "list",
        "elements": "dict",
        "options": {
            "csi_driver": {"type": "str"},
            "storage_class": {"type": "str"},
            "host_path": {"type": "path"},
            "fc": {"type": "bool"},
        },
    },
    "release_ready_node": {"type": "bool", "default": False},
    "wait": {"type": "bool", "default": False},
    "wait_timeout": {"type": "int", "default": 300},
}


def is_out_of_service(taint: dict[str, Any]) -> bool:
    """True for ``node.kubernetes.io/out-of-service`` with effect NoExecute (KEP-2268)."""
    return taint.get("key") == OUT_OF_SERVICE_KEY and taint.get("effect") == OUT_OF_SERVICE_EFFECT


def validate_fence_evidence(evidence: Any, max_age: float, now: float) -> dict[str, Any]:
    """Check the fencing modules' ``fence`` result before workloads are released.

    Args:
        evidence: ``{"verified": true, "method": "ipmi"|"redfish"|"pdu"|"fc", "target": str,
            "state": "off"|"disabled", "verified_at": epoch seconds}``.
        max_age: seconds the verification may be old (``fence_max_age``).
        now: current time, epoch seconds.

    Returns:
        The evidence with ``age`` (seconds) added.

    Raises:
        KubeError: ``invalid``; the message names the failing field (``fence_evidence.state``...).
    """
    if not isinstance(evidence, dict) or not evidence:
        raise KubeError(
            "fence_evidence: required to add the out-of-service taint: pass the 'fence' result of a "
            "noderemedy.core fencing module (verified power off or storage ports disabled)",
            "invalid",
        )
    if evidence.get("verified") is not True:
        raise KubeError(
            f"fence_evidence.verified: must be true, got {evidence.get('verified')!r}: the fence was not verified",
            "invalid",
        )
    method = evidence.get("method")
    if method not in FENCE_STATES:
        raise KubeError(
            f"fence_evidence.method: must be one of {sorted(FENCE_STATES)}, got {method!r}", "invalid"
        )
    if not isinstance(evidence.get("target"), str) or not evidence["target"]:
        raise KubeError("fence_evidence.target: must name the fencing device that was read back", "invalid")
    state = evidence.get("state")
    if state != FENCE_STATES[method]:
        raise KubeError(
            f"fence_evidence.state: a {method} fence must read back {FENCE_STATES[method]!r}, got {state!r}",
            "invalid",
        )
    stamp = evidence.get("verified_at")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise KubeError(f"fence_evidence.verified_at: must be epoch seconds, got {stamp!r}", "invalid")
    age = now - float(stamp)
    if age < -CLOCK_SKEW:
        raise KubeError(f"fence_evidence.verified_at: {stamp} is {-age:.0f} s in the future", "invalid")
    if age > max_age:
        raise KubeError(
            f"fence_evidence.verified_at: the fence was verified {age:.0f} s ago, more than "
            f"fence_max_age {max_age:g} s: verify the fence again",
            "invalid",
        )
    return {**evidence, "age": round(max(age, 0.0), 3)}


def ready_status(node: dict[str, Any]) -> str:
    """The status of the node's ``Ready`` condition (``True``, ``False``, ``Unknown``), ``Missing`` if absent."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return "Missing"


def check_node_not_ready(node: dict[str, Any]) -> None:
    """Raise KubeError (``conflict``) unless the node's Ready condition is False or Unknown."""
    status = ready_status(node)
    if status not in ("False", "Unknown"):
        name = node.get("metadata", {}).get("name")
        raise KubeError(
            f"node {name}: Ready is {status}: the out-of-service taint is only for a NotReady node whose "
            "fence was verified (KEP-2268); refusing",
            "conflict",
        )


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("key"), a.get("value") or "", a.get("effect")) == (
        b.get("key"),
        b.get("value") or "",
        b.get("effect"),
    )


def desired_taints(
    current: list[dict[str, Any]], taints: list[dict[str, Any]], state: str, now: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The node's taints after adding or removing ``taints``.

    A taint is identified by key and effect (as ``kubectl taint``); adding one with the same key
    and effect replaces its value. Removing one without ``effect`` removes every effect of the key.
    NoExecute taints get ``timeAdded`` (``now``, epoch seconds), as ``kubectl taint`` sets it.

    Returns:
        ``(new_list, added, removed)``.

    Raises:
        KubeError: ``invalid`` for a taint without key, or without effect when adding.
    """
    new = [dict(t) for t in current]
    added: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for i, want in enumerate(taints):
        key, effect = want.get("key"), want.get("effect")
        if not key:
            raise KubeError(f"taints[{i}].key: required", "invalid")
        if state == "present":
            if effect not in EFFECTS:
                raise KubeError(
                    f"taints[{i}].effect: must be one of {list(EFFECTS)}, got {effect!r}", "invalid"
                )
            item = {"key": key, "effect": effect}
            if want.get("value"):
                item["value"] = want["value"]
            if any(_same(t, item) for t in new):
                continue
            old = [t for t in new if t.get("key") == key and t.get("effect") == effect]
            removed += old
            new = [t for t in new if t not in old]
            if effect == "NoExecute":
                item["timeAdded"] = stamp
            new.append(item)
            added.append(item)
        else:
            gone = [t for t in new if t.get("key") == key and (not effect or t.get("effect") == effect)]
            removed += gone
            new = [t for t in new if t not in gone]
    return new, added, removed


def tolerates(pod: dict[str, Any], taint: dict[str, Any]) -> bool:
    """True if one of the pod's tolerations matches ``taint`` (``v1.Toleration.ToleratesTaint``)."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        operator = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if operator == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta.get("name", "")


class NodeTaints(KubeNode):
    """Read and change one node's taints through the API.

    Args:
        client: ``kubernetes.client.ApiClient``.
        node: the node's name.
        dry_run: server-side dry run.
        clock, sleep, wall: monotonic seconds, ``sleep(seconds)``, epoch seconds (tests may pass their own).
    """

    def __init__(
        self,
        client: Any,
        node: str,
        dry_run: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(client, node, dry_run, clock)
        self.sleep = sleep
        self.wall = wall

    def apply(
        self,
        taints: list[dict[str, Any]],
        state: str,
        guard: Callable[[dict[str, Any], list[dict[str, Any]]], None] | None = None,
    ) -> dict[str, Any]:
        """Add (``present``) or remove (``absent``) ``taints``; retried on a write conflict.

        ``guard(node, added)`` runs on the freshly read node before each write and may raise to
        refuse it. The write is a merge patch carrying the read ``resourceVersion``, so it never
        overwrites a change made in between.

        Returns:
            ``{"changed", "taints" (after), "added", "removed", "before" (taints)}``.

        Raises:
            KubeError: from the guard, the API, or after 5 conflicting writes.
        """
        for _attempt in range(5):
            node = self.get_node()
            current = (node.get("spec") or {}).get("taints") or []
            new, added, removed = desired_taints(current, taints, state, self.wall())
            if not added and not removed:
                return {"changed": False, "taints": current, "added": [], "removed": [], "before": current}
            if guard is not None:
                guard(node, added)
            body = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": new or None},
            }
            try:
                request(
                    self.client,
                    "PATCH",
                    self.path,
                    query=self.write_query(),
                    body=body,
                    content_type="application/merge-patch+json",
                )
            except KubeError as exc:
                if exc.reason == "conflict":
                    continue
                raise
            return {"changed": True, "taints": new, "added": added, "removed": removed, "before": current}
        raise KubeError(f"node {self.node}: taints changed concurrently 5 times; giving up", "conflict")

    def blocking(self, taint: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Pods still bound to the node that do not tolerate ``taint`` (or are terminating), and
        VolumeAttachments still naming the node: ``(pods, volume_attachments)``."""
        doc = request(
            self.client, "GET", "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={self.node}")]
        )
        pods = [
            _ref(p)
            for p in doc.get("items") or []
            if not tolerates(p, taint) or p.get("metadata", {}).get("deletionTimestamp")
        ]
        vas = request(self.client, "GET", "/apis/storage.k8s.io/v1/volumeattachments")
        attachments = [
            _ref(v) for v in vas.get("items") or [] if (v.get("spec") or {}).get("nodeName") == self.node
        ]
        return sorted(pods), sorted(attachments)

    def _force_delete(self, pod: dict[str, Any]) -> bool:
        """Delete ``pod`` with grace period 0 and its uid as precondition; False when it is gone
        already or another pod has its name by now."""
        meta = pod.get("metadata") or {}
        path = f"/api/v1/namespaces/{quote(meta['namespace'], safe='')}/pods/{quote(meta['name'], safe='')}"
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta.get("uid")}}
        try:
            request(self.client, "DELETE", path, body=body)
        except KubeError as exc:
            if exc.reason in ("not_found", "conflict"):
                return False
            raise
        return True

    def release_fenced_storage(self, fenced_storage: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
        """Force-delete (as :meth:`force_delete_pods`) the node's pods that use storage a
        storage-only fence cut off (:func:`uses_fenced_storage`); leave the others. Mirror pods
        and finished pods are neither. Only for a node whose storage fence was verified (the
        caller's guard). Returns ``(deleted, kept)``, ``namespace/name`` each, sorted."""
        doc = request(
            self.client, "GET", "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={self.node}")]
        )
        pods = [
            p
            for p in doc.get("items") or []
            if MIRROR_ANNOTATION not in ((p.get("metadata") or {}).get("annotations") or {})
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        pvs: dict[str, dict[str, Any]] = {}
        if any(
            (v.get("persistentVolumeClaim") or {})
            for p in pods
            for v in (p.get("spec") or {}).get("volumes") or []
        ):
            for pv in request(self.client, "GET", "/api/v1/persistentvolumes").get("items") or []:
                ref = (pv.get("spec") or {}).get("claimRef") or {}
                if (pv.get("status") or {}).get("phase") == "Bound" and ref.get("name"):
                    pvs[f"{ref.get('namespace', '')}/{ref['name']}"] = pv
        deleted, kept = [], []
        for pod in pods:
            if not uses_fenced_storage(pod, pvs, fenced_storage):
                kept.append(_ref(pod))
            elif self._force_delete(pod):
                deleted.append(_ref(pod))
        return sorted(deleted), sorted(kept)

    def force_delete_pods(self, taint: dict[str, Any]) -> list[str]:
        """Delete, with grace period 0 (``kubectl delete pod --force --grace-period=0``), every pod
        bound to the node that does not tolerate ``taint``: what the pod garbage collector does to
        the pods of an out-of-service node on its next pass (KEP-2268; its period is 20 s), done at
        once. Each delete carries the pod's uid as a precondition, so a pod of the same name
        created meanwhile is never touched; a pod already gone is skipped. Only for a node whose
        fence was verified (the caller's guard). Returns the deleted pods (``namespace/name``)."""
        doc = request(
            self.client, "GET", "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={self.node}")]
        )
        deleted = [
            _ref(p) for p in doc.get("items") or [] if not tolerates(p, taint) and self._force_delete(p)
        ]
        return sorted(deleted)

    def wait_released(self, taint: dict[str, Any], timeout: float, interval: float = 0.5) -> dict[str, Any]:
        """Wait until the node's pods are gone and its VolumeAttachments released (KEP-2268's effect).

        Returns:
            ``{"pods": [...], "volume_attachments": [...], "seconds": float}``: what was on the node
            when waiting began and is now gone.

        Raises:
            KubeError: ``timeout`` after ``timeout`` seconds, naming what is left.
        """
        start = self.clock()
        first_pods, first_vas = self.blocking(taint)
        pods, vas = first_pods, first_vas
        seen_pods, seen_vas = set(first_pods), set(first_vas)
        while pods or vas:
            if self.clock() - start >= timeout:
                raise KubeError(
                    f"node {self.node}: after {timeout:g} s still bound: pods {pods or 'none'}, "
                    f"volume attachments {vas or 'none'}",
                    "timeout",
                )
            self.sleep(interval)
            pods, vas = self.blocking(taint)
            seen_pods.update(pods)
            seen_vas.update(vas)
        return {
            "pods": sorted(seen_pods),
            "volume_attachments": sorted(seen_vas),
            "seconds": round(self.clock() - start, 3),
        }


def run_node_taint(client: Any, params: dict[str, Any], check_mode: bool = False) -> dict[str, Any]:
    """What ``noderemedy.core.node_taint`` does.

    Adding the out-of-service taint goes through the guard (node NotReady, valid
    ``fence_evidence`` no older than ``fence_max_age`` seconds). With ``force_delete_pods`` the
    node's pods that do not tolerate the taint are then force-deleted
    (:meth:`NodeTaints.force_delete_pods`); the guard is checked for that even when the taint was
    already there. With ``wait`` it then waits up to ``wait_timeout`` seconds for the node's pods
    and VolumeAttachments to be released.

    Returns:
        ``{"node", "changed", "taints", "added", "removed", "diff"}`` plus ``fence`` (the accepted
        evidence with its ``age``), ``deleted_pods`` and ``waited`` (see
        :meth:`NodeTaints.wait_released`) where used.

    Raises:
        KubeError: refused (``invalid`` evidence, ``conflict`` for a Ready node), not found,
            API errors, ``timeout`` while waiting.
    """
    state = params.get("state") or "present"
    taints = params.get("taints") or []
    if not taints:
        raise KubeError("taints: give at least one taint", "invalid")
    max_age = params.get("fence_max_age")
    max_age = 300 if max_age is None else max_age
    if max_age <= 0:
        raise KubeError(f"fence_max_age: must be more than 0 seconds, got {max_age}", "invalid")
    nt = NodeTaints(client, params["name"], dry_run=check_mode)
    out: dict[str, Any] = {"node": nt.node}
    oos_wanted = state == "present" and any(is_out_of_service(t) for t in taints)
    evidence = params.get("fence_evidence")
    if oos_wanted and isinstance(evidence, dict) and evidence.get("method") in STORAGE_METHODS:
        return _release_fenced_storage(nt, params, taints, evidence, max_age, check_mode, out)

    def guard(node: dict[str, Any], added: list[dict[str, Any]]) -> None:
        if any(is_out_of_service(t) for t in added):
            # the input first: refused evidence is refused whatever the node's state
            fence = validate_fence_evidence(params.get("fence_evidence"), max_age, nt.wall())
            check_node_not_ready(node)
            out["fence"] = fence

    res = nt.apply(taints, state, guard)
    out.update(
        changed=res["changed"],
        taints=res["taints"],
        added=res["added"],
        removed=res["removed"],
        diff={"before": {"taints": res["before"]}, "after": {"taints": res["taints"]}},
    )
    if params.get("force_delete_pods") and oos_wanted and not check_mode:
        if "fence" not in out:  # the taint was there already: the same guard before any delete
            guard(nt.get_node(), [t for t in taints if is_out_of_service(t)])
        taint = next(t for t in taints if is_out_of_service(t))
        out["deleted_pods"] = nt.force_delete_pods(
            {"key": taint["key"], "value": taint.get("value") or "", "effect": taint["effect"]}
        )
    if params.get("wait") and oos_wanted and not check_mode:
        taint = next(t for t in taints if is_out_of_service(t))
        out["waited"] = nt.wait_released(
            {"key": taint["key"], "value": taint.get("value") or "", "effect": taint["effect"]},
            float(params.get("wait_timeout") or 0),
        )
    return out


def _release_fenced_storage(
    nt: NodeTaints,
    params: dict[str, Any],
    taints: list[dict[str, Any]],
    evidence: dict[str, Any],
    max_age: float,
    check_mode: bool,
    out: dict[str, Any],
) -> dict[str, Any]:
    """:func:`run_node_taint` on the evidence of a storage-only fence (module docs): the
    out-of-service taint is not added (the other taints are); after the same guard (node NotReady,
    unless ``release_ready_node``: a storage fence stops what the node reaches through the fenced
    ports whether its kubelet runs or not; valid evidence), with ``force_delete_pods`` only the
    pods on ``fenced_storage`` are force-deleted. ``released: fenced_storage``, ``deleted_pods`` and ``kept_pods`` in the result.
    Raises KubeError ``invalid`` when ``fenced_storage`` names no storage."""
    fenced_storage = [
        {k: v for k, v in m.items() if v not in (None, "", False)} for m in params.get("fenced_storage") or []
    ]
    fenced_storage = [m for m in fenced_storage if m]
    if not fenced_storage:
        raise KubeError(
            "fenced_storage: a storage-only fence (fence_evidence.method "
            f"{evidence.get('method')!r}) never licenses the out-of-service taint, because the node "
            "may still run pods that use no fenced storage (that needs a power fence); it releases "
            "the pods whose volumes are behind the fenced ports, so name that storage",
            "invalid",
        )
    fence = validate_fence_evidence(evidence, max_age, nt.wall())
    if not params.get("release_ready_node"):
        check_node_not_ready(nt.get_node())
    out["fence"] = fence
    others = [t for t in taints if not is_out_of_service(t)]
    if others:
        res = nt.apply(others, "present", lambda node, added: None)
    else:
        current = list((nt.get_node().get("spec") or {}).get("taints") or [])
        res = {"changed": False, "taints": current, "added": [], "removed": [], "before": current}
    out.update(
        changed=res["changed"],
        taints=res["taints"],
        added=res["added"],
        removed=res["removed"],
        released="fenced_storage",
        diff={"before": {"taints": res["before"]}, "after": {"taints": res["taints"]}},
    )
    if params.get("force_delete_pods") and not check_mode:
        deleted, kept = nt.release_fenced_storage(fenced_storage)
        out.update(deleted_pods=deleted, kept_pods=kept, changed=out["changed"] or bool(deleted))
    return out
