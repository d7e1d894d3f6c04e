"""What the watcher schedules its workers from between two listings: the NodeFences and opted-in
Metal3Remediations as their watches delivered them (``loops/watcher.py``: ``_Keys``,
``Watcher._watched``), in the shape of a listing. Pure: the informers are built but never run;
their events are handed in as a watch would hand them.
"""

from __future__ import annotations

from typing import Any

from noderemedy_runner.kube.informer import Informer
from noderemedy_runner.kube.resources import METAL3REMEDIATION, NODEFENCE
from noderemedy_runner.loops.watcher import Key, Watcher, _Keys
from noderemedy_runner.machines.metal3 import OPT_IN_ANNOTATION

NF: Key = ("NodeFence", "", "lab-node-1")
M3: Key = ("Metal3Remediation", "capi", "worker-1")


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


def test_a_nodefences_events_keep_its_version_uid_and_deletion_and_wake_the_loop() -> None:
    wakes: list[int] = []
    keys = _Keys(NODEFENCE, None, lambda: wakes.append(1))
    keys.reset([_nf("10")])
    assert keys.snapshot() == {NF: ("10", "u1", False)}
    keys.event("MODIFIED", _nf("11"))
    assert keys.snapshot() == {NF: ("11", "u1", False)}
    keys.event("MODIFIED", _nf("12", deleting=True))
    assert keys.snapshot() == {NF: ("12", "u1", True)}, "a finalizer holds it: being deleted"
    keys.event("DELETED", _nf("13"))
    assert keys.snapshot() == {}
    assert len(wakes) == 4, "every list and event wakes the loop"


def test_a_late_deletion_of_the_old_object_leaves_the_one_created_again_under_its_name() -> None:
    keys = _Keys(NODEFENCE, None, lambda: None)
    keys.event("ADDED", _nf("20", uid="u2"))
    keys.event("DELETED", _nf("19", uid="u1"))
    assert keys.snapshot() == {NF: ("20", "u2", False)}


def test_a_list_replaces_what_the_events_left() -> None:
    keys = _Keys(NODEFENCE, None, lambda: None)
    keys.event("ADDED", _nf("5"))
    keys.reset([])
    assert keys.snapshot() == {}, "an object missed while the watch was down is gone after the relist"


def test_a_metal3remediation_is_held_only_while_it_is_opted_in() -> None:
    keys = _Keys(METAL3REMEDIATION, None, lambda: None)
    keys.reset([_m3("1", None)])
    assert keys.snapshot() == {}, "no annotation and no selector: not ours"
    keys.event("MODIFIED", _m3("2", "true"))
    assert keys.snapshot() == {M3: ("2", "m1", False)}
    keys.event("MODIFIED", _m3("3", "false"))
    assert keys.snapshot() == {}, "opted out: dropped"
    keys.event("MODIFIED", _m3("4", "maybe"))
    assert keys.snapshot() == {}, "an unreadable annotation is not an opt-in"


def _informer(name: str) -> Informer:
    def never(**_kw: Any) -> Any:
        raise AssertionError("the informer is not run here")

    return Informer(name, never, lambda _items: None, lambda _t, _o: None)


def test_the_watches_stand_for_a_listing_only_once_each_has_listed_or_found_its_kind_missing() -> None:
    nf_inf, m3_inf = _informer("NodeFence"), _informer("Metal3Remediation")
    nf_keys, m3_keys = _Keys(NODEFENCE, None, lambda: None), _Keys(METAL3REMEDIATION, None, lambda: None)
    watches = [(nf_inf, nf_keys), (m3_inf, m3_keys)]
    assert Watcher._watched(watches) is None, "no watch has listed: the loop lists"
    nf_keys.reset([_nf("7", deleting=True)])
    nf_inf.synced.set()
    assert Watcher._watched(watches) is None, "the Metal3Remediations are not known yet"
    m3_inf.missing.set()  # their CRD is not installed: there are none
    assert Watcher._watched(watches) == ({NF: ("7", "u1")}, {NF})
    m3_keys.reset([_m3("8", "true")])
    m3_inf.missing.clear()
    m3_inf.synced.set()
    assert Watcher._watched(watches) == ({NF: ("7", "u1"), M3: ("8", "m1")}, {NF})
