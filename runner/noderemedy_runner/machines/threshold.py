"""The threshold a NodeFence records, and what "healthy" means for it (pure).

The node remedy design watches any node condition (its own example: ``DiskPressure`` True for
10 m → ``storage-fence``; node-problem-detector adds more, such as ``KernelDeadlock``). The
detector (:mod:`noderemedy_runner.loops.detector`) writes the threshold that matched into the
NodeFence it creates, as ``spec.threshold`` (:func:`threshold_spec`)::

    spec:
      node: worker-3
      threshold: {conditionType: DiskPressure, statuses: ["True"], periodSeconds: 600}

and the NodeFence and remedy machines judge the node by it (:func:`judge`): the node is
**healthy** when that threshold no longer holds (its condition has none of the statuses, or is
gone) **and** the node is Ready. Ready stays part of it because a node whose kubelet stopped
posting has every condition set to Unknown by the node lifecycle controller: a DiskPressure that
reads Unknown on a dead node is no recovery. For a Ready threshold this is exactly "the node is
Ready", as before.

A NodeFence created by hand (no ``spec.threshold``) is judged by Ready alone, as it always was.
Ready stays what the safety rules look at whatever the threshold: the out-of-service taint only
for a NotReady node (KEP-2268), its removal and the unfencing of storage only once the node is
Ready and its old pods are gone (DESIGN.md invariant 7).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noderemedy_runner.config.remedy import CONDITION_STATUSES, Threshold
from noderemedy_runner.machines.conditions import parse_time

#: The NodeFence spec field holding the threshold.
THRESHOLD_FIELD = "threshold"
_CONDITION_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


class ThresholdError(ValueError):
    """A ``spec.threshold`` that cannot be read; the message names the field."""


def threshold_spec(th: Threshold) -> dict[str, Any]:
    """``spec.threshold`` for threshold ``th``: ``conditionType``, ``statuses`` (sorted) and
    ``periodSeconds`` (the ``nodeConditionPeriod`` in seconds)."""
    return {
        "conditionType": th.condition_type,
        "statuses": sorted(th.statuses),
        "periodSeconds": th.period,
    }


def threshold_from_spec(spec: Mapping[str, Any] | None) -> Threshold | None:
    """The threshold a NodeFence's ``spec`` records, or None when it records none (a NodeFence made
    by hand: judged by Ready). Raises :class:`ThresholdError` naming the field."""
    raw = (spec or {}).get(THRESHOLD_FIELD)
    if raw is None:
        return None
    where = f"spec.{THRESHOLD_FIELD}"
    if not isinstance(raw, Mapping):
        raise ThresholdError(f"{where}: a map with conditionType, statuses and periodSeconds")
    ctype = raw.get("conditionType")
    if not isinstance(ctype, str) or not _CONDITION_TYPE.match(ctype):
        raise ThresholdError(
            f"{where}.conditionType: {ctype!r} is not a node condition type like DiskPressure"
        )
    statuses = raw.get("statuses")
    if (
        not isinstance(statuses, list)
        or not statuses
        or not all(isinstance(s, str) and s in CONDITION_STATUSES for s in statuses)
    ):
        raise ThresholdError(
            f"{where}.statuses: {statuses!r} is not a non-empty list of True, False, Unknown"
        )
    if ctype == "Ready" and "True" in statuses:
        raise ThresholdError(f"{where}.statuses: Ready=True is a healthy node")
    period = raw.get("periodSeconds", 0)
    if isinstance(period, bool) or not isinstance(period, int | float) or period < 0:
        raise ThresholdError(f"{where}.periodSeconds: {period!r} is not a number of seconds")
    return Threshold(ctype, frozenset(statuses), float(period))


@dataclass(frozen=True)
class Health:
    """The node judged by a threshold: ``healthy`` (the threshold no longer holds and the node
    is Ready), ``unhealthy_since`` (seconds since the epoch: when the matching condition last
    changed, else when Ready did; None when unknown or healthy) and ``why`` (for messages)."""

    healthy: bool
    unhealthy_since: float | None
    why: str


def _condition(node: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return cond
    return None


def _since(cond: Mapping[str, Any] | None) -> float | None:
    ltt = (cond or {}).get("lastTransitionTime")
    try:
        return parse_time(str(ltt)) if ltt else None
    except ValueError:
        return None  # counts from now: the safe side


def judge(node: Mapping[str, Any] | None, th: Threshold) -> Health:
    """Node ``node`` (its JSON; None: it does not exist) judged by ``th`` (module docs)."""
    if node is None:
        return Health(False, None, "the node does not exist")
    ready = _condition(node, "Ready")
    is_ready = ready is not None and ready.get("status") == "True"
    cond = _condition(node, th.condition_type)
    holds = cond is not None and str(cond.get("status")) in th.statuses
    if holds:
        return Health(False, _since(cond), f"{th.condition_type} is {cond.get('status') if cond else '?'}")
    if not is_ready:
        status = ready.get("status") if ready is not None else "missing"
        return Health(False, _since(ready), f"{th.condition_type} no longer matches but Ready is {status}")
    return Health(
        True, None, f"{th.condition_type} no longer in {{{','.join(sorted(th.statuses))}}} and Ready"
    )


__all__ = [
    "THRESHOLD_FIELD",
    "Health",
    "ThresholdError",
    "judge",
    "threshold_from_spec",
    "threshold_spec",
]
