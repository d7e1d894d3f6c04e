"""Remedy escalation (node remedy seed: ``remedy1`` → ``remedy2`` after ``period``; NodeHealthCheck's
``escalatingRemediations``), as a pure decision in front of the NodeFence fence flow.

A NodeFence made by the detector carries its remedy chain in the annotation
:data:`CHAIN_ANNOTATION` (JSON list of :meth:`noderemedy_runner.config.remedy.Remedy.chain_entry`):
the remedies of the matched threshold in the order they escalate. A remedy is either a **pod
remedy** (a ``remedyConfigs`` ``podTemplate``, run once as a Job with the node passed in) or the
**fence flow** (:mod:`noderemedy_runner.machines.nodefence`), which ends the chain. A chain without a
pod remedy (the default, and every NodeFence made by hand) is the fence flow alone and leaves no
trace here.

Per pod remedy (``status.remedy``: :class:`~noderemedy_runner.machines.fencestatus.RemedyStatus`)::

    start      node NotReady for the grace period → status.remedy {name, startTime,
               timeoutSeconds = period, job, result Running} is written, then its Job runs
               (activeDeadlineSeconds = period); a restarted runner adopts the Job by its name
    Job ends   succeeded → result Succeeded; failed (pod exit, image missing, a template the API
               server refuses) → result Failed, and the next remedy starts at once: a remedy
               runs once per NodeFence, never retried (no retry storm on bad input)
    Succeeded  node Ready → Final (Succeeded=True, RemedySucceeded);
               clean-resources → the fence flow: workloads are released only on a fence it verifies
               (invariant 1: a pod's exit code is not a fence);
               period over and the node still not Ready → result TimedOut, the next remedy
    last one   failed or timed out → Error, Succeeded=False, RemediesExhausted (terminal)

Each change is one status write before the next action (invariant 4); the reconciler records an
Event for each (``RemedyStarted``, ``RemedySucceeded``, ``RemedyFailed``, ``RemedyEscalated``,
``RemediesExhausted``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.conditions import set_condition
from noderemedy_runner.machines.fencestatus import (
    RESULTS,
    NodeFenceObservations,
    NodeFenceStatus,
    PodRemedyResult,
    RemedyResult,
    RemedyStatus,
)

#: NodeFence annotation: the remedy chain the detector chose (JSON list of chain entries).
CHAIN_ANNOTATION = "remediation.noderemedy.io/remedy-chain"
#: Condition reasons and Event reasons of the escalation.
REMEDY_STARTED = "RemedyStarted"
REMEDY_SUCCEEDED = "RemedySucceeded"
REMEDY_FAILED = "RemedyFailed"
REMEDY_ESCALATED = "RemedyEscalated"
REMEDIES_EXHAUSTED = "RemediesExhausted"
REMEDY_NOT_FOUND = "RemedyNotFound"
#: Most seconds between two looks at a node whose pod remedy succeeded (waiting for Ready).
HEALTH_RECHECK_SECONDS = 5.0
#: Longest message copied into a condition.
MAX_MESSAGE = 1024


class ChainError(ValueError):
    """A remedy-chain annotation that cannot be read (the message names the entry and field)."""


@dataclass(frozen=True)
class ChainRemedy:
    """One remedy of a NodeFence's chain: ``name``, ``period`` (seconds it is given to make the
    node healthy; None: unbounded), ``clean_resources``, ``pod`` (a pod template remedy; False:
    the fence flow) and ``executor`` (``job``/``inprocess`` for the fence flow; None: default)."""

    name: str
    period: float | None = None
    clean_resources: bool = False
    pod: bool = False
    executor: str | None = None


def parse_chain(text: str | None) -> tuple[ChainRemedy, ...]:
    """The chain of annotation :data:`CHAIN_ANNOTATION` (``()`` when absent or empty: the fence flow
    alone). Raises :class:`ChainError` naming the entry and field."""
    if not text:
        return ()
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise ChainError(f"annotation {CHAIN_ANNOTATION}: not JSON ({exc})") from exc
    if not isinstance(items, list):
        raise ChainError(f"annotation {CHAIN_ANNOTATION}: a list of remedies")
    out = []
    for i, item in enumerate(items):
        where = f"annotation {CHAIN_ANNOTATION}[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str) or not item["name"]:
            raise ChainError(f"{where}.name: required, a string")
        period = item.get("period")
        if period is not None and (
            isinstance(period, bool) or not isinstance(period, int | float) or period < 0
        ):
            raise ChainError(f"{where}.period: {period!r} is not a number of seconds")
        out.append(
            ChainRemedy(
                str(item["name"]),
                float(period) if period is not None else None,
                bool(item.get("cleanResources", False)),
                bool(item.get("pod", False)),
                str(item["executor"]) if item.get("executor") else None,
            )
        )
    return tuple(out)


def remedy_job_name(nodefence: str, remedy: str) -> str:
    """The Job of pod remedy ``remedy`` of NodeFence ``nodefence``: ``<nodefence>-remedy-<remedy>``,
    shortened to 52 characters plus 10 hex digits of its SHA-256 beyond 63 (a DNS label, and
    the same name after a restart, so the Job is adopted, never started twice)."""
    name = f"{nodefence}-remedy-{remedy}".lower()
    if len(name) <= 63:
        return name
    return f"{name[:52].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def run_remedy(node: str, nodefence: str, remedy: ChainRemedy, job: str, deadline: float | None) -> Action:
    """``run_remedy``: run pod remedy ``remedy`` as Job ``job`` (create it, or adopt it when it
    exists) and wait for it to end; ``deadline``: its activeDeadlineSeconds (None: the runner's)."""
    return Action(
        kind="run_remedy",
        ident=job,
        extravars={"node": node, "nodefence": nodefence, "remedy": remedy.name, "deadline": deadline},
        reason="RunRemedy",
    )


def exhausted(status: NodeFenceStatus) -> bool:
    """Whether the chain ended without making the node healthy (Error, ``Succeeded=False``,
    :data:`REMEDIES_EXHAUSTED`): terminal, left for the admin."""
    from noderemedy_runner.machines.conditions import find_condition

    cond = find_condition(status.conditions, "Succeeded")
    return status.status == "Error" and cond is not None and cond.reason == REMEDIES_EXHAUSTED


def _cond(
    s: NodeFenceStatus, type_: str, status: Any, reason: str, message: str, now: float
) -> NodeFenceStatus:
    return replace(
        s,
        conditions=set_condition(
            s.conditions, type_, status, reason, message[:MAX_MESSAGE], now, s.observed_generation
        ),
    )


def _write(s: NodeFenceStatus, reason: str) -> Action:
    return act.write_status(s.to_dict(), reason)


def _begin(
    name: str, s: NodeFenceStatus, chain: Sequence[ChainRemedy], index: int, now: float
) -> NodeFenceStatus:
    r = chain[index]
    job = remedy_job_name(name, r.name) if r.pod else ""
    rs = RemedyStatus(r.name, index, now, r.period, job)
    s = replace(s, remedy=rs, start_time=s.start_time if s.start_time is not None else now)
    period = f", {r.period:g} s to make the node healthy" if r.period is not None else ""
    what = f"Job {job}" if r.pod else "the fence flow"
    return _cond(s, "Processing", "True", REMEDY_STARTED, f"remedy {r.name} ({what}){period}", now)


def _escalate(
    name: str, s: NodeFenceStatus, chain: Sequence[ChainRemedy], cur: RemedyStatus, why: str, now: float
) -> tuple[NodeFenceStatus, str]:
    """Start the remedy after ``cur`` (reason :data:`REMEDY_ESCALATED`), or end the chain."""
    if cur.index + 1 < len(chain):
        nxt = chain[cur.index + 1]
        s = _begin(name, s, chain, cur.index + 1, now)
        return _cond(
            s,
            "Processing",
            "True",
            REMEDY_ESCALATED,
            f"remedy {cur.name} {why}; escalated to {nxt.name}",
            now,
        ), REMEDY_ESCALATED
    message = f"remedy {cur.name} {why}, and it was the last remedy: node left for the admin"
    s = _cond(s, "Processing", "False", REMEDIES_EXHAUSTED, message, now)
    s = _cond(s, "Succeeded", "False", REMEDIES_EXHAUSTED, message, now)
    return replace(s, status="Error", last_transition_time=now), REMEDIES_EXHAUSTED


def decide_remedy(
    name: str,
    s: NodeFenceStatus,
    obs: NodeFenceObservations,
    chain: Sequence[ChainRemedy],
    grace_seconds: float,
) -> Action | None:
    """The escalation's next action for NodeFence ``name``, or None when the fence flow decides
    (no pod remedy in ``chain``, the current remedy is the fence flow, or a clean-resources pod
    remedy succeeded). Pure; see the module docs. ``obs.remedy_result``: how the current pod
    remedy's Job ended, when known."""
    if not any(r.pod for r in chain):
        return None
    now = obs.now
    cur = s.remedy
    if cur is None:
        if s.status != "New" or s.current_run is not None or s.restarts or s.jobs or not chain[0].pod:
            return None  # the fence flow has started (or is the first remedy)
        if obs.node_healthy:
            return None  # the fence flow's own "healthy before anything started"
        since = obs.unhealthy_from if obs.unhealthy_from is not None else now
        if since + grace_seconds > now:
            return act.wait(since + grace_seconds - now, "GracePeriod")
        return _write(_begin(name, s, chain, 0, now), REMEDY_STARTED)
    if cur.index >= len(chain) or chain[cur.index].name != cur.name:
        message = (
            f"remedy {cur.name} is no longer at position {cur.index + 1} of the chain: nothing more is done"
        )
        if s.status == "Error":
            return act.nothing(REMEDY_NOT_FOUND)
        new = _cond(s, "Processing", "False", REMEDY_NOT_FOUND, message, now)
        return _write(replace(new, status="Error", last_transition_time=now), REMEDY_NOT_FOUND)
    r = chain[cur.index]
    if not r.pod or s.status != "New":
        return None  # the fence flow is the remedy (or a clean-resources remedy handed over to it)
    if cur.result == "Running":
        res = obs.remedy_result
        if res is None or res.job != cur.job:
            deadline = r.period if r.period is not None and r.period > 0 else None
            return run_remedy(obs.node, name, r, cur.job, deadline)
        s = replace(s, jobs=(*s.jobs, cur.job) if cur.job not in s.jobs else s.jobs)
        if not res.ok:
            result: RemedyResult = "TimedOut" if res.timed_out else "Failed"
            failed = replace(cur, result=result, message=res.message[:MAX_MESSAGE])
            s = replace(s, remedy=failed)
            s = _cond(s, "Processing", "True", REMEDY_FAILED, f"remedy {cur.name}: {res.message}", now)
            why = f"{'timed out' if res.timed_out else 'failed'}: {res.message[:300]}"
            new, reason = _escalate(name, s, chain, failed, why, now)
            return _write(new, REMEDY_FAILED if reason == REMEDY_ESCALATED else reason)
        s = replace(s, remedy=replace(cur, result="Succeeded", message=res.message[:MAX_MESSAGE]))
        if r.clean_resources:
            message = (
                f"remedy {cur.name} succeeded; clean-resources: the node's workloads are released once the "
                "fence flow has verified its fence"
            )
        else:
            message = f"remedy {cur.name} succeeded; waiting for the node to be Ready"
        return _write(_cond(s, "Processing", "True", REMEDY_SUCCEEDED, message, now), REMEDY_SUCCEEDED)
    if cur.result == "Succeeded":
        if r.clean_resources:
            return None  # the fence flow fences, then releases on its verified fence
        if obs.node_healthy:
            message = f"node {obs.node} is healthy after remedy {cur.name}"
            new = _cond(s, "Processing", "False", REMEDY_SUCCEEDED, message, now)
            new = _cond(new, "Succeeded", "True", REMEDY_SUCCEEDED, message, now)
            return _write(replace(new, status="Final", last_transition_time=now), "NodeHealthy")
        if cur.timeout is None:
            return act.wait(HEALTH_RECHECK_SECONDS, "WaitNodeHealthy")
        remaining = cur.start_time + cur.timeout - now
        if remaining > 0:
            return act.wait(min(remaining, HEALTH_RECHECK_SECONDS), "WaitNodeHealthy")
        timed_out = replace(cur, result="TimedOut")
        new, reason = _escalate(
            name, replace(s, remedy=timed_out), chain, timed_out,
            f"did not make the node Ready within {cur.timeout:g} s", now,
        )  # fmt: skip
        return _write(new, reason)
    return None  # Failed/TimedOut escalate when recorded; an exhausted chain is Error (terminal)


__all__ = [
    "CHAIN_ANNOTATION",
    "REMEDIES_EXHAUSTED",
    "REMEDY_ESCALATED",
    "REMEDY_FAILED",
    "REMEDY_NOT_FOUND",
    "REMEDY_STARTED",
    "RESULTS",
    "REMEDY_SUCCEEDED",
    "ChainError",
    "ChainRemedy",
    "PodRemedyResult",
    "RemedyStatus",
    "decide_remedy",
    "exhausted",
    "parse_chain",
    "remedy_job_name",
    "run_remedy",
]
