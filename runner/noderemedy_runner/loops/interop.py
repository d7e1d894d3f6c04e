"""What the start guards (:mod:`noderemedy_runner.machines.guards`) need from the cluster, read when a
NodeFence is about to start a fencing step: the Nodes (control-plane role, Ready), the other live
NodeFences, node-maintenance-operator's NodeMaintenance objects (when its CRD is installed) and
the node's medik8s Lease. Every request goes through the runner's Kubernetes layer (a timeout on
each call, :class:`~noderemedy_runner.kube.errors.KubeError`); errors propagate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from noderemedy_runner.kube.client import api as kapi
from noderemedy_runner.kube.errors import Conflict, NotFound
from noderemedy_runner.kube.resources import KubeIO, ready_condition
from noderemedy_runner.loops.memory import out_of_service_tainted
from noderemedy_runner.machines.actions import Step
from noderemedy_runner.machines.conditions import parse_time
from noderemedy_runner.machines.guards import (
    LEASE_HOLDER,
    MEDIK8S_LEASE_NAMESPACE,
    NODEMAINTENANCE,
    Fleet,
    Hold,
    Peer,
    foreign_holder,
    is_control_plane,
    maintenance_of,
    medik8s_lease_name,
    start_hold,
)
from noderemedy_runner.machines.nodefence import NodeFencePolicy, NodeFenceStatus, is_terminal


def _items(resp: Any) -> list[dict[str, Any]]:
    return list(json.loads(resp.data).get("items") or [])


def list_nodemaintenances(api: client.ApiClient) -> list[dict[str, Any]]:
    """Every NodeMaintenance (cluster-scoped); [] when node-maintenance-operator's CRD is absent."""
    group, version, plural, _kind = NODEMAINTENANCE
    try:
        resp = kapi(api, client.CustomObjectsApi).list_cluster_custom_object(
            group, version, plural, _preload_content=False
        )
    except NotFound:
        return []
    return _items(resp)


def read_medik8s_lease(api: client.ApiClient, node: str) -> dict[str, Any] | None:
    """The node's medik8s Lease ``medik8s-leases/node-<name>``, or None (no Lease, no namespace)."""
    try:
        resp = kapi(api, client.CoordinationV1Api).read_namespaced_lease(
            medik8s_lease_name(node), MEDIK8S_LEASE_NAMESPACE, _preload_content=False,
        )  # fmt: skip
    except NotFound:
        return None
    data = json.loads(resp.data)  # type: ignore[attr-defined]
    return data if isinstance(data, dict) else None


#: Seconds a medik8s Lease taken by noderemedy lasts; renewed at every step start, deleted when
#: the NodeFence comes to rest.
MEDIK8S_LEASE_SECONDS = 3600


def _lease(
    node: Mapping[str, Any], acquire: datetime, renew: datetime, transitions: int, rv: str | None = None
) -> client.V1Lease:
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    return client.V1Lease(
        metadata=client.V1ObjectMeta(
            name=medik8s_lease_name(name),
            namespace=MEDIK8S_LEASE_NAMESPACE,
            owner_references=[
                client.V1OwnerReference(
                    api_version="v1", kind="Node", name=name, uid=str(meta.get("uid", ""))
                )
            ],
            resource_version=rv,
        ),
        spec=client.V1LeaseSpec(
            holder_identity=LEASE_HOLDER,
            lease_duration_seconds=MEDIK8S_LEASE_SECONDS,
            acquire_time=acquire,
            renew_time=renew,
            lease_transitions=transitions,
        ),
    )


def take_medik8s_lease(
    api: client.ApiClient, node: Mapping[str, Any], now: float, current: Mapping[str, Any] | None
) -> str | None:
    """Take or renew ``medik8s-leases/node-<name>`` for :data:`~noderemedy_runner.machines.guards.LEASE_HOLDER`,
    as medik8s' lease manager ``RequestLease`` does (create; renew our own; take over an expired
    one with ``leaseTransitions + 1``; owner reference to the Node), so NodeHealthCheck,
    node-maintenance-operator and the medik8s remediators see that we act on the node. Returns the
    holder of a valid foreign Lease (nothing written), else None. A missing ``medik8s-leases``
    namespace (no medik8s component installed) is not an error: nothing to coordinate with.

    ``current``: the Lease as the caller read it (:func:`read_medik8s_lease`: a dict, or None when
    there is none). The write is conditional on that read (a create fails on
    an existing Lease, a replace carries its resourceVersion), so a change since the read is a 409
    and answers "changed concurrently", as a lost race does."""
    name = str((node.get("metadata") or {}).get("name", ""))
    coord = kapi(api, client.CoordinationV1Api)
    stamp = datetime.fromtimestamp(now, UTC)
    if current is None:
        try:
            coord.create_namespaced_lease(MEDIK8S_LEASE_NAMESPACE, _lease(node, stamp, stamp, 0))
        except NotFound:  # no medik8s-leases namespace
            return None
        except Conflict:  # someone was faster: look again next time
            return "unknown (created concurrently)"
        return None
    holder = foreign_holder(current, now)
    if holder is not None:
        return holder
    spec = current.get("spec") or {}
    meta = current.get("metadata") or {}
    transitions = int(spec.get("leaseTransitions") or 0)
    ours = spec.get("holderIdentity") == LEASE_HOLDER and spec.get("acquireTime")
    acquire = datetime.fromisoformat(str(spec["acquireTime"]).replace("Z", "+00:00")) if ours else stamp
    body = _lease(node, acquire, stamp, transitions if ours else transitions + 1, meta.get("resourceVersion"))
    try:
        coord.replace_namespaced_lease(medik8s_lease_name(name), MEDIK8S_LEASE_NAMESPACE, body)
    except Conflict:
        return "unknown (changed concurrently)"
    return None


def release_medik8s_lease(api: client.ApiClient, node: str) -> None:
    """Delete ``medik8s-leases/node-<name>`` if we hold it (medik8s' ``InvalidateLease``)."""
    current = read_medik8s_lease(api, node)
    if current is None or (current.get("spec") or {}).get("holderIdentity") != LEASE_HOLDER:
        return
    try:
        kapi(api, client.CoordinationV1Api).delete_namespaced_lease(
            medik8s_lease_name(node), MEDIK8S_LEASE_NAMESPACE
        )
    except NotFound:
        pass


def peer_of(
    obj: Mapping[str, Any],
    control_plane: frozenset[str],
    max_restarts: int,
    released: frozenset[str] = frozenset(),
) -> Peer | None:
    """A live NodeFence as a :class:`~noderemedy_runner.machines.guards.Peer`; None when it rests (Final,
    Error at its restart limit) or its status is unreadable. ``released``: the nodes that carry the
    out-of-service taint. A NodeFence whose node is among them is past its power fence (the node
    is verifiably off and its workloads are gone), so it no longer counts as power-fencing
    (``Peer.power``) while it powers the node back on: the ``PowerFencingLimit`` guard
    (:func:`~noderemedy_runner.machines.guards.start_hold`) bounds the nodes being cut off at
    once, and holding the next nodes' fences while released nodes boot again kept a failure
    larger than the limit waiting for those power-ons. The set may be up to a Node list's age
    old (:meth:`~noderemedy_runner.kube.resources.KubeIO.recent_nodes`): a node tainted since
    counts a little longer, never shorter."""
    meta = obj.get("metadata") or {}
    node = str((obj.get("spec") or {}).get("node", ""))
    try:
        s = NodeFenceStatus.from_dict(obj.get("status"))
    except ValueError:
        return None
    if is_terminal(s, NodeFencePolicy(max_restarts=max_restarts)):
        return None
    run = s.current_run
    waiting = None
    if run is None and s.status == "New":
        waiting = "Isolation"
    elif run is None and s.status == "Running":
        waiting = "PowerManagement"
    stamp = meta.get("creationTimestamp")
    return Peer(
        node=node,
        created=parse_time(stamp) if isinstance(stamp, str) else 0.0,
        name=str(meta.get("name", "")),
        control_plane=node in control_plane,
        started=run is not None or s.status in ("Running", "Done", "Error"),
        power=run is not None and run.step == "PowerManagement" and node not in released,
        waiting_for=waiting,  # type: ignore[arg-type]
    )


_STEPS: tuple[Step, ...] = ("Isolation", "PowerManagement")


def start_holds(
    kube: KubeIO,
    obj: Mapping[str, Any],
    node: str,
    now: float,
    max_restarts: int,
    max_power_fencing: int,
    lease: Mapping[str, Any] | None,
) -> dict[str, Hold]:
    """For NodeFence ``obj`` of ``node``: per step (Isolation, PowerManagement), the guard that
    holds it now, if any (:func:`noderemedy_runner.machines.guards.start_hold`). ``lease``: the
    node's medik8s Lease as the caller read it (:func:`read_medik8s_lease`; None: none).

    The NodeMaintenances are read before the node itself: an admin who hands a node from a
    NodeMaintenance over to the maintenance annotation sets the annotation first, then deletes the
    NodeMaintenance; read in this order, a list that no longer shows the NodeMaintenance is
    followed by a Node read that already shows the annotation, so no instant looks free. The
    fleet's Ready, control-plane and out-of-service tainted nodes, and the other NodeFences (the
    concurrency limits), come from the watcher's watches of them
    (:meth:`~noderemedy_runner.kube.resources.KubeIO.recent_nodes`,
    :meth:`~noderemedy_runner.kube.resources.KubeIO.recent_nodefences`: a watch event behind the
    API, where a list under a rack's load was seconds behind), or from lists until the watches
    have listed."""
    api = kube.api
    nodemaintenances = list_nodemaintenances(api)
    this = kube.get_node(node)
    nodes = kube.recent_nodes()
    control_plane = frozenset(str(n["metadata"]["name"]) for n in nodes if is_control_plane(n))
    ready = frozenset(str(n["metadata"]["name"]) for n in nodes if ready_condition(n)[0])
    released = frozenset(str(n["metadata"]["name"]) for n in nodes if out_of_service_tainted(n))
    meta = obj.get("metadata") or {}
    peers = tuple(
        p
        for o in kube.recent_nodefences()
        if (o.get("metadata") or {}).get("uid") != meta.get("uid")
        for p in (peer_of(o, control_plane, max_restarts, released),)
        if p is not None
    )
    maintenance: dict[str, str] = {}
    if this is not None:
        why = maintenance_of(this, nodemaintenances)
        if why is not None:
            maintenance[node] = why
    holder = foreign_holder(lease, now)
    fleet = Fleet(
        control_plane=control_plane,
        ready=ready,
        peers=peers,
        maintenance=maintenance,
        foreign_leases={node: holder} if holder else {},
    )
    stamp = meta.get("creationTimestamp")
    created = parse_time(stamp) if isinstance(stamp, str) else now
    name = str(meta.get("name", ""))
    out: dict[str, Hold] = {}
    for step in _STEPS:
        hold = start_hold(node, name, created, step, fleet, max_power_fencing)
        if hold is not None:
            out[step] = hold
    return out


def claim_start(
    kube: KubeIO,
    obj: Mapping[str, Any],
    node_obj: Mapping[str, Any] | None,
    now: float,
    max_restarts: int,
    max_power_fencing: int,
) -> dict[str, Hold]:
    """Whether NodeFence ``obj`` may start a step now, and if so, the node's medik8s Lease taken
    for it: per step (Isolation, PowerManagement), the hold of :func:`start_holds`; when none holds
    and the Node exists (``node_obj``, as the reconcile read it), :func:`take_medik8s_lease`, and a
    Lease another holder keeps holds both steps (``LeaseHeld``). {}: the step may start.

    The Lease is read once, before the guards' reads, for both the guard and the write (two reads
    before): the write is conditional on that read, so a Lease changed in between fails it with a
    409 and holds the step. API errors propagate
    (:class:`~noderemedy_runner.kube.errors.KubeError`)."""
    node = str((obj.get("spec") or {}).get("node", ""))
    lease = read_medik8s_lease(kube.api, node)
    holds = start_holds(kube, obj, node, now, max_restarts, max_power_fencing, lease)
    if holds or node_obj is None:
        return holds
    holder = take_medik8s_lease(kube.api, node_obj, now, lease)
    if holder is None:
        return {}
    return {
        step: Hold("LeaseHeld", f"the medik8s Lease of node {node} is held by {holder}") for step in _STEPS
    }


__all__ = [
    "claim_start",
    "list_nodemaintenances",
    "peer_of",
    "read_medik8s_lease",
    "release_medik8s_lease",
    "take_medik8s_lease",
    "start_holds",
]
