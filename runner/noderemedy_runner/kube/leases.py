"""Coordination with ``coordination.k8s.io/v1`` Leases: leader election between runner replicas
(DESIGN.md invariant 2, "one active watcher") and a per-node Lease while a remediation is in
flight ("one remediation in flight per node"), visible to other remediators and our replicas.

Leader election is the kubernetes client's ``kubernetes.leaderelection.LeaderElection`` with its
``LeaseLock``. Its quirks (kubernetes 37.x, read in ``leaderelection.py`` / ``leaselock.py``),
and the minimal wrapper :class:`LeaderElector` adds for them:

* ``LeaseLock`` builds ``client.CoordinationV1Api()`` on the *default* client configuration and
  calls it without a timeout: the wrapper points it at the runner's ``ApiClient`` through
  :func:`noderemedy_runner.kube.client.api` (a timeout on every call; the library's own
  ``ApiException`` handling kept).
* ``LeaderElection.run()`` has no way to stop: ``acquire()`` and ``renew_loop()`` loop forever
  with ``time.sleep``. The wrapper overrides both to wait on a ``threading.Event``.
* No release on cancel (client-go's ``ReleaseOnCancel``): on a clean stop the wrapper clears
  ``holderIdentity`` and sets ``leaseDurationSeconds: 1`` (what client-go writes), so a
  follower -- whose ``LeaseLock.get`` then sees no holder -- takes over at its next retry
  instead of waiting out the lease. It releases only after ``on_stopped`` returned (the work
  stopped, in-flight runs cancelled), never before: a follower must not start while this
  replica still acts. Renewal has ended by then, so a stop slower than the rest of the lease
  lets a follower in early: the CLI's stop cancels runs at once (about 1 s in the lab) and joins its
  threads for at most 10 s; when ``on_stopped`` says the work has not stopped by then, the Lease
  is not released but left to expire.
* ``electionconfig.Config`` calls ``sys.exit`` on bad timings: the wrapper validates first and
  raises ValueError.
* A follower takes over ``lease_duration`` seconds after it last *saw the record change*
  (local clock), so after a leader dies hard (kill -9) the takeover comes at most
  ``lease_duration + retry_period`` seconds after the leader's last renewal.
* When renewal fails for ``renew_deadline`` seconds the leader stops leading: the wrapper calls
  ``on_stopped`` and the CLI exits (as client-go controllers do) -- it must not keep acting.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from noderemedy_runner.kube import retry
from noderemedy_runner.kube.client import api
from noderemedy_runner.kube.errors import Conflict, KubeError, NotFound

log = logging.getLogger("noderemedy_runner.kube.leases")

#: Label on every per-node Lease the runner holds; the Lease's node is in :data:`NODE_ANNOTATION`.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "noderemedy-runner"
NODE_ANNOTATION = "remediation.noderemedy.io/node"


class _StoppableElection(leaderelection.LeaderElection):
    """``LeaderElection`` whose loops end when ``stop`` is set (see module docs)."""

    def __init__(self, config: Any, stop: threading.Event) -> None:
        super().__init__(config)  # type: ignore[no-untyped-call]
        self.stop = stop

    def acquire(self) -> bool:
        while not self.stop.is_set():
            try:
                if self.try_acquire_or_renew():  # type: ignore[no-untyped-call]
                    return True
            except Exception as exc:  # the library raises on transport errors
                log.warning("leader election: acquire attempt failed: %s", exc)
            self.stop.wait(self.election_config.retry_period)
        return False

    def renew_loop(self, leading_failed: threading.Event | None = None) -> None:
        retry = self.election_config.retry_period
        deadline_s = self.election_config.renew_deadline
        while not self.stop.is_set():
            if leading_failed is not None and leading_failed.is_set():
                return
            deadline = time.monotonic() + deadline_s
            ok = False
            while time.monotonic() < deadline and not self.stop.is_set():
                try:
                    ok = self.try_acquire_or_renew()  # type: ignore[no-untyped-call]
                except Exception as exc:
                    log.warning("leader election: renew attempt failed: %s", exc)
                    ok = False
                if ok:
                    break
                self.stop.wait(retry)
            if self.stop.is_set():
                return
            if not ok:
                return
            self.stop.wait(retry)


class LeaderElector:
    """Leader election on Lease ``namespace/name`` for ``identity``.

    Args:
        api_client: the runner's ``kubernetes.client.ApiClient``.
        name, namespace: the Lease (created when missing).
        identity: this replica's unique id (e.g. pod name + uuid).
        lease_duration, renew_deadline, retry_period: seconds, as client-go
            (``lease_duration > renew_deadline > 1.2 * retry_period >= 1.2``). Defaults 15/10/2.
        on_started: called in a thread when this replica becomes leader; it should run until
            :attr:`leading` is cleared.
        on_stopped: called when leadership ends (clean stop, or lost), before the Lease is
            released; it returns whether the work has stopped (None counts as stopped). False
            keeps the Lease: it expires after ``lease_duration`` instead of being handed over
            while this replica may still act.

    Raises ValueError on bad timings.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        on_started: Callable[[], None],
        on_stopped: Callable[[], bool | None] | None = None,
        lease_duration: int = 15,
        renew_deadline: int = 10,
        retry_period: int = 2,
    ) -> None:
        if retry_period < 1:
            raise ValueError(f"retry_period {retry_period} s must be at least 1")
        if renew_deadline <= 1.2 * retry_period:
            raise ValueError(
                f"renew_deadline {renew_deadline} s must exceed 1.2 x retry_period {retry_period} s"
            )
        if lease_duration <= renew_deadline:
            raise ValueError(
                f"lease_duration {lease_duration} s must exceed renew_deadline {renew_deadline} s"
            )
        self.api = api(api_client, client.CoordinationV1Api)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.retry_period = retry_period
        self.lost = False
        #: set while this replica leads; cleared before ``on_stopped`` runs.
        self.leading = threading.Event()
        self._on_started = on_started
        self._on_stopped: Callable[[], bool | None] = on_stopped or (lambda: None)
        lock = LeaseLock(name, namespace, identity)  # type: ignore[no-untyped-call]
        # quirk: LeaseLock uses the default configuration and no timeout; it catches ApiException
        lock.api_instance = api(api_client, client.CoordinationV1Api, classify_errors=False)
        self._lock = lock
        self._config = electionconfig.Config(  # type: ignore[no-untyped-call]
            lock=lock,
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            onstarted_leading=self._started,
            onstopped_leading=lambda: None,
        )

    def _started(self) -> None:
        self.leading.set()
        self._on_started()

    def run(self, stop: threading.Event) -> bool:
        """Campaign until ``stop`` is set; lead while elected. Returns True after a clean stop
        (the Lease released if held), False when leadership was lost (renewal failed for
        ``renew_deadline`` seconds, or ``on_started`` raised)."""
        election = _StoppableElection(self._config, stop)
        if not election.acquire():
            return True
        log.info("leader election: %s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
        failed = threading.Event()
        threading.Thread(target=election.run_onstarted_leading, args=(failed,), daemon=True).start()
        election.renew_loop(failed)
        clean = stop.is_set() and not failed.is_set()
        self.leading.clear()
        if not clean:
            self.lost = True
            log.error("leader election: %s lost the Lease %s/%s", self.identity, self.namespace, self.name)
        # stop acting first, then give the Lease up: releasing first would let a follower start
        # while this replica's runs are still being cancelled (invariant 2: one active watcher)
        stopped = self._on_stopped() is not False
        if clean and stopped:
            self.release()
        elif clean:
            log.warning(
                "leader election: %s keeps the Lease %s/%s until it expires: its work has not stopped",
                self.identity,
                self.namespace,
                self.name,
            )
        return clean

    def release(self) -> bool:
        """Give the Lease up if this replica holds it (client-go ReleaseOnCancel: no holder,
        ``leaseDurationSeconds: 1``). Returns whether it was released; never raises on API errors."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return False
            now = datetime.now(UTC)
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = now
            lease.spec.acquire_time = now
            self.api.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("leader election: %s released the Lease %s/%s", self.identity, self.namespace, self.name)
            return True
        except KubeError as exc:
            log.warning("leader election: release of %s/%s failed: %s", self.namespace, self.name, exc)
            return False


# --- per-node Leases ------------------------------------------------------------------------


def node_lease_name(node: str) -> str:
    """``noderemedy-<node>``; names over 253 characters are cut and suffixed with 8 hex digits of
    the node name's SHA-256."""
    name = f"noderemedy-{node}"
    if len(name) > 253:
        name = f"{name[:244]}-{hashlib.sha256(node.encode()).hexdigest()[:8]}"
    return name


@dataclass(frozen=True)
class NodeLease:
    """A per-node Lease: ``node``, ``holder`` (holderIdentity, None when released), ``renewed``
    (renewTime, seconds), ``duration`` (leaseDurationSeconds), ``resource_version``."""

    node: str
    holder: str | None
    renewed: float | None
    duration: int
    resource_version: str = ""

    def expired(self, now: float) -> bool:
        """Whether nobody holds it at ``now`` (no holder, or not renewed for ``duration`` s)."""
        return self.holder is None or self.renewed is None or self.renewed + self.duration < now


def _lease_from(obj: Any, node: str) -> NodeLease:
    spec = obj.spec
    renewed = spec.renew_time.timestamp() if spec is not None and spec.renew_time is not None else None
    return NodeLease(
        node=node,
        holder=spec.holder_identity if spec is not None else None,
        renewed=renewed,
        duration=int(spec.lease_duration_seconds or 0) if spec is not None else 0,
        resource_version=obj.metadata.resource_version or "",
    )


#: Holder identities of runner replicas start with this: a new leader takes over the per-node
#: Leases of the replica it replaced instead of waiting them out.
HOLDER_PREFIX = "noderemedy-runner/"


class NodeLeases:
    """Per-node Leases ``<namespace>/noderemedy-<node>`` held by ``holder`` (which must start with
    :data:`HOLDER_PREFIX`) while a remediation of the node is in flight. ``duration``:
    leaseDurationSeconds (default 300); the detector renews each held Lease once half of it has
    passed and deletes it when the remediation ends. Raises ValueError on a bad ``holder``."""

    def __init__(
        self, api_client: client.ApiClient, namespace: str, holder: str, duration: int = 300
    ) -> None:
        if not holder.startswith(HOLDER_PREFIX):
            raise ValueError(f"holder {holder!r} must start with {HOLDER_PREFIX!r}")
        self.api = api(api_client, client.CoordinationV1Api)
        self.namespace = namespace
        self.holder = holder
        self.duration = duration

    def ours(self, holder: str | None) -> bool:
        """Whether ``holder`` is a runner replica (this one or another)."""
        return holder is not None and holder.startswith(HOLDER_PREFIX)

    def get(self, node: str) -> NodeLease | None:
        """The node's Lease, or None when there is none. Raises KubeError on other errors."""
        try:
            obj = self.api.read_namespaced_lease(node_lease_name(node), self.namespace)
        except NotFound:
            return None
        return _lease_from(obj, node)

    def list(self) -> dict[str, NodeLease]:
        """Every per-node Lease in the namespace (ours and other replicas'), by node."""
        out: dict[str, NodeLease] = {}
        for obj in self.api.list_namespaced_lease(
            self.namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        ).items:
            node = ((obj.metadata.annotations if obj.metadata else None) or {}).get(NODE_ANNOTATION)
            if node:
                out[node] = _lease_from(obj, node)
        return out

    def _body(self, node: str, now: datetime, acquire: datetime, rv: str | None = None) -> client.V1Lease:
        meta = client.V1ObjectMeta(
            name=node_lease_name(node),
            labels={MANAGED_BY_LABEL: MANAGED_BY},
            annotations={NODE_ANNOTATION: node},
            resource_version=rv,
        )
        spec = client.V1LeaseSpec(
            holder_identity=self.holder,
            lease_duration_seconds=self.duration,
            acquire_time=acquire,
            renew_time=now,
        )
        return client.V1Lease(metadata=meta, spec=spec)

    def acquire(self, node: str) -> tuple[bool, str | None]:
        """Take the node's Lease: create it, or take it over when expired or already ours.
        Returns (held, holder): ``(False, other)`` when another holder has it. A create that
        loses a race with a delete is tried again (:func:`noderemedy_runner.kube.retry.call`,
        at most 3 tries); a takeover that loses a race (409) reports the winner. Raises
        KubeError on other API errors."""
        return retry.call(lambda: self._acquire(node), tries=3, delay=0.05, retry_on={"not_found"})

    def _acquire(self, node: str) -> tuple[bool, str | None]:
        now = datetime.now(UTC)
        try:
            self.api.create_namespaced_lease(self.namespace, self._body(node, now, now))
            return True, self.holder
        except Conflict:
            pass
        current = self.get(node)
        if current is None:  # deleted between the create and the read: try again
            raise NotFound(f"Lease {node_lease_name(node)} vanished", "not_found", 404)
        if not self.ours(current.holder) and not current.expired(now.timestamp()):
            return False, current.holder
        try:
            self.api.replace_namespaced_lease(
                node_lease_name(node), self.namespace, self._body(node, now, now, current.resource_version)
            )
        except Conflict:
            latest = self.get(node)
            return False, latest.holder if latest else None
        return True, self.holder

    def renew(self, lease: NodeLease) -> bool:
        """Renew a Lease a runner replica holds, as this holder (``renewTime`` = now). False when
        another remediator holds it or it changed meanwhile (404/409)."""
        if not self.ours(lease.holder):
            return False
        now = datetime.now(UTC)
        try:
            self.api.replace_namespaced_lease(
                node_lease_name(lease.node),
                self.namespace,
                self._body(lease.node, now, now, lease.resource_version),
            )
        except (NotFound, Conflict):
            return False
        return True

    def release(self, node: str) -> bool:
        """Delete the node's Lease if a runner replica holds it (precondition on its resourceVersion).
        Returns whether it was deleted."""
        current = self.get(node)
        if current is None or not self.ours(current.holder):
            return False
        try:
            self.api.delete_namespaced_lease(
                node_lease_name(node),
                self.namespace,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=current.resource_version)
                ),
            )
        except (NotFound, Conflict):
            return False
        return True


__all__ = ["HOLDER_PREFIX", "LeaderElector", "NodeLease", "NodeLeases", "node_lease_name"]
