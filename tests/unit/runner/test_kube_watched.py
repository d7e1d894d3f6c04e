"""WatchedList's bookkeeping (pure): what a list, the watch's events, a failed watch and a missing
resource type leave it answering, and KubeIO's fleet reads answering from it or listing. The
watches against a real API server run in every runner test of tests/integration (the watcher
starts them, and the guards of each step read them)."""

from __future__ import annotations

import threading
from typing import Any

from noderemedy_runner.kube.resources import KubeIO
from noderemedy_runner.kube.watched import WatchedList, node_facts


class _Recorded:
    """Stands for the Informer's construction only: keeps the callbacks the list hands it."""

    def __init__(self, name: str, list_call: Any, on_reset: Any, on_event: Any, *, on_error: Any) -> None:
        self.name, self.list_call = name, list_call
        self.on_reset, self.on_event, self.on_error = on_reset, on_event, on_error
        self.missing = threading.Event()


def _node(name: str, ready: str = "True", taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "uid": "u-" + name},
        "spec": {"taints": taints or [], "podCIDR": "10.0.0.0/24"},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "images": [{"names": ["registry.example/big:1"], "sizeBytes": 1}],
        },
    }


def test_a_list_events_a_failed_watch_and_a_missing_type() -> None:
    seen: list[Any] = []
    nodes = WatchedList(
        "nodes",
        None,
        keep=node_facts,
        on_reset=lambda items: seen.append(("reset", len(items))),
        on_event=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        informer=_Recorded,
    )
    inf: Any = nodes.informer
    assert nodes.items() is None, "nothing listed yet: the caller lists"
    inf.on_reset([_node("a"), _node("b")])
    assert [n["metadata"]["name"] for n in nodes.items() or ()] == ["a", "b"]
    assert (nodes.items() or ())[0] == {
        "metadata": {"name": "a", "labels": {"kubernetes.io/hostname": "a"}},
        "spec": {"taints": []},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }, "only what the guards read is kept"
    taint = {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}
    inf.on_event("MODIFIED", _node("a", "False", [taint]))
    inf.on_event("DELETED", _node("b"))
    inf.on_event("ADDED", _node("c"))
    held = {n["metadata"]["name"]: n for n in nodes.items() or ()}
    assert sorted(held) == ["a", "c"]
    assert held["a"]["spec"]["taints"] == [taint]
    assert held["a"]["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert seen == [("reset", 2), ("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]
    inf.on_error()
    assert nodes.items() is None, "after a failed watch nothing is answered until the next list"
    inf.on_reset([_node("a")])
    assert len(nodes.items() or ()) == 1
    inf.missing.set()
    assert nodes.items() == (), "a resource type that is not installed has no objects"


def test_objects_of_two_namespaces_under_one_name_are_both_held() -> None:
    fences = WatchedList("pods", None, informer=_Recorded)
    inf: Any = fences.informer
    inf.on_reset(
        [{"metadata": {"name": "x", "namespace": "a"}}, {"metadata": {"name": "x", "namespace": "b"}}]
    )
    inf.on_event("DELETED", {"metadata": {"name": "x", "namespace": "a"}})
    assert fences.items() == ({"metadata": {"name": "x", "namespace": "b"}},)


class _ListingKube(KubeIO):
    """A KubeIO whose lists are counted and answered from :attr:`listed` (no API)."""

    def __init__(self) -> None:
        self.watched_nodes = None
        self.watched_nodefences = None
        self._nodes = None
        self._nodes_lock = threading.Lock()
        self.lists: list[str] = []
        outer = self

        class _Core:
            def list_node(self, **_kw: Any) -> Any:
                outer.lists.append("nodes")

                class _Resp:
                    data = b'{"items": [{"metadata": {"name": "listed"}}]}'

                return _Resp()

        self.core = _Core()  # type: ignore[assignment]

    def list_custom(self, crd: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        self.lists.append(crd[2])
        return [{"metadata": {"name": "listed-fence"}}]


def test_the_fleet_reads_answer_from_the_watches_once_they_have_listed_and_list_before() -> None:
    kube = _ListingKube()
    assert [n["metadata"]["name"] for n in kube.recent_nodes()] == ["listed"]
    assert [f["metadata"]["name"] for f in kube.recent_nodefences()] == ["listed-fence"]
    assert kube.lists == ["nodes", "nodefences"], "no watches: listed"
    nodes = WatchedList("nodes", None, keep=node_facts, informer=_Recorded)
    fences = WatchedList("nodefences", None, informer=_Recorded)
    kube.watched_nodes, kube.watched_nodefences = nodes, fences
    kube.recent_nodes(max_age=0.0)
    kube.recent_nodefences()
    assert kube.lists == ["nodes", "nodefences"] * 2, "the watches have not listed yet: listed again"
    nodes_inf: Any = nodes.informer
    fences_inf: Any = fences.informer
    nodes_inf.on_reset([_node("w1")])
    fences_inf.on_reset([{"metadata": {"name": "nf-w1"}}])
    assert [n["metadata"]["name"] for n in kube.recent_nodes(max_age=0.0)] == ["w1"]
    assert kube.recent_nodefences() == ({"metadata": {"name": "nf-w1"}},)
    assert kube.lists == ["nodes", "nodefences"] * 2, "answered from the watches: nothing listed"
