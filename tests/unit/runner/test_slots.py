"""Executor run slots (runner/noderemedy_runner/executor.py ``Slots``): bounded, handed out by
priority (first tries before retries), first come first served within a priority, cancelable."""

from __future__ import annotations

import threading
import time

import pytest

from noderemedy_runner.executor import AFTER_RELEASE_PRIORITY, Slots


def queue_until(slots: Slots, n: int) -> None:
    deadline = time.monotonic() + 10
    while slots.queued < n:
        assert time.monotonic() < deadline, f"{slots.queued} waiters, expected {n}"
        time.sleep(0.005)


def waiter(
    slots: Slots, priority: int, got: list[int], cancel: threading.Event | None = None
) -> threading.Thread:
    def run() -> None:
        if slots.acquire(priority, cancel or threading.Event(), poll=0.01):
            got.append(priority)
            slots.release(priority)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_lower_priority_gets_the_next_slot_and_equal_ones_queue_in_order() -> None:
    slots = Slots(1)
    assert slots.acquire(0, threading.Event())
    got: list[int] = []
    threads = []
    for p in (3, 1, 2, 0):  # arrive in this order, each queued before the next
        threads.append(waiter(slots, p, got))
        queue_until(slots, len(threads))
    slots.release(0)
    for t in threads:
        t.join(10)
    assert got == [0, 1, 2, 3]

    # equal priorities: first come, first served (arrival tags the ticket)
    order: list[str] = []
    assert slots.acquire(0, threading.Event())

    def named(tag: str) -> threading.Thread:
        def run() -> None:
            assert slots.acquire(1, threading.Event(), poll=0.01)
            order.append(tag)
            slots.release(1)

        t = threading.Thread(target=run)
        t.start()
        return t

    ts = []
    for tag in "abc":
        ts.append(named(tag))
        queue_until(slots, len(ts))
    slots.release(0)
    for t in ts:
        t.join(10)
    assert order == ["a", "b", "c"]


def test_a_canceled_waiter_leaves_the_queue_and_takes_no_slot() -> None:
    slots = Slots(1)
    assert slots.acquire(0, threading.Event())
    cancel = threading.Event()
    got: list[int] = []
    first = waiter(slots, 0, got, cancel)  # would be served first
    queue_until(slots, 1)
    second = waiter(slots, 5, got)
    queue_until(slots, 2)
    cancel.set()
    first.join(10)
    assert slots.queued == 1 and slots.in_flight == 1
    slots.release(0)
    second.join(10)
    assert got == [5]
    assert (slots.in_flight, slots.queued) == (0, 0)


def test_never_more_than_n_in_flight_under_contention() -> None:
    slots = Slots(3)
    lock = threading.Lock()
    running = [0]
    most = [0]

    def work(i: int) -> None:
        assert slots.acquire(i % 4, threading.Event(), poll=0.01)
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.002)
        with lock:
            running[0] -= 1
        slots.release(i % 4)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert most[0] <= 3 and slots.peak == 3
    assert (slots.in_flight, slots.queued) == (0, 0)


def test_release_without_a_slot_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not taken"):
        Slots(2).release(0)
    slots = Slots(2)
    assert slots.acquire(0, threading.Event())
    # a slot of the other kind is not the one held: nothing is given back
    with pytest.raises(RuntimeError, match="not taken"):
        slots.release(AFTER_RELEASE_PRIORITY)
    assert slots.in_flight == 1
    slots.release(0)
    assert slots.in_flight == 0


def test_runs_after_a_release_leave_one_slot_for_a_fence_and_take_it_when_n_is_1() -> None:
    """Recovery runs (AFTER_RELEASE_PRIORITY and above) hold at most n - 1 slots: a fence that
    asks while they run gets the last one at once, and they wait for theirs even when it is free."""
    slots = Slots(3)
    late = AFTER_RELEASE_PRIORITY
    assert slots.acquire(late, threading.Event())
    assert slots.acquire(late + 1_000_000, threading.Event())  # the fence device check's too
    got: list[int] = []
    third_late = waiter(slots, late, got)
    queue_until(slots, 1)
    assert (slots.in_flight, got) == (2, []), "a run after release took the slot kept for fences"
    fence = waiter(slots, 2, got)  # a fence's third try
    fence.join(10)
    assert got == [2] and slots.peak == 3
    assert slots.queued == 1
    slots.release(late)
    third_late.join(10)
    assert got == [2, late]
    slots.release(late + 1_000_000)
    assert (slots.in_flight, slots.queued) == (0, 0)

    one = Slots(1)
    assert one.acquire(late, threading.Event(), poll=0.01)
    one.release(late)
    assert one.in_flight == 0
