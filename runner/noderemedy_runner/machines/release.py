"""What the out-of-service taint releases, what it leaves behind, and how fast releases may go
(pure; no I/O, no clock).

**Safe return** (KEP-2268, non-graceful node shutdown: "make sure the taint is only removed after
detach is finished"; DESIGN.md invariant 7). While a node carries
``node.kubernetes.io/out-of-service:NoExecute`` the control plane gets rid of what ran there: the
taint-eviction controller deletes every pod that does not tolerate the taint, the pod garbage
collector force-deletes those stuck terminating on the NotReady node, and the attach/detach
controller detaches their volumes without waiting for the kubelet (their ``storage.k8s.io/v1``
VolumeAttachments are deleted). Removing the taint, or unfencing the node's storage, before that is
finished would let a node that comes back find its old pods and volumes still bound to it. So the
NodeFence's Recovery step and the removal of the taint wait until :func:`old_pods` is empty and no
VolumeAttachment names the node (:func:`attachments_on`): :class:`LeftOnNode`.

Which pods are waited for (:func:`old_pods`), among those bound to the node (``spec.nodeName``):

* not mirror pods (annotation :data:`MIRROR_ANNOTATION`): the kubelet's copies of static pods,
  which it re-creates as soon as it runs again; the taint never makes them go for good;
* not pods that tolerate the taint for good (a toleration matching it without
  ``tolerationSeconds``): the taint never evicts them. A pod tolerating it for a while *is*
  evicted once ``tolerationSeconds`` pass, so it counts; a pod already terminating always counts;
* not pods that finished (phase ``Succeeded`` or ``Failed``): they run nothing, and the
  attach/detach controller detaches the volumes of finished pods by itself (the VolumeAttachments
  are waited for on their own);
* not pods created after the fence started (``status.startTime``): they are not the node's old
  workloads (nothing non-tolerating can be scheduled on a node with the NoExecute taint anyway);
* DaemonSet pods count like any other. The DaemonSet controller gives its pods tolerations of
  ``node.kubernetes.io/not-ready`` and ``unreachable`` (NoExecute), of the pressure and
  ``unschedulable`` taints (NoSchedule), but not of ``out-of-service``: the taint evicts them, and
  the controller creates no replacement on a node with a NoExecute taint its pods do not tolerate
  (``nodeShouldRunDaemonPod``). They are gone while the taint stays and come back after it is
  removed, so waiting for them ends. A DaemonSet whose pods tolerate every taint (``operator:
  Exists`` without a key) is left alone by the taint and so by this wait.

**Release rate** (node remedy seed: limit the pods released per unit of time).
:func:`admit` keeps the pods released within a sliding window of :data:`RATE_WINDOW_SECONDS` (a
release counts the pods the taint evicts, :func:`old_pods` with no start time, at the moment of
release) at or below ``limit``. A release that would go over waits until enough older releases
leave the window. A node already released in the window is not counted twice, and a release larger
than the whole limit goes when the window is empty (else it would wait for ever).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from noderemedy_runner.machines.actions import OUT_OF_SERVICE_TAINT_EFFECT, OUT_OF_SERVICE_TAINT_KEY
from noderemedy_runner.machines.conditions import parse_time

#: The value of the out-of-service taint the playbooks set (``playbooks/vars/out_of_service.yml``).
OUT_OF_SERVICE_TAINT_VALUE = "nodeshutdown"
#: Annotation the kubelet puts on the mirror pod of a static pod.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
#: Seconds of the sliding window of the release rate limit (the limit is pods per minute).
RATE_WINDOW_SECONDS = 60.0
#: Most object names quoted in a condition message (the counts are always complete).
MAX_NAMES = 3


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    return f"{meta['namespace']}/{name}" if meta.get("namespace") else name


def tolerates_for_good(pod: Mapping[str, Any]) -> bool:
    """Whether one of the pod's tolerations matches the out-of-service taint (``NoExecute``, any
    value) without ``tolerationSeconds`` -- ``v1.Toleration.ToleratesTaint`` as the taint-eviction
    controller applies it: such a pod is never evicted by the taint."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != OUT_OF_SERVICE_TAINT_EFFECT:
            continue
        if tol.get("tolerationSeconds") is not None:
            continue
        operator = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if operator == "Exists":
                return True
            continue
        if tol["key"] != OUT_OF_SERVICE_TAINT_KEY:
            continue
        if operator == "Exists" or (tol.get("value") or "") == OUT_OF_SERVICE_TAINT_VALUE:
            return True
    return False


def is_mirror(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is the kubelet's mirror of a static pod (:data:`MIRROR_ANNOTATION`)."""
    return MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def old_pods(pods: Iterable[Mapping[str, Any]], node: str, since: float | None) -> tuple[str, ...]:
    """``namespace/name`` of the pods bound to ``node`` that the out-of-service taint gets rid of
    (module docs): not mirror pods, not finished, not tolerating the taint for good unless
    terminating, and created before ``since`` (seconds; the fence's start; None: any time). Sorted."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node or is_mirror(pod):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if tolerates_for_good(pod) and not meta.get("deletionTimestamp"):
            continue
        created = meta.get("creationTimestamp")
        if since is not None and isinstance(created, str) and parse_time(created) >= since:
            continue
        out.append(_ref(pod))
    return tuple(sorted(out))


def attachments_on(volume_attachments: Iterable[Mapping[str, Any]], node: str) -> tuple[str, ...]:
    """Names of the ``storage.k8s.io/v1`` VolumeAttachments whose ``spec.nodeName`` is ``node``,
    deleting or not (a VolumeAttachment being deleted is a detach not finished). Sorted."""
    return tuple(sorted(_ref(v) for v in volume_attachments if (v.get("spec") or {}).get("nodeName") == node))


def stale_pods(
    running: Iterable[Mapping[str, Any]], api_pods: Iterable[Mapping[str, Any]]
) -> tuple[str, ...]:
    """``namespace/name`` of the pods a kubelet runs (``running``: its ``/runningpods/``) that the
    API does not have with that uid (``api_pods``: the pods bound to the node), sorted. A static
    pod runs under the uid its mirror pod names in :data:`MIRROR_ANNOTATION`, so it is not stale.

    After a storage-only fence the released pods were force-deleted from the API while their
    containers may still run on a partitioned node: unfencing its storage before the kubelet has
    stopped them would let them write to it again, next to their replacements."""
    known = set()
    for pod in api_pods:
        meta = pod.get("metadata") or {}
        known.add(str(meta.get("uid", "")))
        mirror = (meta.get("annotations") or {}).get(MIRROR_ANNOTATION)
        if mirror:
            known.add(str(mirror))
    return tuple(
        sorted(_ref(p) for p in running if str((p.get("metadata") or {}).get("uid", "")) not in known)
    )


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_NAMES])
    return shown + (f", +{len(items) - MAX_NAMES} more" if len(items) > MAX_NAMES else "")


@dataclass(frozen=True)
class LeftOnNode:
    """What the released node still has: ``pods`` (:func:`old_pods`) and ``volume_attachments``
    (:func:`attachments_on`), names."""

    pods: tuple[str, ...] = ()
    volume_attachments: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """Nothing left: recovery may start and the taint may go."""
        return not self.pods and not self.volume_attachments

    def summary(self) -> str:
        """``N pod(s) (a, b), M VolumeAttachment(s) (c)``: counts, and at most
        :data:`MAX_NAMES` names of each."""
        parts = []
        for count, noun, names in (
            (len(self.pods), "pod(s)", self.pods),
            (len(self.volume_attachments), "VolumeAttachment(s)", self.volume_attachments),
        ):
            parts.append(f"{count} {noun}" + (f" ({_names(names)})" if names else ""))
        return ", ".join(parts)


@dataclass(frozen=True)
class Release:
    """A release the runner made: ``node``, ``at`` (seconds) and ``pods`` (how many the taint was
    to evict then)."""

    node: str
    at: float
    pods: int


@dataclass(frozen=True)
class Admission:
    """:func:`admit`'s answer: ``allowed``; ``used`` (pods released in the window now);
    ``retry_seconds`` (when not allowed: seconds until enough releases leave the window)."""

    allowed: bool
    used: int
    retry_seconds: float = 0.0


@dataclass(frozen=True)
class RateHold:
    """Why a release waits for the rate limit: ``message`` (for the condition and the Event) and
    ``retry_seconds`` (when to ask again)."""

    message: str
    retry_seconds: float


def admit(
    releases: Sequence[Release],
    node: str,
    pods: int,
    now: float,
    limit: int,
    window: float = RATE_WINDOW_SECONDS,
) -> Admission:
    """Whether releasing ``pods`` pods of ``node`` at ``now`` keeps the pods released within the
    last ``window`` seconds at or below ``limit`` (module docs). ``limit`` 0: no limit.
    ``releases``: the runner's earlier releases, any order (those older than the window are
    ignored). A release stamped *after* ``now`` counts too: two NodeFences reconciled at once each
    read the clock before asking, and the one that asks second may hold the earlier ``now``;
    leaving the other's release out would let both through (the safe side is to count it).
    Raises ValueError for a negative ``limit``, ``pods`` or a ``window`` not above 0."""
    if limit < 0 or pods < 0 or window <= 0:
        raise ValueError(f"admit: limit {limit} and pods {pods} must be >= 0, window {window} > 0")
    recent = sorted((r for r in releases if now - window < r.at), key=lambda r: r.at)
    used = sum(r.pods for r in recent)
    if limit == 0 or any(r.node == node for r in recent) or not recent or used + pods <= limit:
        return Admission(True, used)
    left = used
    for r in recent:  # the oldest leave the window first
        left -= r.pods
        if left + pods <= limit or left == 0:
            return Admission(False, used, max(0.001, r.at + window - now))
    raise AssertionError("unreachable: the window empties")  # pragma: no cover


__all__ = [
    "MIRROR_ANNOTATION",
    "OUT_OF_SERVICE_TAINT_VALUE",
    "RATE_WINDOW_SECONDS",
    "Admission",
    "RateHold",
    "LeftOnNode",
    "Release",
    "admit",
    "attachments_on",
    "is_mirror",
    "old_pods",
    "stale_pods",
    "tolerates_for_good",
]
