"""The watcher loop: find NodeFence and (opted-in) Metal3Remediation objects and reconcile each.

:class:`Watcher` watches the custom resources (:class:`~noderemedy_runner.kube.informer.Informer`):
a change wakes the loop at once, and the loop looks every ``poll_interval`` seconds for workers
that are due. It schedules them from the objects the watches hold (:meth:`Watcher._watched`), and lists the
resources themselves every :data:`RESYNC_SECONDS` (the resync, as controller-runtime's informers
have one), or at every look while a watch has not listed yet. Listing at every look and every
change, as before, made the loop a stream of lists of every NodeFence while a rack's NodeFences
wrote their status, on the API server that their own reads and writes were waiting for.

A restarted runner needs nothing but the objects' status to resume. Each custom resource gets at
most one worker thread at a time; it runs the resource's reconciler until the machine waits,
and the watcher schedules the next reconcile after that delay (at most ``max_requeue`` seconds,
so node changes are noticed). Playbook runs are bounded by the executor's
``max_concurrent_runs``; when a custom resource disappears, its in-flight run is canceled (its
cancel event is set; ansible-runner kills the run).

It runs inside ``noderemedy-runner`` (:mod:`noderemedy_runner.cli`; ``--reconcile-only`` runs it
without the detector).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from noderemedy_runner.batches import BATCH_SIZE, SHARED_BATCH_SIZE, BatchingExecutor
from noderemedy_runner.config.fence import CloudDefaults
from noderemedy_runner.config.remedy import ConfigurationSet
from noderemedy_runner.config.selectors import LabelSelector
from noderemedy_runner.executor import RUN_NICE, Executor
from noderemedy_runner.job_batches import JobBatchingExecutor
from noderemedy_runner.jobs import JobExecutor, JobRuns
from noderemedy_runner.kube.configmaps import ConfigMapCache
from noderemedy_runner.kube.resources import CRD, METAL3REMEDIATION, NODEFENCE, KubeIO
from noderemedy_runner.kube.watched import WatchedList, node_facts
from noderemedy_runner.logs import bind
from noderemedy_runner.loops.devicecheck import DeviceChecker
from noderemedy_runner.loops.memory import ERROR_REQUEUE_SECONDS
from noderemedy_runner.loops.metal3 import Metal3RemediationReconciler
from noderemedy_runner.loops.nodefence import NodeFenceReconciler
from noderemedy_runner.loops.remedies import PodRemedies
from noderemedy_runner.machines.health import HealthObserver
from noderemedy_runner.machines.metal3 import opted_in
from noderemedy_runner.machines.nodefence import NodeFencePolicy
from noderemedy_runner.observer import NullObserver, Observer
from noderemedy_runner.playbooks import playbook_root

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (kind, namespace, name)

#: Seconds between full listings of the custom resources while every watch has listed them once;
#: between them, workers are scheduled from the watches' objects (:meth:`Watcher._watched`).
RESYNC_SECONDS = 30.0


def _entry(
    crd: CRD, obj: Mapping[str, Any], selector: LabelSelector | None
) -> tuple[Key, tuple[str, str, bool]] | None:
    """``obj``, of ``crd`` (NodeFence or Metal3Remediation), as the watcher schedules it: its key
    and (resourceVersion, uid, being deleted: ``deletionTimestamp`` set while our finalizer holds
    it); None for a Metal3Remediation that is not opted in (``selector``:
    :func:`~noderemedy_runner.machines.metal3.opted_in`'s). The one rule of :meth:`Watcher._list`
    and :meth:`Watcher._watched`."""
    meta = obj.get("metadata") or {}
    rv, uid = str(meta.get("resourceVersion", "")), str(meta.get("uid", ""))
    if crd == NODEFENCE:
        return ("NodeFence", "", str(meta.get("name"))), (rv, uid, bool(meta.get("deletionTimestamp")))
    try:
        mine = opted_in(meta, selector)
    except ValueError:
        mine = False
    key: Key = ("Metal3Remediation", str(meta.get("namespace")), str(meta.get("name")))
    return (key, (rv, uid, False)) if mine else None


def _split(entries: Mapping[Key, tuple[str, str, bool]]) -> tuple[dict[Key, tuple[str, str]], set[Key]]:
    """:func:`_entry`'s values as :meth:`Watcher.poll` takes them: key → (resourceVersion, uid),
    and the keys being deleted."""
    return {k: (rv, uid) for k, (rv, uid, _d) in entries.items()}, {k for k, e in entries.items() if e[2]}


@dataclass
class _Worker:
    thread: threading.Thread | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    due: float = 0.0
    resource_version: str = ""
    #: the object's ``metadata.uid``: a NodeFence deleted and created again under the same name
    #: (the detector fencing a node again) is a new object, and gets a new worker
    uid: str = ""
    #: the object's ``deletionTimestamp`` was seen (a finalizer holds it): its flow's run, if one
    #: was in flight, was canceled once, and the cleanup then runs with a fresh cancel event
    deleting: bool = False


class Watcher:
    """Reconcile every NodeFence and opted-in Metal3Remediation.

    Args:
        api_client: a kubernetes ``ApiClient``.
        data_dir: ansible-runner private data dirs go under it (one per custom resource).
        max_concurrent_runs: playbook runs in flight at once.
        batch_window: seconds runs of the same fence playbook are gathered into one run of many
            hosts (:class:`~noderemedy_runner.batches.BatchingExecutor`, in-process runs only);
            0: every run on its own.
        batch_size: most hosts in one batch run (its Ansible forks).
        shared_batch_size: most hosts in one batch whose runs switch plugs of one shared PDU or
            FC switch first (its forks stay at most ``batch_size``).
        idle_start: a run that finds its playbook idle, its resource the only one being
            reconciled (:meth:`reconciling`), starts at once, without the window
            (:meth:`~noderemedy_runner.batches.BatchingExecutor.idle`).
        run_deadline: seconds a run may take before it is killed.
        run_nice: niceness added to each playbook run (see
            :func:`~noderemedy_runner.executor.run_niced`; 0: none).
        dry_run: decide and log only; no playbook, no write.
        observer: metrics seam (:class:`~noderemedy_runner.observer.Observer`).
        metal3_selector: label selector for Metal3Remediations without the opt-in annotation
            (None: only annotated ones).
        namespace: where fence ConfigMaps and Secrets live.
        policy: NodeFence tunables (seconds).
        playbook_dir: the collection's ``playbooks/`` (default: the checkout's, else the installed
            collection's must be given).
        collections_path: ``ANSIBLE_COLLECTIONS_PATH`` for the runs; default: when running from a
            checkout, ``<data_dir>/collections`` with a ``noderemedy/core`` symlink to it.
        kubeconfig: path for the modules (``K8S_AUTH_KUBECONFIG``); None: in-cluster.
        poll_interval: seconds between looks for due workers in :meth:`run` (a listing only at
            each resync, :data:`RESYNC_SECONDS`, once the watches have listed).
        max_requeue: longest delay between two reconciles of a live custom resource, seconds.
        idle_requeue: delay after a reconcile with nothing to do (terminal, not opted in), seconds;
            a change of the object's resourceVersion wakes it earlier.
        extra_env: more (non-secret) environment for the runs.
        job_pod: the runner's own pod (:func:`noderemedy_runner.jobs.own_pod`): runs go as Jobs
            from its image (:class:`noderemedy_runner.jobs.JobExecutor`); None: in this process.
            Device checks always run in this process (read-only, and never waiting for a pod).
        configs: the remedy Configurations: their pod remedies run as Jobs in ``namespace``
            (:class:`~noderemedy_runner.loops.remedies.PodRemedies`), and a fence-flow remedy may
            name its executor (``job`` needs ``job_pod``).
        default_executor: ``job`` or ``inprocess``, for runs whose remedy names none (None: ``job``
            when ``job_pod`` is given).
        nodes: the Node watch the guards read (the detector's, when it runs in this process);
            None: :meth:`run` starts one.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        data_dir: Path,
        max_concurrent_runs: int = 4,
        batch_window: float = 0.0,
        batch_size: int = BATCH_SIZE,
        shared_batch_size: int = SHARED_BATCH_SIZE,
        idle_start: bool = True,
        run_deadline: float = 300,
        run_nice: int = RUN_NICE,
        dry_run: bool = False,
        observer: Observer | None = None,
        metal3_selector: LabelSelector | None = None,
        namespace: str = "noderemedy",
        policy: NodeFencePolicy | None = None,
        cloud: CloudDefaults | None = None,
        playbook_dir: Path | None = None,
        collections_path: Path | None = None,
        kubeconfig: Path | None = None,
        poll_interval: float = 0.5,
        max_requeue: float = 2.0,
        idle_requeue: float = 30.0,
        extra_env: dict[str, str] | None = None,
        device_check_interval: float = 0.0,
        job_pod: Mapping[str, Any] | None = None,
        configs: ConfigurationSet | None = None,
        default_executor: str | None = None,
        nodes: WatchedList | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        found_playbooks, found_collections = playbook_root(playbook_dir, self.data_dir)
        collections_path = collections_path or found_collections
        self.observer: Observer = observer or NullObserver()
        self.kube = KubeIO(api_client)
        self.kube.watched_nodes = nodes
        #: the fence configurations, read at every decision of every NodeFence, from a watch
        #: started by :meth:`run` (until it has listed, and without it, each read is a GET)
        self.configmaps = ConfigMapCache(api_client, namespace)
        self.kube.configmaps = self.configmaps
        run_options: dict[str, Any] = {
            "collections_path": collections_path,
            "kubeconfig": kubeconfig,
            "max_concurrent_runs": max_concurrent_runs,
            "run_deadline": run_deadline,
            "extra_env": extra_env,
            "run_nice": run_nice,
        }
        #: device checks stay in this process: read-only, and they must not wait for a pod
        self.local_executor = (
            BatchingExecutor(
                self.data_dir / "runs",
                found_playbooks,
                batch_window=batch_window,
                batch_size=batch_size,
                shared_batch_size=shared_batch_size,
                idle_start=idle_start,
                busy_resources=self.reconciling,
                **run_options,
            )
            if batch_window > 0
            else Executor(self.data_dir / "runs", found_playbooks, **run_options)
        )
        self.executor: Executor = self.local_executor
        self.job_executor: Executor | None = None
        if job_pod is not None:
            # a rack's runs as one Job per batch, as in process one ansible-runner run per batch
            self.job_executor = (
                JobBatchingExecutor(
                    api_client,
                    self.data_dir / "runs",
                    found_playbooks,
                    namespace=namespace,
                    pod=job_pod,
                    batch_window=batch_window,
                    batch_size=batch_size,
                    shared_batch_size=shared_batch_size,
                    idle_start=idle_start,
                    busy_resources=self.reconciling,
                    **run_options,
                )
                if batch_window > 0
                else JobExecutor(
                    api_client,
                    self.data_dir / "runs",
                    found_playbooks,
                    namespace=namespace,
                    pod=job_pod,
                    **run_options,
                )
            )
            self.job_executor.slots = self.local_executor.slots  # one bound on runs in flight
        executors: dict[str, Executor] = {"inprocess": self.local_executor}
        if self.job_executor is not None:
            executors["job"] = self.job_executor
        if default_executor not in (None, *executors):
            raise ValueError(f"default_executor {default_executor!r}: not one of {', '.join(executors)}")
        self.executor = executors[default_executor or ("job" if job_pod is not None else "inprocess")]
        remedies = (
            PodRemedies(JobRuns(api_client, namespace), configs, pod=job_pod, run_deadline=run_deadline)
            if configs is not None
            else None
        )
        self.metal3_selector = metal3_selector
        self.nodefences = NodeFenceReconciler(
            self.kube,
            self.executor,
            namespace=namespace,
            policy=policy or NodeFencePolicy(),
            cloud=cloud,
            observer=self.observer,
            dry_run=dry_run,
            remedies=remedies,
            executors=executors,
        )
        self.metal3 = Metal3RemediationReconciler(
            self.kube,
            self.executor,
            selector=metal3_selector,
            observer=self.observer,
            dry_run=dry_run,
            releases=self.nodefences.releases,
        )
        self.poll_interval = poll_interval
        self.max_requeue = max_requeue
        self.idle_requeue = idle_requeue
        self._workers: dict[Key, _Worker] = {}
        self.device_checker = (
            DeviceChecker(
                api_client,
                self.kube,
                self.local_executor,
                namespace=namespace,
                interval=device_check_interval,
                observer=self.observer if isinstance(self.observer, HealthObserver) else None,
            )
            if device_check_interval > 0 and not dry_run
            else None
        )

    def list_keys(self) -> dict[Key, str]:
        """Every custom resource to reconcile → its resourceVersion."""
        return {key: rv for key, (rv, _uid) in self._list()[0].items()}

    def _list(self) -> tuple[dict[Key, tuple[str, str]], set[Key]]:
        """Every custom resource to reconcile → (resourceVersion, uid), and the NodeFences being
        deleted (``deletionTimestamp`` set while our finalizer holds them), listed now."""
        entries = [
            _entry(crd, obj, self.metal3_selector)
            for crd in (NODEFENCE, METAL3REMEDIATION)
            for obj in self.kube.list_custom(crd)
        ]
        return _split(dict(e for e in entries if e is not None))

    def reconcile_key(self, key: Key, cancel: threading.Event | None = None) -> float | None:
        """Reconcile one custom resource; the delay before the next reconcile (None: none needed).
        Any error (API, configuration) is logged, reported to the observer and gives
        :data:`ERROR_REQUEUE_SECONDS`."""
        kind, namespace, name = key
        resource = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
        try:
            if kind == "NodeFence":
                return self.nodefences.reconcile(name, cancel)
            return self.metal3.reconcile(namespace, name, cancel)
        except Exception as exc:  # one bad object must not stop the others; requeued
            bind(log, resource=resource).warning("%s: %s", type(exc).__name__, exc)
            self.observer.reconcile_error(kind, name, f"{type(exc).__name__}: {exc}")
            return ERROR_REQUEUE_SECONDS

    def reconcile_once(self) -> dict[Key, float | None]:
        """Reconcile every custom resource once, in this thread (runs playbooks inline); returns
        each key's requested delay."""
        return {key: self.reconcile_key(key) for key in sorted(self.list_keys())}

    def reconciling(self) -> int:
        """How many custom resources (NodeFences, Metal3Remediations) are being reconciled now:
        their workers' threads in flight, a run they wait for included. The batching executors
        start a run at once only when its own resource is the only one (one failed node). Read
        from another thread than :meth:`poll`'s: ``list`` copies the workers in one step."""
        return sum(1 for w in list(self._workers.values()) if w.thread is not None and w.thread.is_alive())

    def _start(self, key: Key, worker: _Worker) -> None:
        def body() -> None:
            delay = self.reconcile_key(key, worker.cancel)
            # nothing to do: only a change of the object (resourceVersion) or the idle period wakes it
            wait = self.idle_requeue if delay is None else min(delay, self.max_requeue)
            worker.due = time.monotonic() + max(wait, 0.05)

        worker.thread = threading.Thread(target=body, name=f"reconcile-{key[0]}-{key[2]}", daemon=True)
        worker.thread.start()

    def poll(self, listing: tuple[dict[Key, tuple[str, str]], set[Key]] | None = None) -> None:
        """One round of :meth:`run`: start due workers, cancel those whose resource is gone, and
        cancel the fencing flow's run in flight of a NodeFence being deleted: the deletion's cleanup
        (loops/deletion.py) takes over from where the flow stopped, with a fresh cancel event.

        A resource is gone when its name is no longer listed or names another object (another
        ``uid``: deleted and created again between two listings). Its worker is canceled and,
        once its thread has ended, dropped with the reconciler's memory of the name; the new
        object then gets a worker of its own, never the old one's canceled event.

        ``listing``: the resources as the watches hold them (:meth:`_watched`), in :meth:`_list`'s
        shape; None: listed now."""
        keys, deleting = listing if listing is not None else self._list()
        now = time.monotonic()
        for key, worker in list(self._workers.items()):
            if key not in keys or keys[key][1] != worker.uid:
                worker.cancel.set()
                if worker.thread is None or not worker.thread.is_alive():
                    del self._workers[key]
                    if key[0] == "NodeFence":
                        self.nodefences.forget(key[2])
                    else:
                        self.metal3.forget(key[1], key[2])
        for key, (rv, uid) in keys.items():
            worker = self._workers.setdefault(key, _Worker(uid=uid))
            if worker.uid != uid:  # the old object's worker is still ending; next round
                continue
            busy = worker.thread is not None and worker.thread.is_alive()
            if key in deleting and not worker.deleting:
                worker.deleting = True
                if busy:
                    worker.cancel.set()
            if busy:
                continue
            if worker.deleting and worker.cancel.is_set():
                worker.cancel = threading.Event()
            if now >= worker.due or rv != worker.resource_version:
                worker.resource_version = rv
                self._start(key, worker)

    def _watch(self, crd: CRD, wake: threading.Event) -> WatchedList:
        """A watch of every ``crd`` object that sets ``wake`` at every list and change, so a new or
        changed object is reconciled at once; the loop lists the objects themselves at each
        resync (:data:`RESYNC_SECONDS`). The NodeFences' watch also serves the guards
        (:attr:`KubeIO.watched_nodefences
        <noderemedy_runner.kube.resources.KubeIO.watched_nodefences>`). A kind whose CRD is not
        installed is looked for again every 30 s."""
        group, version, plural, _kind = crd

        def list_call(**kw: Any) -> Any:
            return self.kube.custom.list_cluster_custom_object(group, version, plural, **kw)

        def changed(*_: object) -> None:
            wake.set()

        return WatchedList(crd[3], list_call, on_reset=changed, on_event=changed)

    def _watched(
        self, watches: Mapping[CRD, WatchedList]
    ) -> tuple[dict[Key, tuple[str, str]], set[Key]] | None:
        """The resources as the watches hold them (:func:`_entry` of each object), in
        :meth:`_list`'s shape, once every watch has listed its kind (a kind not installed has
        none); None before, and after a failed watch until it has listed again."""
        entries: dict[Key, tuple[str, str, bool]] = {}
        for crd, objects in watches.items():
            items = objects.items()
            if items is None:
                return None
            entries.update(e for e in (_entry(crd, o, self.metal3_selector) for o in items) if e is not None)
        return _split(entries)

    def _start_watches(self, stop: threading.Event, wake: threading.Event) -> dict[CRD, WatchedList]:
        """Start the watches of :meth:`run` in daemon threads: one per custom resource kind
        (:meth:`_watch`; the NodeFences' also serve the guards), and a Node watch for the guards
        only when none was given (``nodes``: the detector's, so a runner keeps one). Returns the
        custom resources' watches, by kind."""
        watches: dict[CRD, WatchedList] = {
            crd: self._watch(crd, wake) for crd in (NODEFENCE, METAL3REMEDIATION)
        }
        self.kube.watched_nodefences = watches[NODEFENCE]
        for crd, objects in watches.items():
            threading.Thread(target=objects.run, args=(stop,), name=f"watch-{crd[2]}", daemon=True).start()
        nodes = self.kube.watched_nodes
        if nodes is None:  # no detector in this process: a Node watch of our own for the guards
            nodes = self.kube.watched_nodes = WatchedList("nodes", self.kube.core.list_node, keep=node_facts)
            threading.Thread(target=nodes.run, args=(stop,), name="watch-nodes", daemon=True).start()
        return watches

    def run(self, stop: threading.Event) -> None:
        """Reconcile until ``stop`` is set: a :meth:`poll` every ``poll_interval`` seconds, and at
        once when a watch reports a NodeFence or Metal3Remediation change; the resources listed
        every :data:`RESYNC_SECONDS` (and while a watch has not listed yet), between them taken
        from the watches (:meth:`_watched`). Then cancel in-flight
        runs (the device check's too) and wait for the workers and the device check (at most
        30 s; a canceled run ends within a second, its processes killed)."""
        wake = threading.Event()
        checker: threading.Thread | None = None
        if self.device_checker is not None:  # Pacemaker-style monitor of every fence device
            checker = threading.Thread(
                target=self.device_checker.run, args=(stop,), name="device-check", daemon=True
            )
            checker.start()
        watches = self._start_watches(stop, wake)
        threading.Thread(
            target=self.configmaps.run, args=(stop,), name="watch-configmaps", daemon=True
        ).start()
        listed = -RESYNC_SECONDS
        while not stop.is_set():
            try:
                now = time.monotonic()
                watched = self._watched(watches) if now - listed < RESYNC_SECONDS else None
                self.poll(watched)
                if watched is None:
                    listed = now
            except Exception as exc:  # API unreachable etc.: keep polling
                log.warning("listing custom resources: %s: %s", type(exc).__name__, exc)
                self.observer.reconcile_error("Watcher", "", f"{type(exc).__name__}: {exc}")
            if wake.wait(self.poll_interval):
                wake.clear()
        for worker in self._workers.values():
            worker.cancel.set()
        deadline = time.monotonic() + 30
        threads = [w.thread for w in self._workers.values() if w.thread is not None]
        for thread in [*threads, *([checker] if checker is not None else [])]:
            thread.join(max(0.0, deadline - time.monotonic()))
