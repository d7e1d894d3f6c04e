"""The Metal3Remediation ``escalate`` strategy (pure): phase sequence, escalation counting, power
timeouts as failed attempts, the never-taint-without-verified-off rule, and the spec's fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.machines.metal3 import (
    FINALIZER,
    PHASE_DELETING_MACHINE,
    PHASE_POWER_OFF,
    PHASE_POWER_ON,
    POWER_TIMED_OUT,
    POWER_VERIFIED,
    HostRef,
    Metal3Error,
    Metal3Observations,
    Metal3RemediationStatus,
    PowerFailure,
    RemediationStrategy,
    last_reading,
)
from noderemedy_runner.machines.metal3_escalate import ATTEMPT_FAILED, ESCALATED, NODE_READY, decide
from noderemedy_runner.machines.release import LeftOnNode

T0 = 1_700_000_000.0
NODE = "worker-1"
HOST = HostRef("host-1", "metal3", "ipmi://127.0.0.1:9001", "host-1-bmc", True)


def strategy(retries: int = 2, **kw: Any) -> RemediationStrategy:
    return RemediationStrategy(
        "escalate", 0, kw.pop("timeout", 300.0), retries, kw.pop("off", 5.0), kw.pop("on", 7.0)
    )


@dataclass
class World:
    """A host behind a BMC, its node and Machine, as the loop would observe them. ``bmc``:
    ``ok`` (does what it is told), ``lies`` (answers power-off as done, stays on), ``silent``
    (never answers). ``boots``: the node is Ready once powered on."""

    bmc: str = "ok"
    boots: bool = True
    power_on: bool = True
    taint: bool = False
    finalizer: bool = False
    owner_false: bool = False
    node_ready: bool = False
    now: float = T0
    reading: FenceReading | None = None
    failure: PowerFailure | None = None
    status: Metal3RemediationStatus = field(default_factory=Metal3RemediationStatus)
    power_log: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    tainted_ever: bool = False

    def obs(self) -> Metal3Observations:
        return Metal3Observations(
            now=self.now,
            node=NODE,
            node_ready=self.node_ready,
            taint_present=self.taint,
            left_on_node=LeftOnNode() if self.taint else None,
            power=self.reading,
            power_failure=self.failure,
            has_finalizer=self.finalizer,
            owner_remediated_false=self.owner_false,
        )

    def apply(self, a: Action, strat: RemediationStrategy) -> None:
        self.actions.append(a)
        if a.kind == "write_status":
            assert a.status is not None
            self.status = Metal3RemediationStatus.from_dict(a.status)
            if not self.phases or self.phases[-1] != self.status.phase:
                self.phases.append(self.status.phase)
        elif a.kind == "add_finalizer":
            self.finalizer = True
        elif a.kind == "remove_finalizer":
            self.finalizer = False
        elif a.kind == "set_owner_remediated":
            self.owner_false = True
        elif a.kind == "taint_out_of_service":
            assert a.fence is not None and a.fence.fenced, "taint without a verified power-off"
            self.taint = self.tainted_ever = True
        elif a.kind == "untaint_out_of_service":
            self.taint = False
        elif a.kind == "power":
            state = str(a.extravars["state"])
            bound = float(a.extravars["power_timeout"])
            attempt = max(1, self.status.retry_count)
            self.power_log.append(state)
            if self.bmc == "silent":
                self.now += bound
                self.failure = PowerFailure(state, attempt, "timeout", None, "no answer", bound, self.now)
            elif self.bmc == "lies" and state == "off":
                self.now += bound
                self.failure = PowerFailure(
                    state, attempt, "verify", "on", "read back: chassis=on", bound, self.now
                )
            else:
                self.power_on = state == "on"
                self.node_ready = self.power_on and self.boots
                self.now += 1
                self.reading = FenceReading(NODE, not self.power_on, "power_off", "BareMetalHost", self.now)
                self.failure = None
        elif a.kind == "wait":
            self.now += a.seconds or 1

    def run(self, strat: RemediationStrategy, steps: int = 200) -> Action:
        for _ in range(steps):
            a = decide("m", "ns", "m", self.status, strat, HOST, self.obs())
            if a.kind == "none":
                return a
            self.apply(a, strat)
        raise AssertionError(f"no end after {steps} actions: {[x.kind for x in self.actions[-10:]]}")


def test_a_host_that_powers_off_and_boots_goes_power_off_then_power_on_and_ends_done() -> None:
    w = World()
    end = w.run(strategy())
    assert end.reason == "RemediationDone"
    assert w.phases == [PHASE_POWER_OFF, PHASE_POWER_ON]
    assert w.power_log == ["off", "on"] and w.tainted_ever and not w.taint and not w.finalizer
    assert w.status.retry_count == 1
    cond = w.status.condition(POWER_VERIFIED)
    assert cond is not None and cond["status"] == "True" and "ipmi://127.0.0.1:9001" in cond["message"]
    kinds = [a.kind for a in w.actions]
    assert kinds.index("add_finalizer") < kinds.index("power") < kinds.index("taint_out_of_service")


def test_a_lying_bmc_is_tried_delete_after_retries_times_then_the_machine_is_handed_over_untainted() -> None:
    w = World(bmc="lies")
    end = w.run(strategy(retries=2))
    assert end.reason == ESCALATED
    assert w.power_log == ["off", "off"], "exactly deleteAfterRetries power attempts"
    assert w.phases == [PHASE_POWER_OFF, PHASE_DELETING_MACHINE]
    assert w.owner_false and not w.finalizer
    assert not w.tainted_ever, "never a taint without a verified power-off"
    assert w.status.retry_count == 2
    cond = w.status.condition(POWER_VERIFIED)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == POWER_TIMED_OUT
    assert "attempt 2 of 2" in cond["message"] and "BMC ipmi://127.0.0.1:9001" in cond["message"]
    assert "last reading: on" in cond["message"] and "powerOffTimeoutSeconds 5" in cond["message"]
    reasons = [a.reason for a in w.actions if a.kind == "write_status"]
    assert reasons == ["RemediationStarted", ATTEMPT_FAILED, ESCALATED]
    # the Machine is marked before the finalizer goes (the Machine's deletion collects the object)
    kinds = [a.kind for a in w.actions]
    assert kinds.index("set_owner_remediated") < kinds.index("remove_finalizer")


def test_a_silent_bmc_fails_each_attempt_after_the_power_off_timeout() -> None:
    w = World(bmc="silent")
    w.run(strategy(retries=3, off=5.0))
    assert w.power_log == ["off"] * 3 and not w.tainted_ever
    cond = w.status.condition(POWER_VERIFIED)
    assert cond is not None and "last reading: none (no answer)" in cond["message"]
    assert "after 5.0 s" in cond["message"]
    powers = [a for a in w.actions if a.kind == "power"]
    assert {a.extravars["power_timeout"] for a in powers} == {5.0}
    assert [a.ident for a in powers] == ["m-retry1-power-off", "m-retry2-power-off", "m-retry3-power-off"]


def test_a_power_on_timeout_is_a_failed_attempt_and_the_next_attempt_powers_off_again() -> None:
    w = World()
    strat = strategy(retries=2, on=7.0)
    for _ in range(50):  # up to the power-on
        a = decide("m", "ns", "m", w.status, strat, HOST, w.obs())
        if a.kind == "power" and a.extravars["state"] == "on":
            break
        w.apply(a, strat)
    assert a.extravars["power_timeout"] == 7.0
    w.now += 7
    w.failure = PowerFailure("on", 1, "verify", "off", "not verified on", 7.0, w.now)
    nxt = decide("m", "ns", "m", w.status, strat, HOST, w.obs())
    assert nxt.kind == "write_status" and nxt.reason == ATTEMPT_FAILED
    assert nxt.status is not None and nxt.status["phase"] == PHASE_POWER_OFF and nxt.status["retryCount"] == 2
    assert "power on at BMC" in nxt.status["conditions"][-1]["message"]


def test_a_node_not_ready_within_the_timeout_is_a_failed_attempt() -> None:
    w = World(boots=False)
    end = w.run(strategy(retries=2, timeout=60.0))
    assert end.reason == ESCALATED
    assert w.power_log == ["off", "on", "off", "on"]
    cond = w.status.condition(NODE_READY)
    assert cond is not None and cond["status"] == "False" and "not Ready 60 s after" in cond["message"]
    assert w.taint, "the verified power-off's taint stays while the Machine is handed over"


def test_a_failure_of_an_earlier_attempt_or_the_other_transition_is_not_counted_again() -> None:
    s = Metal3RemediationStatus(PHASE_POWER_OFF, 2, T0)
    obs = Metal3Observations(now=T0 + 1, node=NODE, has_finalizer=True)
    for stale in (
        PowerFailure("off", 1, "timeout", None, "", 5, T0),
        PowerFailure("on", 2, "timeout", None, "", 5, T0),
    ):
        a = decide("m", "ns", "m", s, strategy(), HOST, dataclasses.replace(obs, power_failure=stale))
        assert a.kind == "power" and a.extravars["state"] == "off"


@settings(max_examples=300, deadline=None)
@given(
    bmc=st.sampled_from(["ok", "lies", "silent"]),
    boots=st.booleans(),
    retries=st.integers(min_value=1, max_value=4),
)
def test_every_run_ends_within_its_attempts_and_taints_only_after_a_verified_off(
    bmc: str, boots: bool, retries: int
) -> None:
    w = World(bmc=bmc, boots=boots)
    end = w.run(strategy(retries=retries, timeout=60.0))
    offs = w.power_log.count("off")
    assert 1 <= offs <= retries
    assert w.status.retry_count <= retries
    if bmc != "ok":
        assert not w.tainted_ever and end.reason == ESCALATED and w.owner_false
    if bmc == "ok" and boots:
        assert end.reason == "RemediationDone" and not w.taint and offs == 1
    assert not w.finalizer


def test_spec_fields_v1beta1_and_v1beta2_shapes() -> None:
    seed = {
        "strategy": {"type": "escalate", "timeout": "5m"},
        "deleteAfterRetries": 10,
        "powerOnTimeoutSeconds": 600,
        "powerOffTimeoutSeconds": 120,
    }
    got = RemediationStrategy.from_spec(seed, "x")
    assert got == RemediationStrategy("escalate", 0, 300.0, 10, 120.0, 600.0)
    assert got.power_timeout("off") == 120.0 and got.power_timeout("on") == 600.0
    v1beta2 = RemediationStrategy.from_spec(
        {"strategy": {"type": "Reboot", "retryLimit": 1, "timeoutSeconds": 600}}, "x"
    )
    assert v1beta2 == RemediationStrategy("Reboot", 1, 600.0)


@pytest.mark.parametrize(
    ("spec", "field_"),
    [
        (
            {"strategy": {"type": "Reprovision"}},
            r"spec.strategy.type: 'Reprovision' is not one of Reboot, escalate",
        ),
        ({"deleteAfterRetries": 0}, r"spec.deleteAfterRetries: 0 is not an integer >= 1"),
        ({"powerOffTimeoutSeconds": "5s"}, r"spec.powerOffTimeoutSeconds: '5s' is not an integer >= 1"),
        ({"powerOnTimeoutSeconds": 0}, r"spec.powerOnTimeoutSeconds: 0 is not an integer >= 1"),
        ({"strategy": {"timeoutSeconds": True}}, r"spec.strategy.timeoutSeconds: True"),
        ({"strategy": {"timeout": "soon"}}, r"spec.strategy.timeout: 'soon' is not a duration"),
    ],
)
def test_bad_spec_fields_are_named(spec: dict, field_: str) -> None:
    with pytest.raises(Metal3Error, match=r"^Metal3Remediation ns/a " + field_):
        RemediationStrategy.from_spec(spec, "Metal3Remediation ns/a")


def test_status_conditions_round_trip() -> None:
    s = Metal3RemediationStatus(PHASE_POWER_OFF, 1, T0).with_condition(
        {"type": POWER_VERIFIED, "status": "False", "reason": POWER_TIMED_OUT, "message": "m",
         "lastTransitionTime": "2023-11-14T22:13:20Z"}
    )  # fmt: skip
    assert Metal3RemediationStatus.from_dict(s.to_dict()) == s
    assert s.to_dict()["phase"] == "power-off" and s.to_dict()["retryCount"] == 1
    with pytest.raises(ValueError, match="status.conditions"):
        Metal3RemediationStatus.from_dict({"conditions": [{"status": "True"}]})


@pytest.mark.parametrize(
    ("state", "msg", "want"),
    [
        ("on", "", "on"),
        (
            None,
            "not verified off within power_timeout=5s after 1 attempt(s) (read back: chassis=on); left",
            "on",
        ),
        (None, "not verified on within power_timeout=5s (read back: System.Embedded.1=off)", "off"),
        (None, "no answer from the BMC within power_timeout=5s", None),
    ],
)
def test_last_reading(state: str | None, msg: str, want: str | None) -> None:
    assert last_reading(state, msg) == want


def test_finalizer_name_is_capm3s() -> None:
    w = World()
    a = decide("m", "ns", "m", Metal3RemediationStatus(PHASE_POWER_OFF, 1, T0), strategy(), HOST, w.obs())
    assert a.kind == "add_finalizer" and a.extravars["finalizer"] == FINALIZER
