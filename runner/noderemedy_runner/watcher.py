"""The watcher loop: find NodeFence and (opted-in) Metal3Remediation objects and reconcile each.

:class:`Watcher` polls the API every ``poll_interval`` seconds (short polling rather than watches:
simple, and a restarted runner needs nothing but the objects' status to resume). Each custom
resource gets at most one worker thread at a time; it runs the resource's reconciler until the
machine waits, and the watcher schedules the next reconcile after that delay (at most
``max_requeue`` seconds, so node changes are noticed). Playbook runs are bounded by the
executor's ``max_concurrent_runs``; when a custom resource disappears, its in-flight run is
canceled (its cancel event is set; ansible-runner kills the run).

Minimal entry point for tests and by hand (the real CLI is ``noderemedy-runner``)::

    python -m noderemedy_runner.watcher --kubeconfig K --data-dir D [--namespace noderemedy] ...
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from kubernetes import client, config

from noderemedy_runner.devicecheck import DeviceChecker
from noderemedy_runner.executor import RUN_NICE, Executor, link_collection
from noderemedy_runner.health import HealthObserver
from noderemedy_runner.kubeio import METAL3REMEDIATION, NODEFENCE, KubeIO
from noderemedy_runner.logs import bind
from noderemedy_runner.logs import setup as setup_logs
from noderemedy_runner.metal3 import LabelSelector, opted_in
from noderemedy_runner.nodefence import NodeFencePolicy
from noderemedy_runner.observe import NullObserver, Observer
from noderemedy_runner.reconcile import (
    ERROR_REQUEUE_SECONDS,
    Metal3RemediationReconciler,
    NodeFenceReconciler,
)

log = logging.getLogger(__name__)

#: The checkout this package runs from, when it is one (the collection root: playbooks/, roles/).
CHECKOUT_ROOT = Path(__file__).resolve().parents[2]

Key = tuple[str, str, str]  # (kind, namespace, name)


def default_collection_root() -> Path | None:
    """The checkout to use as ``noderemedy.core`` when running from a source tree, else None
    (the collection is installed, as in the pod image)."""
    root = CHECKOUT_ROOT
    return root if (root / "galaxy.yml").is_file() and (root / "playbooks").is_dir() else None


@dataclass
class _Worker:
    thread: threading.Thread | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    due: float = 0.0
    resource_version: str = ""


class Watcher:
    """Reconcile every NodeFence and opted-in Metal3Remediation.

    Args:
        api_client: a kubernetes ``ApiClient``.
        data_dir: ansible-runner private data dirs go under it (one per custom resource).
        max_concurrent_runs: playbook runs in flight at once.
        run_deadline: seconds a run may take before it is killed.
        run_nice: niceness added to each playbook run (see
            :func:`~noderemedy_runner.executor.run_niced`; 0: none).
        dry_run: decide and log only; no playbook, no write.
        observer: metrics seam (:class:`~noderemedy_runner.observe.Observer`).
        metal3_selector: label selector for Metal3Remediations without the opt-in annotation
            (None: only annotated ones).
        namespace: where fence ConfigMaps and Secrets live.
        policy: NodeFence tunables (seconds).
        playbook_dir: the collection's ``playbooks/`` (default: the checkout's, else the installed
            collection's must be given).
        collections_path: ``ANSIBLE_COLLECTIONS_PATH`` for the runs; default: when running from a
            checkout, ``<data_dir>/collections`` with a ``noderemedy/core`` symlink to it.
        kubeconfig: path for the modules (``K8S_AUTH_KUBECONFIG``); None: in-cluster.
        poll_interval: seconds between listings in :meth:`run`.
        max_requeue: longest delay between two reconciles of a live custom resource, seconds.
        idle_requeue: delay after a reconcile with nothing to do (terminal, not opted in), seconds;
            a change of the object's resourceVersion wakes it earlier.
        extra_env: more (non-secret) environment for the runs.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        data_dir: Path,
        max_concurrent_runs: int = 4,
        run_deadline: float = 300,
        run_nice: int = RUN_NICE,
        dry_run: bool = False,
        observer: Observer | None = None,
        metal3_selector: LabelSelector | None = None,
        namespace: str = "noderemedy",
        policy: NodeFencePolicy | None = None,
        playbook_dir: Path | None = None,
        collections_path: Path | None = None,
        kubeconfig: Path | None = None,
        poll_interval: float = 0.5,
        max_requeue: float = 2.0,
        idle_requeue: float = 30.0,
        extra_env: dict[str, str] | None = None,
        device_check_interval: float = 0.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        root = default_collection_root()
        if playbook_dir is None:
            if root is None:
                raise ValueError("playbook_dir is required when not running from a checkout")
            playbook_dir = root / "playbooks"
        if collections_path is None and root is not None:
            collections_path = link_collection(self.data_dir / "collections", root)
        self.observer: Observer = observer or NullObserver()
        self.kube = KubeIO(api_client)
        self.executor = Executor(
            self.data_dir / "runs",
            playbook_dir,
            collections_path=collections_path,
            kubeconfig=kubeconfig,
            max_concurrent_runs=max_concurrent_runs,
            run_deadline=run_deadline,
            extra_env=extra_env,
            run_nice=run_nice,
        )
        self.metal3_selector = metal3_selector
        self.nodefences = NodeFenceReconciler(
            self.kube,
            self.executor,
            namespace=namespace,
            policy=policy or NodeFencePolicy(),
            observer=self.observer,
            dry_run=dry_run,
        )
        self.metal3 = Metal3RemediationReconciler(
            self.kube, self.executor, selector=metal3_selector, observer=self.observer, dry_run=dry_run
        )
        self.poll_interval = poll_interval
        self.max_requeue = max_requeue
        self.idle_requeue = idle_requeue
        self._workers: dict[Key, _Worker] = {}
        self.device_checker = (
            DeviceChecker(
                api_client,
                self.kube,
                self.executor,
                namespace=namespace,
                interval=device_check_interval,
                observer=self.observer if isinstance(self.observer, HealthObserver) else None,
            )
            if device_check_interval > 0 and not dry_run
            else None
        )

    def list_keys(self) -> dict[Key, str]:
        """Every custom resource to reconcile → its resourceVersion."""
        out: dict[Key, str] = {}
        for obj in self.kube.list_custom(NODEFENCE):
            meta = obj.get("metadata") or {}
            out[("NodeFence", "", str(meta.get("name")))] = str(meta.get("resourceVersion", ""))
        for obj in self.kube.list_custom(METAL3REMEDIATION):
            meta = obj.get("metadata") or {}
            try:
                mine = opted_in(meta, self.metal3_selector)
            except ValueError:
                mine = False
            if mine:
                key = ("Metal3Remediation", str(meta.get("namespace")), str(meta.get("name")))
                out[key] = str(meta.get("resourceVersion", ""))
        return out

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
        except Exception as exc:  # noqa: BLE001 - one bad object must not stop the others; requeued
            bind(log, resource=resource).warning("%s: %s", type(exc).__name__, exc)
            self.observer.reconcile_error(kind, name, f"{type(exc).__name__}: {exc}")
            return ERROR_REQUEUE_SECONDS

    def reconcile_once(self) -> dict[Key, float | None]:
        """Reconcile every custom resource once, in this thread (runs playbooks inline); returns
        each key's requested delay."""
        return {key: self.reconcile_key(key) for key in sorted(self.list_keys())}

    def _start(self, key: Key, worker: _Worker) -> None:
        def body() -> None:
            delay = self.reconcile_key(key, worker.cancel)
            # nothing to do: only a change of the object (resourceVersion) or the idle period wakes it
            wait = self.idle_requeue if delay is None else min(delay, self.max_requeue)
            worker.due = time.monotonic() + max(wait, 0.05)

        worker.thread = threading.Thread(target=body, name=f"reconcile-{key[0]}-{key[2]}", daemon=True)
        worker.thread.start()

    def poll(self) -> None:
        """One round of :meth:`run`: start due workers, cancel those whose resource is gone."""
        keys = self.list_keys()
        now = time.monotonic()
        for key, worker in list(self._workers.items()):
            if key not in keys:
                worker.cancel.set()
                if worker.thread is None or not worker.thread.is_alive():
                    del self._workers[key]
                    if key[0] == "NodeFence":
                        self.nodefences.forget(key[2])
                    else:
                        self.metal3.forget(key[1], key[2])
        for key, rv in keys.items():
            worker = self._workers.setdefault(key, _Worker())
            busy = worker.thread is not None and worker.thread.is_alive()
            if busy:
                continue
            if now >= worker.due or rv != worker.resource_version:
                worker.resource_version = rv
                self._start(key, worker)

    def _watch(self, crd: tuple[str, str, str, str], stop: threading.Event, wake: threading.Event) -> None:
        """Set ``wake`` on every change of a ``crd`` object (one watch stream per kind, renewed
        every minute and after errors), so a new or changed object is reconciled at once; the
        periodic :meth:`poll` stays the resync and the source of truth (the events carry nothing
        else). A kind whose CRD is not installed is retried every ``poll_interval`` seconds."""
        from kubernetes import watch  # noqa: PLC0415 - only the watcher thread needs it

        group, version, plural, _kind = crd
        while not stop.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for _event in w.stream(  # type: ignore[no-untyped-call]
                    self.kube.custom.list_cluster_custom_object,
                    group,
                    version,
                    plural,
                    timeout_seconds=60,
                    _request_timeout=75,
                ):
                    wake.set()
                    if stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - not installed, API unreachable: the poll carries on
                stop.wait(max(self.poll_interval, 1.0))
            finally:
                w.stop()  # type: ignore[no-untyped-call]

    def run(self, stop: threading.Event) -> None:
        """Reconcile until ``stop`` is set: a full :meth:`poll` every ``poll_interval`` seconds, and
        at once when a watch reports a NodeFence or Metal3Remediation change. Then cancel in-flight
        runs and wait for the workers (at most 30 s)."""
        wake = threading.Event()
        if self.device_checker is not None:  # Pacemaker-style monitor of every fence device
            threading.Thread(
                target=self.device_checker.run, args=(stop,), name="device-check", daemon=True
            ).start()
        for crd in (NODEFENCE, METAL3REMEDIATION):
            threading.Thread(
                target=self._watch, args=(crd, stop, wake), name=f"watch-{crd[2]}", daemon=True
            ).start()
        while not stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - API unreachable etc.: keep polling
                log.warning("listing custom resources: %s: %s", type(exc).__name__, exc)
                self.observer.reconcile_error("Watcher", "", f"{type(exc).__name__}: {exc}")
            if wake.wait(self.poll_interval):
                wake.clear()
        for worker in self._workers.values():
            worker.cancel.set()
        deadline = time.monotonic() + 30
        for worker in self._workers.values():
            if worker.thread is not None:
                worker.thread.join(max(0.0, deadline - time.monotonic()))


def main(argv: list[str] | None = None) -> int:
    """``python -m noderemedy_runner.watcher``: run a :class:`Watcher` until SIGTERM/SIGINT."""
    p = argparse.ArgumentParser(
        prog="python -m noderemedy_runner.watcher", description=__doc__.split("\n")[0]
    )
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig (default: in-cluster)")
    p.add_argument("--data-dir", type=Path, required=True, help="ansible-runner private data dirs")
    p.add_argument("--namespace", default="noderemedy", help="namespace of fence ConfigMaps and Secrets")
    p.add_argument("--max-concurrent-runs", type=int, default=4)
    p.add_argument("--run-deadline", type=float, default=300.0, help="seconds per run")
    p.add_argument("--grace-seconds", type=float, default=60.0)
    p.add_argument("--step-retries", type=int, default=2)
    p.add_argument("--retry-delay", type=float, default=10.0)
    p.add_argument("--recovery-timeout", type=float, default=600.0)
    p.add_argument("--max-restarts", type=int, default=1)
    p.add_argument("--restart-delay", type=float, default=30.0)
    p.add_argument(
        "--max-power-fencing", type=int, default=1, help="nodes in their PowerManagement step at once"
    )
    p.add_argument("--poll-interval", type=float, default=0.5)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument(
        "--device-check-interval",
        type=float,
        default=300.0,
        help="seconds between read-only checks of every fence device (0: off)",
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="K=V", help="extra (non-secret) env for runs"
    )
    p.add_argument("--log-level", default="info", help="debug, info, warning or error (JSON lines)")
    args = p.parse_args(argv)
    try:
        setup_logs(args.log_level.lower())
    except ValueError as exc:
        p.error(str(exc))
    if args.kubeconfig is not None:
        api = config.new_client_from_config(str(args.kubeconfig))  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        api = client.ApiClient()
    policy = NodeFencePolicy(
        grace_seconds=args.grace_seconds,
        step_retries=args.step_retries,
        retry_delay_seconds=args.retry_delay,
        recovery_timeout_seconds=args.recovery_timeout,
        max_restarts=args.max_restarts,
        restart_delay_seconds=args.restart_delay,
        max_power_fencing=args.max_power_fencing,
    )
    extra_env = dict(item.split("=", 1) for item in args.env)
    watcher = Watcher(
        api,
        data_dir=args.data_dir,
        max_concurrent_runs=args.max_concurrent_runs,
        run_deadline=args.run_deadline,
        dry_run=args.dry_run,
        namespace=args.namespace,
        policy=policy,
        kubeconfig=args.kubeconfig,
        poll_interval=args.poll_interval,
        extra_env=extra_env,
        device_check_interval=args.device_check_interval,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("watching NodeFence and Metal3Remediation objects; data dir %s", args.data_dir)
    watcher.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
