"""Guards that decide whether a NodeFence may *start* a fencing step now (pure; no I/O, no clock).

A NodeFence asks before it commits to its Isolation or PowerManagement step; a step already
committed runs on (a power cycle is never left half done). The first guard that says no holds the
NodeFence with ``Processing=False`` and its reason, and it asks again every few seconds:

``NodeUnderMaintenance``
    A NodeMaintenance (node-maintenance-operator, ``nodemaintenance.medik8s.io``) names the node,
    or the node carries the annotation :data:`MAINTENANCE_ANNOTATION` (``"true"``). An admin is
    working on the machine; fencing it would fight the admin.
``LeaseHeld``
    Another remediator holds the node's medik8s Lease (``medik8s-leases/node-<name>``, the
    convention of medik8s' common lease manager used by NodeHealthCheck, node-maintenance-operator
    and the fence-agents/self-node remediations): a valid Lease (renewTime + leaseDurationSeconds
    not past, renewTime not in the future) whose holder is not :data:`LEASE_HOLDER`.
``EtcdQuorumGuard``
    The node is a control-plane node and fencing it could break etcd quorum. Every control-plane
    node is taken to run an etcd member (stacked etcd, kubeadm's default) and, since a NotReady
    kubelet does not prove a dead etcd, the node's own member is taken to be up. With ``n``
    control-plane nodes the quorum is ``n // 2 + 1``; fencing is refused when the other Ready
    control-plane nodes are fewer than the quorum *and* adding this node's member would reach it
    (this fence could be the one that breaks it). When quorum is lost whatever this node's member
    does, fencing is allowed: bringing members back is the way out, one node at a time.
``ControlPlaneRemediationInProgress``
    At most one control-plane node is remediated at a time (NodeHealthCheck's rule). A
    control-plane NodeFence waits while another control-plane node's NodeFence has started
    fencing, or when another one waiting to start is ahead of it (older, then by name): so when
    three control-plane nodes fail at once, exactly one goes first.
``PowerFencingLimit``
    At most ``max_power_fencing`` nodes being power-fenced at once (the runner's
    ``--max-power-fencing``; the node remedy seed's "process at most N nodes at a time"), the
    same first-come order deciding who waits. A node is being power-fenced from the start of its
    PowerManagement step until its workloads are released (its node carries the out-of-service
    taint, :attr:`Peer.power`): it is then verifiably off, and powering it back on disrupts
    nothing, so the next node's fence does not wait for that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from noderemedy_runner.machines.actions import Step
from noderemedy_runner.machines.conditions import parse_time

#: Annotation on a Node by which an admin says the node is under maintenance (value ``"true"``).
MAINTENANCE_ANNOTATION = "remediation.noderemedy.io/maintenance"
#: node-maintenance-operator's NodeMaintenance (group, version, plural, kind); cluster-scoped.
NODEMAINTENANCE = ("nodemaintenance.medik8s.io", "v1beta1", "nodemaintenances", "NodeMaintenance")
#: medik8s' lease namespace (common/pkg/lease: ``medik8s-leases``, overridable there by env).
MEDIK8S_LEASE_NAMESPACE = "medik8s-leases"
#: The holderIdentity noderemedy writes on medik8s Leases.
LEASE_HOLDER = "noderemedy-runner"
#: The label that makes a node a control-plane node (kubeadm).
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
#: Seconds between looks at a held NodeFence.
HOLD_RECHECK_SECONDS = 5.0


def medik8s_lease_name(node: str) -> str:
    """``node-<name>``: medik8s' lease name for a Node (``<lowercase kind>-<name>``)."""
    return f"node-{node}".lower()


@dataclass(frozen=True)
class Hold:
    """Why a NodeFence may not start a step now: ``reason`` (CamelCase) and ``message``."""

    reason: str
    message: str


@dataclass(frozen=True)
class Peer:
    """Another node's NodeFence as the guards see it: ``node``, ``created`` (seconds; its
    creationTimestamp), ``name``, ``control_plane`` (its node is a control-plane node),
    ``started`` (it committed a fencing step: it is past waiting), ``power`` (it is in, or
    committed to, its PowerManagement step and its node does not carry the out-of-service taint
    yet), ``waiting_for`` (the step it waits to start, if any)."""

    node: str
    created: float
    name: str
    control_plane: bool = False
    started: bool = False
    power: bool = False
    waiting_for: Step | None = None

    @property
    def order(self) -> tuple[float, str]:
        """First come, first served: (creation time, name)."""
        return self.created, self.name


@dataclass(frozen=True)
class Fleet:
    """What the guards know about the cluster: ``control_plane`` (names of the control-plane
    nodes), ``ready`` (names of the Ready nodes), ``peers`` (the other live NodeFences, one per
    node), ``maintenance`` (node → why it is under maintenance), ``foreign_leases`` (node → the
    holder of a valid medik8s Lease that is not ours)."""

    control_plane: frozenset[str] = frozenset()
    ready: frozenset[str] = frozenset()
    peers: tuple[Peer, ...] = ()
    maintenance: Mapping[str, str] = field(default_factory=dict)
    foreign_leases: Mapping[str, str] = field(default_factory=dict)


def start_hold(
    node: str, name: str, created: float, step: Step, fleet: Fleet, max_power_fencing: int = 1
) -> Hold | None:
    """The first guard (module docs, in that order) that keeps NodeFence ``name`` of ``node``
    (created at ``created`` seconds) from starting ``step`` now, or None. Raises ValueError for
    ``max_power_fencing`` < 1."""
    if max_power_fencing < 1:
        raise ValueError(f"max_power_fencing = {max_power_fencing} must be >= 1")
    why = fleet.maintenance.get(node)
    if why is not None:
        return Hold("NodeUnderMaintenance", f"node {node} is under maintenance ({why}): it is not fenced")
    holder = fleet.foreign_leases.get(node)
    if holder is not None:
        return Hold(
            "LeaseHeld",
            f"{MEDIK8S_LEASE_NAMESPACE}/{medik8s_lease_name(node)} is held by {holder}: another "
            "remediator acts on this node",
        )
    me = (created, name)
    others = [p for p in fleet.peers if p.node != node]
    if node in fleet.control_plane:
        n = len(fleet.control_plane)
        quorum = n // 2 + 1
        ready_others = len((fleet.ready & fleet.control_plane) - {node})
        if ready_others < quorum <= ready_others + 1:
            return Hold(
                "EtcdQuorumGuard",
                f"control-plane node {node}: {ready_others} other control-plane node(s) Ready of {n}, "
                f"etcd quorum {quorum}; fencing it could break quorum if its etcd member still runs",
            )
        busy = sorted(p.node for p in others if p.control_plane and p.started)
        if busy:
            return Hold(
                "ControlPlaneRemediationInProgress",
                f"control-plane node {', '.join(busy)} is being remediated: one control-plane node at a time",
            )
        ahead = sorted(p.node for p in others if p.control_plane and p.waiting_for and p.order < me)
        if ahead:
            return Hold(
                "ControlPlaneRemediationInProgress",
                f"control-plane node {ahead[0]} goes first: one control-plane node at a time",
            )
    if step == "PowerManagement":
        powering = sorted(p.node for p in others if p.power)
        ahead = sorted(p.node for p in others if p.waiting_for == "PowerManagement" and p.order < me)
        if len(powering) + len(ahead) >= max_power_fencing:
            return Hold(
                "PowerFencingLimit",
                f"at most {max_power_fencing} node(s) power-fenced at a time: "
                f"{', '.join(powering + ahead)} first",
            )
    return None


def lease_valid(lease: Mapping[str, Any], now: float) -> bool:
    """medik8s' ``isValidLease``: renewTime + leaseDurationSeconds is not past and renewTime is
    not in the future. A Lease without either is not valid."""
    spec = lease.get("spec") or {}
    renew, duration = spec.get("renewTime"), spec.get("leaseDurationSeconds")
    if not renew or duration is None:
        return False
    renewed = _micro_time(str(renew))
    return renewed <= now <= renewed + float(duration)


def _micro_time(value: str) -> float:
    """RFC 3339 with optional fractional seconds (metav1.MicroTime) → epoch seconds."""
    try:
        return parse_time(value)
    except ValueError:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def foreign_holder(lease: Mapping[str, Any] | None, now: float) -> str | None:
    """The holder of ``lease`` when it is valid and not ours, else None."""
    if not lease or not lease_valid(lease, now):
        return None
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "unknown")
    return None if holder == LEASE_HOLDER else holder


def maintenance_of(node: Mapping[str, Any], nodemaintenances: Sequence[Mapping[str, Any]]) -> str | None:
    """Why ``node`` (a Node object) is under maintenance, or None: a NodeMaintenance whose
    ``spec.nodeName`` is it (and that is not being deleted), or the annotation
    :data:`MAINTENANCE_ANNOTATION` = ``"true"``."""
    meta = node.get("metadata") or {}
    name = meta.get("name")
    for nm in nodemaintenances:
        nm_meta = nm.get("metadata") or {}
        if (nm.get("spec") or {}).get("nodeName") == name and not nm_meta.get("deletionTimestamp"):
            reason = (nm.get("spec") or {}).get("reason")
            return f"NodeMaintenance {nm_meta.get('name')}" + (f": {reason}" if reason else "")
    if str((meta.get("annotations") or {}).get(MAINTENANCE_ANNOTATION, "")).strip().lower() == "true":
        return f"annotation {MAINTENANCE_ANNOTATION}=true"
    return None


def is_control_plane(node: Mapping[str, Any]) -> bool:
    """Whether a Node object carries a control-plane role label (kubeadm)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(key in labels for key in CONTROL_PLANE_LABELS)


__all__ = [
    "CONTROL_PLANE_LABELS",
    "HOLD_RECHECK_SECONDS",
    "LEASE_HOLDER",
    "MAINTENANCE_ANNOTATION",
    "MEDIK8S_LEASE_NAMESPACE",
    "NODEMAINTENANCE",
    "Fleet",
    "Hold",
    "Peer",
    "foreign_holder",
    "is_control_plane",
    "lease_valid",
    "maintenance_of",
    "medik8s_lease_name",
    "start_hold",
]
