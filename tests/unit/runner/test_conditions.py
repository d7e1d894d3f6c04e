"""The metav1.Condition helper: lastTransitionTime changes only when the status changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.machines.conditions import (
    Condition,
    find_condition,
    format_time,
    is_true,
    parse_time,
    remove_condition,
    set_condition,
)

T0 = 1_700_000_000.0


def test_set_new_condition_appends_with_now() -> None:
    conds = set_condition((), "Processing", "True", "FenceAgentRunning", "m", T0, 3)
    assert conds == (Condition("Processing", "True", "FenceAgentRunning", "m", T0, 3),)


def test_same_status_keeps_transition_time_but_updates_reason_message_generation() -> None:
    first = set_condition((), "Processing", "True", "A", "one", T0, 1)
    second = set_condition(first, "Processing", "True", "B", "two", T0 + 50, 2)
    assert second == (Condition("Processing", "True", "B", "two", T0, 2),)


def test_status_change_moves_transition_time() -> None:
    first = set_condition((), "Succeeded", "Unknown", "A", "", T0)
    second = set_condition(first, "Succeeded", "False", "A", "", T0 + 7)
    assert find_condition(second, "Succeeded") == Condition("Succeeded", "False", "A", "", T0 + 7)


def test_replace_keeps_order_of_other_conditions() -> None:
    conds = set_condition((), "A", "True", "R", "", T0)
    conds = set_condition(conds, "B", "True", "R", "", T0)
    conds = set_condition(conds, "A", "False", "R", "", T0 + 1)
    assert [c.type for c in conds] == ["A", "B"]
    assert is_true(conds, "B") and not is_true(conds, "A") and not is_true(conds, "C")
    assert [c.type for c in remove_condition(conds, "A")] == ["B"]


def test_input_is_not_modified() -> None:
    conds = set_condition((), "A", "True", "R", "", T0)
    set_condition(conds, "A", "False", "R", "", T0 + 1)
    assert conds[0].status == "True"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"type": "has space"}, "qualified name"),
        ({"status": "Yes"}, "status 'Yes'"),
        ({"reason": "not camel"}, "CamelCase"),
        ({"reason": ""}, "CamelCase"),
        ({"observed_generation": -1}, "observedGeneration"),
    ],
)
def test_condition_rejects_what_the_api_server_rejects(kwargs: dict, match: str) -> None:
    base = {"type": "Processing", "status": "True", "reason": "Ok"}
    with pytest.raises(ValueError, match=match):
        Condition(**{**base, **kwargs})


def test_dict_round_trip_and_missing_field_error() -> None:
    cond = Condition("example.com/Ready", "False", "Why", "msg", T0, 4)
    d = cond.to_dict()
    assert d == {
        "type": "example.com/Ready",
        "status": "False",
        "reason": "Why",
        "message": "msg",
        "lastTransitionTime": "2023-11-14T22:13:20Z",
        "observedGeneration": 4,
    }
    assert Condition.from_dict(d) == cond
    del d["reason"]
    with pytest.raises(ValueError, match="lacks field 'reason'"):
        Condition.from_dict(d)


def test_parse_time_forms_and_errors() -> None:
    assert parse_time("2023-11-14T22:13:20Z") == T0
    assert parse_time("2023-11-14T23:13:20.5+01:00") == T0 + 0.5
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        parse_time("yesterday")
    with pytest.raises(ValueError, match="without a zone offset"):
        parse_time("2023-11-14T22:13:20")


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "B", "C"]),
            st.sampled_from(["True", "False", "Unknown"]),
            st.integers(min_value=0, max_value=10**6),
        ),
        max_size=30,
    )
)
def test_transition_time_is_the_time_of_the_last_status_change(ops: list[tuple[str, str, int]]) -> None:
    conds: tuple[Condition, ...] = ()
    expected: dict[str, tuple[str, float]] = {}
    t = T0
    for type_, status, dt in ops:
        t += dt
        conds = set_condition(conds, type_, status, "R", "", t)  # type: ignore[arg-type]
        if type_ not in expected or expected[type_][0] != status:
            expected[type_] = (status, t)
    assert {c.type: (c.status, c.last_transition_time) for c in conds} == expected
    assert len({c.type for c in conds}) == len(conds)
    for c in conds:
        assert parse_time(format_time(c.last_transition_time)) == float(int(c.last_transition_time))
