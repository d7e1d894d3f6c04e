# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One Kubernetes client layer for the collection: authentication options, the cached API client,
and one error classification.

Shape follows kubernetes.core (``module_utils/args_common.py`` AUTH_ARG_SPEC,
``module_utils/k8s/client.py``): the same option names and ``K8S_AUTH_*`` environment
fallbacks, in-cluster configuration when nothing is given, one cached client per run.

Interface used by the other modules (keep it stable):

* :data:`KUBE_AUTH_ARGSPEC` -- argspec fragment; documented 1:1 by ``doc_fragments/kube.py`` ``DOCUMENTATION``.
* :func:`get_api_client` -- ``params -> kubernetes.client.ApiClient`` (cached).
* :class:`KubeError` -- the one error family, with ``reason`` in :data:`REASONS`.
* :func:`classify` -- any exception raised while talking to the API -> :class:`KubeError`.
* :func:`call` -- run one API call and raise the classified error.
* :class:`KubeNode` -- one node's path, read and dry-run query (the drain and taint helpers' base).
* :data:`HAS_KUBERNETES`, :data:`KUBERNETES_IMPORT_ERROR` -- for ``missing_required_lib``.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import time
import traceback
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ansible.module_utils.basic import env_fallback

try:
    import kubernetes
    import urllib3
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import SERVICE_HOST_ENV_NAME, SERVICE_TOKEN_FILENAME

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR: str | None = None
except ImportError:  # pragma: no cover - exercised only without the library
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()
    ApiException = ConfigException = None  # type: ignore[assignment,misc]
    SERVICE_HOST_ENV_NAME = "KUBERNETES_SERVICE_HOST"
    SERVICE_TOKEN_FILENAME = "/var/run/secrets/kubernetes.io/serviceaccount/token"

#: The node a Kubernetes node module acts on (``node_drain``, ``node_taint``); documented 1:1 by
#: ``doc_fragments/kube.py`` ``NODE``.
NODE_ARGSPEC: dict[str, dict[str, Any]] = {"name": {"type": "str", "required": True, "aliases": ["node"]}}

#: Authentication options shared by every module that talks to the Kubernetes API.
#: Names, aliases and ``K8S_AUTH_*`` environment variables are kubernetes.core's.
KUBE_AUTH_ARGSPEC: dict[str, dict[str, Any]] = {
    "kubeconfig": {"type": "raw", "fallback": (env_fallback, ["K8S_AUTH_KUBECONFIG"])},
    "context": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_CONTEXT"])},
    "host": {"type": "str", "fallback": (env_fallback, ["K8S_AUTH_HOST"])},
    "api_key": {"type": "str", "no_log": True, "fallback": (env_fallback, ["K8S_AUTH_API_KEY"])},
    "validate_certs": {
        "type": "bool",
        "aliases": ["verify_ssl"],
        "fallback": (env_fallback, ["K8S_AUTH_VERIFY_SSL"]),
    },
    "ca_cert": {
        "type": "path",
        "aliases": ["ssl_ca_cert"],
        "fallback": (env_fallback, ["K8S_AUTH_SSL_CA_CERT"]),
    },
    "client_cert": {
        "type": "path",
        "aliases": ["cert_file"],
        "fallback": (env_fallback, ["K8S_AUTH_CERT_FILE"]),
    },
    "client_key": {
        "type": "path",
        "aliases": ["key_file"],
        "no_log": False,
        "fallback": (env_fallback, ["K8S_AUTH_KEY_FILE"]),
    },
}

#: Every value :attr:`KubeError.reason` can take.
REASONS = frozenset(
    {"not_found", "conflict", "forbidden", "too_many_requests", "timeout", "unreachable", "invalid", "other"}
)

#: Seconds for one request: (connect, read). Keeps an unreachable API server a quick, clear error.
REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)

#: HTTP connections kept per client; parallel evictions use up to this many at once.
CONNECTION_POOL_MAXSIZE = 64


class KubeError(Exception):
    """An error talking to the Kubernetes API, classified once.

    Args:
        message: what failed, for a human (names the object where known).
        reason: one of :data:`REASONS`: ``not_found`` (404), ``conflict`` (409),
            ``forbidden`` (401/403), ``too_many_requests`` (429, e.g. an eviction blocked by a
            PodDisruptionBudget), ``timeout`` (408/504 or a socket timeout), ``unreachable``
            (connection refused, DNS, TLS), ``invalid`` (400/422 or a bad configuration),
            ``other``.
        status: the HTTP status code, if there was a response.
        causes: the ``reason`` of each ``details.causes`` entry of the API's Status, e.g.
            ``NamespaceTerminating``.

    Raises:
        ValueError: ``reason`` is not one of :data:`REASONS`.
    """

    def __init__(
        self,
        message: str,
        reason: str = "other",
        status: int | None = None,
        causes: tuple[str, ...] = (),
    ) -> None:
        if reason not in REASONS:
            raise ValueError(f"reason: {reason!r} is not one of {sorted(REASONS)}")
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.status = status
        self.causes = tuple(causes)


_STATUS_REASONS = {
    400: "invalid",
    401: "forbidden",
    403: "forbidden",
    404: "not_found",
    408: "timeout",
    409: "conflict",
    410: "conflict",
    422: "invalid",
    429: "too_many_requests",
    504: "timeout",
}


def _status_body(exc: Any) -> dict[str, Any]:
    """The Kubernetes Status in an ApiException's body (``{}`` if none)."""
    body = getattr(exc, "body", None)
    if body:
        try:
            doc = json.loads(body)
            if isinstance(doc, dict):
                return doc
        except (TypeError, ValueError):
            pass
    return {}


def _api_message(exc: Any) -> str:
    """The ``message`` of a Kubernetes Status body, else the HTTP reason phrase."""
    doc = _status_body(exc)
    if doc.get("message"):
        return str(doc["message"])
    return f"{exc.status} {exc.reason}".strip()


def classify(exc: BaseException) -> KubeError:
    """Map any exception raised while configuring or calling the API to a :class:`KubeError`.

    Args:
        exc: an ``ApiException`` (HTTP status -> reason), a urllib3/socket/SSL error
            (``unreachable`` or ``timeout``), a ``ConfigException`` or missing file (``invalid``),
            or a ``KubeError`` (returned unchanged).

    Returns:
        The classified error; the original is not raised here (callers ``raise ... from exc``).
    """
    if isinstance(exc, KubeError):
        return exc
    if ApiException is not None and isinstance(exc, ApiException):
        status = exc.status or 0
        reason = _STATUS_REASONS.get(status)
        if reason is None:
            if status == 0:
                reason = "unreachable"
            else:
                reason = "other"
        details = _status_body(exc).get("details") or {}
        causes = tuple(str(c.get("reason")) for c in details.get("causes") or [] if isinstance(c, dict))
        return KubeError(_api_message(exc), reason, status=status or None, causes=causes)
    if HAS_KUBERNETES:
        timeouts: tuple[type[BaseException], ...] = (
            urllib3.exceptions.ReadTimeoutError,
            urllib3.exceptions.ConnectTimeoutError,
            socket.timeout,
            TimeoutError,
        )
        # urllib3 2.x: NewConnectionError (refused, DNS) subclasses ConnectTimeoutError; it is not a timeout
        refused = urllib3.exceptions.NewConnectionError
        if isinstance(exc, refused) or (
            isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, refused)
        ):
            detail = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            return KubeError(f"API server unreachable: {detail}", "unreachable")
        if isinstance(exc, urllib3.exceptions.MaxRetryError) and isinstance(exc.reason, timeouts):
            return KubeError(f"API server timed out: {exc.reason}", "timeout")
        if isinstance(exc, timeouts):
            return KubeError(f"API server timed out: {exc}", "timeout")
        if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | ssl.SSLError | socket.gaierror):
            detail = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) else exc
            return KubeError(f"API server unreachable: {detail}", "unreachable")
        if isinstance(exc, ConfigException):
            return KubeError(f"invalid Kubernetes configuration: {exc}", "invalid")
    if isinstance(exc, OSError):
        return KubeError(f"invalid Kubernetes configuration: {exc}", "invalid")
    return KubeError(f"{type(exc).__name__}: {exc}", "other")


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` (one API request) with :data:`REQUEST_TIMEOUT` unless given.

    Returns:
        What ``fn`` returns.

    Raises:
        KubeError: classified by :func:`classify`.
    """
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # classified right here
        raise classify(exc) from exc


def auth_params(params: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``params`` named in :data:`KUBE_AUTH_ARGSPEC` (missing ones as None)."""
    return {key: params.get(key) for key in KUBE_AUTH_ARGSPEC}


def in_cluster_available() -> bool:
    """True if running in a pod with a service-account token (``KUBERNETES_SERVICE_HOST`` set)."""
    return bool(os.environ.get(SERVICE_HOST_ENV_NAME)) and os.path.isfile(SERVICE_TOKEN_FILENAME)


def build_configuration(params: dict[str, Any]) -> Any:
    """A ``kubernetes.client.Configuration`` from the auth options.

    Order (kubernetes.core's): with no option given, the in-cluster service account if available,
    else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``); with ``kubeconfig``
    (a path or a dict) or ``context``, that kubeconfig; then ``host``, ``api_key``,
    ``validate_certs``, ``ca_cert``, ``client_cert`` and ``client_key`` override it.

    Raises:
        KubeError: ``invalid`` for a missing or bad kubeconfig, or no credentials at all.
    """
    if not HAS_KUBERNETES:
        raise KubeError("the Python library 'kubernetes' is required", "invalid")
    auth = auth_params(params)
    cfg = kubernetes.client.Configuration()
    explicit = auth["host"] is not None
    try:
        if auth["kubeconfig"] is not None or auth["context"] is not None:
            if isinstance(auth["kubeconfig"], dict):
                kubernetes.config.load_kube_config_from_dict(
                    auth["kubeconfig"],
                    context=auth["context"],
                    client_configuration=cfg,
                    persist_config=False,
                )
            else:
                path = auth["kubeconfig"]
                if path is not None:
                    path = os.path.expanduser(str(path))
                    if not os.path.isfile(path):
                        raise KubeError(f"kubeconfig: file not found: {path}", "invalid")
                kubernetes.config.load_kube_config(
                    config_file=path, context=auth["context"], client_configuration=cfg, persist_config=False
                )
        elif not explicit:
            if in_cluster_available():
                kubernetes.config.load_incluster_config(client_configuration=cfg)
            else:
                default = os.path.expanduser(
                    os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
                )
                if not os.path.isfile(default):
                    raise KubeError(
                        "no Kubernetes credentials: set kubeconfig or host (or K8S_AUTH_KUBECONFIG / "
                        f"K8S_AUTH_HOST), or run in a pod; default kubeconfig {default} does not exist",
                        "invalid",
                    )
                kubernetes.config.load_kube_config(
                    config_file=default, client_configuration=cfg, persist_config=False
                )
    except KubeError:
        raise
    except Exception as exc:  # classified right here
        raise classify(exc) from exc
    if auth["host"] is not None:
        cfg.host = auth["host"]
    if auth["api_key"] is not None:
        # the key the kubeconfig loaders use; an explicit token also disables their refresh hook
        cfg.api_key = {"BearerToken": "Bearer " + auth["api_key"]}
        cfg.api_key_prefix = {}
        cfg.refresh_api_key_hook = None
    if auth["validate_certs"] is not None:
        cfg.verify_ssl = bool(auth["validate_certs"])
    if auth["ca_cert"] is not None:
        cfg.ssl_ca_cert = auth["ca_cert"]
    if auth["client_cert"] is not None:
        cfg.cert_file = auth["client_cert"]
    if auth["client_key"] is not None:
        cfg.key_file = auth["client_key"]
    for field in ("ca_cert", "client_cert", "client_key"):
        if auth[field] is not None and not os.path.isfile(auth[field]):
            raise KubeError(f"{field}: file not found: {auth[field]}", "invalid")
    cfg.connection_pool_maxsize = CONNECTION_POOL_MAXSIZE
    cfg.retries = 0 if cfg.retries is None else cfg.retries
    return cfg


_CLIENTS: dict[str, Any] = {}


def _cache_key(params: dict[str, Any]) -> str:
    return json.dumps(auth_params(params), sort_keys=True, default=str)


def get_api_client(params: dict[str, Any]) -> Any:
    """One ``kubernetes.client.ApiClient`` per distinct set of auth options in this process (cached).

    Args:
        params: a module's params (only the :data:`KUBE_AUTH_ARGSPEC` keys are read).

    Returns:
        ``kubernetes.client.ApiClient``; thread-safe for parallel requests (pool of
        :data:`CONNECTION_POOL_MAXSIZE` connections).

    Raises:
        KubeError: ``invalid`` when no usable configuration is found (see :func:`build_configuration`).
    """
    key = _cache_key(params)
    client = _CLIENTS.get(key)
    if client is None:
        client = kubernetes.client.ApiClient(build_configuration(params))
        _CLIENTS[key] = client
    return client


def request(
    client: Any,
    method: str,
    path: str,
    *,
    query: list[tuple[str, Any]] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: tuple[float, float] | float | None = REQUEST_TIMEOUT,
) -> Any:
    """One raw JSON request through ``client`` (auth, TLS and pooling of the ApiClient), no model types.

    Used on hot paths (listing and evicting a hundred pods) where the generated, validated model
    layer of the kubernetes client costs more than the request itself.

    Args:
        client: a ``kubernetes.client.ApiClient`` from :func:`get_api_client`.
        method: ``GET``, ``POST``, ``PATCH``, ``PUT`` or ``DELETE``.
        path: the API path, e.g. ``/api/v1/nodes/lab-node-0`` (callers quote names).
        query: query parameters as ``(name, value)`` pairs.
        body: a JSON-able body.
        content_type: e.g. ``application/merge-patch+json``; default ``application/json`` with a body.
        timeout: seconds, ``(connect, read)`` or one total; default :data:`REQUEST_TIMEOUT`.

    Returns:
        The decoded JSON response (a dict), or None for an empty body.

    Raises:
        KubeError: classified by :func:`classify` (HTTP status >= 300, connection or TLS errors).
    """
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    try:
        params = client.param_serialize(
            method,
            path,
            query_params=query or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(*params, _request_timeout=timeout)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise kubernetes.client.exceptions.ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace") if data else None, data=None
            )
    except Exception as exc:  # classified right here
        raise classify(exc) from exc
    return json.loads(data) if data else None


class KubeNode:
    """One Node through the API, what the drain and taint helpers share: the name checked once,
    the node's path, its read, and the query every write of a server-side dry run carries.

    Args:
        client: a ``kubernetes.client.ApiClient`` (see :func:`get_api_client`).
        node: the node's name; KubeError ``invalid`` when empty (it would name the collection).
        dry_run: server-side dry run (``dryRun=All``): the API checks every write, persists none.
        clock: monotonic seconds, for deadlines and retry delays.
    """

    def __init__(
        self, client: Any, node: str, dry_run: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not node:
            raise KubeError("name: the node's name must not be empty", "invalid")
        self.client = client
        self.node = node
        self.dry_run = dry_run
        self.clock = clock

    @property
    def path(self) -> str:
        """``/api/v1/nodes/<name>``, the name quoted."""
        return f"/api/v1/nodes/{quote(self.node, safe='')}"

    def write_query(self) -> list[tuple[str, Any]]:
        """The query of a write: ``dryRun=All`` in a dry run, else none."""
        return [("dryRun", "All")] if self.dry_run else []

    def get_node(self) -> dict[str, Any]:
        """The node as a dict. Raises KubeError (``not_found`` names the node)."""
        try:
            return request(self.client, "GET", self.path)
        except KubeError as exc:
            if exc.reason == "not_found":
                raise KubeError(f"node {self.node!r} not found", "not_found", status=404) from exc
            raise
