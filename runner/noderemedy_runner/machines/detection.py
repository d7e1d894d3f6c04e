"""Detection, as pure functions: nodes + their conditions + existing NodeFences + ``now`` → which
nodes get a NodeFence, which not-yet-started NodeFences are cancelled, which unhealthy nodes are
refused and why, and the storm guard's state per Configuration.

Rules (node remedy seed "Remedy detector"; NodeHealthCheck for exclusions and pauses):

* A node is **unhealthy** when one of its Configuration's thresholds has matched for the
  threshold's ``nodeConditionPeriod``: the condition ``nodeConditionType`` has a status in
  ``nodeConditionStatus`` and its ``lastTransitionTime`` is at least the period ago.
* **Flapping**: a node that was healthy at any time within the period is not unhealthy for the
  period. The condition's ``lastTransitionTime`` moves on every Ready ↔ NotReady change, so a
  flap restarts the period; the caller may also pass ``last_healthy`` (when it last *saw* the
  node healthy, seconds) and the later of the two is used, so a flap the API coalesced (e.g.
  False → True → False between two observations, or a missing time) also restarts it.
  A matching condition without ``lastTransitionTime`` counts from ``now`` (never fences at once).
* **Exclusions**: label ``remediation.noderemedy.io/exclude-from-remediation=true`` (ours) or
  ``remediation.medik8s.io/exclude-from-remediation=true`` (medik8s) → never fenced.
  **Pause**: node annotation ``remediation.noderemedy.io/pause`` (any non-empty value is the
  reason) or the Configuration's ``pauseRequests`` (NodeHealthCheck) → no new fencing.
* **One NodeFence per node**, named after the node. A node with a NodeFence that is not
  finished gets no second one; a node whose NodeFence is ``Final`` and that turned unhealthy
  *after* it finished gets a new one (the old object is replaced). ``Error`` with the restart
  limit reached stays for the admin (never replaced automatically).
* **Cancel**: a NodeFence still ``New`` that has not started a step (no ``currentRun``, no
  ``jobs``, no restart) whose node is Ready and no longer matches any threshold is cancelled in the way the
  NodeFence machine itself does it (``New`` + node Ready → ``Final``, reason ``NodeHealthy``).
* **Another remediator** holding the node's Lease (holder not ours) → refused (``LeaseHeld``).
* The **storm guard** (:mod:`noderemedy_runner.machines.storm`) is evaluated per Configuration; while
  active, unhealthy nodes without a NodeFence are refused (``StormGuard``). It counts the nodes
  whose threshold condition matches *now*, without waiting for the period: nodes that drop
  together in a switch failure are counted as soon as they drop, so none of them is fenced
  because its period happened to run out before the others' (NodeHealthCheck counts only nodes
  past their duration and can fence the first of a storm; we choose the conservative side).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from noderemedy_runner.config.remedy import ConfigurationSet, RemedyConfiguration, Threshold
from noderemedy_runner.machines.actions import OUT_OF_SERVICE_TAINT_KEY
from noderemedy_runner.machines.conditions import parse_time
from noderemedy_runner.machines.storm import StormState, evaluate

EXCLUDE_LABEL = "remediation.noderemedy.io/exclude-from-remediation"
MEDIK8S_EXCLUDE_LABEL = "remediation.medik8s.io/exclude-from-remediation"
PAUSE_ANNOTATION = "remediation.noderemedy.io/pause"

#: Why an unhealthy node got no NodeFence (Event reasons on the Node, metric label).
REFUSED_EXCLUDED = "Excluded"
REFUSED_PAUSED = "Paused"
REFUSED_STORM = "StormGuard"
REFUSED_LEASE = "LeaseHeld"
REFUSED_ERROR = "RestartLimitReached"


@dataclass(frozen=True)
class NodeCondition:
    """One entry of ``node.status.conditions``: ``last_transition_time`` in seconds or None."""

    type: str
    status: str
    last_transition_time: float | None = None


@dataclass(frozen=True)
class NodeInfo:
    """What detection needs of a Node: name, labels, annotations, conditions, whether the
    out-of-service taint is on it, ``uid`` (for Events)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    conditions: tuple[NodeCondition, ...] = ()
    out_of_service: bool = False
    uid: str = ""

    def condition(self, type_: str) -> NodeCondition | None:
        """The condition of type ``type_`` or None."""
        for c in self.conditions:
            if c.type == type_:
                return c
        return None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeInfo:
        """From a Node's JSON (camelCase, as the API returns it). A malformed
        ``lastTransitionTime`` is treated as missing (counts from now: the safe side)."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        conds = []
        for c in status.get("conditions") or ():
            ltt = c.get("lastTransitionTime")
            try:
                t = parse_time(str(ltt)) if ltt else None
            except ValueError:
                t = None
            conds.append(NodeCondition(str(c.get("type", "")), str(c.get("status", "")), t))
        taints = (obj.get("spec") or {}).get("taints") or ()
        return cls(
            name=str(meta.get("name", "")),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            conditions=tuple(conds),
            out_of_service=any(t.get("key") == OUT_OF_SERVICE_TAINT_KEY for t in taints),
            uid=str(meta.get("uid", "")),
        )


@dataclass(frozen=True)
class FenceInfo:
    """What detection needs of a NodeFence: ``name``, ``node`` (spec.node), ``phase``
    (status.status, "New" when no status), ``started`` (a step was committed or ran, or the flow
    restarted), ``terminal`` (Final, or Error with the restart limit reached -- as the reconciler
    reports it with the Succeeded condition), ``finished_at`` (status.lastTransitionTime of a
    terminal fence, seconds)."""

    name: str
    node: str
    phase: str = "New"
    started: bool = False
    terminal: bool = False
    finished_at: float | None = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> FenceInfo:
        """From a NodeFence's JSON. Error is terminal when ``Succeeded=False`` with reason
        ``RestartLimitReached`` (what :func:`noderemedy_runner.machines.nodefence.decide` writes)."""
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        phase = str(status.get("status") or "New")
        started = bool(status.get("currentRun") or status.get("jobs") or status.get("restarts"))
        started = started or phase not in ("New",)
        terminal = phase == "Final" or (
            phase == "Error"
            and any(
                c.get("type") == "Succeeded" and c.get("reason") == "RestartLimitReached"
                for c in status.get("conditions") or ()
            )
        )
        ltt = status.get("lastTransitionTime")
        try:
            finished = parse_time(str(ltt)) if (terminal and ltt) else None
        except ValueError:
            finished = None
        return cls(
            name=str(meta.get("name", "")),
            node=str((obj.get("spec") or {}).get("node", "")),
            phase=phase,
            started=started,
            terminal=terminal,
            finished_at=finished,
        )


@dataclass(frozen=True)
class Assessment:
    """One node against its Configuration at ``now``. ``config``: the Configuration's name (None:
    no Configuration selects the node). ``matching``: a threshold's condition currently matches.
    ``threshold``/``since``: the matching threshold that becomes (or became) unhealthy first,
    and since when it counts (seconds). ``unhealthy``: matched for its period. ``remaining``:
    seconds until it would become unhealthy (0 when it is). ``excluded``/``paused``: the reason
    text, or None."""

    node: str
    config: str | None
    matching: bool = False
    unhealthy: bool = False
    threshold: Threshold | None = None
    since: float | None = None
    remaining: float | None = None
    excluded: str | None = None
    paused: str | None = None


def exclusion(node: NodeInfo) -> str | None:
    """The exclude label that applies to ``node`` (``key=true``), or None."""
    for key in (EXCLUDE_LABEL, MEDIK8S_EXCLUDE_LABEL):
        if str(node.labels.get(key, "")).lower() == "true":
            return f"{key}=true"
    return None


def assess(
    node: NodeInfo, cfg: RemedyConfiguration | None, now: float, last_healthy: float | None = None
) -> Assessment:
    """The :class:`Assessment` of ``node`` under ``cfg`` at ``now`` (seconds); ``last_healthy``
    is when the caller last saw the node match no threshold (see module docs, "Flapping")."""
    if cfg is None:
        return Assessment(node.name, None)
    best: tuple[float, Threshold, float] | None = None  # (due, threshold, since)
    for th in cfg.thresholds:
        cond = node.condition(th.condition_type)
        if cond is None or cond.status not in th.statuses:
            continue
        since = cond.last_transition_time if cond.last_transition_time is not None else now
        if last_healthy is not None and last_healthy > since:
            since = last_healthy
        since = min(since, now)
        due = since + th.period
        if best is None or due < best[0]:
            best = (due, th, since)
    paused = node.annotations.get(PAUSE_ANNOTATION) or None
    if paused is None and cfg.pause_requests:
        paused = f"Configuration {cfg.name} pauseRequests: {', '.join(cfg.pause_requests)}"
    elif paused is not None:
        paused = f"{PAUSE_ANNOTATION}={paused}"
    excluded = exclusion(node)
    if best is None:
        return Assessment(node.name, cfg.name, excluded=excluded, paused=paused)
    due, th, since = best
    return Assessment(
        node.name,
        cfg.name,
        matching=True,
        unhealthy=now >= due,
        threshold=th,
        since=since,
        remaining=max(0.0, due - now),
        excluded=excluded,
        paused=paused,
    )


@dataclass(frozen=True)
class Refusal:
    """An unhealthy node that gets no NodeFence: ``reason`` (Excluded, Paused, StormGuard,
    LeaseHeld, RestartLimitReached) and a ``message`` for the Event."""

    node: str
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """What to do now. ``create``: assessments of the nodes that get a NodeFence (named after
    the node); ``replace``: names of finished NodeFences to delete first (a subset of the created
    nodes' names); ``cancel``: NodeFences to cancel (node recovered before fencing started);
    ``refused``; ``storms``: the guard's state per Configuration name; ``unhealthy``: per
    Configuration, the names of the nodes the guard counts (threshold condition matching now); ``assessments``: per node; ``next_check``:
    seconds until a period runs out or a cooldown ends (None: nothing pending)."""

    create: tuple[Assessment, ...] = ()
    replace: tuple[str, ...] = ()
    cancel: tuple[FenceInfo, ...] = ()
    refused: tuple[Refusal, ...] = ()
    storms: Mapping[str, StormState] = field(default_factory=dict)
    unhealthy: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    assessments: Mapping[str, Assessment] = field(default_factory=dict)
    next_check: float | None = None


def plan(
    nodes: Iterable[NodeInfo],
    configs: ConfigurationSet,
    fences: Iterable[FenceInfo],
    now: float,
    storms: Mapping[str, StormState] | None = None,
    last_healthy: Mapping[str, float] | None = None,
    foreign_leases: Mapping[str, str] | None = None,
) -> Plan:
    """The :class:`Plan` at ``now`` (seconds). ``storms``: the previous guard state per
    Configuration (for the cooldown); ``last_healthy``: node → when last seen healthy;
    ``foreign_leases``: node → holder of its remediation Lease when held by someone else.
    Pure and deterministic (output ordered by node name)."""
    storms = storms or {}
    last_healthy = last_healthy or {}
    foreign_leases = foreign_leases or {}
    by_node: dict[str, FenceInfo] = {}
    for f in fences:
        by_node.setdefault(f.node, f)
    nodes_sorted = sorted(nodes, key=lambda n: n.name)
    assessments: dict[str, Assessment] = {}
    per_cfg: dict[str, list[Assessment]] = {c.name: [] for c in configs.configurations}
    cfg_by_name = {c.name: c for c in configs.configurations}
    next_check: float | None = None

    def soon(seconds: float) -> None:
        nonlocal next_check
        if seconds > 0 and (next_check is None or seconds < next_check):
            next_check = seconds

    for node in nodes_sorted:
        cfg = configs.for_node(node.labels)
        a = assess(node, cfg, now, last_healthy.get(node.name))
        assessments[node.name] = a
        if a.config is not None:
            per_cfg[a.config].append(a)
        if a.matching and not a.unhealthy and a.remaining is not None:
            soon(a.remaining)

    new_storms: dict[str, StormState] = {}
    unhealthy: dict[str, tuple[str, ...]] = {}
    for name, items in per_cfg.items():
        bad = tuple(a.node for a in items if a.matching)
        unhealthy[name] = bad
        state = evaluate(cfg_by_name[name].storm_guard, len(items), len(bad), storms.get(name), now)
        new_storms[name] = state
        left = state.cooldown_left(cfg_by_name[name].storm_guard, now)
        if left:
            soon(left)

    create: list[Assessment] = []
    replace: list[str] = []
    cancel: list[FenceInfo] = []
    refused: list[Refusal] = []
    for node in nodes_sorted:
        a = assessments[node.name]
        fence = by_node.get(node.name)
        if not a.matching:
            ready = node.condition("Ready")
            if (
                fence is not None
                and fence.phase == "New"
                and not fence.started
                and not fence.terminal
                and ready is not None
                and ready.status == "True"
            ):
                cancel.append(fence)
            continue
        if not a.unhealthy or a.config is None:
            continue
        if fence is not None and not fence.terminal:
            continue  # one remediation in flight per node
        if fence is not None and fence.phase == "Error":
            refused.append(
                Refusal(
                    node.name,
                    REFUSED_ERROR,
                    f"NodeFence {fence.name} is in Error with its restart limit reached; delete it to fence again",
                )
            )
            continue
        if fence is not None and (
            fence.finished_at is None or a.since is None or a.since < fence.finished_at
        ):
            continue  # unhealthy since before the last fence finished: that fence was for this
        th = a.threshold.describe() if a.threshold else ""
        if a.excluded:
            refused.append(
                Refusal(node.name, REFUSED_EXCLUDED, f"unhealthy ({th}) but excluded by label {a.excluded}")
            )
            continue
        if a.paused:
            refused.append(Refusal(node.name, REFUSED_PAUSED, f"unhealthy ({th}) but paused: {a.paused}"))
            continue
        holder = foreign_leases.get(node.name)
        if holder:
            refused.append(
                Refusal(
                    node.name,
                    REFUSED_LEASE,
                    f"unhealthy ({th}) but its remediation Lease is held by {holder}",
                )
            )
            continue
        state = new_storms[a.config]
        if state.active:
            refused.append(
                Refusal(
                    node.name,
                    REFUSED_STORM,
                    f"unhealthy ({th}); storm guard of Configuration {a.config}: {state.message}",
                )
            )
            continue
        create.append(a)
        if fence is not None:
            replace.append(fence.name)
    return Plan(
        create=tuple(create),
        replace=tuple(replace),
        cancel=tuple(cancel),
        refused=tuple(refused),
        storms=new_storms,
        unhealthy=unhealthy,
        assessments=assessments,
        next_check=next_check,
    )


__all__ = [
    "EXCLUDE_LABEL",
    "MEDIK8S_EXCLUDE_LABEL",
    "PAUSE_ANNOTATION",
    "Assessment",
    "FenceInfo",
    "NodeCondition",
    "NodeInfo",
    "Plan",
    "Refusal",
    "assess",
    "exclusion",
    "plan",
]
