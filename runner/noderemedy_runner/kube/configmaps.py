"""The ConfigMaps of one namespace, kept by a watch: the fence configurations and their templates.

A NodeFence's reconcile parses its node's ``fence-config-<node>`` and the templates it names at
every decision (``loops/nodefence.load_fence_config``), so that an admin's edit takes effect at
the next step. Read from the API, that is three GETs a decision; when a rack of 100 nodes was
fenced on the 1,000-node lab (``bench/rack.py --nodes 1000 --rack 100``) they were a third of the
runner's API calls (4,096 of 12,073), each 0.5 s on the loaded API server, and a NodeFence's
decisions between two runs took 3 to 5 s each. :class:`ConfigMapCache` lists the namespace's
ConfigMaps once and watches them (:class:`~noderemedy_runner.kube.informer.Informer`), as
controller-runtime's cached client does, and answers from memory.

A name the cache does not hold is read from the API (:meth:`KubeIO.get_configmap_data
<noderemedy_runner.kube.resources.KubeIO.get_configmap_data>`): a ConfigMap created a moment ago
is found, and only a missing one costs a request. Before the first list, and after the watch
failed until it has listed again, every read goes to the API.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from noderemedy_runner.kube.client import api
from noderemedy_runner.kube.informer import Informer


class ConfigMapCache:
    """The ``data`` of every ConfigMap in ``namespace``, kept current by :meth:`run` (a list, then
    a watch). Thread-safe: :meth:`data` may be called from any thread."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        informer: Callable[..., Informer] = Informer,
    ) -> None:
        self.namespace = namespace
        core = api(api_client, client.CoreV1Api)
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        self._fresh = False

        def list_call(**kw: Any) -> Any:
            return core.list_namespaced_config_map(namespace, **kw)

        self.informer = informer(
            f"configmaps/{namespace}", list_call, self._reset, self._event, on_error=self._stale
        )

    def _reset(self, items: list[dict[str, Any]]) -> None:
        data = {str((i.get("metadata") or {}).get("name")): dict(i.get("data") or {}) for i in items}
        with self._lock:
            self._data, self._fresh = data, True

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        with self._lock:
            if kind == "DELETED":
                self._data.pop(name, None)
            else:
                self._data[name] = dict(obj.get("data") or {})

    def data(self, name: str) -> dict[str, Any] | None:
        """A copy of ConfigMap ``name``'s ``data`` ({} when it has none), or None when the cache
        has not listed the namespace yet or does not hold that name (read it from the API)."""
        with self._lock:
            if not self._fresh or name not in self._data:
                return None
            return dict(self._data[name])

    def _stale(self) -> None:
        with self._lock:
            self._fresh = False

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set. After a failure of the watch, :meth:`data`
        answers None until the namespace has been listed again."""
        self.informer.run(stop)


__all__ = ["ConfigMapCache"]
