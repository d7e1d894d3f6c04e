"""The fence driver base (``_fence.py``): action logic, verification, retries, evidence.

Pure logic, no network: the device is an in-memory state table driven through the base's two hooks
(``get_state`` / ``set_state``) and a simulated clock, so no test sleeps or measures time. Protocol
behaviour is tested against the lab's real peers in ``tests/integration/test_fencing_*.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    FenceConfigError,
    FenceDriver,
    PrivilegeError,
    UnreachableError,
    VerifyError,
    aggregate,
)


class Clock:
    """Simulated monotonic clock: ``sleep`` advances it, nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class TableDriver(FenceDriver):
    """State table with a configurable lag (seconds of simulated time before a SET shows)."""

    method = "table"

    def __init__(self, states: dict[str, str], lag: float = 0.0, ignore_sets: int = 0, **kw) -> None:
        self.clock = Clock()
        super().__init__(
            target="dev:1",
            plugs=list(states),
            clock=self.clock,
            sleep=self.clock.sleep,
            wall=lambda: 5.0,
            **kw,
        )
        self.actual = dict(states)
        self.pending: dict[str, tuple[float, str]] = {}
        self.lag = lag
        self.ignore_sets = ignore_sets
        self.log: list[tuple[str, str, str]] = []
        self.unreachable_reads = 0
        self.opened = self.closed = 0

    def open(self) -> None:
        self.opened += 1

    def close(self) -> None:
        self.closed += 1

    def get_state(self, plug: str) -> str:
        if self.unreachable_reads:
            self.unreachable_reads -= 1
            raise UnreachableError("dropped", self.target)
        self.log.append(("get", plug, ""))
        if plug in self.pending and self.clock.now >= self.pending[plug][0]:
            self.actual[plug] = self.pending.pop(plug)[1]
        return self.actual[plug]

    def set_state(self, plug: str, state: str) -> None:
        self.log.append(("set", plug, state))
        if self.ignore_sets:
            self.ignore_sets -= 1
            return
        self.pending[plug] = (self.clock.now + self.lag, state)

    def sets(self) -> list[tuple[str, str]]:
        return [(p, s) for op, p, s in self.log if op == "set"]


def test_off_from_on_is_changed_verified_and_evidenced() -> None:
    drv = TableDriver({"1": "on"}, lag=0.3, poll_interval=0.1)
    res = drv.run("off")
    assert (res.changed, res.before, res.after) == (True, {"1": "on"}, {"1": "off"})
    assert res.verify_seconds == pytest.approx(0.3, abs=0.11)
    assert drv.evidence(res) == {
        "verified": True,
        "method": "table",
        "target": "dev:1",
        "plugs": ["1"],
        "state": "off",
        "verified_at": 5.0,
    }
    assert (drv.opened, drv.closed) == (1, 1)


def test_off_when_off_is_not_changed_but_still_evidence() -> None:
    drv = TableDriver({"1": "off"})
    res = drv.run("off")
    assert res.changed is False
    assert drv.sets() == []
    assert drv.evidence(res)["verified"] is True


def test_check_mode_predicts_without_setting() -> None:
    drv = TableDriver({"1": "on", "2": "off"})
    res = drv.run("off", check_mode=True)
    assert res.changed is True
    assert res.after == {"1": "off", "2": "off"}
    assert drv.sets() == []
    assert drv.evidence(res)["verified"] is False, "check mode must never claim a fence"


def test_only_plugs_not_in_state_are_set() -> None:
    drv = TableDriver({"1": "on", "2": "off"})
    drv.run("off")
    assert drv.sets() == [("1", "off")]


def test_status_lagging_longer_than_power_timeout_fails_never_reports_off() -> None:
    drv = TableDriver({"1": "on"}, lag=30.0, power_timeout=2.0, poll_interval=0.5)
    with pytest.raises(VerifyError, match="power_timeout=2s"):
        drv.run("off")
    assert drv.closed == 1
    # polled until the deadline, never beyond it by more than one interval
    assert drv.clock.now - 1000.0 <= 2.0 + 0.5


def test_power_wait_is_slept_before_the_first_read_back() -> None:
    drv = TableDriver({"1": "on"}, power_wait=2.0, power_timeout=5.0)
    drv.run("off")
    first_get_after_set = drv.log.index(("set", "1", "off")) + 1
    assert drv.log[first_get_after_set][0] == "get"
    assert drv.clock.sleeps[0] == 2.0


def test_on_is_retried_retry_on_times() -> None:
    drv = TableDriver({"1": "off"}, ignore_sets=1, retry_on=1, power_timeout=1.0, poll_interval=0.25)
    res = drv.run("on")
    assert res.after == {"1": "on"}
    assert res.attempts == 2
    assert drv.sets() == [("1", "on"), ("1", "on")]


def test_on_without_retry_fails_after_one_attempt() -> None:
    drv = TableDriver({"1": "off"}, ignore_sets=1, retry_on=0, power_timeout=1.0, poll_interval=0.25)
    with pytest.raises(VerifyError, match="1 attempt"):
        drv.run("on")


def test_off_is_not_retried() -> None:
    drv = TableDriver({"1": "on"}, ignore_sets=1, retry_on=3, power_timeout=1.0, poll_interval=0.25)
    with pytest.raises(VerifyError):
        drv.run("off")
    assert drv.sets() == [("1", "off")]


def test_reboot_turns_every_plug_off_and_verifies_before_any_on() -> None:
    drv = TableDriver({"a": "on", "b": "on"}, lag=0.2, poll_interval=0.1)
    res = drv.run("reboot")
    sets = drv.sets()
    assert sets == [("a", "off"), ("b", "off"), ("a", "on"), ("b", "on")]
    # a read-back showing both off happened between the last off and the first on
    first_on = drv.log.index(("set", "a", "on"))
    assert drv.actual == {"a": "on", "b": "on"}
    gets_before_on = [e for e in drv.log[:first_on] if e[0] == "get"]
    assert gets_before_on, "off must be read back before switching on"
    assert res.changed and res.verified_off_at == 5.0
    assert drv.evidence(res)["state"] == "off"


def test_reboot_with_failed_power_on_is_a_fence_with_a_warning() -> None:
    drv = TableDriver({"1": "on"}, power_timeout=1.0, poll_interval=0.5)
    drv.ignore_sets = 0
    original = drv.set_state

    def set_state(plug: str, state: str) -> None:
        if state == "on":
            drv.log.append(("set", plug, state))
            return  # the device ignores power-on
        original(plug, state)

    drv.set_state = set_state  # type: ignore[method-assign]
    res = drv.run("reboot")
    assert res.after == {"1": "off"}
    assert res.warnings and "powering on again failed" in res.warnings[0]
    assert drv.evidence(res)["verified"] is True


def test_unreachable_read_during_verification_is_tolerated_until_deadline() -> None:
    drv = TableDriver({"1": "on"}, poll_interval=0.1)
    drv.unreachable_reads = 0
    original = drv.read_all
    calls = {"n": 0}

    def flaky() -> dict[str, str]:
        calls["n"] += 1
        if calls["n"] in (2, 3):  # the first read is the "before" read
            raise UnreachableError("dropped", "dev:1")
        return original()

    drv.read_all = flaky  # type: ignore[method-assign]
    res = drv.run("off")
    assert res.after == {"1": "off"}


def test_unreachable_until_deadline_is_a_verify_error_naming_the_cause() -> None:
    drv = TableDriver({"1": "on"}, power_timeout=1.0, poll_interval=0.25)
    original = drv.read_all
    calls = {"n": 0}

    def dead() -> dict[str, str]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise UnreachableError("BMC stopped answering", "dev:1")
        return original()

    drv.read_all = dead  # type: ignore[method-assign]
    with pytest.raises(VerifyError, match="BMC stopped answering"):
        drv.run("off")


def test_privilege_error_propagates_and_closes() -> None:
    drv = TableDriver({"1": "on"})

    def refuse(plug: str, state: str) -> None:
        raise PrivilegeError("no", "dev:1")

    drv.set_state = refuse  # type: ignore[method-assign]
    with pytest.raises(PrivilegeError):
        drv.run("off")
    assert drv.closed == 1


def test_status_reads_only() -> None:
    drv = TableDriver({"1": "on", "2": "off"})
    res = drv.run("status")
    assert (res.changed, res.state_before, drv.sets()) == (False, "on", [])
    assert drv.evidence(res)["verified"] is False
    assert drv.evidence(res, {"on": "enabled", "off": "disabled"})["state"] == "enabled"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"power_timeout": 0}, "power_timeout"),
        ({"power_timeout": -1}, "power_timeout"),
        ({"power_wait": -0.5}, "power_wait"),
        ({"retry_on": -1}, "retry_on"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"poll_interval": 2}, "poll_interval"),
    ],
)
def test_bad_timing_options_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(FenceConfigError, match=f"^{field}:"):
        FenceDriver("dev:1", ["1"], **kwargs)


def test_plugs_must_be_given_and_unique() -> None:
    with pytest.raises(FenceConfigError, match="^plug:"):
        FenceDriver("dev:1", [])
    with pytest.raises(FenceConfigError, match="^plug: duplicate"):
        FenceDriver("dev:1", ["1", "1"])


def test_unknown_action_is_refused_before_open() -> None:
    drv = TableDriver({"1": "on"})
    with pytest.raises(FenceConfigError, match="^state:"):
        drv.run("cycle")
    assert drv.opened == 0


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(["1", "2", "3", "4"]), st.sampled_from(["on", "off"]), min_size=1))
def test_aggregate_is_on_iff_any_plug_is_on(states: dict[str, str]) -> None:
    assert (aggregate(states) == "on") == ("on" in states.values())


@settings(deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["on", "off"]), min_size=1),
    st.sampled_from(["on", "off"]),
    st.floats(min_value=0, max_value=3),
)
def test_any_start_reaches_the_target_or_fails_never_lies(
    states: dict[str, str], target: str, lag: float
) -> None:
    drv = TableDriver(dict(states), lag=lag, power_timeout=2.0, poll_interval=0.2)
    try:
        res = drv.run(target)
    except VerifyError:
        assert lag > 2.0 - 1e-9
        assert any(s != target for s in drv.actual.values()) or drv.pending
        return
    assert all(s == target for s in res.after.values())
    assert all(s == target for s in drv.actual.values())
    assert res.changed == (any(s != target for s in states.values()))
    assert drv.evidence(res)["verified"] == (target == "off")


@settings(deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["1", "2", "3"]), st.sampled_from(["on", "off", "powering_off"]), min_size=1
    )
)
def test_aggregate_is_off_only_when_every_plug_reads_off(states: dict[str, str]) -> None:
    assert (aggregate(states) == "off") == all(s == "off" for s in states.values())


class TransitionDriver(TableDriver):
    """A device that reports a transition (Redfish ``PoweringOff``) for ``transition_reads`` reads."""

    def __init__(self, *a, transition_reads: int = 0, **kw) -> None:
        super().__init__(*a, **kw)
        self.transition_reads = transition_reads

    def get_state(self, plug: str) -> str:
        state = super().get_state(plug)
        if self.transition_reads:
            self.transition_reads -= 1
            return "powering_off"
        return state


def test_a_transition_is_never_taken_for_off() -> None:
    drv = TransitionDriver({"1": "on"}, transition_reads=10_000, power_timeout=2, poll_interval=0.5)
    with pytest.raises(VerifyError, match="powering_off"):
        drv.run("off")


def test_status_during_a_transition_is_no_evidence() -> None:
    drv = TransitionDriver({"1": "off"}, transition_reads=1)
    res = drv.run("status")
    assert res.state_after == "powering_off" and res.verified_off_at is None
    assert drv.evidence(res)["verified"] is False


def test_off_is_verified_once_the_transition_ends() -> None:
    drv = TransitionDriver({"1": "on"}, transition_reads=3, poll_interval=0.5)
    res = drv.run("off")
    assert res.after == {"1": "off"} and res.verified_off_at is not None
