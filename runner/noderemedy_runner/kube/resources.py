"""The reconcilers' typed access to the objects they need: custom resources, Nodes, ConfigMaps,
Pods, VolumeAttachments; status writes with resourceVersion conflicts; finalizers; Machine conditions.

Objects are returned as plain JSON dicts (``_preload_content=False``), the shape the pure
machines and the CRDs use. Status writes are a PUT of the whole ``.status`` on the status
subresource carrying the object's ``metadata.resourceVersion`` (a merge patch would keep fields
the machine dropped, such as ``currentRun``); a 409 raises
:class:`~noderemedy_runner.kube.errors.Conflict` so the caller re-reads and decides again
(DESIGN.md invariant 4: status is never lost or overwritten blindly). Every other failure raises
:class:`~noderemedy_runner.kube.errors.KubeError`; every call has a timeout
(:func:`~noderemedy_runner.kube.client.api`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from noderemedy_runner.kube import retry
from noderemedy_runner.kube.client import api
from noderemedy_runner.kube.configmaps import ConfigMapCache
from noderemedy_runner.kube.errors import KubeError, NotFound
from noderemedy_runner.kube.events import EventRecorder
from noderemedy_runner.kube.watched import WatchedList
from noderemedy_runner.times import parse_time

#: (group, version, plural, kind) of the custom resources the runner reads or writes.
CRD = tuple[str, str, str, str]
NODEFENCE: CRD = ("remediation.noderemedy.io", "v1alpha1", "nodefences", "NodeFence")
METAL3REMEDIATION: CRD = (
    "infrastructure.cluster.x-k8s.io",
    "v1beta1",
    "metal3remediations",
    "Metal3Remediation",
)
BAREMETALHOST: CRD = ("metal3.io", "v1alpha1", "baremetalhosts", "BareMetalHost")
MACHINE: CRD = ("cluster.x-k8s.io", "v1beta1", "machines", "Machine")
#: Seconds a list of every Node serves the callers of :meth:`KubeIO.recent_nodes` that allow it.
NODE_LIST_SECONDS = 2.0


def read_json(resp: Any) -> dict[str, Any]:
    """The JSON object of a raw answer (a call made with ``_preload_content=False``); KubeError
    when it is not an object."""
    data = json.loads(resp.data)
    if not isinstance(data, dict):
        raise KubeError(f"unexpected answer: {type(data).__name__}")
    return data


def ready_condition(node: Mapping[str, Any]) -> tuple[bool, float | None]:
    """``(ready, since)`` from a Node's ``Ready`` condition: ready is status True; ``since`` its
    ``lastTransitionTime`` in seconds (None when the condition is absent)."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            since = cond.get("lastTransitionTime")
            return cond.get("status") == "True", parse_time(since) if since else None
    return False, None


def has_taint(node: Mapping[str, Any], key: str, effect: str) -> bool:
    """Whether the node carries a taint with this key and effect."""
    return any(
        t.get("key") == key and t.get("effect") == effect
        for t in (node.get("spec") or {}).get("taints") or []
    )


class KubeIO:
    """The reconcilers' API access on ``api_client``; ``events`` records their Events (in the
    calling thread, so an Event is written before the next status change)."""

    def __init__(self, api_client: client.ApiClient, events: EventRecorder | None = None) -> None:
        self.api = api_client
        self.core = api(api_client, client.CoreV1Api)
        self.custom = api(api_client, client.CustomObjectsApi)
        self.storage = api(api_client, client.StorageV1Api)
        self.events = events or EventRecorder(api_client)
        self._nodes: tuple[float, tuple[dict[str, Any], ...]] | None = None
        self._nodes_lock = threading.Lock()
        #: the watched ConfigMaps of one namespace (:meth:`get_configmap_data` reads them there
        #: first); None: every read goes to the API
        self.configmaps: ConfigMapCache | None = None
        #: every Node's guard facts (:func:`~noderemedy_runner.kube.watched.node_facts`) and every
        #: NodeFence, kept by watches (:meth:`recent_nodes`, :meth:`recent_nodefences` answer from
        #: them once they have listed); None: listed at each call
        self.watched_nodes: WatchedList | None = None
        self.watched_nodefences: WatchedList | None = None

    # --- reads -----------------------------------------------------------------------------
    def list_custom(self, crd: CRD, namespace: str | None = None) -> list[dict[str, Any]]:
        """All objects of ``crd``; [] when the CRD is not installed."""
        group, version, plural, _kind = crd
        try:
            if namespace is None:
                resp = self.custom.list_cluster_custom_object(group, version, plural, _preload_content=False)
            else:
                resp = self.custom.list_namespaced_custom_object(
                    group, version, namespace, plural, _preload_content=False
                )
        except NotFound:
            return []
        return [dict(i) for i in read_json(resp).get("items") or []]

    def get_custom(self, crd: CRD, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """One object of ``crd``, or None when it does not exist."""
        group, version, plural, _kind = crd
        try:
            if namespace is None:
                resp = self.custom.get_cluster_custom_object(
                    group, version, plural, name, _preload_content=False
                )
            else:
                resp = self.custom.get_namespaced_custom_object(
                    group, version, namespace, plural, name, _preload_content=False
                )
        except NotFound:
            return None
        return read_json(resp)

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The Node, or None when it does not exist."""
        try:
            return read_json(self.core.read_node(name, _preload_content=False))
        except NotFound:
            return None

    def recent_nodes(self, max_age: float = NODE_LIST_SECONDS) -> tuple[dict[str, Any], ...]:
        """Every Node's name, labels, taints and conditions: from :attr:`watched_nodes` once it has
        listed, else from a list made at most ``max_age`` seconds ago (monotonic clock) by any
        caller of this KubeIO, else listed now. For fleet-wide counts (which nodes are Ready, which
        are control-plane, which released): when a rack fails, its NodeFences start their steps
        within seconds of each other, and one list of 1,000 Nodes each made the API server time
        out. Callers waiting for a list in progress take its result. Not for a node's own fields
        that must be read after something else (read :meth:`get_node`). A tuple: every caller
        gets the same one, which none may change."""
        watched = self.watched_nodes.items() if self.watched_nodes is not None else None
        if watched is not None:
            return watched
        with self._nodes_lock:
            if self._nodes is None or time.monotonic() - self._nodes[0] > max_age:
                items = read_json(self.core.list_node(_preload_content=False)).get("items") or []
                self._nodes = (time.monotonic(), tuple(items))
            return self._nodes[1]

    def recent_nodefences(self) -> tuple[dict[str, Any], ...]:
        """Every NodeFence: from :attr:`watched_nodefences` once it has listed (a watch event
        behind the API), else listed now. The same dicts to every caller: none may change them."""
        watched = self.watched_nodefences.items() if self.watched_nodefences is not None else None
        if watched is not None:
            return watched
        return tuple(self.list_custom(NODEFENCE))

    def get_configmap_data(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``data`` of ConfigMap ``namespace/name`` ({} when empty), or None when it does not exist.
        From :attr:`configmaps` when it watches ``namespace`` and holds the name, else read now."""
        cache = self.configmaps
        if cache is not None and cache.namespace == namespace:
            cached = cache.data(name)
            if cached is not None:
                return cached
        try:
            obj = read_json(self.core.read_namespaced_config_map(name, namespace, _preload_content=False))
        except NotFound:
            return None
        return dict(obj.get("data") or {})

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Pods bound to ``node`` (field selector ``spec.nodeName``), any phase."""
        resp = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False
        )
        return [dict(p) for p in read_json(resp).get("items") or []]

    def volume_attachments(self) -> list[dict[str, Any]]:
        """Every ``storage.k8s.io/v1`` VolumeAttachment (cluster-scoped; the API cannot select
        them by ``spec.nodeName``, so the caller filters)."""
        resp = self.storage.list_volume_attachment(_preload_content=False)
        return [dict(v) for v in read_json(resp).get("items") or []]

    def kubelet_running_pods(self, node: str) -> list[dict[str, Any]]:
        """The pods whose containers ``node``'s kubelet runs now, as the container runtime reports
        them (the kubelet's ``/runningpods/``, through the API server's node proxy; RBAC
        ``nodes/proxy`` get): ``metadata`` with ``name``, ``namespace`` and ``uid``. Unlike the API,
        it still lists a pod the API force-deleted while its containers run."""
        resp = self.core.connect_get_node_proxy_with_path(node, "runningpods/", _preload_content=False)
        return [dict(p) for p in read_json(resp).get("items") or []]

    # --- writes ----------------------------------------------------------------------------
    def replace_status(self, crd: CRD, obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
        """PUT ``status`` as the whole ``.status`` of ``obj`` with its resourceVersion; returns the
        updated object. Raises :class:`~noderemedy_runner.kube.errors.Conflict` on 409."""
        group, version, plural, kind = crd
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace")
        body: dict[str, Any] = {
            "apiVersion": obj.get("apiVersion", f"{group}/{version}"),
            "kind": obj.get("kind", kind),
            "metadata": {"name": name, "resourceVersion": meta.get("resourceVersion")},
            "status": dict(status),
        }
        if namespace:
            body["metadata"]["namespace"] = namespace
            resp = self.custom.replace_namespaced_custom_object_status(
                group, version, namespace, plural, name, body, _preload_content=False
            )
        else:
            resp = self.custom.replace_cluster_custom_object_status(
                group, version, plural, name, body, _preload_content=False
            )
        return read_json(resp)

    def patch_finalizers(
        self, crd: CRD, obj: Mapping[str, Any], finalizer: str, present: bool
    ) -> dict[str, Any]:
        """Add or remove ``finalizer`` of ``obj`` (namespaced, or cluster-scoped when it has no
        namespace) with a JSON merge patch carrying the resourceVersion
        (:class:`~noderemedy_runner.kube.errors.Conflict` on 409)."""
        group, version, plural, _kind = crd
        meta = obj.get("metadata") or {}
        current = list(meta.get("finalizers") or [])
        wanted = [f for f in current if f != finalizer] + ([finalizer] if present else [])
        body = {"metadata": {"finalizers": wanted, "resourceVersion": meta.get("resourceVersion")}}
        if not meta.get("namespace"):  # cluster-scoped (NodeFence)
            resp = self.custom.patch_cluster_custom_object(
                group, version, plural, meta["name"], body, _preload_content=False
            )
            return read_json(resp)
        resp = self.custom.patch_namespaced_custom_object(
            group, version, meta["namespace"], plural, meta["name"], body, _preload_content=False
        )
        return read_json(resp)

    def set_machine_condition(self, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        """Set (add or replace by type) a condition on Machine ``namespace/name``'s status, in both
        of cluster-api's shapes, read through its v1beta1 API: the v1beta1 condition (``type``,
        ``status``, ``reason``, ``severity``, ``message``) in ``status.conditions``, and the same
        as a metav1.Condition (no severity; ``observedGeneration`` = the Machine's generation) in
        ``status.v1beta2.conditions``, which is what cluster-api's v1beta2 controllers read
        (``status.conditions`` of a v1beta2 Machine; util/collections
        ``IsUnhealthyAndOwnerRemediated``). On a 409 the Machine is read again and the write
        retried (at most 5 tries, :func:`noderemedy_runner.kube.retry.call`). Raises NotFound for
        a missing Machine."""

        def write() -> None:
            machine = self.get_custom(MACHINE, name, namespace)
            if machine is None:
                raise NotFound(f"Machine {namespace}/{name} not found", "not_found", 404)
            status = dict(machine.get("status") or {})
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            conds = [c for c in status.get("conditions") or [] if c.get("type") != condition.get("type")]
            conds.append({**condition, "lastTransitionTime": now})
            status["conditions"] = conds
            v1beta2 = dict(status.get("v1beta2") or {})
            newer = [c for c in v1beta2.get("conditions") or [] if c.get("type") != condition.get("type")]
            newer.append(
                {
                    "type": condition.get("type"),
                    "status": condition.get("status"),
                    "reason": condition.get("reason") or "",
                    "message": condition.get("message") or "",
                    "lastTransitionTime": now,
                    "observedGeneration": int((machine.get("metadata") or {}).get("generation") or 0),
                }
            )
            v1beta2["conditions"] = newer
            status["v1beta2"] = v1beta2
            self.replace_status(MACHINE, machine, status)

        retry.call(write, tries=5, delay=0.05, retry_on={"conflict"})

    def event(
        self, obj: Mapping[str, Any], type_: str, reason: str, message: str, once_key: str = ""
    ) -> None:
        """Record an Event on ``obj`` (:class:`~noderemedy_runner.kube.events.EventRecorder`;
        ``once_key``: at most once for that key)."""
        self.events.record(obj, type_, reason, message, once_key=once_key)


__all__ = [
    "BAREMETALHOST",
    "CRD",
    "MACHINE",
    "METAL3REMEDIATION",
    "NODEFENCE",
    "KubeIO",
    "has_taint",
    "read_json",
    "ready_condition",
]
