"""NodeFence state machine: hypothesis properties (invariant 1, resume after a crash, bounded
retries/restarts), fencing levels with a BMC that died with its node, and a step's segments and
levels (where a step splits, their round trip, and statuses written before they existed)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest
from _nodefence_helpers import CONFIG, LEVELS, NOW, POLICY, cond, cstat, lref, observe, status, written
from hypothesis import given, settings
from hypothesis import strategies as st
from nodefence_world import NAME, NODE, T0, World, run

from noderemedy_runner.machines.actions import FenceReading
from noderemedy_runner.machines.nodefence import (
    PHASES,
    LevelOutcome,
    NodeFencePolicy,
    NodeFenceStatus,
    RunRef,
    StepResult,
    decide,
    run_ident,
    step_segments,
)

STEP_NAMES = ("Isolation", "PowerManagement", "Recovery")


# --- hypothesis properties -----------------------------------------------------------------
fences = st.one_of(
    st.none(),
    st.builds(
        FenceReading,
        node=st.sampled_from([NODE, "worker-2"]),
        fenced=st.booleans(),
        kind=st.sampled_from(["power_off", "storage_isolated", "network_isolated"]),
        source=st.just("m"),
        observed_at=st.just(NOW),
    ),
)
statuses = st.builds(
    status,
    phase=st.sampled_from(PHASES),
    step=st.sampled_from(["Isolation", "PowerManagement", "Recovery"]),
    retries=st.integers(0, POLICY.step_retries),
    restarts=st.integers(0, POLICY.max_restarts),
    conditions=st.sampled_from([(), (cond("FenceVerified", "True"),), (cond("FenceVerified", "False"),)]),
    last_transition_time=st.integers(T0, int(NOW)).map(float),
)


@st.composite
def observation_steps(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "node_ready": draw(st.booleans()),
        "taint_present": draw(st.booleans()),
        "fence": draw(fences),
        "ok": draw(st.booleans()),
        "dt": draw(st.integers(0, 700)),
    }


@settings(max_examples=300, deadline=None)
@given(start=statuses, steps=st.lists(observation_steps(), min_size=1, max_size=40))
def test_invariant_1_over_random_observation_sequences(
    start: NodeFenceStatus, steps: list[dict[str, Any]]
) -> None:
    """Safety invariant 1: whatever the observations, a release action is only ever returned
    together with an observation that verifies a fence of this very node."""
    s, now = start, NOW
    for step in steps:
        now += step["dt"]
        result = (
            StepResult(s.current_run.ident, step["ok"], fence=step["fence"])
            if s.current_run and step["ok"]
            else None
        )
        obs = observe(
            now=now,
            node_ready=step["node_ready"],
            taint_present=step["taint_present"],
            fence=step["fence"],
            result=result,
        )
        action = decide(NAME, s, obs, CONFIG, POLICY)
        if action.releases_workloads:
            assert obs.fence is not None and obs.fence.fenced and obs.fence.node == NODE
        if action.kind == "write_status":
            s = written(action)


worlds = st.builds(
    World,
    fails=st.lists(st.booleans(), min_size=27, max_size=27).map(tuple),
    revive=st.booleans(),
    ready_after_isolation=st.booleans(),
    detach_waits=st.integers(0, 3),
)
policies = st.builds(
    NodeFencePolicy,
    grace_seconds=st.integers(0, 120),
    step_retries=st.integers(0, 2),
    retry_delay_seconds=st.integers(0, 20),
    recovery_timeout_seconds=st.integers(1, 900),
    max_restarts=st.integers(0, 2),
    restart_delay_seconds=st.integers(0, 60),
)


def projection(s: NodeFenceStatus) -> tuple:
    """The state compared across crash/no-crash runs: everything but times and FenceVerified."""
    return (
        s.status,
        s.step,
        s.retries,
        s.restarts,
        s.jobs,
        cstat(s, "Processing"),
        cstat(s, "Succeeded"),
        cstat(s, "FenceAgentActionSucceeded"),
    )


@settings(max_examples=200, deadline=None)
@given(world=worlds, policy=policies)
def test_runs_terminate_with_bounded_retries_and_restarts(world: World, policy: NodeFencePolicy) -> None:
    out = run(world, policy)
    assert out.terminated, out.status
    assert out.status.status in ("Final", "Error")
    statuses_written = [NodeFenceStatus.from_dict(a.status) for a in out.actions if a.kind == "write_status"]
    assert all(
        s.retries <= policy.step_retries and s.restarts <= policy.max_restarts for s in statuses_written
    )
    segments = sum(len(step_segments(CONFIG.methods(step))) for step in STEP_NAMES)
    assert len(out.world.runs) <= (policy.max_restarts + 1) * (segments + 3 * policy.step_retries)
    if out.status.status == "Final" and out.status.jobs:
        assert not out.world.taint and out.world.fc_up  # recovery ran and the taint is gone
    if out.world.releases:
        assert out.world.ever_fenced


@settings(max_examples=200, deadline=None)
@given(
    world=worlds,
    policy=policies,
    crashes=st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=80).map(tuple),
)
def test_resume_after_crash_reaches_the_same_final_state(
    world: World, policy: NodeFencePolicy, crashes: tuple[int, ...]
) -> None:
    """Invariant 4: replaying decide() from the persisted status after crashes that lose action
    results (and, for code 2, the status write itself) ends in the same state as a clean run.
    A crash may lose a power cycle's read-back, so the release can be skipped (never added)."""
    clean = run(dataclasses.replace(world, runs=[], power_log=[]), policy)
    crashed = run(dataclasses.replace(world, runs=[], power_log=[]), policy, crashes)
    assert crashed.terminated and clean.terminated
    assert projection(crashed.status) == projection(clean.status)
    assert crashed.world.taint <= clean.world.taint  # a crash can only skip a release
    assert (crashed.world.fc_up, crashed.world.power_on) == (clean.world.fc_up, clean.world.power_on)
    for out in (clean, crashed):
        assert_no_off_after_on(out.world.power_log)


def assert_no_off_after_on(log: list[tuple[int, str, str]]) -> None:
    """Within one pass of the flow (one ``restarts`` value) the power is never cut again once it
    was switched back on: a replay resumes after the segment that finished (step_segments)."""
    on_seen: set[int] = set()
    for restarts, method, action in log:
        if action == "on":
            on_seen.add(restarts)
        assert not (action == "off" and restarts in on_seen), (
            f"{method} off after on in pass {restarts}: {log}"
        )


def test_step_segments_split_where_the_direction_changes() -> None:
    names = [[m.name for m in seg] for seg in step_segments(CONFIG.power_management)]
    assert names == [["pdu-off"], ["pdu-on"]]
    assert [[m.name for m in seg] for seg in step_segments(CONFIG.isolation)] == [["fc-off"]]
    offs = CONFIG.isolation + CONFIG.power_management[:1]  # fc-off pdu-off: one segment
    assert [len(seg) for seg in step_segments(offs)] == [2]
    reboot = replace(CONFIG.power_management[0], action="reboot")
    assert [len(seg) for seg in step_segments((reboot, reboot, *CONFIG.recovery))] == [1, 1, 1]
    assert step_segments(()) == ()


def test_a_status_written_before_segments_existed_reads_as_segment_0_of_1() -> None:
    old = {"ident": "x", "step": "PowerManagement", "attempt": 0, "notBefore": "2023-11-14T22:13:20Z"}
    ref = RunRef.from_dict(old)
    assert (ref.segment, ref.segments) == (0, 1)
    with pytest.raises(ValueError, match="currentRun.segment 2"):
        RunRef.from_dict({**old, "segment": 2, "segments": 2})


# --- fencing levels: a BMC that died with its node ------------------------------------------
dead_bmc_worlds = st.builds(
    World,
    fails=st.lists(st.booleans(), min_size=27, max_size=27).map(tuple),
    revive=st.booleans(),
    bmc_dead=st.just(True),
)


@settings(max_examples=200, deadline=None)
@given(
    world=dead_bmc_worlds,
    policy=policies,
    crashes=st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=80).map(tuple),
)
def test_a_dead_bmc_is_fenced_through_the_next_level_and_resumes_after_crashes(
    world: World, policy: NodeFencePolicy, crashes: tuple[int, ...]
) -> None:
    """With power_management=ipmi-off ipmi-on | pdu-off pdu-on and a dead BMC: every power change
    that happens is the PDU's; workloads are released only after a real fence; the flow ends with
    bounded runs; a run with crashes ends in the clean run's state; no off after an on."""
    clean = run(dataclasses.replace(world, runs=[], power_log=[]), policy, config=LEVELS)
    crashed = run(dataclasses.replace(world, runs=[], power_log=[]), policy, crashes, config=LEVELS)
    for out in (clean, crashed):
        assert out.terminated and out.status.status in ("Final", "Error")
        assert {method for _r, method, _a in out.world.power_log} <= {"pdu-off", "pdu-on"}
        assert_no_off_after_on(out.world.power_log)
        if out.world.releases:
            assert out.world.ever_fenced
    segments = 1 + 2 * 2 + 1  # isolation, two levels of two segments, recovery
    assert len(clean.world.runs) <= (policy.max_restarts + 1) * (segments + 5 * policy.step_retries)
    assert projection(crashed.status) == projection(clean.status)
    assert crashed.world.taint <= clean.world.taint
    pm = [lv for lv in clean.status.fence_levels if lv.step == "PowerManagement"]
    assert all(lv.result == "Failed" for lv in pm if lv.level == 1)
    if clean.world.power_log:  # the PDU level ran, after level 1 failed in the same pass
        assert pm and pm[0].level == 1


def test_fence_levels_round_trip_and_old_runs_read_as_level_1() -> None:
    lv = LevelOutcome("PowerManagement", 2, 1, 0, "pdu-off pdu-on", "Failed", "outlet 3 reads on", float(T0))
    s = status("Running", "PowerManagement", fence_levels=(lv,), current_run=lref(level=2))
    assert NodeFenceStatus.from_dict(s.to_dict()) == s
    assert "fenceLevels" not in status().to_dict()
    old = {"ident": "x", "step": "PowerManagement", "attempt": 0, "notBefore": "2023-11-14T22:13:20Z"}
    assert (RunRef.from_dict(old).level, RunRef.from_dict(old).levels) == (1, 1)
    with pytest.raises(ValueError, match="currentRun.level 3"):
        RunRef.from_dict({**old, "level": 3, "levels": 2})
    with pytest.raises(ValueError, match="fenceLevels\\[\\].result 'Maybe'"):
        NodeFenceStatus.from_dict({"fenceLevels": [{**lv.to_dict(), "result": "Maybe"}]})
    assert run_ident("nf", 0, "PowerManagement", 1, 1, 2) == "nf-r0-power-management-a1-l2-s1"
