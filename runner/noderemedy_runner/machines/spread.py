"""Which of the runner's own replicas to evict so that no two share a node while a node is free.

Kubernetes never moves a running pod: the scheduler places a replica once. After a node fails and
is fenced, its runner pod is replaced on a surviving node, next to another replica; when the node
comes back, the two stay together. The next failure of that node then takes both, and nobody acts
until the replicas' 30 s toleration evicts them and a replacement starts elsewhere and takes the
Lease (measured in CI with two replicas: the failed node's pod ran elsewhere 69-74 s after a power
cut instead of 24-30 s). A
standby that shares the leader's node dies with it. The descheduler's ``RemoveDuplicates`` and
``RemovePodsViolatingTopologySpreadConstraint`` plugins fix this for any workload by evicting a
duplicate so that the scheduler places it again; :func:`choose_eviction` is the same rule for the
runner's own pods only, decided by the leader (``noderemedy_runner.loops.respread`` does the I/O).

The rule: evict one pod when

1. the Deployment is *settled*: every runner pod is Ready, none is terminating
   (``deletionTimestamp``) or unscheduled; pods that ended (phase ``Succeeded``/``Failed``) are
   ignored, the ReplicaSet has replaced them;
2. some node hosts two or more runner pods; and
3. some *eligible* node hosts none: Ready is True, not ``spec.unschedulable``, every
   ``NoSchedule``/``NoExecute`` taint tolerated by the runner pod for good (a toleration with
   ``tolerationSeconds`` only delays an eviction and does not count; the out-of-service taint and
   ``unreachable``/``not-ready`` are taints like any other) and its labels match the pod's
   ``nodeSelector``.

The pod evicted is never the leader's own; it is the newest (``creationTimestamp``, then the name)
of the other pods on the most crowded node (ties: the node name first in order). Its replacement
goes where the scheduler's topology spread and anti-affinity put it: on the free node.

No I/O, no clock: the caller passes what it listed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from noderemedy_runner.times import parse_time

#: Taint effects that keep a pod off a node (``PreferNoSchedule`` does not).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: Pod phases of a pod that has ended (it runs nowhere and the ReplicaSet has replaced it).
ENDED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class RunnerPod:
    """One runner pod as listed.

    Attributes:
        name: ``metadata.name``.
        node: ``spec.nodeName``; None while unscheduled.
        ready: the pod's ``Ready`` condition is True.
        terminating: ``metadata.deletionTimestamp`` is set.
        created: ``metadata.creationTimestamp`` in seconds since the epoch.
        phase: ``status.phase`` (``Pending``, ``Running``, ``Succeeded``, ``Failed``, ...).
    """

    name: str
    node: str | None
    ready: bool
    terminating: bool = False
    created: float = 0.0
    phase: str = "Running"


@dataclass(frozen=True)
class Taint:
    """A node taint: ``key``, ``value`` (may be empty), ``effect``."""

    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True)
class Toleration:
    """A pod toleration as in ``v1.Toleration``: an empty ``key`` with ``Exists`` matches every
    key, an empty ``effect`` every effect; ``seconds`` is ``tolerationSeconds`` (None: for good)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    seconds: float | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration keeps ``taint`` from blocking the pod for good
        (``v1.Toleration.ToleratesTaint``; a ``NoExecute`` toleration with ``seconds`` does not)."""
        if self.effect and self.effect != taint.effect:
            return False
        if taint.effect == "NoExecute" and self.seconds is not None:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True)
class NodeView:
    """One node as listed: ``name``, Ready True (``ready``), ``spec.unschedulable``, its taints
    and its labels."""

    name: str
    ready: bool
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    """Where a runner pod may run: the pod's ``nodeSelector`` and tolerations (the leader's own
    pod's: the replicas share one template)."""

    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class Eviction:
    """The decision: evict ``pod`` from ``node``, which hosts ``crowded`` runner pods, while the
    eligible nodes ``free`` (sorted) host none."""

    pod: str
    node: str
    crowded: int
    free: tuple[str, ...]

    def describe(self) -> str:
        """One line for a log and an Event."""
        return (
            f"evicting runner replica {self.pod} from {self.node}, which hosts {self.crowded} "
            f"replicas while {', '.join(self.free)} hosts none: a standby that shares the "
            "leader's node fails with it; its replacement is scheduled on a free node"
        )


def settled(pods: Iterable[RunnerPod]) -> bool:
    """Whether the Deployment is settled (module docs, 1): every pod that has not ended is
    scheduled, Ready and not terminating. False when no pod is running."""
    live = [p for p in pods if p.phase not in ENDED_PHASES]
    return bool(live) and all(p.ready and not p.terminating and p.node for p in live)


def crowded_nodes(pods: Iterable[RunnerPod]) -> dict[str, int]:
    """Node name → number of runner pods, for the nodes that host two or more (ended pods not
    counted). A cheap first look: the nodes need listing only when this is not empty."""
    counts = Counter(p.node for p in pods if p.node and p.phase not in ENDED_PHASES)
    return {node: n for node, n in counts.items() if n >= 2}


def eligible(node: NodeView, placement: Placement) -> bool:
    """Whether a runner pod may be scheduled on ``node`` and stay there (module docs, 3)."""
    if not node.ready or node.unschedulable:
        return False
    if any(node.labels.get(k) != v for k, v in placement.node_selector.items()):
        return False
    return all(
        any(t.tolerates(taint) for t in placement.tolerations)
        for taint in node.taints
        if taint.effect in BLOCKING_EFFECTS
    )


def choose_eviction(
    pods: Sequence[RunnerPod], nodes: Iterable[NodeView], *, leader: str, placement: Placement
) -> Eviction | None:
    """The one runner pod to evict, or None (module docs).

    Args:
        pods: every pod of the runner's Deployment (by its ``app.kubernetes.io/name`` label).
        nodes: the cluster's nodes (only those the ``nodeSelector`` selects are needed).
        leader: the leader's own pod name, never evicted.
        placement: the runner pod's ``nodeSelector`` and tolerations.
    """
    if not settled(pods):
        return None
    crowded = crowded_nodes(pods)
    if not crowded:
        return None
    used = {p.node for p in pods if p.node and p.phase not in ENDED_PHASES}
    free = tuple(sorted(n.name for n in nodes if n.name not in used and eligible(n, placement)))
    if not free:
        return None
    # the most crowded node first, then by name; on it, the newest pod that is not the leader
    for node, count in sorted(crowded.items(), key=lambda item: (-item[1], item[0])):
        candidates = [p for p in pods if p.node == node and p.name != leader and p.phase not in ENDED_PHASES]
        if candidates:
            victim = max(candidates, key=lambda p: (p.created, p.name))
            return Eviction(victim.name, node, count, free)
    return None


# --- reading the API's JSON -----------------------------------------------------------------------


def pod_view(pod: Mapping[str, Any]) -> RunnerPod:
    """A :class:`RunnerPod` from a Pod's JSON (``metadata``, ``spec``, ``status``)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    created = meta.get("creationTimestamp")
    return RunnerPod(
        name=str(meta.get("name", "")),
        node=(pod.get("spec") or {}).get("nodeName") or None,
        ready=conds.get("Ready") == "True",
        terminating=meta.get("deletionTimestamp") is not None,
        created=parse_time(created) if isinstance(created, str) else 0.0,
        phase=str(status.get("phase") or "Pending"),
    )


def node_view(node: Mapping[str, Any]) -> NodeView:
    """A :class:`NodeView` from a Node's JSON."""
    spec = node.get("spec") or {}
    conds = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    return NodeView(
        name=str((node.get("metadata") or {}).get("name", "")),
        ready=conds.get("Ready") == "True",
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(
            Taint(str(t.get("key") or ""), str(t.get("effect") or ""), str(t.get("value") or ""))
            for t in spec.get("taints") or []
        ),
        labels={str(k): str(v) for k, v in ((node.get("metadata") or {}).get("labels") or {}).items()},
    )


def placement_of(pod: Mapping[str, Any]) -> Placement:
    """The :class:`Placement` of a Pod's JSON (``spec.nodeSelector``, ``spec.tolerations``)."""
    spec = pod.get("spec") or {}
    tolerations = tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
            seconds=float(t["tolerationSeconds"]) if t.get("tolerationSeconds") is not None else None,
        )
        for t in spec.get("tolerations") or []
    )
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    return Placement(selector, tolerations)


__all__ = [
    "BLOCKING_EFFECTS",
    "ENDED_PHASES",
    "Eviction",
    "NodeView",
    "Placement",
    "RunnerPod",
    "Taint",
    "Toleration",
    "choose_eviction",
    "crowded_nodes",
    "eligible",
    "node_view",
    "placement_of",
    "pod_view",
    "settled",
]
