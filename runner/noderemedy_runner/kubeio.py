"""The reconcilers' Kubernetes I/O: read custom resources, nodes, ConfigMaps; write status with
resourceVersion conflict handling; record Events. Built on the kubernetes python client directly
(the collection's ``plugins/module_utils/_kube.py`` is for modules).

Objects are returned as plain JSON dicts (``_preload_content=False``), the shape the pure
machines and the CRDs use. Status writes are a PUT of the whole ``.status`` on the status
subresource carrying the object's ``metadata.resourceVersion`` (a merge patch would keep fields
the machine dropped, such as ``currentRun``); a 409 raises :class:`Conflict` so the caller
re-reads and decides again (DESIGN.md invariant 4: status is never lost or overwritten blindly).

Errors: :class:`KubeIOError` for anything the API refuses (``status`` is the HTTP code, None when
there was no answer), :class:`Conflict` (a subclass) for 409.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from noderemedy_runner.conditions import parse_time

NODEFENCE = ("remediation.noderemedy.io", "v1alpha1", "nodefences", "NodeFence")
METAL3REMEDIATION = ("infrastructure.cluster.x-k8s.io", "v1beta1", "metal3remediations", "Metal3Remediation")
BAREMETALHOST = ("metal3.io", "v1alpha1", "baremetalhosts", "BareMetalHost")
MACHINE = ("cluster.x-k8s.io", "v1beta1", "machines", "Machine")
#: Component name in Events (``source.component`` / ``reportingController``).
COMPONENT = "noderemedy-runner"
#: medik8s prefix of remediation Event messages.
EVENT_PREFIX = "[remediation] "
#: Seconds per API request.
REQUEST_TIMEOUT = 15.0
#: Events namespace for cluster-scoped objects (the core API puts their events in "default").
CLUSTER_EVENTS_NAMESPACE = "default"


class KubeIOError(RuntimeError):
    """An API request failed: ``status`` (HTTP code or None) and a message naming the object."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Conflict(KubeIOError):
    """409: the object changed since it was read (resourceVersion mismatch): re-read, re-decide."""


def _err(exc: ApiException, what: str) -> KubeIOError:
    reason = ""
    try:
        reason = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        reason = str(exc.reason)
    cls = Conflict if exc.status == 409 else KubeIOError
    return cls(f"{what}: HTTP {exc.status} {reason}".strip(), exc.status)


def _json(resp: Any) -> dict[str, Any]:
    data = json.loads(resp.data)
    if not isinstance(data, dict):
        raise KubeIOError(f"unexpected answer: {type(data).__name__}")
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
    """Thin, typed access to the objects the reconcilers need; ``api`` is a kubernetes ApiClient."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # --- reads -----------------------------------------------------------------------------
    def list_custom(
        self, crd: tuple[str, str, str, str], namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """All objects of ``crd`` (group, version, plural, kind); [] when the CRD is not installed."""
        group, version, plural, kind = crd
        try:
            if namespace is None:
                resp = self.custom.list_cluster_custom_object(
                    group, version, plural, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            else:
                resp = self.custom.list_namespaced_custom_object(
                    group,
                    version,
                    namespace,
                    plural,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise _err(exc, f"list {kind}") from exc
        items = _json(resp).get("items") or []
        return [dict(i) for i in items]

    def get_custom(
        self, crd: tuple[str, str, str, str], name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """One object of ``crd``, or None when it does not exist."""
        group, version, plural, kind = crd
        try:
            if namespace is None:
                resp = self.custom.get_cluster_custom_object(
                    group, version, plural, name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            else:
                resp = self.custom.get_namespaced_custom_object(
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _err(exc, f"get {kind} {namespace or ''}/{name}") from exc
        return _json(resp)

    def get_node(self, name: str) -> dict[str, Any] | None:
        """The Node, or None when it does not exist."""
        try:
            return _json(self.core.read_node(name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _err(exc, f"get Node {name}") from exc

    def get_configmap_data(self, namespace: str, name: str) -> dict[str, Any] | None:
        """``data`` of ConfigMap ``namespace/name`` ({} when empty), or None when it does not exist."""
        try:
            obj = _json(
                self.core.read_namespaced_config_map(
                    name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _err(exc, f"get ConfigMap {namespace}/{name}") from exc
        return dict(obj.get("data") or {})

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Pods bound to ``node`` (field selector ``spec.nodeName``), any phase."""
        try:
            resp = self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            raise _err(exc, f"list Pods on {node}") from exc
        return [dict(p) for p in _json(resp).get("items") or []]

    # --- writes ----------------------------------------------------------------------------
    def replace_status(
        self, crd: tuple[str, str, str, str], obj: Mapping[str, Any], status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT ``status`` as the whole ``.status`` of ``obj`` with its resourceVersion; returns the
        updated object. Raises :class:`Conflict` on 409 (re-read and decide again)."""
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
        try:
            if namespace:
                resp = self.custom.replace_namespaced_custom_object_status(
                    group,
                    version,
                    namespace,
                    plural,
                    name,
                    body,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            else:
                resp = self.custom.replace_cluster_custom_object_status(
                    group,
                    version,
                    plural,
                    name,
                    body,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
        except ApiException as exc:
            raise _err(exc, f"write status of {kind} {namespace or ''}/{name}") from exc
        return _json(resp)

    def patch_finalizers(
        self, crd: tuple[str, str, str, str], obj: Mapping[str, Any], finalizer: str, present: bool
    ) -> dict[str, Any]:
        """Add or remove ``finalizer`` with a JSON merge patch carrying the resourceVersion
        (:class:`Conflict` on 409)."""
        group, version, plural, kind = crd
        meta = obj.get("metadata") or {}
        current = list(meta.get("finalizers") or [])
        wanted = [f for f in current if f != finalizer] + ([finalizer] if present else [])
        body = {"metadata": {"finalizers": wanted, "resourceVersion": meta.get("resourceVersion")}}
        try:
            resp = self.custom.patch_namespaced_custom_object(
                group, version, meta["namespace"], plural, meta["name"], body,
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as exc:
            raise _err(
                exc, f"finalizer {finalizer} on {kind} {meta.get('namespace')}/{meta.get('name')}"
            ) from exc
        return _json(resp)

    def set_machine_condition(self, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        """Set (add or replace by type) a condition on Machine ``namespace/name``'s status, with
        conflict retries (re-read on 409, at most 5 times)."""
        for _ in range(5):
            machine = self.get_custom(MACHINE, name, namespace)
            if machine is None:
                raise KubeIOError(f"Machine {namespace}/{name} not found", 404)
            status = dict(machine.get("status") or {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != condition.get("type")]
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            conds.append({**condition, "lastTransitionTime": now})
            status["conditions"] = conds
            try:
                self.replace_status(MACHINE, machine, status)
                return
            except Conflict:
                continue
        raise Conflict(f"Machine {namespace}/{name}: status kept changing (5 conflicts)", 409)

    def event(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        note_prefix: str = EVENT_PREFIX,
    ) -> None:
        """Record a core/v1 Event on ``obj`` (``type_`` Normal or Warning; ``reason`` CamelCase;
        ``message`` prefixed with ``[remediation]``, at most 1024 characters). Cluster-scoped
        objects get their events in ``default``. Failures to record are swallowed (an Event is
        best effort, as client-go's recorder)."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or CLUSTER_EVENTS_NAMESPACE
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {
            "metadata": {
                "name": f"{meta.get('name', 'obj')}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            "message": (note_prefix + message)[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, OSError):
            return
