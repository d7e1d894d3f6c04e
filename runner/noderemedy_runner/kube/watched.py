"""Every object of one collection, kept by a watch: the fleet the NodeFence guards look at.

Before a NodeFence starts a step, its guards (``loops/interop.start_holds``) look at every Node
(which are Ready, control-plane, released) and every other NodeFence (the concurrency limits).
Listed at each step start, on the 1,000-node lab with a rack of 100 failing (``bench/rack.py
--nodes 1000 --rack 100``, runner at ``--log-level debug``), the Node list took 2.26 s (median,
12.3 s at most) even shared for 2 s between callers, the NodeFence list 1.73 s, and the guards
6.1 s of the median step start: about as long as the step's own ``ansible-playbook`` batch.
:class:`WatchedList` lists the collection once and watches it
(:class:`~noderemedy_runner.kube.informer.Informer`), as controller-runtime's cached client does,
and answers from memory, at most a watch event behind where a list is its own round trip behind.

Until the first list, and after the watch failed until it has listed again, :meth:`items`
answers None and the caller lists (:meth:`KubeIO.recent_nodes
<noderemedy_runner.kube.resources.KubeIO.recent_nodes>`, :meth:`KubeIO.recent_nodefences
<noderemedy_runner.kube.resources.KubeIO.recent_nodefences>`). A collection whose resource type
is not installed (a CRD) answers ().
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from noderemedy_runner.kube.informer import Informer

Obj = dict[str, Any]


def node_facts(node: Mapping[str, Any]) -> Obj:
    """What the guards read of a Node, in its own shape: ``metadata.name`` and ``labels``,
    ``spec.taints``, ``status.conditions``. A thousand whole Nodes (images, addresses, capacity)
    would hold megabytes for these few fields."""
    meta = node.get("metadata") or {}
    return {
        "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
        "spec": {"taints": list((node.get("spec") or {}).get("taints") or [])},
        "status": {"conditions": list((node.get("status") or {}).get("conditions") or [])},
    }


class WatchedList:
    """Every object of the collection ``list_call`` lists (keyed by namespace and name), as
    ``keep`` trims it (keeping ``metadata.uid`` if it is to tell an object from one created again
    under its name), kept current by :meth:`run` (a list, then a watch). ``on_reset`` and
    ``on_event`` (optional) are handed every list and event after they are applied, in the
    informer's thread. Thread-safe: :meth:`items` may be called from any thread."""

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        keep: Callable[[Mapping[str, Any]], Obj] = dict,
        on_reset: Callable[[list[Obj]], None] | None = None,
        on_event: Callable[[str, Obj], None] | None = None,
        informer: Callable[..., Informer] = Informer,
    ) -> None:
        self.keep = keep
        self._on_reset = on_reset
        self._on_event = on_event
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], Obj] = {}
        self._fresh = False
        self.informer = informer(name, list_call, self._reset, self._event, on_error=self._stale)

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return str(meta.get("namespace") or ""), str(meta.get("name"))

    def _reset(self, items: list[Obj]) -> None:
        kept = {self._key(i): self.keep(i) for i in items}
        with self._lock:
            self._items, self._fresh = kept, True
        if self._on_reset is not None:
            self._on_reset(items)

    def _event(self, kind: str, obj: Obj) -> None:
        key = self._key(obj)
        with self._lock:
            if kind == "DELETED":
                # a deletion of an object since created again under its name leaves the new one
                held = (self._items.get(key, {}).get("metadata") or {}).get("uid")
                uid = (obj.get("metadata") or {}).get("uid")
                if not (held and uid and held != uid):
                    self._items.pop(key, None)
            else:
                self._items[key] = self.keep(obj)
        if self._on_event is not None:
            self._on_event(kind, obj)

    def _stale(self) -> None:
        with self._lock:
            self._fresh = False

    def items(self) -> tuple[Obj, ...] | None:
        """Every object held (the same dicts to every caller: none may change them); () when the
        resource type is not installed; None before the first list or after a failed watch until
        it has listed again (list it yourself)."""
        if self.informer.missing.is_set():
            return ()
        with self._lock:
            return tuple(self._items.values()) if self._fresh else None

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set."""
        self.informer.run(stop)


__all__ = ["WatchedList", "node_facts"]
