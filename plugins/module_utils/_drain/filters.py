# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kubectl drain's pod filters (``k8s.io/kubectl/pkg/drain/filters.go``) as pure functions on pod
dicts, the options, and the refusal message; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._kube import NODE_ARGSPEC, KubeError

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
    **NODE_ARGSPEC,
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
