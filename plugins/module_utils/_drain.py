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

import concurrent.futures
import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, request

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"

# kubectl's messages (filters.go), with this collection's option names.
DAEMONSET_FATAL = "DaemonSet-managed Pods (use ignore_daemonsets to ignore)"
DAEMONSET_WARNING = "ignoring DaemonSet-managed Pods"
LOCAL_STORAGE_FATAL = "Pods with local storage (use delete_emptydir_data to override)"
LOCAL_STORAGE_WARNING = "deleting Pods with local storage"
UNMANAGED_FATAL = "cannot delete Pods that declare no controller (use force to override)"
UNMANAGED_WARNING = "deleting Pods that declare no controller"
MIRROR_SKIP = "mirror (static) pod, managed by the kubelet"
DELETED_SKIP = "terminating longer than skip_wait_for_delete_timeout"

OKAY, SKIP, WARNING, ERROR = "okay", "skip", "warning", "error"

#: Status cause of an eviction refused because the pod's namespace is being deleted.
NAMESPACE_TERMINATING = "NamespaceTerminating"

#: Seconds between full lists of the node's pods while a watch reports deletions (a safety net).
LIST_RESYNC = 5.0

#: Parallel eviction requests. Each worker holds one HTTP/1.1 connection (one TLS handshake, on
#: both ends, the first time), and a small API server is saturated well before that many requests
#: are in flight; more workers only add handshakes and thread switching (bench/drain.py).
EVICTION_WORKERS = 16

#: kubectl's delay before retrying an eviction refused with 429, in seconds (drain.go).
EVICTION_RETRY_DELAY = 5.0

FINISHED_PHASES = ("Succeeded", "Failed")


#: Options of ``noderemedy.core.node_drain`` besides the auth options (kubectl drain's flag names).
DRAIN_ARGSPEC: dict[str, dict[str, Any]] = {
    "name": {"type": "str", "required": True, "aliases": ["node"]},
    "state": {"type": "str", "default": "drain", "choices": ["cordon", "drain", "uncordon"]},
    "force": {"type": "bool", "default": False},
    "ignore_daemonsets": {"type": "bool", "default": False},
    "delete_emptydir_data": {"type": "bool", "default": False},
    "disable_eviction": {"type": "bool", "default": False},
    "grace_period": {"type": "int", "default": -1},
    "timeout": {"type": "int", "default": 300},
    "skip_wait_for_delete_timeout": {"type": "int", "default": 0},
    "pod_selector": {"type": "str", "default": ""},
}


@dataclass(frozen=True)
class DrainOptions:
    """What a drain may do; the names are kubectl drain's flags.

    Attributes:
        force: also delete pods without a controller, and orphaned DaemonSet pods.
        ignore_daemonsets: leave DaemonSet-managed pods in place instead of refusing.
        delete_emptydir_data: also delete pods with emptyDir volumes (their data is lost).
        disable_eviction: DELETE pods instead of evicting them (bypasses PodDisruptionBudgets).
        grace_period: seconds each pod gets to terminate; -1 keeps the pod's own
            ``terminationGracePeriodSeconds``, 0 deletes it at once.
        timeout: seconds for the whole drain (evictions, retries and waiting); 0 means no limit.
        skip_wait_for_delete_timeout: seconds; pods terminating longer than this are skipped and not
            waited for (0 disables).
        pod_selector: label selector; only matching pods are drained.
        retry_delay: seconds before retrying an eviction refused with 429.
        poll_interval: seconds between lists of the node's pods while the watch that reports
            deletions is down (it is normally up: deletions are then seen as they happen).
    """

    force: bool = False
    ignore_daemonsets: bool = False
    delete_emptydir_data: bool = False
    disable_eviction: bool = False
    grace_period: int = -1
    timeout: float = 0
    skip_wait_for_delete_timeout: int = 0
    pod_selector: str = ""
    retry_delay: float = EVICTION_RETRY_DELAY
    poll_interval: float = 0.2

    def __post_init__(self) -> None:
        """Raise ValueError naming the field for an out-of-range value."""
        if self.grace_period < -1:
            raise ValueError(
                f"grace_period: must be -1 (the pod's own), 0 or more seconds, got {self.grace_period}"
            )
        if self.timeout < 0:
            raise ValueError(f"timeout: must be 0 (no limit) or more seconds, got {self.timeout}")
        if self.skip_wait_for_delete_timeout < 0:
            raise ValueError(
                f"skip_wait_for_delete_timeout: must be 0 or more seconds, got {self.skip_wait_for_delete_timeout}"
            )
        if self.retry_delay <= 0 or self.poll_interval <= 0:
            raise ValueError("retry_delay and poll_interval: must be more than 0 seconds")


@dataclass(frozen=True)
class PodDecision:
    """The filters' verdict on one pod (kubectl's ``PodDeleteStatus``).

    Attributes:
        namespace, name, uid: the pod.
        delete: True if the drain evicts/deletes it.
        status: ``okay``, ``skip``, ``warning`` (delete or skip, with a message) or ``error``
            (the drain refuses to run).
        message: why, for ``skip``, ``warning`` and ``error``.
    """

    namespace: str
    name: str
    uid: str
    delete: bool
    status: str
    message: str = ""

    @property
    def ref(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


def controller_ref(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's owner reference with ``controller: true``, or None (``metav1.GetControllerOf``)."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def is_finished(pod: dict[str, Any]) -> bool:
    """True for a pod in phase Succeeded or Failed."""
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def has_local_storage(pod: dict[str, Any]) -> bool:
    """True if the pod has an emptyDir volume (filters.go ``hasLocalStorage``)."""
    return any(v.get("emptyDir") is not None for v in (pod.get("spec") or {}).get("volumes") or [])


def parse_time(value: str) -> float:
    """RFC 3339 time as the API writes it (``2026-11-21T08:00:00Z``) -> epoch seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def terminating_longer_than(pod: dict[str, Any], seconds: int, now: float) -> bool:
    """kubectl's ``shouldSkipPod``: ``seconds`` > 0 and the pod's deletionTimestamp is more than
    ``seconds`` before ``now`` (epoch seconds)."""
    stamp = pod.get("metadata", {}).get("deletionTimestamp")
    return seconds > 0 and bool(stamp) and int(now - parse_time(stamp)) > seconds


def _decision(pod: dict[str, Any], delete: bool, status: str, message: str = "") -> PodDecision:
    meta = pod.get("metadata", {})
    return PodDecision(
        meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""), delete, status, message
    )


def skip_deleted_filter(pod: dict[str, Any], opts: DrainOptions, now: float) -> PodDecision:
    """Skip a pod terminating longer than ``skip_wait_for_delete_timeout`` (filters.go ``skipDeletedFilter``)."""
    if terminating_longer_than(pod, opts.skip_wait_for_delete_timeout, now):
        return _decision(pod, False, SKIP, DELETED_SKIP)
    return _decision(pod, True, OKAY)


def daemonset_filter(
    pod: dict[str, Any], opts: DrainOptions, daemonset_exists: Callable[[str, str], bool]
) -> PodDecision:
    """DaemonSet pods are never deleted; they refuse the drain unless ``ignore_daemonsets``.

    An orphan (its DaemonSet is not found) is deleted with ``force``; finished pods may go
    (filters.go ``daemonSetFilter``). ``daemonset_exists(namespace, name)`` may raise
    :class:`KubeError`, which refuses the pod with that message.
    """
    ref = controller_ref(pod)
    if ref is None or ref.get("kind") != "DaemonSet":
        return _decision(pod, True, OKAY)
    if is_finished(pod):
        return _decision(pod, True, OKAY)
    namespace = pod.get("metadata", {}).get("namespace", "")
    try:
        exists = daemonset_exists(namespace, ref.get("name", ""))
    except KubeError as exc:
        return _decision(pod, False, ERROR, str(exc))
    if not exists:
        message = f'daemonsets.apps "{ref.get("name", "")}" not found'
        if opts.force:
            return _decision(pod, True, WARNING, message)
        return _decision(pod, False, ERROR, message)
    if not opts.ignore_daemonsets:
        return _decision(pod, False, ERROR, DAEMONSET_FATAL)
    return _decision(pod, False, WARNING, DAEMONSET_WARNING)


def mirror_pod_filter(pod: dict[str, Any]) -> PodDecision:
    """Skip mirror pods: the kubelet owns static pods (filters.go ``mirrorPodFilter``)."""
    if MIRROR_POD_ANNOTATION in (pod.get("metadata", {}).get("annotations") or {}):
        return _decision(pod, False, SKIP, MIRROR_SKIP)
    return _decision(pod, True, OKAY)


def local_storage_filter(pod: dict[str, Any], opts: DrainOptions) -> PodDecision:
    """Pods with emptyDir volumes need ``delete_emptydir_data`` unless finished (``localStorageFilter``)."""
    if not has_local_storage(pod) or is_finished(pod):
        return _decision(pod, True, OKAY)
    if not opts.delete_emptydir_data:
        return _decision(pod, False, ERROR, LOCAL_STORAGE_FATAL)
    return _decision(pod, True, WARNING, LOCAL_STORAGE_WARNING)


def unreplicated_filter(pod: dict[str, Any], opts: DrainOptions) -> PodDecision:
    """Pods without a controller need ``force`` unless finished (filters.go ``unreplicatedFilter``)."""
    if is_finished(pod) or controller_ref(pod) is not None:
        return _decision(pod, True, OKAY)
    if opts.force:
        return _decision(pod, True, WARNING, UNMANAGED_WARNING)
    return _decision(pod, False, ERROR, UNMANAGED_FATAL)


def decide(
    pod: dict[str, Any],
    opts: DrainOptions,
    daemonset_exists: Callable[[str, str], bool],
    now: float,
) -> PodDecision:
    """Run kubectl's filters in order on one pod; the first that says "do not delete" wins.

    As in drain.go ``GetPodsForDeletion`` the delete/keep verdict is the first refusal, else
    delete. Unlike kubectl, whose later "okay" drops an earlier warning (the TODO in filters.go),
    the last warning is kept, so ``delete_emptydir_data`` deletions are reported as warnings.

    Args:
        pod: the pod as the API returns it (a dict).
        opts: the drain's options.
        daemonset_exists: ``(namespace, name) -> bool``; may raise :class:`KubeError`.
        now: current time, epoch seconds.
    """
    filters: list[Callable[[dict[str, Any]], PodDecision]] = [
        lambda p: skip_deleted_filter(p, opts, now),
        lambda p: daemonset_filter(p, opts, daemonset_exists),
        mirror_pod_filter,
        lambda p: local_storage_filter(p, opts),
        lambda p: unreplicated_filter(p, opts),
    ]
    verdict = _decision(pod, True, OKAY)
    for flt in filters:
        decision = flt(pod)
        if not decision.delete:
            return decision
        if decision.status == WARNING:
            verdict = decision
    return verdict


def refusal_message(decisions: list[PodDecision]) -> str | None:
    """kubectl's aggregated error for refused pods, grouped by message, or None if none refused.

    Example: ``cannot delete Pods with local storage (use delete_emptydir_data to override):
    ns/a, ns/b; cannot delete Pods that declare no controller (use force to override): ns/c``.
    """
    groups: dict[str, list[str]] = {}
    for d in decisions:
        if d.status == ERROR:
            groups.setdefault(d.message or "unexpected error", []).append(d.ref)
    if not groups:
        return None
    parts = []
    for msg in sorted(groups):
        prefix = "" if msg.lower().startswith("cannot delete") else "cannot delete "
        parts.append(f"{prefix}{msg}: {', '.join(sorted(groups[msg]))}")
    return "; ".join(parts)


@dataclass
class DrainResult:
    """What a drain did (or, in check mode, would do).

    Attributes:
        node: the node's name.
        changed: True if the node was cordoned or a pod evicted/deleted.
        cordoned: True if this run cordoned the node (False if it already was).
        method: ``eviction`` or ``delete``.
        evicted: ``namespace/name`` of pods evicted or deleted and gone (in check mode: accepted by
            the server-side dry run).
        skipped_pods: ``{"pod": "namespace/name", "reason": ...}`` for pods left in place.
        pending: ``{"pod": "namespace/name", "reason": ...}`` for pods still on the node when the
            drain ended (blocked by a PodDisruptionBudget, still terminating, failed).
        warnings: kubectl's warnings, e.g. ``deleting Pods with local storage: ns/a``.
        retries: evictions refused with 429 (a PodDisruptionBudget) and tried again.
        elapsed: seconds the drain took.
    """

    node: str
    changed: bool = False
    cordoned: bool = False
    method: str = "eviction"
    evicted: list[str] = field(default_factory=list)
    skipped_pods: list[dict[str, str]] = field(default_factory=list)
    pending: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    retries: int = 0
    elapsed: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict for a module result."""
        return {
            "node": self.node,
            "changed": self.changed,
            "cordoned": self.cordoned,
            "method": self.method,
            "evicted": sorted(self.evicted),
            "skipped_pods": sorted(self.skipped_pods, key=lambda x: x["pod"]),
            "pending": sorted(self.pending, key=lambda x: x["pod"]),
            "warnings": self.warnings,
            "retries": self.retries,
            "elapsed": round(self.elapsed, 3),
        }


class DrainError(KubeError):
    """A drain that did not finish; ``result`` (a :class:`DrainResult`) says how far it got."""

    def __init__(self, message: str, reason: str, result: DrainResult) -> None:
        super().__init__(message, reason)
        self.result = result


class PodWatch(threading.Thread):
    """Watch the node's pods from a resourceVersion and record which UIDs were deleted.

    One streaming request (``watch=true``, field selector ``spec.nodeName``) instead of listing
    every pod again and again: the API server sends one event per change. ``healthy`` turns
    False if the stream fails or ends (e.g. ``410 Gone``); the caller then lists instead.

    Args:
        client: ``kubernetes.client.ApiClient``.
        node: the node's name.
        resource_version: where to start (from the LIST the drain decided on), so no event is missed.
        timeout: seconds the server keeps the watch open.
        notify: called (from the watch's thread) after each event that marks a pod deleted or
            terminating, and once when the stream ends, so the caller need not poll.
    """

    def __init__(
        self,
        client: Any,
        node: str,
        resource_version: str,
        timeout: float,
        notify: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=f"watch-pods-{node}", daemon=True)
        self.notify = notify or (lambda: None)
        self.client = client
        self.node = node
        self.resource_version = resource_version
        self.timeout = max(1, int(timeout))
        self.deleted: set[str] = set()
        self.deletion_timestamps: dict[str, str] = {}
        self.healthy = bool(resource_version)
        self.started_streaming = threading.Event()
        self._new_deleted: set[str] = set()
        self._new_stamps: dict[str, str] = {}
        self._response: Any = None
        self._lock = threading.Lock()

    def snapshot(self) -> tuple[set[str], dict[str, str]]:
        """``(deleted UIDs, {uid: deletionTimestamp})`` seen so far (copies)."""
        with self._lock:
            return set(self.deleted), dict(self.deletion_timestamps)

    def take(self) -> tuple[set[str], dict[str, str]]:
        """Like :meth:`snapshot`, but only what was seen since the previous ``take`` (cheap to
        call after every event; the caller accumulates)."""
        with self._lock:
            deleted, stamps = self._new_deleted, self._new_stamps
            self._new_deleted, self._new_stamps = set(), {}
        return deleted, stamps

    def run(self) -> None:
        try:
            params = self.client.param_serialize(
                "GET",
                "/api/v1/pods",
                query_params=[
                    ("watch", "true"),
                    ("fieldSelector", f"spec.nodeName={self.node}"),
                    ("resourceVersion", self.resource_version),
                    ("timeoutSeconds", self.timeout),
                ],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.client.call_api(*params, _request_timeout=(5.0, float(self.timeout + 30)))
            self._response = response.response
            if response.status != 200:
                return
            self.started_streaming.set()
            pending = b""
            for chunk in self._response.stream(amt=None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip() and not self._event(json.loads(line)):
                        return
        except Exception:  # any failure means: fall back to listing
            return
        finally:
            self.healthy = False
            self.started_streaming.set()
            self.notify()

    def _event(self, event: dict[str, Any]) -> bool:
        kind = event.get("type")
        if kind == "ERROR":
            return False
        meta = (event.get("object") or {}).get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return True
        with self._lock:
            if kind == "DELETED":
                self.deleted.add(uid)
                self._new_deleted.add(uid)
            elif (
                meta.get("deletionTimestamp")
                and self.deletion_timestamps.get(uid) != meta["deletionTimestamp"]
            ):
                self.deletion_timestamps[uid] = meta["deletionTimestamp"]
                self._new_stamps[uid] = meta["deletionTimestamp"]
            else:
                return True
        self.notify()
        return True

    def stop(self) -> None:
        """End the stream without waiting: ``shutdown()`` interrupts the thread's blocking read
        (``close()`` would wait for it, holding the reader's lock, until the server ends the watch)."""
        self.healthy = False
        response = self._response
        shutdown = getattr(response, "shutdown", None)  # urllib3 >= 2.3
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # a stream that is already gone
                pass


# Outcomes of one eviction/deletion attempt.
_ACCEPTED, _GONE, _RETRY, _FAILED = "accepted", "gone", "retry", "failed"


class Drainer:
    """Cordon, uncordon or drain one node through the API (kubectl drain's ``Helper``).

    Args:
        client: a ``kubernetes.client.ApiClient`` (see ``_kube.get_api_client``).
        node: the node's name.
        opts: :class:`DrainOptions`.
        dry_run: server-side dry run (``dryRun=All``): nothing is persisted; nothing is waited for.
        clock: monotonic seconds, for deadlines and retry delays (waiting itself blocks on a queue
            in real time, woken by eviction results and watch events).
        max_workers: parallel eviction requests (threads, each with its own pooled HTTP connection);
            default :data:`EVICTION_WORKERS`.
    """

    def __init__(
        self,
        client: Any,
        node: str,
        opts: DrainOptions,
        dry_run: bool = False,
        clock: Callable[[], float] = time.monotonic,
        max_workers: int = 0,
    ) -> None:
        if not node:
            raise KubeError("name: the node's name must not be empty", "invalid")
        self.client = client
        self.node = node
        self.opts = opts
        self.dry_run = dry_run
        self.clock = clock
        self.max_workers = max_workers if max_workers > 0 else EVICTION_WORKERS
        self._ds_cache: dict[tuple[str, str], bool] = {}
        self.last_resource_version = ""

    # -- node --------------------------------------------------------------------------------

    def _query(self) -> list[tuple[str, Any]]:
        return [("dryRun", "All")] if self.dry_run else []

    def get_node(self) -> dict[str, Any]:
        """The node as a dict. Raises KubeError (``not_found`` names the node)."""
        try:
            return request(self.client, "GET", f"/api/v1/nodes/{quote(self.node, safe='')}")
        except KubeError as exc:
            if exc.reason == "not_found":
                raise KubeError(f"node {self.node!r} not found", "not_found", status=404) from exc
            raise

    def set_unschedulable(self, value: bool) -> None:
        """PATCH ``spec.unschedulable`` (kubectl cordon/uncordon; uncordon removes the field)."""
        request(
            self.client,
            "PATCH",
            f"/api/v1/nodes/{quote(self.node, safe='')}",
            query=self._query(),
            body={"spec": {"unschedulable": True if value else None}},
            content_type="application/merge-patch+json",
        )

    def cordon(self) -> bool:
        """Mark the node unschedulable. Returns True if it was schedulable (changed)."""
        node = self.get_node()
        if (node.get("spec") or {}).get("unschedulable"):
            return False
        self.set_unschedulable(True)
        return True

    def uncordon(self) -> bool:
        """Mark the node schedulable. Returns True if it was unschedulable (changed)."""
        node = self.get_node()
        if not (node.get("spec") or {}).get("unschedulable"):
            return False
        self.set_unschedulable(False)
        return True

    # -- pods --------------------------------------------------------------------------------

    def list_pods(self, label_selector: str = "", limit: int = 0) -> list[dict[str, Any]]:
        """Pods bound to the node (all namespaces), optionally filtered by ``label_selector``.

        Raises:
            KubeError: ``invalid`` naming ``pod_selector`` for a selector the server rejects.
        """
        query: list[tuple[str, Any]] = [("fieldSelector", f"spec.nodeName={self.node}")]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if limit:
            query.append(("limit", limit))
        try:
            doc = request(self.client, "GET", "/api/v1/pods", query=query)
        except KubeError as exc:
            if exc.reason == "invalid" and label_selector:
                raise KubeError(f"pod_selector: {exc.message}", "invalid", status=exc.status) from exc
            raise
        self.last_resource_version = (doc.get("metadata") or {}).get("resourceVersion") or ""
        return doc.get("items") or []

    def daemonset_exists(self, namespace: str, name: str) -> bool:
        """True if DaemonSet ``namespace/name`` exists (cached). Raises KubeError other than 404."""
        key = (namespace, name)
        if key not in self._ds_cache:
            try:
                request(
                    self.client,
                    "GET",
                    f"/apis/apps/v1/namespaces/{quote(namespace, safe='')}/daemonsets/{quote(name, safe='')}",
                )
                self._ds_cache[key] = True
            except KubeError as exc:
                if exc.reason != "not_found":
                    raise
                self._ds_cache[key] = False
        return self._ds_cache[key]

    def eviction_supported(self) -> bool:
        """True if the server offers ``pods/eviction`` (drain.go ``CheckEvictionSupport``)."""
        doc = request(self.client, "GET", "/api/v1")
        return any(r.get("name") == "pods/eviction" for r in doc.get("resources") or [])

    def _delete_options(self, uid: str) -> dict[str, Any]:
        opts: dict[str, Any] = {"preconditions": {"uid": uid}} if uid else {}
        if self.opts.grace_period >= 0:
            opts["gracePeriodSeconds"] = self.opts.grace_period
        if self.dry_run:
            opts["dryRun"] = ["All"]
        return opts

    def _get_pod(self, d: PodDecision) -> dict[str, Any] | None:
        """The pod, or None if it is not found or has another UID (drain.go ``waitForDelete``)."""
        try:
            pod = request(
                self.client,
                "GET",
                f"/api/v1/namespaces/{quote(d.namespace, safe='')}/pods/{quote(d.name, safe='')}",
            )
        except KubeError as exc:
            if exc.reason == "not_found":
                return None
            raise
        return pod if pod.get("metadata", {}).get("uid") == d.uid else None

    def _pod_gone(self, d: PodDecision) -> bool:
        """True if the pod is not found or has another UID."""
        return self._get_pod(d) is None

    def remove_pod(self, d: PodDecision, use_eviction: bool) -> tuple[str, str, str]:
        """One eviction (or DELETE) attempt for a pod.

        Returns:
            ``(outcome, message, reason)``: outcome one of ``accepted``, ``gone`` (404, or the UID
            changed), ``retry`` (429: a PodDisruptionBudget allows no disruption now), ``failed``;
            the API's message and the :class:`KubeError` reason of a refusal.
        """
        ns, name = quote(d.namespace, safe=""), quote(d.name, safe="")
        try:
            if use_eviction:
                request(
                    self.client,
                    "POST",
                    f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
                    body={
                        "apiVersion": "policy/v1",
                        "kind": "Eviction",
                        "metadata": {"name": d.name, "namespace": d.namespace},
                        "deleteOptions": self._delete_options(d.uid),
                    },
                )
            else:
                request(
                    self.client,
                    "DELETE",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    body=self._delete_options(d.uid),
                )
        except KubeError as exc:
            if exc.reason == "not_found":
                return _GONE, "", exc.reason
            if exc.reason == "too_many_requests":
                return _RETRY, exc.message, exc.reason
            if exc.reason == "forbidden" and NAMESPACE_TERMINATING in exc.causes:
                # drain.go: an eviction in a deleting namespace is forbidden; the namespace
                # controller deletes the pod itself: wait for that instead of failing
                try:
                    pod = self._get_pod(d)
                except KubeError as again:
                    return _FAILED, again.message, again.reason
                if pod is None:
                    return _GONE, "", ""
                if pod.get("metadata", {}).get("deletionTimestamp"):
                    return _ACCEPTED, "", ""
                return _RETRY, exc.message, exc.reason
            if exc.reason == "conflict":
                # UID precondition failed (a new pod of that name) or a PDB update conflict
                try:
                    return (_GONE, "", "") if self._pod_gone(d) else (_RETRY, exc.message, exc.reason)
                except KubeError as again:
                    return _FAILED, again.message, again.reason
            return _FAILED, exc.message, exc.reason
        return _ACCEPTED, "", ""

    # -- drain -------------------------------------------------------------------------------

    def drain(self) -> DrainResult:
        """Cordon the node, then evict (or delete) its pods as kubectl drain does, and wait.

        Returns:
            :class:`DrainResult`.

        Raises:
            DrainError: pods refused by the filters (reason ``invalid``, nothing evicted), the
                ``timeout`` reached (reason ``timeout``, blocked pods named), or an eviction failed;
                in every case a node this run cordoned is uncordoned again. ``result`` says what
                was done.
            KubeError: the node is not found, the API is unreachable or forbids the request
                (before anything was changed, or after the cordon was undone).
        """
        start = self.clock()
        result = DrainResult(self.node)
        if self.opts.pod_selector:
            self.list_pods(self.opts.pod_selector, limit=1)  # a bad selector fails before the cordon
        result.cordoned = self.cordon()
        result.changed = result.cordoned
        try:
            self._drain_pods(result, start)
        except KubeError as exc:
            result.elapsed = self.clock() - start
            message = exc.message
            if result.cordoned and not self.dry_run:
                try:
                    self.set_unschedulable(False)
                    result.cordoned = False
                    result.changed = bool(result.evicted)
                    message += f"; node {self.node} uncordoned again"
                except KubeError as undo:
                    message += f"; uncordoning node {self.node} again failed too: {undo.message}"
            raise DrainError(message, exc.reason, result) from exc
        result.elapsed = self.clock() - start
        return result

    def _drain_pods(self, result: DrainResult, start: float) -> None:
        opts = self.opts
        now = time.time()
        pods = self.list_pods(opts.pod_selector)
        decisions = [decide(p, opts, self.daemonset_exists, now) for p in pods]
        refusal = refusal_message(decisions)
        for d in decisions:
            if not d.delete and d.status != ERROR:
                result.skipped_pods.append({"pod": d.ref, "reason": d.message})
        warnings: dict[str, list[str]] = {}
        for d in decisions:
            if d.status == WARNING:
                warnings.setdefault(d.message, []).append(d.ref)
        result.warnings = [f"{m}: {', '.join(sorted(p))}" for m, p in sorted(warnings.items())]
        if refusal:
            for d in decisions:
                if d.status == ERROR:
                    result.pending.append({"pod": d.ref, "reason": d.message})
            raise DrainError(f"node {self.node}: {refusal}", "invalid", result)
        todo = [d for d in decisions if d.delete]
        if not todo:
            return
        use_eviction = not opts.disable_eviction and self.eviction_supported()
        result.method = "eviction" if use_eviction else "delete"
        self._remove_all(todo, use_eviction, result, start)

    def _remove_all(
        self, todo: list[PodDecision], use_eviction: bool, result: DrainResult, start: float
    ) -> None:
        """Evict/delete ``todo`` in parallel, retry 429s, wait until gone; fill ``result``.

        Event-driven: eviction results (from the worker threads) and the :class:`PodWatch`'s
        notifications arrive on one queue, so the loop wakes the moment something happens and
        never busy-polls. Deletions are seen through the watch, started at the resourceVersion of
        the list the filters ran on; while the watch is not healthy the node's pods are listed every
        ``poll_interval`` seconds instead, and every ``LIST_RESYNC`` seconds regardless (a safety net).
        """
        opts = self.opts
        deadline = start + opts.timeout if opts.timeout > 0 else None
        due: dict[str, float] = {d.uid: self.clock() for d in todo}  # queued attempts
        by_uid = {d.uid: d for d in todo}
        inflight = 0
        accepted: set[str] = set()
        done: set[str] = set()
        blocked: dict[str, str] = {}
        failed: dict[str, str] = {}
        failed_reason = "other"
        timed_out = False
        last_list = self.clock()
        seen_deleted: set[str] = set()
        seen_stamps: dict[str, str] = {}
        events: queue.SimpleQueue = queue.SimpleQueue()
        watch = None
        if not self.dry_run:
            watch = PodWatch(
                self.client,
                self.node,
                self.last_resource_version,
                opts.timeout or 3600,
                notify=lambda: events.put(None),
            )
            watch.start()

        def submit(pool: concurrent.futures.ThreadPoolExecutor, uid: str) -> None:
            fut = pool.submit(self.remove_pod, by_uid[uid], use_eviction)
            fut.add_done_callback(lambda f: events.put((uid, f)))

        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(self.max_workers, len(todo))) as pool:
                while True:
                    now = self.clock()
                    if deadline is not None and now >= deadline and not timed_out:
                        timed_out = True
                        due.clear()
                    if not failed and not timed_out:
                        for uid in [u for u, t in due.items() if t <= now]:
                            del due[uid]
                            submit(pool, uid)
                            inflight += 1
                    # everything that arrived: eviction results (uid, future) and watch wake-ups (None)
                    while True:
                        try:
                            item = events.get_nowait()
                        except queue.Empty:
                            break
                        if item is None:
                            continue
                        uid, fut = item
                        inflight -= 1
                        outcome, message, reason = fut.result()
                        if outcome == _ACCEPTED:
                            blocked.pop(uid, None)
                            accepted.add(uid)
                            if self.dry_run:
                                done.add(uid)
                        elif outcome == _GONE:
                            blocked.pop(uid, None)
                            done.add(uid)
                        elif outcome == _RETRY:
                            blocked[uid] = message
                            if self.dry_run or timed_out:
                                continue
                            result.retries += 1
                            delay = opts.retry_delay
                            if deadline is not None:
                                delay = min(delay, max(0.0, deadline - self.clock()))
                            due[uid] = self.clock() + delay
                        else:
                            failed[uid] = message
                            failed_reason = reason or "other"
                            due.clear()
                    waiting = accepted - done
                    if waiting and watch is not None:
                        deleted, stamps = watch.take()
                        seen_deleted |= deleted
                        seen_stamps.update(stamps)
                        self._seen_by_watch(seen_deleted, seen_stamps, waiting, done)
                        if not watch.healthy or self.clock() - last_list >= LIST_RESYNC:
                            if self.clock() - last_list >= opts.poll_interval:
                                last_list = self.clock()
                                self._check_gone(waiting, done)
                        waiting = accepted - done
                    if not inflight and (failed or timed_out or self.dry_run or (not due and not waiting)):
                        break
                    # sleep until the next event, retry, list, skip-wait check or the deadline
                    wake = min(due.values(), default=float("inf"))
                    if waiting:
                        healthy = watch is not None and watch.healthy
                        wake = min(wake, last_list + (LIST_RESYNC if healthy else opts.poll_interval))
                        if opts.skip_wait_for_delete_timeout > 0:
                            wake = min(wake, self.clock() + 1.0)
                    if deadline is not None and not timed_out:
                        wake = min(wake, deadline)
                    try:
                        item = events.get(timeout=max(0.0, min(wake - self.clock(), 3600.0)))
                    except queue.Empty:
                        continue
                    events.put(item)  # handled at the top of the loop, with whatever else arrived
        finally:
            if watch is not None:
                watch.stop()
        result.evicted = [d.ref for d in todo if d.uid in done]
        result.changed = result.changed or bool(done)
        for d in todo:
            if d.uid in done:
                continue
            if d.uid in failed:
                reason = f"failed: {failed[d.uid]}"
            elif d.uid in blocked and self.dry_run:
                reason = f"eviction would be refused now (429): {blocked[d.uid]}"
            elif d.uid in blocked:
                reason = f"eviction refused, retried until the end: {blocked[d.uid]}"
            elif d.uid in accepted:
                reason = "evicted, still terminating" if use_eviction else "deleted, still terminating"
            else:
                reason = "not attempted"
            result.pending.append({"pod": d.ref, "reason": reason})
        if self.dry_run:
            return
        if failed:
            names = ", ".join(sorted(by_uid[u].ref for u in failed))
            first = next(iter(failed.values()))
            raise DrainError(
                f"node {self.node}: error when {'evicting' if use_eviction else 'deleting'} pods {names}: {first}",
                failed_reason,
                result,
            )
        if timed_out and result.pending:
            pending = "; ".join(
                f"{p['pod']} ({p['reason']})" for p in sorted(result.pending, key=lambda x: x["pod"])
            )
            raise DrainError(
                f"node {self.node}: drain timed out after {opts.timeout:g} s with pods still on the node: {pending}",
                "timeout",
                result,
            )

    def _seen_by_watch(
        self, deleted: set[str], stamps: dict[str, str], waiting: set[str], done: set[str]
    ) -> None:
        """Mark pods of ``waiting`` the watch saw deleted (``deleted`` UIDs) or terminating longer
        than ``skip_wait_for_delete_timeout`` (``stamps``: uid -> deletionTimestamp) as done."""
        done.update(waiting & deleted)
        limit = self.opts.skip_wait_for_delete_timeout
        if limit > 0:
            now = time.time()
            for uid in waiting - deleted:
                if uid in stamps and int(now - parse_time(stamps[uid])) > limit:
                    done.add(uid)

    def _check_gone(self, waiting: set[str], done: set[str]) -> None:
        """Mark pods of ``waiting`` that left the node (or terminate too long) as done."""
        present = {p.get("metadata", {}).get("uid"): p for p in self.list_pods()}
        now = time.time()
        for uid in waiting:
            pod = present.get(uid)
            if pod is None or terminating_longer_than(pod, self.opts.skip_wait_for_delete_timeout, now):
                done.add(uid)


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
