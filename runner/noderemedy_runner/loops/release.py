"""The reconciler's I/O for what the out-of-service taint releases: what a released node still
has (safe return) and the release rate limit's ledger. The decisions are pure, in
:mod:`noderemedy_runner.machines.release`; this module reads the API through
:class:`~noderemedy_runner.kube.resources.KubeIO` and keeps the ledger in memory.
"""

from __future__ import annotations

import threading
from typing import Any

from noderemedy_runner.kube.resources import KubeIO
from noderemedy_runner.loops.memory import release_key, taint_event
from noderemedy_runner.machines.nodefence import NodeFenceStatus
from noderemedy_runner.machines.release import (
    RATE_WINDOW_SECONDS,
    Admission,
    LeftOnNode,
    RateHold,
    Release,
    admit,
    attachments_on,
    old_pods,
    stale_pods,
)
from noderemedy_runner.outcomes import Release as RunRelease


def observe_left(kube: KubeIO, node: str, since: float | None) -> LeftOnNode:
    """What the release left on ``node``: its old pods (bound to it, created before ``since``,
    seconds; :func:`~noderemedy_runner.machines.release.old_pods`) and the VolumeAttachments naming
    it. Two list calls; API errors propagate (:class:`~noderemedy_runner.kube.errors.KubeError`)."""
    return LeftOnNode(
        old_pods(kube.pods_on_node(node), node, since), attachments_on(kube.volume_attachments(), node)
    )


def observe_stale(kube: KubeIO, node: str) -> tuple[str, ...]:
    """``namespace/name`` of the pods ``node``'s kubelet still runs although the API no longer has
    them (the pods a storage-only fence force-deleted, until the kubelet of a node that comes back
    stops them; :func:`~noderemedy_runner.machines.release.stale_pods`). Two reads; API errors
    propagate (:class:`~noderemedy_runner.kube.errors.KubeError`)."""
    return stale_pods(kube.kubelet_running_pods(node), kube.pods_on_node(node))


class ReleaseLedger:
    """The releases this runner made within the last window, for the release rate limit
    (``--max-pods-released-per-minute``; :func:`~noderemedy_runner.machines.release.admit`).

    Held in memory by the active runner, shared by every NodeFence it reconciles (thread-safe). A
    new leader starts with an empty ledger: at most one extra window's worth of pods can be
    released across a change of leader.

    Args:
        limit: pods per ``window`` seconds; 0: no limit (nothing is listed or kept).
        window: seconds (60: the limit is per minute).
    """

    def __init__(self, limit: int, window: float = RATE_WINDOW_SECONDS) -> None:
        if limit < 0:
            raise ValueError(f"max pods released per minute = {limit} must be >= 0")
        self.limit = limit
        self.window = window
        self._releases: list[Release] = []
        self._lock = threading.Lock()

    def ask(self, node: str, pods: int, now: float) -> Admission:
        """Whether ``node``'s release of ``pods`` pods may happen at ``now`` (seconds); when it
        may, it is recorded at once (a release that then fails still counts: the safe side)."""
        with self._lock:
            # only the old ones go: a release stamped after this caller's ``now`` (another
            # NodeFence's, asked a moment before with a later clock reading) still counts
            self._releases = [r for r in self._releases if now - self.window < r.at]
            answer = admit(self._releases, node, pods, now, self.limit, self.window)
            if answer.allowed and not any(r.node == node for r in self._releases):
                self._releases.append(Release(node, now, pods))
            return answer

    def hold(self, kube: KubeIO, node: str, now: float) -> RateHold | None:
        """Ask for ``node``'s release now, counted in the pods the taint evicts from it (one list
        call); None when it may go, else why it waits and for how long."""
        if self.limit == 0:
            return None
        pods = len(old_pods(kube.pods_on_node(node), node, None))
        answer = self.ask(node, pods, now)
        if answer.allowed:
            return None
        return RateHold(
            f"the release of node {node} ({pods} pods) waits: {answer.used} pods released in the last "
            f"{self.window:g} s, limit {self.limit} per minute (--max-pods-released-per-minute); "
            f"next try in {answer.retry_seconds:.0f} s. The fencing goes on meanwhile",
            answer.retry_seconds,
        )


__all__ = ["ReleaseLedger", "observe_left", "observe_stale"]


def record_release(
    kube: KubeIO, obj: dict[str, Any], node: str, release: RunRelease | None, kind: str, ident: str
) -> int | None:
    """The Events of what run ``ident`` released on ``node``, on the NodeFence ``obj`` and the Node:
    ``OutOfServiceTaintAdded`` when it added the taint (``kind``: the fence reading that licensed
    it, e.g. ``ipmi``; the Event's name is fixed per NodeFence flow by
    :func:`~noderemedy_runner.loops.memory.release_key`, so a replay never records it twice),
    ``FencedStoragePodsReleased`` for a storage-only fence's pods, ``OutOfServiceTaintRefused``
    (Warning) when the module refused. Returns the flow (``status.restarts``) whose taint was
    recorded, None when no taint was added. Best effort, as every Event."""
    if release is not None and release.added:
        restarts = NodeFenceStatus.from_dict(obj.get("status")).restarts
        added = f"out-of-service taint added to node {node} ({kind} verified in run {ident})"
        key = release_key(obj, "OutOfServiceTaintAdded", restarts)
        taint_event(kube, obj, node, "Normal", "OutOfServiceTaintAdded", added, once_key=key)
        return restarts
    if release is not None and release.fenced_storage:
        shown = ", ".join(release.deleted_pods[:5]) + (" ..." if len(release.deleted_pods) > 5 else "")
        taint_event(
            kube,
            obj,
            node,
            "Normal",
            "FencedStoragePodsReleased",
            f"node {node}: storage-only fence verified in run {ident}: {len(release.deleted_pods)} pod(s) "
            f"on the fenced storage force-deleted ({shown or 'none'}); {len(release.kept_pods)} other "
            "pod(s) left running, and no out-of-service taint: that needs a power fence",
        )
    elif release is not None and release.message:
        taint_event(kube, obj, node, "Warning", "OutOfServiceTaintRefused", f"node {node}: {release.message}")
    return None
