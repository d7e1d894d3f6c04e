"""A release whose runner died before recording it: found and recorded by the runner that goes on.

The out-of-service taint is added inside a run (a fence step's release, or
``out_of_service_taint.yml``); the runner records it after the run ended, with the
``OutOfServiceTaintAdded`` Event on the NodeFence and the Node. A runner killed in between (after
the taint, before the Event) left a release nobody recorded, and its replay or its successor finds
the taint already there: ``node_taint`` changes nothing, the run reports no release.

:func:`record_adopted_release` closes that gap. Called before each decision of a NodeFence whose
node carries the taint while its flow is fencing (Running or Done, before Recovery), once per flow
and process (:attr:`InMemory.release_recorded`), it records the release as the live path would,
naming the evidence the NodeFence holds:

1. the fresh fence reading held in memory with the fencing module's own evidence (a replayed
   power-off segment reads the power back), else
2. the status's ``FenceVerified=True`` condition of a power fence (written from the run that
   verified it, before the power came back on), else
3. while a run is committed (``status.currentRun``), nothing yet: its result comes first, else
4. a read of the fence at the device (``verify_fence``, read-only) first; verified → as 1.

The Event's name is fixed per NodeFence uid and flow (:func:`~noderemedy_runner.loops.memory.release_key`),
the live path's too, so the live run, a replay and a successor record it exactly once between
them. The pods the dead run force-deleted are in its lost output; the record names the pods the
cluster still binds to the node (released by the taint now; KEP-2268's pod garbage collection).

When the NodeFence holds no verified evidence and the device does not read back fenced, the taint
was not added under this NodeFence's evidence, or the fence no longer holds: a Warning Event
``OutOfServiceTaintUnverified`` on the NodeFence and the Node, and ``WorkloadsReleased=False``
reason ``ReleaseUnverified`` in the status, say so. The taint is left alone: removing it would
not bring back pods already force-deleted, and recovery removes it when the node returns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from noderemedy_runner.kube.errors import Conflict
from noderemedy_runner.kube.resources import NODEFENCE, KubeIO
from noderemedy_runner.loops.memory import InMemory, meta_of, release_key, taint_event
from noderemedy_runner.machines.conditions import find_condition, format_time, set_condition
from noderemedy_runner.machines.nodefence import FENCE_VERIFIED, WORKLOADS_RELEASED, NodeFenceStatus

log = logging.getLogger(__name__)

#: The reason of the release's Event (as the live path's).
ADDED = "OutOfServiceTaintAdded"
#: The Warning Event and condition reason when the taint is there without verified evidence.
UNVERIFIED = "OutOfServiceTaintUnverified"
#: ``WorkloadsReleased=False`` reason when the taint is there without verified evidence.
RELEASE_UNVERIFIED = "ReleaseUnverified"
#: Pods named in the Event at most.
SHOWN_PODS = 5


def needs_record(status: NodeFenceStatus, held: InMemory, taint: bool) -> bool:
    """Whether a release on the node may be unrecorded by this process: the taint is there, the
    flow is fencing (Running or Done, before Recovery) and this process has not recorded the
    release of this flow (``status.restarts``) yet."""
    return (
        taint
        and status.status in ("Running", "Done")
        and status.step != "Recovery"
        and held.release_recorded != status.restarts
    )


def _evidence(status: NodeFenceStatus, held: InMemory, node: str, now: float) -> str | None:
    """What licenses the release, in words, from what the NodeFence holds (None: nothing)."""
    reading = held.fresh_reading(now)
    if reading is not None and reading.licenses_taint(node) and held.evidence:
        ev = held.evidence
        at = ev.get("verified_at")
        at = format_time(float(at)) if isinstance(at, int | float) else at
        return (
            f"{reading.kind} verified by {reading.source}: {ev.get('method', '?')} {ev.get('target', '?')} "
            f"read back {ev.get('state', '?')} at {at or '?'}"
        )
    fv = find_condition(status.conditions, FENCE_VERIFIED)
    if fv is not None and fv.status == "True" and fv.message.startswith("power_off"):
        return f"{fv.message}, {FENCE_VERIFIED} since {format_time(fv.last_transition_time)}"
    return None


def _pods(kube: KubeIO, node: str) -> str:
    pods = [
        f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}"
        for p in kube.pods_on_node(node)
    ]
    shown = ", ".join(pods[:SHOWN_PODS]) + (" ..." if len(pods) > SHOWN_PODS else "")
    return f"{len(pods)} pod(s) still bound to it, released by the taint ({shown or 'none'})"


def record_adopted_release(
    kube: KubeIO,
    obj: Mapping[str, Any],
    node: str,
    status: NodeFenceStatus,
    held: InMemory,
    now: float,
    verify: Callable[[], bool],
    cancel: threading.Event,
) -> bool:
    """Record the release of NodeFence ``obj`` found on ``node`` (see the module docs), when
    :func:`needs_record` holds. ``verify()`` reads the fence back (``verify_fence``, read-only)
    and keeps the reading in ``held``; False when it did not run (canceled, no executor). Returns False only when the caller should
    stop (canceled); True otherwise, also when a committed run must come first. API errors
    propagate (:class:`~noderemedy_runner.kube.errors.KubeError`)."""
    name = str(meta_of(obj).get("name"))
    evidence = _evidence(status, held, node, now)
    if evidence is None:
        if status.current_run is not None:
            return True  # the committed run (a replayed off segment) reads the fence first
        log.info("NodeFence %s: taint on node %s without evidence held: reading the fence back", name, node)
        if not verify():
            return not cancel.is_set()
        evidence = _evidence(status, held, node, now)
    key = release_key(obj, ADDED, status.restarts)
    if evidence is not None:
        message = (
            f"out-of-service taint added to node {node} (recorded after its runner stopped: {evidence}); "
            f"{_pods(kube, node)}; the pods the run force-deleted were in its lost output"
        )
        taint_event(kube, obj, node, "Normal", ADDED, message, once_key=key)
        held.release_recorded = status.restarts
        return True
    message = (
        f"node {node} carries the out-of-service taint, but NodeFence {name} holds no verified fence "
        "for it and the fence does not read back as holding: its workloads may have been released "
        "without a verified fence; check the machine"
    )
    taint_event(
        kube,
        obj,
        node,
        "Warning",
        UNVERIFIED,
        message,
        once_key=release_key(obj, UNVERIFIED, status.restarts),
    )
    new = set_condition(
        status.conditions,
        WORKLOADS_RELEASED,
        "False",
        RELEASE_UNVERIFIED,
        message,
        now,
        status.observed_generation,
    )
    try:
        kube.replace_status(NODEFENCE, obj, {**status.to_dict(), "conditions": [c.to_dict() for c in new]})
    except Conflict:
        return True  # re-read and looked at again
    held.release_recorded = status.restarts
    return True


__all__ = ["ADDED", "RELEASE_UNVERIFIED", "UNVERIFIED", "needs_record", "record_adopted_release"]
