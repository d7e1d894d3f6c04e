"""ConfigMapCache's bookkeeping (pure): what a list, the watch's events and a failed watch leave
it answering. Its list and watch against a real API server: tests/integration/test_configmap_watch.py."""

from __future__ import annotations

from typing import Any

from noderemedy_runner.kube.configmaps import ConfigMapCache


class _Recorded:
    """Stands for the Informer's construction only: keeps the callbacks the cache hands it."""

    def __init__(self, name: str, list_call: Any, on_reset: Any, on_event: Any, *, on_error: Any) -> None:
        self.name, self.list_call = name, list_call
        self.on_reset, self.on_event, self.on_error = on_reset, on_event, on_error


def _cm(name: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, **({"data": data} if data is not None else {})}


def test_list_events_and_a_failed_watch() -> None:
    cache = ConfigMapCache(None, "noderemedy", informer=_Recorded)  # type: ignore[arg-type]
    inf: Any = cache.informer
    assert inf.name == "configmaps/noderemedy"
    assert cache.data("fence-config-a") is None  # nothing listed yet
    inf.on_reset([_cm("fence-config-a", {"k": "1"}), _cm("empty")])
    assert cache.data("fence-config-a") == {"k": "1"} and cache.data("empty") == {}
    assert cache.data("other") is None
    copy = cache.data("fence-config-a")
    assert copy is not None
    copy["k"] = "changed by a caller"
    assert cache.data("fence-config-a") == {"k": "1"}  # callers get copies
    inf.on_event("MODIFIED", _cm("fence-config-a", {"k": "2"}))
    inf.on_event("ADDED", _cm("fence-config-b", {"x": "y"}))
    assert cache.data("fence-config-a") == {"k": "2"} and cache.data("fence-config-b") == {"x": "y"}
    inf.on_event("DELETED", _cm("fence-config-a"))
    assert cache.data("fence-config-a") is None
    # a failed watch: nothing is answered until the next list
    inf.on_error()
    assert cache.data("fence-config-b") is None
    inf.on_reset([_cm("fence-config-b", {"x": "z"})])
    assert cache.data("fence-config-b") == {"x": "z"}
