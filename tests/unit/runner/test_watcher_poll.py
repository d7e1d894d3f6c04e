"""The watcher's scheduling of workers (:meth:`Watcher.poll`), without a cluster: the listing and
the reconcile are replaced, the rest is the real loop. A NodeFence deleted and created again under
the same name between two listings (the detector fencing a node again) is a new object: it gets a
worker of its own, with a cancel event that is not set, and the reconciler forgets the old one.

Before this rule the new NodeFence inherited the old worker, whose cancel event the deletion had
set; every reconcile of it then returned at once, and the node was never fenced again.
"""

from __future__ import annotations

import threading
from typing import Any

from noderemedy_runner.loops.watcher import Key, Watcher

NF: Key = ("NodeFence", "", "lab-real-0")


class _Forgets:
    def __init__(self) -> None:
        self.names: list[tuple[str, ...]] = []

    def forget(self, *key: str) -> None:
        self.names.append(key)


class _Scheduling(Watcher):
    """A Watcher whose listing is :attr:`listing` and whose reconcile records the cancel event's
    state at its start, then waits for :attr:`gate` (a reconcile in flight while the list changes)."""

    def __init__(self) -> None:  # the real constructor builds executors and an API client
        self._workers: dict[Key, Any] = {}
        self.max_requeue = 2.0
        self.idle_requeue = 30.0
        self.nodefences: Any = _Forgets()
        self.metal3: Any = _Forgets()
        self.listing: dict[Key, tuple[str, str]] = {}
        self.deleting: set[Key] = set()
        self.gate = threading.Event()
        self.calls: list[tuple[Key, bool]] = []

    def _list(self) -> tuple[dict[Key, tuple[str, str]], set[Key]]:
        return dict(self.listing), set(self.deleting)

    def reconcile_key(self, key: Key, cancel: threading.Event | None = None) -> float | None:
        self.calls.append((key, bool(cancel and cancel.is_set())))
        self.gate.wait(10)
        return None

    def settle(self) -> None:
        for worker in self._workers.values():
            if worker.thread is not None:
                worker.thread.join(10)


def test_a_nodefence_created_again_under_its_name_gets_a_fresh_worker_and_is_reconciled() -> None:
    w = _Scheduling()
    w.listing = {NF: ("10", "uid-old")}
    w.poll()  # the old (finished) NodeFence's reconcile is in flight...
    assert w.calls == [(NF, False)]
    w.listing = {NF: ("12", "uid-new")}  # ...when it is deleted and created again
    w.poll()
    old = w._workers[NF]
    assert old.cancel.is_set(), "the old object's worker is canceled"
    assert len(w.calls) == 1, "the new object waits for the old worker to end"
    w.gate.set()
    w.settle()
    w.poll()  # the old worker has ended: dropped, forgotten, and the new object gets its own
    w.settle()
    assert w.nodefences.names == [("lab-real-0",)]
    assert w._workers[NF] is not old
    assert w.calls == [(NF, False), (NF, False)], "the new NodeFence is reconciled, not canceled"


def test_a_nodefence_listed_gone_then_back_under_its_name_is_not_reconciled_as_canceled() -> None:
    """The sequence of a CI run's demo: one listing missed the name (the old object deleted, its
    reconcile still in flight), the next one had the new object."""
    w = _Scheduling()
    w.listing = {NF: ("10", "uid-old")}
    w.poll()
    w.listing = {}
    w.poll()  # gone: canceled, kept while its thread runs
    w.listing = {NF: ("12", "uid-new")}
    w.gate.set()
    w.settle()
    w.poll()
    w.settle()
    assert w.calls[-1] == (NF, False), w.calls
    assert not w._workers[NF].cancel.is_set()


def _reconciled_once() -> _Scheduling:
    """A watcher whose reconciles do not wait, after one round over NodeFence uid-a."""
    w = _Scheduling()
    w.gate.set()
    w.listing = {NF: ("10", "uid-a")}
    w.poll()
    w.settle()
    return w


def test_the_same_object_keeps_its_worker_across_changes() -> None:
    w = _reconciled_once()
    first = w._workers[NF]
    w.listing = {NF: ("11", "uid-a")}  # a status write: same object, new resourceVersion
    w.poll()
    w.settle()
    assert w._workers[NF] is first and not first.cancel.is_set()
    assert w.calls == [(NF, False), (NF, False)]
    assert w.nodefences.names == []


def test_a_gone_nodefence_is_canceled_and_forgotten() -> None:
    w = _reconciled_once()
    worker = w._workers[NF]
    w.listing = {}
    w.poll()
    assert worker.cancel.is_set() and NF not in w._workers
    assert w.nodefences.names == [("lab-real-0",)]


def test_the_reconciles_in_flight_are_counted_for_the_batches_idle_start() -> None:
    """:meth:`Watcher.reconciling` (the batching executors start a run at once only when its own
    resource is the only one): each worker counts from its start until its reconcile returns."""
    w = _Scheduling()
    other: Key = ("NodeFence", "", "lab-real-1")
    w.listing = {NF: ("10", "uid-a")}
    w.poll()
    assert w.reconciling() == 1
    w.listing = {NF: ("10", "uid-a"), other: ("11", "uid-b")}
    w.poll()
    assert w.reconciling() == 2
    w.gate.set()
    w.settle()
    assert w.reconciling() == 0


def test_a_poll_given_the_watches_listing_schedules_from_it_and_lists_nothing() -> None:
    """Between resyncs the loop hands :meth:`Watcher.poll` what the watches hold
    (``Watcher._watched``): a new resourceVersion there starts the worker, and nothing is listed."""
    w = _reconciled_once()
    listed: list[int] = []
    w._list = lambda: listed.append(1) or ({}, set())  # type: ignore[method-assign]
    w.poll(({NF: ("11", "uid-a")}, set()))
    w.settle()
    assert listed == []
    assert w.calls == [(NF, False), (NF, False)]
    w.poll(({}, set()))  # the watch delivered its deletion
    assert listed == [] and NF not in w._workers
