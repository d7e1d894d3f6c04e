"""The leader keeps its own replicas spread over nodes: the I/O of
:mod:`noderemedy_runner.machines.spread` (the rule, and why: a standby that shares the leader's
node fails with it).

Every :data:`PERIOD` seconds, while this replica leads, :class:`Respreader` lists the runner's
pods (by its own pod's ``app.kubernetes.io/name`` label, in its own namespace) and, only when the
Deployment is settled and some node hosts two of them, the nodes its ``nodeSelector`` selects; when
the machine names a pod, it asks the Eviction API (``policy/v1`` Eviction) for it, so the
PodDisruptionBudget ``noderemedy-runner`` is honoured: a refusal (429) is logged and asked again
at the next period. After an eviction it waits for the Deployment to settle again (the evicted
pod gone, as many pods as before, every one Ready; at most :data:`MAX_BACKOFF` seconds) before
deciding again; when an eviction did not
spread the replicas (the replacement came back to a crowded node), the next one waits twice as
long as the last, up to :data:`MAX_BACKOFF` seconds.

What it writes: the Eviction, a Normal Event ``ReplicaRespread`` on the evicted pod, the log line
``respread: evicting runner replica ...`` and the counter ``noderemedy_replica_respreads_total``
(``result``: ``evicted``, ``refused``, ``failed``). It runs only in a pod (``POD_NAME`` and
``POD_NAMESPACE``, the Deployment's downward API) with ``--leader-elect``; ``--no-respread`` turns it
off. RBAC: ``list`` pods and nodes, ``create`` pods/eviction and events (deploy/rbac).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from kubernetes import client

from noderemedy_runner.kube.client import api as kapi
from noderemedy_runner.kube.client import own_pod_name as in_cluster
from noderemedy_runner.kube.errors import KubeError, NotFound
from noderemedy_runner.kube.events import EventRecorder
from noderemedy_runner.kube.resources import read_json
from noderemedy_runner.machines.spread import (
    Eviction,
    Placement,
    RunnerPod,
    choose_eviction,
    crowded_nodes,
    node_view,
    placement_of,
    pod_view,
    settled,
)

log = logging.getLogger(__name__)

#: Seconds between two looks at the replicas' placement.
PERIOD = 10.0
#: Most seconds between two evictions when evicting does not spread the replicas (the scheduler
#: put the replacement back on a crowded node: a constraint the machine does not read).
MAX_BACKOFF = 600.0
#: (connect, read) seconds of each call: short, so that a stop (at most 10 s for every thread,
#: ``cli.STOP_JOIN_SECONDS``) never waits for a slow answer here.
TIMEOUT = (3.0, 5.0)
#: The label whose value the runner's pods share (deploy/runner/deployment.yaml).
NAME_LABEL = "app.kubernetes.io/name"
#: Reason of the Event on the evicted pod.
REASON = "ReplicaRespread"


class RespreadObserver(Protocol):
    """Metrics of the loop (:class:`noderemedy_runner.metrics.Metrics` implements it)."""

    def replica_respread(self, result: str) -> None:
        """An eviction was asked for: ``evicted``, ``refused`` (429: the PDB) or ``failed``."""


class NullRespreadObserver:
    """Observes nothing."""

    def replica_respread(self, result: str) -> None:
        """Nothing."""


class Respreader:
    """Evicts a runner replica that shares a node while an eligible node hosts none (module docs).

    Args:
        api: the runner's ApiClient.
        pod_name: this replica's pod (the leader's own: never evicted).
        namespace: its namespace (the runner's pods and the Events).
        observer: metrics.
        events: the Event recorder (None: one of its own, writing in the background).
        dry_run: decide and log (each decision once), evict nothing.
        period: seconds between looks.
        clock: monotonic seconds (injectable).
    """

    def __init__(
        self,
        api: client.ApiClient,
        *,
        pod_name: str,
        namespace: str,
        observer: RespreadObserver | None = None,
        events: EventRecorder | None = None,
        dry_run: bool = False,
        period: float = PERIOD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = kapi(api, client.CoreV1Api, timeout=TIMEOUT)
        self.pod_name, self.namespace = pod_name, namespace
        self.observer: RespreadObserver = observer or NullRespreadObserver()
        self.events = events or EventRecorder(api, pod_name, enabled=not dry_run, asynchronous=True)
        self.dry_run, self.period, self.clock = dry_run, period, clock
        self.selector: str | None = None  # "app.kubernetes.io/name=<value>", from the own pod
        self.placement = Placement()
        # (evicted pod, pods before, when) until settled again, or MAX_BACKOFF seconds at most
        self.waiting: tuple[str, int, float] | None = None
        self.backoff = 0.0  # seconds to wait before the next eviction; 0: none
        self.not_before = 0.0
        self.logged: Eviction | None = None  # the last decision of a dry run, logged once

    def own_pod(self) -> bool:
        """Read this replica's pod: the label selector of its siblings and its placement. False
        (logged) when its pod has no :data:`NAME_LABEL`. API errors propagate (KubeError)."""
        pod = read_json(self.core.read_namespaced_pod(self.pod_name, self.namespace, _preload_content=False))
        value = ((pod.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL)
        if not value:
            log.warning(
                "respread: pod %s has no label %s: the replicas are not kept spread",
                self.pod_name,
                NAME_LABEL,
            )
            return False
        self.selector = f"{NAME_LABEL}={value}"
        self.placement = placement_of(pod)
        return True

    def pods(self) -> list[RunnerPod]:
        """The runner's pods (one list call; KubeError propagates)."""
        resp = self.core.list_namespaced_pod(
            self.namespace, label_selector=self.selector, _preload_content=False
        )
        return [pod_view(p) for p in read_json(resp).get("items") or []]

    def nodes(self) -> list[Any]:
        """The nodes the runner pod's ``nodeSelector`` selects, as views (one list call)."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.placement.node_selector.items()))
        resp = self.core.list_node(label_selector=selector or None, _preload_content=False)
        return [node_view(n) for n in read_json(resp).get("items") or []]

    def once(self) -> Eviction | None:
        """One look: the eviction asked for (or, dry run, decided), else None. KubeError of the
        reads propagates; an eviction's refusal or failure is counted and logged, not raised."""
        if self.selector is None and not self.own_pod():
            return None
        pods = self.pods()
        if self.waiting is not None:
            evicted, before, since = self.waiting
            back = not any(p.name == evicted for p in pods) and len(pods) >= before and settled(pods)
            # (a Deployment scaled down meanwhile never gets back to ``before``)
            if not back and self.clock() - since < MAX_BACKOFF:
                return None
            self.waiting = None
        if not settled(pods) or not crowded_nodes(pods):
            self.backoff = 0.0  # spread (or a failure under way): the last eviction did its work
            return None
        decision = choose_eviction(pods, self.nodes(), leader=self.pod_name, placement=self.placement)
        if decision is None:
            self.backoff = 0.0
            return None
        if self.clock() < self.not_before:
            return None
        if self.dry_run:
            if decision != self.logged:
                log.info("respread (dry run): %s", decision.describe())
                self.logged = decision
            return decision
        log.info("respread: %s", decision.describe(), extra={"pod": decision.pod, "node": decision.node})
        if not self.evict(decision.pod):
            return None
        self.events.record(self.pod_ref(decision.pod), "Normal", REASON, decision.describe())
        self.waiting = (decision.pod, len(pods), self.clock())
        # a second eviction before the replicas spread means the first did not: back off
        self.not_before = self.clock() + self.backoff
        self.backoff = min(MAX_BACKOFF, max(self.period, 2 * self.backoff))
        return decision

    def evict(self, name: str) -> bool:
        """Ask the Eviction API to evict pod ``name``; True when it was accepted (or the pod is
        gone already). A 429 (the PodDisruptionBudget allows no disruption now) and other errors
        are logged and counted, and False returned: asked again at the next period."""
        body: Any = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": self.namespace},
        }
        try:
            self.core.create_namespaced_pod_eviction(name, self.namespace, body)
        except NotFound:
            log.info("respread: pod %s is gone already", name)
            return True
        except KubeError as exc:
            refused = exc.reason == "too_many_requests"
            self.observer.replica_respread("refused" if refused else "failed")
            log.log(
                logging.INFO if refused else logging.WARNING,
                "respread: eviction of %s %s: %s",
                name,
                "refused (the PodDisruptionBudget allows no disruption now)" if refused else "failed",
                exc,
            )
            return False
        self.observer.replica_respread("evicted")
        return True

    def pod_ref(self, name: str) -> dict[str, str]:
        """The Event's ``involvedObject`` for pod ``name``."""
        return {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": self.namespace}

    def run(self, stop: threading.Event) -> None:
        """Look every :attr:`period` seconds until ``stop`` is set (the first look one period
        after the start: a new leader first lets its detector and watcher catch up). API errors
        are logged and the next look tries again."""
        while not stop.wait(self.period):
            try:
                self.once()
            except KubeError as exc:
                log.warning("respread: %s", exc)


__all__ = [
    "MAX_BACKOFF",
    "NAME_LABEL",
    "PERIOD",
    "REASON",
    "NullRespreadObserver",
    "RespreadObserver",
    "Respreader",
    "in_cluster",
]
