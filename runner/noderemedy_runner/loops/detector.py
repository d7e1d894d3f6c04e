"""The detector's I/O side: watch Nodes and NodeFences, run :func:`noderemedy_runner.machines.detection.plan`,
and act on the plan -- create NodeFences, cancel not-yet-started ones, hold per-node Leases,
write Events and the storm guard's status.

What it writes (all decided by the pure :mod:`~noderemedy_runner.machines.detection` and
:mod:`~noderemedy_runner.machines.storm`):

* **NodeFence** ``<node>`` (cluster-scoped, ``spec: {node, threshold}``: the threshold that matched,
  by which the NodeFence judges the node healthy again, :mod:`noderemedy_runner.machines.threshold`), labelled
  ``app.kubernetes.io/managed-by=noderemedy-runner`` and annotated with the Configuration, the
  threshold that matched, the remedy names and when the node became unhealthy. Before creating
  it the detector takes the node's Lease (:class:`~noderemedy_runner.kube.leases.NodeLeases`); it
  renews the Lease while the NodeFence is not finished and deletes it afterwards.
* **Cancel**: for a NodeFence still New whose node is Ready again before any step started, the
  detector asks the NodeFence machine itself (:func:`noderemedy_runner.machines.nodefence.decide` with
  the node Ready) and writes the status it returns (``Final``, ``Processing=False``
  ``NodeHealthy``) with a PUT on the status subresource carrying the resourceVersion read --
  so it cannot race the reconciler committing a step (one of the two writes gets 409).
* **Storm guard status**: ConfigMap ``<namespace>/noderemedy-status``, key
  ``<configuration>.json`` holding a ``StormGuardActive`` condition (reason TooManyUnhealthy /
  Cooldown / WithinLimit / Disabled, message with the counts) plus ``since``/``endedAt``; a new
  leader restores the storm state (and so the cooldown) from it. Events go on that ConfigMap.
  The record's shape and its Events are :mod:`noderemedy_runner.loops.storm_status`'s.
* **Events** (core/v1, component ``noderemedy-runner``, messages prefixed ``[remediation]``
  like medik8s): on the Node and the NodeFence when one is created (``NodeFenceCreated``) or
  cancelled (``NodeFenceCancelled``); on the Node when an unhealthy node is refused
  (``RemediationRefused``: Excluded, Paused, StormGuard, LeaseHeld, RestartLimitReached -- once per
  node and reason); on the status ConfigMap when a storm starts (``StormGuardActive``), ends
  (``StormGuardCooldown``) and fencing resumes (``StormGuardCleared``). Events for cluster-scoped
  objects go to namespace ``default``, as the kubelet's do.

``dry_run``: decide and report (JSON log lines, metrics), write nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kubernetes import client

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.config.remedy import ConfigurationSet
from noderemedy_runner.kube.client import api
from noderemedy_runner.kube.errors import Conflict, KubeError, NotFound
from noderemedy_runner.kube.events import COMPONENT, EventRecorder
from noderemedy_runner.kube.informer import Informer
from noderemedy_runner.kube.leases import MANAGED_BY_LABEL, NodeLeases
from noderemedy_runner.kube.watched import WatchedList, node_facts
from noderemedy_runner.logs import bind
from noderemedy_runner.loops.storm_status import STATUS_CONFIGMAP, StatusConfigMap, changed, storm_event
from noderemedy_runner.machines import detection as detect
from noderemedy_runner.machines.conditions import format_time
from noderemedy_runner.machines.deletion import FINALIZER
from noderemedy_runner.machines.detection import Assessment, FenceInfo, NodeInfo, Plan, Refusal
from noderemedy_runner.machines.nodefence import (
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    decide,
)
from noderemedy_runner.machines.remedies import CHAIN_ANNOTATION
from noderemedy_runner.machines.storm import StormState
from noderemedy_runner.machines.threshold import THRESHOLD_FIELD, threshold_spec
from noderemedy_runner.metrics import Metrics

log = logging.getLogger("noderemedy_runner.loops.detector")

GROUP, VERSION, PLURAL, KIND = "remediation.noderemedy.io", "v1alpha1", "nodefences", "NodeFence"
ANNOTATION_PREFIX = "remediation.noderemedy.io/"


class Detector:
    """Watches Nodes and NodeFences and keeps exactly one NodeFence per unhealthy node.

    Args:
        api_client: ``kubernetes.client.ApiClient``.
        configs: the remedy Configurations (:func:`noderemedy_runner.config.remedy.load`).
        namespace: the runner's namespace (status ConfigMap, per-node Leases).
        identity: this replica's id (Lease holder ``noderemedy-runner/<identity>``, Events).
        dry_run: decide and report only.
        metrics: where to report (None: a private :class:`Metrics`).
        clock: seconds since the epoch (tests pass a fake).
        node_lease_seconds: leaseDurationSeconds of per-node Leases.
        workers: parallel API calls when many NodeFences are created at once.
        resync: seconds between full passes when nothing changes.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        configs: ConfigurationSet,
        *,
        namespace: str,
        identity: str,
        dry_run: bool = False,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        node_lease_seconds: int = 300,
        workers: int = 16,
        resync: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.core = api(api_client, client.CoreV1Api)
        self.custom = api(api_client, client.CustomObjectsApi)
        self.configs = configs
        self.namespace = namespace
        self.identity = identity
        self.dry_run = dry_run
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.resync = resync
        self.leases = NodeLeases(api_client, namespace, f"noderemedy-runner/{identity}", node_lease_seconds)
        self.events = EventRecorder(api_client, identity, enabled=not dry_run, asynchronous=True)
        self.status = StatusConfigMap(self.core, namespace)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="detector")
        # status ConfigMap writes: one ordered background writer, off the detection path
        self._status_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="status")
        # per-node Lease upkeep (one API call per in-flight NodeFence): in the background, so a
        # mass failure's upkeep never holds up the detection of the next node
        self._upkeep = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease-upkeep")
        self._upkeep_future: Future[None] | None = None
        self._creating: set[str] = set()  # nodes whose Lease _create has taken, NodeFence not yet cached
        self._busy: set[str] = set()  # nodes with a create or cancel submitted and not done
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeInfo] = {}
        self._fences: dict[str, dict[str, Any]] = {}
        self._last_healthy: dict[str, float] = {}
        self._storms: dict[str, StormState] = {}
        self._refused: dict[str, str] = {}  # node -> last refusal reason reported
        self._created_at: dict[str, float] = {}
        self._dirty = threading.Event()
        self._informers: list[Informer] = []
        #: the Node watch, shared with the watcher's guards (KubeIO.watched_nodes): one watch of
        #: every Node per runner
        self.nodes = WatchedList("nodes", self._list_nodes, node_facts, self._reset_nodes, self._node_event)
        self._last_lease_upkeep = 0.0
        self._foreign: dict[str, tuple[str, float]] = {}  # node -> (holder, expiry) of others' Leases
        self.last_plan: Plan | None = None
        self.ready = threading.Event()

    # --- caches -------------------------------------------------------------------------------
    def _note_node(self, node: NodeInfo, now: float) -> None:
        cfg = self.configs.for_node(node.labels)
        if cfg is not None and not detect.assess(node, cfg, now).matching:
            self._last_healthy[node.name] = now

    def _reset_nodes(self, items: list[dict[str, Any]]) -> None:
        now = self.clock()
        nodes = {}
        for obj in items:
            n = NodeInfo.from_object(obj)
            nodes[n.name] = n
        with self._lock:
            self._nodes = nodes
            for n in nodes.values():
                self._note_node(n, now)
        self._dirty.set()

    def _node_event(self, kind: str, obj: dict[str, Any]) -> None:
        n = NodeInfo.from_object(obj)
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(n.name, None)
                self._last_healthy.pop(n.name, None)
            else:
                self._nodes[n.name] = n
                self._note_node(n, self.clock())
        self._dirty.set()

    def _reset_fences(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._fences = {o["metadata"]["name"]: o for o in items}
        self._dirty.set()

    def _fence_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self._fences.pop(name, None)
            else:
                self._fences[name] = obj
        self._dirty.set()

    def _list_nodes(self, **kw: Any) -> Any:
        return self.core.list_node(**kw)

    def _list_fences(self, **kw: Any) -> Any:
        return self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw)

    def sync(self) -> None:
        """List Nodes and NodeFences once (what :meth:`reconcile_once` uses without watches).
        Raises KubeError when the API server refuses or does not answer."""
        self._reset_nodes(json.loads(self._list_nodes(_preload_content=False).data).get("items") or [])
        self._reset_fences(json.loads(self._list_fences(_preload_content=False).data).get("items") or [])

    def start_watches(self, stop: threading.Event, timeout: float = 60.0) -> bool:
        """Start the Node and NodeFence informers in daemon threads; wait up to ``timeout`` s for
        their first list. Returns whether both synced."""
        self._informers = [
            self.nodes.informer,
            Informer("nodefences", self._list_fences, self._reset_fences, self._fence_event),
        ]
        for inf in self._informers:
            threading.Thread(target=inf.run, args=(stop,), name=f"watch-{inf.name}", daemon=True).start()
        deadline = time.monotonic() + timeout
        return all(inf.synced.wait(max(0.0, deadline - time.monotonic())) for inf in self._informers)

    # --- storm status ---------------------------------------------------------------------------
    def restore_storms(self) -> None:
        """Load the storm state (and so a running cooldown) from the status ConfigMap, if any."""
        self._storms.update(self.status.restore(cfg.name for cfg in self.configs.configurations))

    def _report_storm(self, name: str, old: StormState | None, new: StormState, now: float) -> None:
        if not changed(old, new):
            return
        slog = bind(log, resource=f"ConfigMap/{self.namespace}/{STATUS_CONFIGMAP}")
        slog.info(
            "storm guard %s: %s",
            name,
            new.message,
            extra={"configuration": name, "storm_active": new.active, "reason": new.reason},
        )
        if self.dry_run:
            return
        event = storm_event(name, old, new)
        if event is not None:
            self.events.record(self.status.ref(), *event)
        self._status_writer.submit(self.status.write, name, new, now)

    # --- one pass ----------------------------------------------------------------------------------
    def reconcile_once(self, now: float | None = None, wait: bool = True) -> Plan:
        """One detection pass on the cached Nodes/NodeFences (call :meth:`sync` first when no
        watches run): plan, then act (unless dry-run). Returns the plan.

        ``wait``: return only when the pass's creates and cancels are done. :meth:`run` passes
        False: each create (Lease, then NodeFence: API round trips that take long on a loaded
        API server) goes on in the background and the next pass starts as soon as another node
        changes, so a node failing during a mass failure never waits for the creates of the nodes
        before it. A node with a create or cancel under way is left out of the passes until it is
        done (never two at once for one node)."""
        now = self.clock() if now is None else now
        with self._lock:
            nodes = list(self._nodes.values())
            fence_objs = dict(self._fences)
            last_healthy = dict(self._last_healthy)
            busy = set(self._busy)
        fences = [FenceInfo.from_object(o) for o in fence_objs.values()]
        # other remediators' Leases: from the last upkeep (a create re-checks the Lease anyway)
        foreign = {n: h for n, (h, until) in self._foreign.items() if until > now}
        p = detect.plan(nodes, self.configs, fences, now, self._storms, last_healthy, foreign)
        previous, self._storms = self._storms, dict(p.storms)
        by_name = {n.name: n for n in nodes}
        # act first (the fast path), then report
        futures = [
            self._act(a.node, self._create, a, by_name[a.node], fence_objs.get(a.node), now)
            for a in p.create
            if a.node not in busy
        ]
        futures += [
            self._act(f.node, self._cancel, f, fence_objs.get(f.name), by_name.get(f.node), now)
            for f in p.cancel
            if f.node not in busy
        ]
        if wait:
            for fut in futures:
                fut.result()
        for name, state in p.storms.items():
            self.metrics.configuration_state(name, state.total, len(p.unhealthy.get(name, ())), state.active)
            self._report_storm(name, previous.get(name), state, now)
        self._report_refusals(p.refused)
        upkeep_due = now - self._last_lease_upkeep >= min(30.0, self.leases.duration / 4)
        if not self.dry_run and upkeep_due and (self._upkeep_future is None or self._upkeep_future.done()):
            self._last_lease_upkeep = now
            self._upkeep_future = self._upkeep.submit(self._lease_upkeep_pass, now)
        self.last_plan = p
        return p

    def _act(self, node: str, fn: Callable[..., None], *args: Any) -> Future[None]:
        """Submit a create or cancel for ``node`` to the pool; the node is busy until it is done.
        Whatever the work raises is logged and counted (``reconcile_errors_total``), never lost
        in the future: the node is planned again at the next pass."""
        with self._lock:
            self._busy.add(node)
        fut = self._pool.submit(fn, *args)
        fut.add_done_callback(functools.partial(self._acted, node, getattr(fn, "__name__", "act")))
        return fut

    def _acted(self, node: str, what: str, fut: Future[None]) -> None:
        with self._lock:
            self._busy.discard(node)
        exc = fut.exception()
        if exc is not None:
            self.metrics.reconcile_error("Detector", node, f"{what.strip('_')}: {exc}")
            bind(log, node=node).error("%s failed: %s: %s", what.strip("_"), type(exc).__name__, exc)
            self._dirty.set()

    def wait_lease_upkeep(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the Lease upkeep under way, if any; False if it is
        still running then."""
        fut = self._upkeep_future
        if fut is None:
            return True
        try:
            fut.result(timeout)
        except FutureTimeout:
            return False
        return True

    def close(self) -> None:
        """Finish the work under way (creates, cancels, status writes, the Lease upkeep) and flush
        the Events; the detector acts no more."""
        self._pool.shutdown(wait=True)
        self._status_writer.shutdown(wait=True)
        self._upkeep.shutdown(wait=True)
        self.events.flush(5.0)

    def _report_refusals(self, refused: tuple[Refusal, ...]) -> None:
        """Report each refusal once per node and reason; forget nodes no longer refused."""
        current = {r.node for r in refused}
        with self._lock:
            for node in [n for n in self._refused if n not in current]:
                del self._refused[node]
        for r in refused:
            self._refuse(r)

    def _refuse(self, r: Refusal) -> None:
        with self._lock:
            if self._refused.get(r.node) == r.reason:
                return
            self._refused[r.node] = r.reason
            n = self._nodes.get(r.node)
            uid = n.uid if n else ""
        self.metrics.fencing_refused(r.reason)
        bind(log, node=r.node).warning(
            "no NodeFence: %s", r.message, extra={"reason": r.reason, "dry_run": self.dry_run}
        )
        self.events.record(
            {"kind": "Node", "apiVersion": "v1", "name": r.node, "uid": uid},
            "Warning",
            "RemediationRefused",
            f"{r.reason}: {r.message}",
        )

    def _record_on_both(
        self, node: str, node_uid: str, fence: str, fence_uid: str, reason: str, message: str
    ) -> None:
        """A Normal Event ``reason`` on Node ``node`` and on NodeFence ``fence`` (uids as read), so
        both ``kubectl describe node`` and ``kubectl describe nodefence`` show it."""
        for ref in (
            {"kind": "Node", "apiVersion": "v1", "name": node, "uid": node_uid},
            {"kind": KIND, "apiVersion": f"{GROUP}/{VERSION}", "name": fence, "uid": fence_uid},
        ):
            self.events.record(ref, "Normal", reason, message)

    def _create(self, a: Assessment, node: NodeInfo, old: dict[str, Any] | None, now: float) -> None:
        rlog = bind(log, resource=f"{KIND}/{node.name}", node=node.name)
        th = a.threshold
        due = (a.since or now) + (th.period if th else 0.0)
        if self.dry_run:
            rlog.info(
                "dry run: would create NodeFence",
                extra={"configuration": a.config, "threshold": th.describe() if th else None},
            )
            return
        with self._lock:
            self._creating.add(node.name)
        try:
            held, holder = self.leases.acquire(node.name)
            if not held:
                self._refuse(
                    Refusal(node.name, detect.REFUSED_LEASE, f"its remediation Lease is held by {holder}")
                )
                return
            if old is not None:
                rv = old["metadata"].get("resourceVersion")
                if FINALIZER in (old["metadata"].get("finalizers") or []):
                    # the new NodeFence takes the node over: the finished one undoes nothing
                    kept = [f for f in old["metadata"]["finalizers"] if f != FINALIZER]
                    patched: Any = self.custom.patch_cluster_custom_object(
                        GROUP, VERSION, PLURAL, node.name,
                        {"metadata": {"finalizers": kept, "resourceVersion": rv}},
                    )  # fmt: skip
                    rv = patched["metadata"].get("resourceVersion")
                self.custom.delete_cluster_custom_object(
                    GROUP,
                    VERSION,
                    PLURAL,
                    node.name,
                    body=client.V1DeleteOptions(preconditions=client.V1Preconditions(resource_version=rv)),
                )
                rlog.info("deleted finished NodeFence to fence the node again")
            remedies = [[r.name for r in step] for step in th.remedies] if th else []
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "metadata": {
                    "name": node.name,
                    "labels": {MANAGED_BY_LABEL: COMPONENT},
                    "annotations": {
                        ANNOTATION_PREFIX + "configuration": str(a.config),
                        ANNOTATION_PREFIX + "threshold": th.describe() if th else "",
                        ANNOTATION_PREFIX + "remedies": json.dumps(remedies),
                        CHAIN_ANNOTATION: json.dumps([r.chain_entry() for r in th.chain()] if th else []),
                        ANNOTATION_PREFIX + "recovery": json.dumps(
                            [r.name for r in th.recovery] if th else []
                        ),
                        ANNOTATION_PREFIX + "unhealthy-since": format_time(a.since or now),
                        ANNOTATION_PREFIX + "detected-by": self.identity,
                    },
                },
                "spec": {"node": node.name, **({THRESHOLD_FIELD: threshold_spec(th)} if th else {})},
            }
            try:
                created: Any = self.custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
            except Conflict:
                rlog.info("NodeFence already exists")
                return
            late = self.clock() - due
            self.metrics.nodefence_created(late)
            with self._lock:
                self._fences[node.name] = created
                self._refused.pop(node.name, None)
            rlog.info(
                "created NodeFence",
                extra={
                    "configuration": a.config,
                    "threshold": th.describe() if th else None,
                    "late_s": round(late, 3),
                },
            )
            msg = f"node unhealthy ({th.describe() if th else '?'}) under Configuration {a.config}: NodeFence {node.name} created"
            self._record_on_both(
                node.name, node.uid, node.name, created["metadata"]["uid"], "NodeFenceCreated", msg
            )
        except KubeError as exc:
            self.metrics.reconcile_error("Detector", node.name, str(exc))
            rlog.error("NodeFence not created: %s", exc)
        finally:
            with self._lock:
                self._creating.discard(node.name)

    def _cancel(self, f: FenceInfo, obj: dict[str, Any] | None, node: NodeInfo | None, now: float) -> None:
        rlog = bind(log, resource=f"{KIND}/{f.name}", node=f.node)
        if obj is None or node is None:
            return
        try:
            status = NodeFenceStatus.from_dict(obj.get("status"))
        except ValueError as exc:
            rlog.error("NodeFence status unreadable, not cancelled: %s", exc)
            return
        gen = int(obj["metadata"].get("generation", 0))
        obs = NodeFenceObservations(
            node=f.node, now=now, node_ready=True, taint_present=node.out_of_service, generation=gen
        )
        empty = FenceConfig(
            configmap=f"fence-config-{f.node}", node=f.node, isolation=(), power_management=(), recovery=()
        )
        policy = NodeFencePolicy()
        action = decide(f.name, status, obs, empty, policy)
        if (
            action.kind == "write_status"
            and action.reason == "ObservedGeneration"
            and action.status is not None
        ):
            status = NodeFenceStatus.from_dict(action.status)
            action = decide(f.name, status, obs, empty, policy)
        if action.kind != "write_status" or action.reason != "NodeHealthy" or action.status is None:
            rlog.info("not cancelled: the NodeFence machine decides %s", action.reason)
            return
        if self.dry_run:
            rlog.info("dry run: would cancel NodeFence (node Ready before fencing started)")
            return
        new_status = dict(action.status)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": f.name, "resourceVersion": obj["metadata"]["resourceVersion"]},
            "spec": obj.get("spec") or {"node": f.node},
            "status": new_status,
        }
        try:
            updated: Any = self.custom.replace_cluster_custom_object_status(
                GROUP, VERSION, PLURAL, f.name, body
            )
        except (NotFound, Conflict) as exc:
            rlog.info("not cancelled: the NodeFence changed meanwhile (%s)", exc.reason)
            return
        except KubeError as exc:
            self.metrics.reconcile_error("Detector", f.name, str(exc))
            rlog.error("NodeFence not cancelled: %s", exc)
            return
        with self._lock:
            self._fences[f.name] = updated
        self.metrics.nodefence_cancelled()
        rlog.info("cancelled NodeFence: node Ready before fencing started")
        msg = f"node {f.node} Ready again before fencing started: NodeFence {f.name} cancelled (Final, NodeHealthy)"
        self._record_on_both(
            f.node, node.uid, f.name, obj["metadata"].get("uid", ""), "NodeFenceCancelled", msg
        )
        try:
            self.leases.release(f.node)
        except KubeError as exc:
            rlog.warning("node Lease not released: %s", exc)

    def _lease_upkeep_pass(self, now: float) -> None:
        try:
            self._lease_upkeep(now)
        except Exception as exc:  # a failed upkeep is retried at the next one
            self.metrics.reconcile_error("Detector", "-", f"lease upkeep: {exc}")
            log.exception("node Lease upkeep failed")

    def _lease_upkeep(self, now: float) -> None:
        """Renew our per-node Leases of NodeFences not finished, release those of finished ones,
        take the missing ones; note other holders' Leases (``_foreign``). The NodeFences are read
        *after* the Leases, and a node whose create is under way counts as active: its Lease was
        taken before its NodeFence exists (DESIGN.md invariant 2)."""
        try:
            leases = self.leases.list()
        except KubeError as exc:
            log.warning("per-node Leases unreadable: %s", exc)
            return
        with self._lock:
            fences = [FenceInfo.from_object(o) for o in self._fences.values()]
            known_nodes = set(self._nodes)
            active = {f.node for f in fences if not f.terminal} | self._creating
        self._foreign = {
            node: (str(lease.holder), (lease.renewed or now) + lease.duration)
            for node, lease in leases.items()
            if not self.leases.ours(lease.holder) and not lease.expired(now)
        }
        for node, lease in leases.items():
            if not self.leases.ours(lease.holder):
                continue
            try:
                if node not in active:
                    if self.leases.release(node):
                        bind(log, node=node).info("released node Lease: remediation finished")
                elif (
                    lease.renewed is None
                    or lease.renewed + lease.duration / 2 <= now
                    or lease.holder != self.leases.holder
                ):
                    self.leases.renew(lease)
            except KubeError as exc:
                bind(log, node=node).warning("node Lease upkeep failed: %s", exc)
        for f in fences:
            if not f.terminal and f.node not in leases and f.node in known_nodes:
                try:
                    self.leases.acquire(f.node)
                except KubeError as exc:
                    bind(log, node=f.node).warning("node Lease not taken: %s", exc)

    # --- loop ----------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, beat: Callable[[], None] | None = None) -> None:
        """Watch and act until ``stop`` is set: a pass after every change, when a period or a
        cooldown runs out, and every ``resync`` seconds. Errors in a pass are logged, counted
        (``reconcile_errors_total{kind="Detector"}``) and retried after 1 s. Returns at once
        when ``stop`` is set (a pass in progress is finished first)."""
        self.restore_storms()
        if not self.start_watches(stop):
            log.error("node/NodeFence watches did not sync within 60 s; retrying in the background")
        self.ready.set()
        # a stop wakes the loop at once: the wait below is on changes, and may last ``resync`` s

        def wake_on_stop() -> None:
            stop.wait()
            self._dirty.set()

        threading.Thread(target=wake_on_stop, name="detector-stop", daemon=True).start()
        while not stop.is_set():
            if beat is not None:
                beat()
            try:
                p = self.reconcile_once(wait=False)
                wait = self.resync if p.next_check is None else min(self.resync, p.next_check + 0.01)
            except Exception as exc:  # one bad pass must not stop detection
                self.metrics.reconcile_error("Detector", "-", str(exc))
                log.exception("detection pass failed")
                wait = 1.0
            self._dirty.wait(wait)
            self._dirty.clear()
        self.close()


__all__ = ["Detector"]
