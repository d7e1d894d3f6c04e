"""The runner's ApiClient and its API classes, with a timeout on every call.

:func:`new_client` builds the one ``ApiClient`` of a process, from a kubeconfig file or the pod's
service account. :func:`api` wraps an API class (``CoreV1Api``, ``CustomObjectsApi``, ...) so
that every method call gets ``_request_timeout`` (:data:`REQUEST_TIMEOUT` unless the caller
passes one) and raises :class:`~noderemedy_runner.kube.errors.KubeError` instead of the client's
exceptions. A watch passes the wrapped ``list_*`` method to ``kubernetes.watch.Watch.stream``
with its own, longer timeout.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config

from noderemedy_runner.kube.errors import TRANSPORT_ERRORS, classify

#: (connect, read) seconds for one request.
REQUEST_TIMEOUT: tuple[float, float] = (5.0, 30.0)

T = TypeVar("T")


def own_pod_name() -> tuple[str, str] | None:
    """``(POD_NAME, POD_NAMESPACE)`` of the runner's own pod when both are set (the Deployment's
    downward API: it runs in a pod), else None."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    return (name, namespace) if name and namespace else None


def new_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """The ApiClient of ``kubeconfig`` (its current context), or of the pod's service account
    when None (``KUBERNETES_SERVICE_HOST`` and the mounted token). Raises
    ``kubernetes.config.ConfigException`` when neither can be loaded."""
    if kubeconfig is not None:
        made: client.ApiClient = config.new_client_from_config(str(kubeconfig))  # type: ignore[no-untyped-call]
        return made
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


class _Timed:
    """Proxy of an API class instance: calls get a timeout; errors are classified (or not)."""

    def __init__(self, target: Any, timeout: Any, classify_errors: bool) -> None:
        self._target = target
        self._timeout = timeout
        self._classify = classify_errors

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        return self._wrap(name, attr)

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("_request_timeout", self._timeout)
            if not self._classify:
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except TRANSPORT_ERRORS as exc:
                raise classify(exc, _describe(name, args)) from exc

        call.__name__ = name
        call.__doc__ = fn.__doc__  # kubernetes.watch reads the return type from it
        return call


def _describe(method: str, args: tuple[Any, ...]) -> str:
    words = method.split("_")
    shown = [str(a) for a in args if isinstance(a, str)][:4]
    return " ".join(words) + (f" {'/'.join(shown)}" if shown else "")


def api(
    api_client: client.ApiClient,
    cls: type[T],
    *,
    timeout: Any = REQUEST_TIMEOUT,
    classify_errors: bool = True,
) -> T:
    """An instance of the API class ``cls`` on ``api_client`` whose every call has
    ``_request_timeout=timeout`` (seconds, or a (connect, read) pair) unless given, and raises
    :class:`~noderemedy_runner.kube.errors.KubeError` (``classify_errors``) for API refusals and
    transport failures alike. ``classify_errors=False`` keeps the client's own exceptions, for
    libraries that catch them (the leader-election lock)."""
    proxy: Any = _Timed(cls(api_client), timeout, classify_errors)  # type: ignore[call-arg]
    return proxy  # type: ignore[no-any-return]


__all__ = ["REQUEST_TIMEOUT", "api", "new_client", "own_pod_name"]
