# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drain itself: cordon, evictions in parallel (429 retried, 404 done, UID preconditions),
waiting for the pods to be gone, and uncordon on failure (``k8s.io/kubectl/pkg/drain/drain.go``).
"""

from __future__ import annotations

import concurrent.futures
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ansible_collections.noderemedy.core.plugins.module_utils._drain.filters import (
    ERROR,
    EVICTION_WORKERS,
    LIST_RESYNC,
    NAMESPACE_TERMINATING,
    WARNING,
    DrainOptions,
    PodDecision,
    decide,
    parse_time,
    refusal_message,
    terminating_longer_than,
)
from ansible_collections.noderemedy.core.plugins.module_utils._drain.watch import (
    PodWatch,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, KubeNode, request


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


# Outcomes of one eviction/deletion attempt.
_ACCEPTED, _GONE, _RETRY, _FAILED = "accepted", "gone", "retry", "failed"


class Drainer(KubeNode):
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
        super().__init__(client, node, dry_run, clock)
        self.opts = opts
        self.max_workers = max_workers if max_workers > 0 else EVICTION_WORKERS
        self._ds_cache: dict[tuple[str, str], bool] = {}
        self.last_resource_version = ""

    # -- node --------------------------------------------------------------------------------

    def set_unschedulable(self, value: bool) -> None:
        """PATCH ``spec.unschedulable`` (kubectl cordon/uncordon; uncordon removes the field)."""
        request(
            self.client,
            "PATCH",
            self.path,
            query=self.write_query(),
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
