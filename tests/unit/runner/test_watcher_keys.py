"""What the watcher schedules its workers from between two listings: the NodeFences and opted-in
Metal3Remediations its watches hold (``loops/watcher.py``: ``Watcher._watched`` over the
``WatchedList`` of each kind), in the shape of a listing. Pure: the informers are built but never
run; their lists and events are handed in as a watch would hand them.
"""

from __future__ import annotations

import threading
from typing import Any

from noderemedy_runner.kube.resources import METAL3REMEDIATION, NODEFENCE
from noderemedy_runner.kube.watched import WatchedList
from noderemedy_runner.loops.watcher import Key, Watcher
from noderemedy_runner.machines.metal3 import OPT_IN_ANNOTATION

NF: Key = ("NodeFence", "", "lab-node-1")
M3: Key = ("Metal3Remediation", "capi", "worker-1")


class _Recorded:
    """Stands for the Informer's construction only: keeps the callbacks the list hands it."""

    def __init__(self, name: str, list_call: Any, on_reset: Any, on_event: Any, *, on_error: Any) -> None:
        self.name = name
        self.on_reset, self.on_event, self.on_error = on_reset, on_event, on_error
        self.missing = threading.Event()


def _nf(rv: str, uid: str = "u1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "lab-node-1", "resourceVersion": rv, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T08:00:00Z"
    return {"metadata": meta}


def _m3(rv: str, opt_in: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "worker-1", "namespace": "capi", "resourceVersion": rv, "uid": "m1"}
    if opt_in is not None:
        meta["annotations"] = {OPT_IN_ANNOTATION: opt_in}
    return {"metadata": meta}


def _watcher() -> Watcher:
    w = Watcher.__new__(Watcher)  # the real constructor builds executors and an API client
    w.metal3_selector = None
    return w


def _watch(name: str, wakes: list[int] | None = None) -> tuple[WatchedList, Any]:
    def changed(*_: object) -> None:
        if wakes is not None:
            wakes.append(1)

    objects = WatchedList(name, None, on_reset=changed, on_event=changed, informer=_Recorded)
    return objects, objects.informer


def test_a_nodefences_events_keep_its_version_uid_and_deletion_and_wake_the_loop() -> None:
    wakes: list[int] = []
    fences, inf = _watch("NodeFence", wakes)
    w, watches = _watcher(), {NODEFENCE: fences}
    inf.on_reset([_nf("10")])
    assert w._watched(watches) == ({NF: ("10", "u1")}, set())
    inf.on_event("MODIFIED", _nf("11"))
    assert w._watched(watches) == ({NF: ("11", "u1")}, set())
    inf.on_event("MODIFIED", _nf("12", deleting=True))
    assert w._watched(watches) == ({NF: ("12", "u1")}, {NF}), "a finalizer holds it: being deleted"
    inf.on_event("DELETED", _nf("13"))
    assert w._watched(watches) == ({}, set())
    assert len(wakes) == 4, "every list and event wakes the loop"


def test_a_late_deletion_of_the_old_object_leaves_the_one_created_again_under_its_name() -> None:
    fences, inf = _watch("NodeFence")
    inf.on_reset([])
    inf.on_event("ADDED", _nf("20", uid="u2"))
    inf.on_event("DELETED", _nf("19", uid="u1"))
    assert _watcher()._watched({NODEFENCE: fences}) == ({NF: ("20", "u2")}, set())


def test_a_list_replaces_what_the_events_left() -> None:
    fences, inf = _watch("NodeFence")
    inf.on_reset([])
    inf.on_event("ADDED", _nf("5"))
    inf.on_reset([])
    assert _watcher()._watched({NODEFENCE: fences}) == ({}, set()), (
        "an object missed while the watch was down is gone after the relist"
    )


def test_a_metal3remediation_is_scheduled_only_while_it_is_opted_in() -> None:
    remediations, inf = _watch("Metal3Remediation")
    w, watches = _watcher(), {METAL3REMEDIATION: remediations}
    inf.on_reset([_m3("1", None)])
    assert w._watched(watches) == ({}, set()), "no annotation and no selector: not ours"
    inf.on_event("MODIFIED", _m3("2", "true"))
    assert w._watched(watches) == ({M3: ("2", "m1")}, set())
    inf.on_event("MODIFIED", _m3("3", "false"))
    assert w._watched(watches) == ({}, set()), "opted out: dropped"
    inf.on_event("MODIFIED", _m3("4", "maybe"))
    assert w._watched(watches) == ({}, set()), "an unreadable annotation is not an opt-in"


def test_the_watches_stand_for_a_listing_only_once_each_has_listed_or_found_its_kind_missing() -> None:
    fences, nf_inf = _watch("NodeFence")
    remediations, m3_inf = _watch("Metal3Remediation")
    w, watches = _watcher(), {NODEFENCE: fences, METAL3REMEDIATION: remediations}
    assert w._watched(watches) is None, "no watch has listed: the loop lists"
    nf_inf.on_reset([_nf("7", deleting=True)])
    assert w._watched(watches) is None, "the Metal3Remediations are not known yet"
    m3_inf.missing.set()  # their CRD is not installed: there are none
    assert w._watched(watches) == ({NF: ("7", "u1")}, {NF})
    m3_inf.on_reset([_m3("8", "true")])
    m3_inf.missing.clear()
    assert w._watched(watches) == ({NF: ("7", "u1"), M3: ("8", "m1")}, {NF})
    nf_inf.on_error()
    assert w._watched(watches) is None, "a failed watch: the loop lists until it has listed again"


class _Kube:
    """What ``Watcher._start_watches`` touches of KubeIO; the lists are never made (``stop`` is set)."""

    def __init__(self, nodes: WatchedList | None) -> None:
        self.watched_nodes = nodes
        self.watched_nodefences: WatchedList | None = None
        self.custom = None

        class _Core:
            def list_node(self, **_kw: Any) -> Any:
                raise AssertionError("not listed: stop is set")

        self.core = _Core()


def test_the_guards_read_the_detectors_node_watch_and_the_watchers_nodefence_watch() -> None:
    stop = threading.Event()
    stop.set()  # the watches' threads end at once
    detectors, _inf = _watch("nodes")
    w = _watcher()
    w.kube = _Kube(detectors)  # type: ignore[assignment]
    watches = w._start_watches(stop, threading.Event())
    assert w.kube.watched_nodes is detectors, "one Node watch per runner: the detector's"
    assert w.kube.watched_nodefences is watches[NODEFENCE]
    assert set(watches) == {NODEFENCE, METAL3REMEDIATION}
    alone = _watcher()
    alone.kube = _Kube(None)  # type: ignore[assignment]
    alone._start_watches(stop, threading.Event())
    assert isinstance(alone.kube.watched_nodes, WatchedList), "--reconcile-only: a Node watch of its own"
