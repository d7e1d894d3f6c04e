"""The storm guard's status record (runner/noderemedy_runner/loops/storm_status.py): the ConfigMap
``noderemedy-status`` the detector writes and a new leader reads back, and the Events a change of
the storm state gives. The states come from the pure storm guard itself
(:func:`noderemedy_runner.machines.storm.evaluate`)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from noderemedy_runner.config.remedy import IntOrPercent, StormGuard
from noderemedy_runner.kube.errors import KubeError, NotFound
from noderemedy_runner.loops.storm_status import (
    STATUS_CONFIGMAP,
    STORM_CONDITION,
    StatusConfigMap,
    changed,
    record_conditions,
    state_from_record,
    status_key,
    storm_event,
    storm_record,
)
from noderemedy_runner.machines.storm import StormState, evaluate
from noderemedy_runner.times import format_time

#: at most 1 of the nodes unhealthy, 60 s of cooldown after a storm
GUARD = StormGuard(max_unhealthy=IntOrPercent(1), cooldown=60.0)
T0 = 1_800_000_000.0


def states() -> list[StormState]:
    """Within the limit, a storm, the storm going on, its end (cooldown), fencing resumed."""
    out: list[StormState] = []
    prev = None
    for now, unhealthy in ((T0, 0), (T0 + 10, 3), (T0 + 20, 3), (T0 + 30, 0), (T0 + 100, 0)):
        prev = evaluate(GUARD, 5, unhealthy, prev, now)
        out.append(prev)
    return out


def test_the_storm_states_used_here_are_what_the_guard_gives() -> None:
    # the walk below is meaningful only if the guard really goes through these reasons
    assert [(s.active, s.storm, s.reason) for s in states()] == [
        (False, False, "WithinLimit"),
        (True, True, "TooManyUnhealthy"),
        (True, True, "TooManyUnhealthy"),
        (True, False, "Cooldown"),
        (False, False, "WithinLimit"),
    ]


def test_a_record_reads_back_as_the_state_it_was_written_from() -> None:
    for state in states():
        doc = json.loads(json.dumps(storm_record("workers", state, (), T0 + 200)))
        back = state_from_record(doc)
        assert (back.active, back.storm, back.total, back.unhealthy, back.reason) == (
            state.active,
            state.storm,
            state.total,
            state.unhealthy,
            state.reason,
        )
        # a running cooldown survives a new leader: it is counted from endedAt
        assert back.since == state.since and back.ended_at == state.ended_at
        assert back.cooldown_left(GUARD, T0 + 50) == state.cooldown_left(GUARD, T0 + 50)


def test_the_record_holds_the_condition_and_the_counts() -> None:
    storm = states()[1]
    doc = storm_record("workers", storm, (), T0 + 10)
    assert doc["configuration"] == "workers"
    assert (doc["total"], doc["unhealthy"], doc["allowed"], doc["since"]) == (5, 3, 1, format_time(T0 + 10))
    assert doc["endedAt"] is None
    [cond] = doc["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (STORM_CONDITION, "True", "TooManyUnhealthy")
    assert cond["message"] == storm.message


def test_the_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    within, storm, going_on, cooldown, resumed = states()
    first = storm_record("workers", storm, (), T0 + 10)
    again = storm_record("workers", going_on, record_conditions(json.dumps(first)), T0 + 20)
    assert again["conditions"][0]["lastTransitionTime"] == format_time(T0 + 10)
    # the cooldown is still active (no new fencing): the same status, a new reason
    cooling = storm_record("workers", cooldown, record_conditions(json.dumps(again)), T0 + 30)
    assert cooling["conditions"][0]["lastTransitionTime"] == format_time(T0 + 10)
    assert cooling["conditions"][0]["reason"] == "Cooldown"
    ended = storm_record("workers", resumed, record_conditions(json.dumps(cooling)), T0 + 100)
    assert ended["conditions"][0]["status"] == "False"
    assert ended["conditions"][0]["lastTransitionTime"] == format_time(T0 + 100)


def test_an_unreadable_record_has_no_conditions() -> None:
    assert record_conditions(None) == ()
    assert record_conditions("") == ()
    assert record_conditions("not json") == ()
    assert record_conditions(json.dumps({"conditions": [{"type": "X"}]})) == ()


def test_events_of_a_storm_from_start_to_resume() -> None:
    within, storm, going_on, cooldown, resumed = states()
    steps = [(None, within), (within, storm), (storm, going_on), (going_on, cooldown), (cooldown, resumed)]
    events = [storm_event("workers", old, new) for old, new in steps]
    assert [e[:2] if e else None for e in events] == [
        None,
        ("Warning", "StormGuardActive"),
        None,  # the storm goes on: said once
        ("Normal", "StormGuardCooldown"),
        ("Normal", "StormGuardCleared"),
    ]
    assert events[1] is not None and events[1][2] == f"Configuration workers: {storm.message}"
    assert events[4] is not None and events[4][2].startswith("Configuration workers: fencing resumes; ")


def test_a_state_is_reported_when_its_activity_reason_or_counts_change() -> None:
    within, storm, going_on, cooldown, resumed = states()
    assert changed(None, within)
    assert changed(within, storm)
    assert not changed(storm, going_on)  # only the time went on
    assert changed(going_on, cooldown)
    assert changed(within, evaluate(GUARD, 6, 0, within, T0 + 1))  # a node joined


class FakeCore:
    """The ConfigMap calls of a CoreV1Api, on one namespace's ConfigMaps held here."""

    def __init__(self, fail: bool = False) -> None:
        self.maps: dict[str, Any] = {}
        self.fail = fail
        self.calls: list[str] = []

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        self.calls.append("read")
        if self.fail:
            raise KubeError("refused", "forbidden", 403)
        if name not in self.maps:
            raise NotFound("not there", "not_found", 404)
        cm = self.maps[name]
        return SimpleNamespace(metadata=cm.metadata, data=dict(cm.data or {}))

    def create_namespaced_config_map(self, namespace: str, body: Any) -> None:
        self.calls.append("create")
        self.maps[body.metadata.name] = body

    def replace_namespaced_config_map(self, name: str, namespace: str, body: Any) -> None:
        self.calls.append("replace")
        self.maps[name] = body


def test_the_configmap_is_created_then_updated_keeping_other_keys() -> None:
    core = FakeCore()
    status = StatusConfigMap(core, "noderemedy")  # type: ignore[arg-type]
    within, storm, *_ = states()
    status.write("workers", storm, T0 + 10)
    status.write("masters", within, T0 + 10)
    assert core.calls == ["read", "create", "read", "replace"]
    cm = core.maps[STATUS_CONFIGMAP]
    assert cm.metadata.labels == {"app.kubernetes.io/managed-by": "noderemedy-runner"}
    assert set(cm.data) == {status_key("workers"), status_key("masters")} == {"workers.json", "masters.json"}
    restored = status.restore(["workers", "masters", "absent"])
    assert set(restored) == {"workers", "masters"}
    assert restored["workers"].storm and restored["workers"].since == T0 + 10
    assert not restored["masters"].active


def test_restore_leaves_out_what_it_cannot_read() -> None:
    assert StatusConfigMap(FakeCore(), "ns").restore(["workers"]) == {}  # type: ignore[arg-type]
    assert StatusConfigMap(FakeCore(fail=True), "ns").restore(["workers"]) == {}  # type: ignore[arg-type]
    core = FakeCore()
    core.maps[STATUS_CONFIGMAP] = SimpleNamespace(
        metadata=None, data={"workers.json": json.dumps({"since": "yesterday"}), "other.json": "{}"}
    )
    assert StatusConfigMap(core, "ns").restore(["workers", "other"]) == {"other": StormState()}  # type: ignore[arg-type]


def test_a_refused_write_is_not_raised() -> None:
    core = FakeCore(fail=True)
    StatusConfigMap(core, "ns").write("workers", states()[1], T0)  # type: ignore[arg-type]
    assert core.calls == ["read"] and core.maps == {}


def test_the_ref_names_the_configmap_for_events() -> None:
    ref = StatusConfigMap(FakeCore(), "noderemedy").ref()  # type: ignore[arg-type]
    assert ref == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "name": "noderemedy-status",
        "namespace": "noderemedy",
    }
