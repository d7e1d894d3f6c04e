"""What the reconcilers share: :class:`InMemory`, the little each one keeps about a custom resource
between two decisions (lost on a restart: the machines never depend on it for correctness), kept
per resource by :class:`Reconciler` (their common base, which also runs the out-of-service taint
actions), the requeue delays, and the out-of-service taint Events.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from noderemedy_runner.executor import Executor
from noderemedy_runner.kube.resources import KubeIO, has_taint
from noderemedy_runner.machines.actions import (
    FENCE_FRESH_SECONDS,
    OUT_OF_SERVICE_TAINT_EFFECT,
    OUT_OF_SERVICE_TAINT_KEY,
    Action,
    FenceReading,
)
from noderemedy_runner.machines.conditions import parse_time
from noderemedy_runner.machines.metal3 import PowerFailure
from noderemedy_runner.machines.nodefence import (
    StepResult,
)
from noderemedy_runner.machines.remedies import PodRemedyResult
from noderemedy_runner.observer import NullObserver, Observer

#: Seconds a fence reading held in memory may license a taint; older → verify_fence again.
READING_FRESH_SECONDS = float(FENCE_FRESH_SECONDS)
#: Seconds before retrying after an error the machine cannot see (bad config, API error, failed taint run).
ERROR_REQUEUE_SECONDS = 10.0


@dataclass
class InMemory:
    """What a reconciler keeps in memory about one custom resource between two decisions: the last
    step result, the last fence reading with the module evidence that proves it, the count of
    failed power runs and how the last pod remedy's Job ended. Lost on a restart, by design: the status holds what the machines need, and
    a lost reading only makes the machine read the fence back again."""

    result: StepResult | None = None
    reading: FenceReading | None = None
    evidence: dict[str, Any] | None = None
    power_failures: int = 0
    power_refused: bool = False
    #: the last power run that failed (a Metal3Remediation's escalate counts it as a failed attempt)
    power_failure: PowerFailure | None = None
    notes: list[str] = field(default_factory=list)
    remedy_result: PodRemedyResult | None = None
    #: the release of this flow (``restarts``) is recorded (its Event written, or its absence of
    #: evidence raised); None: not yet looked at by this process
    release_recorded: int | None = None

    def evidence_for(self, action: Action) -> dict[str, Any] | None:
        """The fence evidence that licenses ``action`` (a ``taint_out_of_service``), or None.

        Safety invariant 1 (DESIGN.md): the taint is applied only with the evidence of the very
        reading that made the machine ask for it. Anything else forgets the reading, so the fence
        is read again before another try. Both reconcilers go through here.
        """
        if action.fence is None or action.fence != self.reading or self.evidence is None:
            self.reading, self.evidence = None, None
            return None
        return self.evidence

    def fresh_reading(self, now: float) -> FenceReading | None:
        """The reading held, if it is at most :data:`READING_FRESH_SECONDS` old at ``now`` (epoch
        seconds); an older one is not offered to the machine, which then reads the fence again."""
        reading = self.reading
        if reading is not None and now - reading.observed_at > READING_FRESH_SECONDS:
            return None
        return reading


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj["metadata"]`` as a mapping ({} when absent or malformed)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def created_at(obj: Mapping[str, Any], default: float) -> float:
    """``metadata.creationTimestamp`` of ``obj`` in seconds since the epoch, else ``default``."""
    stamp = meta_of(obj).get("creationTimestamp")
    return parse_time(stamp) if isinstance(stamp, str) else default


def out_of_service_tainted(node: Mapping[str, Any] | None) -> bool:
    """Whether Node object ``node`` (None: no such node) carries the out-of-service taint
    (KEP-2268: key :data:`~noderemedy_runner.machines.actions.OUT_OF_SERVICE_TAINT_KEY`, effect
    ``NoExecute``)."""
    return node is not None and has_taint(node, OUT_OF_SERVICE_TAINT_KEY, OUT_OF_SERVICE_TAINT_EFFECT)


def taint_event(
    kube: KubeIO,
    obj: Mapping[str, Any],
    node: str,
    type_: str,
    reason: str,
    message: str,
    once_key: str = "",
) -> None:
    """Record an out-of-service taint Event (added, removed, refused, failed) on the custom
    resource ``obj`` and on Node ``node`` too (an Event on the Node for each transition and
    refusal), so ``kubectl describe node`` shows why its pods went away. Best effort, as
    :meth:`KubeIO.event`. ``once_key``: each of the two at most once for that key
    (:func:`release_key`)."""
    kube.event(obj, type_, reason, message, once_key=once_key)
    node_obj = kube.get_node(node) if node else None
    if node_obj is not None:
        kube.event(
            {**node_obj, "apiVersion": "v1", "kind": "Node"}, type_, reason, message, once_key=once_key
        )


def release_key(obj: Mapping[str, Any], reason: str, restarts: int) -> str:
    """The once-key of a release Event (:func:`taint_event`) of custom resource ``obj``: one per
    ``reason``, object uid and flow (``restarts``), so the live run, a replay and a successor that
    adopts the release record it once between them."""
    uid = str(meta_of(obj).get("uid", "")).replace("-", "")[:12] or "nouid"
    return f"{reason.lower()}-{uid}-r{restarts}"


class Reconciler:
    """The base of the reconcilers: their I/O seams and the :class:`InMemory` of each custom
    resource they drive, keyed by ``(name,)`` for a cluster-scoped kind, ``(namespace, name)``
    for a namespaced one.

    Args:
        kube: API access.
        executor: runs the playbooks.
        observer: metrics/logging seam (never raises).
        clock: wall-clock seconds (injectable for tests).
        dry_run: decide and log, perform nothing.
    """

    #: The custom resource's kind (for run data dirs, metrics, logs).
    kind = ""

    def __init__(
        self,
        kube: KubeIO,
        executor: Executor,
        *,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
    ) -> None:
        self.kube = kube
        self.executor = executor
        self.observer: Observer = observer or NullObserver()
        self.clock = clock
        self.dry_run = dry_run
        self._held: dict[tuple[str, ...], InMemory] = {}
        self._lock = threading.Lock()

    def held(self, *key: str) -> InMemory:
        """The in-memory state of the custom resource ``key`` (created on first use). Thread-safe."""
        with self._lock:
            return self._held.setdefault(key, InMemory())

    def forget(self, *key: str) -> None:
        """Drop the in-memory state of a deleted custom resource ``key``."""
        with self._lock:
            self._held.pop(key, None)

    def dry_run_stops(self, logger: logging.Logger, where: str, action: Action) -> bool:
        """Log ``action``, just decided for ``where`` (``"NodeFence nf-1"``), on ``logger`` at
        debug level. In a dry run also say at info level what would be done and return True: the
        caller performs nothing and ends its reconcile there. False when not a dry run."""
        logger.debug("%s: %s (%s)", where, action.kind, action.reason)
        if not self.dry_run:
            return False
        logger.info("dry run: %s would %s (%s)", where, action.kind, action.reason)
        return True

    def run_taint(
        self,
        obj: Mapping[str, Any],
        node: str,
        action: Action,
        held: InMemory,
        cancel: threading.Event,
        fence_evidence: Mapping[str, Any] | None = None,
        flow: int | None = None,
    ) -> bool:
        """Perform a ``taint_out_of_service`` / ``untaint_out_of_service`` action for custom
        resource ``obj`` (``out_of_service_taint.yml``); True when the run succeeded.

        The taint goes with ``fence_evidence`` when given (an admin's confirmation), else with
        the evidence of the very reading that made the machine ask for it
        (:meth:`InMemory.evidence_for`; without it nothing runs and False is returned: safety
        invariant 1). A failed add forgets the reading, so the fence is read again before another
        try. Every outcome is an Event on ``obj`` and on Node ``node`` (:func:`taint_event`).
        ``flow`` (a NodeFence's ``status.restarts``): the added taint's Event is recorded once per
        flow (:func:`release_key`), and :attr:`InMemory.release_recorded` says so.
        """
        meta = meta_of(obj)
        name = str(meta.get("name"))
        add = action.kind == "taint_out_of_service"
        extra: dict[str, Any] = {}
        if add:
            evidence = fence_evidence if fence_evidence is not None else held.evidence_for(action)
            if evidence is None:
                return False
            extra["fence_evidence"] = dict(evidence)
        verb = "add" if add else "remove"
        outcome = self.executor.run(
            action,
            kind=self.kind,
            name=name,
            namespace=str(meta["namespace"]) if meta.get("namespace") else None,
            uid=str(meta.get("uid", "")),
            ident=f"{name}-taint-{verb}-{int(self.clock() * 1000)}",
            extra_extravars=extra,
            cancel=cancel,
        )
        if outcome.succeeded:
            if add:
                verified = action.fence.kind if action.fence is not None else "fence"
                what = f"out-of-service taint added to node {node} ({verified} verified)"
            else:
                what = f"out-of-service taint removed from node {node}"
            reason = "OutOfServiceTaintAdded" if add else "OutOfServiceTaintRemoved"
            once = release_key(obj, reason, flow) if add and flow is not None else ""
            taint_event(self.kube, obj, node, "Normal", reason, what, once_key=once)
            if add and flow is not None:
                held.release_recorded = flow
            return True
        if add:
            held.reading, held.evidence = None, None  # read the fence again before another try
        message = f"{verb} taint on {node}: {outcome.summary()}"
        taint_event(self.kube, obj, node, "Warning", "OutOfServiceTaintFailed", message)
        return False


__all__ = [
    "ERROR_REQUEUE_SECONDS",
    "READING_FRESH_SECONDS",
    "InMemory",
    "Reconciler",
    "created_at",
    "meta_of",
    "out_of_service_tainted",
    "release_key",
    "taint_event",
]
