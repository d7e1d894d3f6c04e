"""A release whose runner died before recording it (:mod:`noderemedy_runner.loops.adopt`): what
the runner that goes on records, from what the NodeFence holds. A fake Kubernetes layer; no
network."""

from __future__ import annotations

import threading
from typing import Any

from noderemedy_runner.kube.errors import Conflict
from noderemedy_runner.loops.adopt import (
    ADDED,
    RELEASE_UNVERIFIED,
    UNVERIFIED,
    needs_record,
    record_adopted_release,
)
from noderemedy_runner.loops.memory import InMemory, release_key
from noderemedy_runner.machines.actions import FenceReading
from noderemedy_runner.machines.conditions import set_condition
from noderemedy_runner.machines.nodefence import (
    FENCE_VERIFIED,
    WORKLOADS_RELEASED,
    NodeFenceStatus,
    RunRef,
)

NOW = 1_800_000_000.0
NODE = "worker-1"
OBJ = {"metadata": {"name": "nf-1", "uid": "0123-4567-89ab-cdef", "resourceVersion": "7"}, "status": {}}
EVIDENCE = {
    "verified": True,
    "method": "ipmi",
    "state": "off",
    "target": "10.0.0.9:623",
    "verified_at": NOW - 2,
}


class FakeKube:
    """Events as the API server keeps them: a second create of a fixed name is refused (409)."""

    def __init__(self) -> None:
        self.events: dict[str, tuple[str, str, str]] = {}
        self.statuses: list[dict[str, Any]] = []

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str, once_key: str = "") -> None:
        name = f"{obj['metadata']['name']}.{once_key or len(self.events)}"
        if name not in self.events:  # the recorder drops the 409
            self.events[name] = (type_, reason, message)

    def get_node(self, node: str) -> dict[str, Any]:
        return {"metadata": {"name": node}}

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return [{"metadata": {"namespace": "app", "name": "db-0"}}]

    def replace_status(self, crd: Any, obj: Any, status: dict[str, Any]) -> dict[str, Any]:
        self.statuses.append(status)
        return {}


def fencing(**kw: Any) -> NodeFenceStatus:
    return NodeFenceStatus(**{"status": "Running", "step": "PowerManagement", **kw})


def record(kube: FakeKube, status: NodeFenceStatus, held: InMemory, verify: Any = None) -> bool:
    calls: list[int] = []

    def default_verify() -> bool:
        calls.append(1)
        return True

    return record_adopted_release(
        kube,  # type: ignore[arg-type]
        OBJ,
        NODE,
        status,
        held,
        NOW,
        verify or default_verify,
        threading.Event(),
    )


def test_only_a_taint_of_a_fencing_flow_not_yet_recorded_needs_a_record() -> None:
    held = InMemory()
    assert needs_record(fencing(), held, True)
    assert not needs_record(fencing(), held, False)
    assert not needs_record(fencing(step="Recovery", status="Done"), held, True)
    assert not needs_record(fencing(status="New", step="Isolation"), held, True)
    held.release_recorded = 0
    assert not needs_record(fencing(), held, True)
    assert needs_record(fencing(restarts=1), held, True), "a new flow records its own release"


def test_a_fresh_reading_held_is_the_evidence_and_the_record_is_made_once() -> None:
    kube = FakeKube()
    held = InMemory(
        reading=FenceReading(NODE, True, "power_off", "ipmi-off", NOW - 2), evidence=dict(EVIDENCE)
    )
    assert record(kube, fencing(), held) and held.release_recorded == 0
    assert record(kube, fencing(), InMemory(reading=held.reading, evidence=dict(EVIDENCE)))  # a successor
    assert list(kube.events) == [f"nf-1.{release_key(OBJ, ADDED, 0)}", f"{NODE}.{release_key(OBJ, ADDED, 0)}"]
    type_, reason, message = kube.events[f"nf-1.{release_key(OBJ, ADDED, 0)}"]
    assert (type_, reason) == ("Normal", ADDED)
    assert "power_off verified by ipmi-off: ipmi 10.0.0.9:623 read back off" in message, message
    assert "app/db-0" in message and not kube.statuses


def test_a_verified_power_fence_in_the_status_is_the_evidence_without_a_device_read() -> None:
    kube = FakeKube()
    conds = set_condition(
        (), FENCE_VERIFIED, "True", "FenceVerified", "power_off read back (ipmi-off)", NOW - 30
    )

    def no_read() -> bool:
        raise AssertionError("the status holds the evidence: no device read")

    assert record(kube, fencing(status="Done", conditions=conds), InMemory(), no_read)
    (_, reason, message), *_ = kube.events.values()
    assert reason == ADDED and "power_off read back (ipmi-off), FenceVerified since" in message


def test_a_committed_run_comes_first() -> None:
    kube = FakeKube()
    run = RunRef("nf-1-r0-power-management-a0", "PowerManagement", 0, 0.0)

    def no_read() -> bool:
        raise AssertionError("the committed run reads the fence")

    held = InMemory()
    assert record(kube, fencing(current_run=run), held, no_read)
    assert not kube.events and held.release_recorded is None


def test_no_evidence_reads_the_device_and_a_fence_not_holding_raises_the_alarm() -> None:
    kube = FakeKube()
    held = InMemory()

    def read_on() -> bool:  # the device read back: power on
        held.reading = FenceReading(NODE, False, "power_off", "verify", NOW)
        return True

    assert record(kube, fencing(), held, read_on)
    (type_, reason, message), *_ = kube.events.values()
    assert (type_, reason) == ("Warning", UNVERIFIED) and "holds no verified fence" in message
    [status] = kube.statuses
    cond = next(c for c in status["conditions"] if c["type"] == WORKLOADS_RELEASED)
    assert (cond["status"], cond["reason"]) == ("False", RELEASE_UNVERIFIED)
    assert held.release_recorded == 0


def test_no_evidence_and_a_fence_read_back_as_holding_records_the_release() -> None:
    kube = FakeKube()
    held = InMemory()

    def read_off() -> bool:
        held.reading = FenceReading(NODE, True, "power_off", "ipmi-off", NOW)
        held.evidence = dict(EVIDENCE)
        return True

    assert record(kube, fencing(), held, read_off)
    assert [r for _, r, _ in kube.events.values()] == [ADDED, ADDED] and not kube.statuses


def test_a_canceled_read_stops_and_records_nothing() -> None:
    kube = FakeKube()
    cancel = threading.Event()
    cancel.set()
    ok = record_adopted_release(
        kube,  # type: ignore[arg-type]
        OBJ, NODE, fencing(), InMemory(), NOW, lambda: False, cancel,
    )  # fmt: skip
    assert ok is False and not kube.events


def test_a_conflicting_status_write_is_left_for_the_next_look() -> None:
    kube = FakeKube()

    def conflict(*_: Any) -> dict[str, Any]:
        raise Conflict("changed")

    kube.replace_status = conflict  # type: ignore[method-assign]
    held = InMemory()

    def read_on() -> bool:
        held.reading = FenceReading(NODE, False, "power_off", "verify", NOW)
        return True

    assert record(kube, fencing(), held, read_on) and held.release_recorded is None
