"""The storm guard (pure): MachineHealthCheck/NodeHealthCheck semantics, the rounding rule
(maxUnhealthy rounds down like cluster-api, minHealthy rounds up like NodeHealthCheck) and the
cooldown after a storm."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.config.remedy import IntOrPercent, StormGuard
from noderemedy_runner.machines.storm import (
    REASON_COOLDOWN,
    REASON_TOO_MANY,
    REASON_WITHIN_LIMIT,
    StormState,
    evaluate,
    scaled,
    within_limit,
)


def max_unhealthy(v: int | str, cooldown: float = 60.0) -> StormGuard:
    return StormGuard(max_unhealthy=_iop(v), cooldown=cooldown)


def min_healthy(v: int | str, cooldown: float = 60.0) -> StormGuard:
    return StormGuard(min_healthy=_iop(v), cooldown=cooldown)


def _iop(v: int | str) -> IntOrPercent:
    return IntOrPercent(int(v[:-1]), True) if isinstance(v, str) else IntOrPercent(v)


@pytest.mark.parametrize(
    ("guard", "total", "unhealthy", "allowed"),
    [
        # the demo's: maxUnhealthy 40% of 3 → 1.2 rounded down → 1: 2 of 3 down is a storm
        (max_unhealthy("40%"), 3, 1, True),
        (max_unhealthy("40%"), 3, 2, False),
        # rounding up would have allowed it (2 <= ceil(1.2)): that is the rule we do NOT use here
        (max_unhealthy("40%"), 5, 2, True),
        (max_unhealthy("40%"), 5, 3, False),
        (max_unhealthy(1), 3, 1, True),
        (max_unhealthy(1), 3, 2, False),
        (max_unhealthy("100%"), 3, 3, True),
        (max_unhealthy("0%"), 3, 1, False),
        # NodeHealthCheck's default minHealthy 51%: of 3 nodes, ceil(1.53) = 2 must be healthy
        (min_healthy("51%"), 3, 1, True),
        (min_healthy("51%"), 3, 2, False),
        # of 4 nodes ceil(2.04) = 3 healthy: only 1 may be down (rounding down would allow 2)
        (min_healthy("51%"), 4, 1, True),
        (min_healthy("51%"), 4, 2, False),
        (min_healthy(2), 3, 1, True),
        (min_healthy(2), 3, 2, False),
        (StormGuard(unhealthy_range=(1, 2)), 5, 2, True),
        (StormGuard(unhealthy_range=(1, 2)), 5, 3, False),
        (StormGuard(unhealthy_range=(2, 3)), 5, 1, False),
        (StormGuard(enabled=False, max_unhealthy=IntOrPercent(0)), 3, 3, True),
        (max_unhealthy(0), 3, 0, True),  # nothing unhealthy is never a storm
    ],
)
def test_table(guard: StormGuard, total: int, unhealthy: int, allowed: bool) -> None:
    assert within_limit(guard, total, unhealthy) is allowed


@settings(deadline=None)
@given(st.integers(0, 5000), st.integers(0, 100))
def test_rounding_brackets_the_exact_share(total: int, pct: int) -> None:
    exact = Fraction(total * pct, 100)
    down = scaled(IntOrPercent(pct, True), total, round_up=False)
    up = scaled(IntOrPercent(pct, True), total, round_up=True)
    assert down <= exact <= up
    assert up - down == (0 if exact.denominator == 1 else 1)


@settings(deadline=None)
@given(st.integers(1, 500), st.integers(0, 100), st.booleans(), st.data())
def test_monotonic_in_unhealthy(total: int, pct: int, use_max: bool, data: st.DataObject) -> None:
    """If u unhealthy nodes block fencing, so do u + 1 (maxUnhealthy / minHealthy forms)."""
    guard = (
        StormGuard(max_unhealthy=IntOrPercent(pct, True))
        if use_max
        else StormGuard(min_healthy=IntOrPercent(pct, True))
    )
    u = data.draw(st.integers(0, total - 1))
    if not within_limit(guard, total, u):
        assert not within_limit(guard, total, u + 1)


def test_impossible_counts_refused() -> None:
    with pytest.raises(ValueError, match="unhealthy=4 must be within 0..total=3"):
        within_limit(max_unhealthy(1), 3, 4)


def test_storm_then_cooldown_then_resume() -> None:
    g = max_unhealthy("40%", cooldown=60)
    s = evaluate(g, 3, 2, None, 100.0)
    assert (s.active, s.storm, s.reason, s.since) == (True, True, REASON_TOO_MANY, 100.0)
    assert "2 of 3 nodes unhealthy" in s.message and "maxUnhealthy=40%" in s.message
    s = evaluate(g, 3, 2, s, 110.0)
    assert s.since == 100.0  # the storm keeps its start
    s = evaluate(g, 3, 1, s, 120.0)  # share drops: storm over, cooldown starts
    assert (s.active, s.storm, s.reason, s.ended_at) == (True, False, REASON_COOLDOWN, 120.0)
    assert s.cooldown_left(g, 150.0) == 30.0
    s = evaluate(g, 3, 1, s, 179.0)
    assert s.active and s.reason == REASON_COOLDOWN
    s = evaluate(g, 3, 1, s, 180.0)
    assert (s.active, s.reason) == (False, REASON_WITHIN_LIMIT)


def test_new_storm_inside_cooldown_continues_the_old_one() -> None:
    g = max_unhealthy(1, cooldown=60)
    s = evaluate(g, 3, 2, None, 0.0)
    s = evaluate(g, 3, 0, s, 10.0)
    s = evaluate(g, 3, 2, s, 20.0)
    assert s.storm and s.since == 0.0
    s = evaluate(g, 3, 0, s, 30.0)
    assert s.reason == REASON_COOLDOWN and s.ended_at == 30.0


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10), st.floats(0, 100, allow_nan=False)), min_size=1, max_size=40),
    st.integers(0, 10),
    st.floats(0, 200, allow_nan=False),
)
def test_never_allows_during_storm_or_cooldown(
    steps: list[tuple[int, float]], limit: int, cooldown: float
) -> None:
    """Fencing is allowed only when within the limit now and no over-limit observation happened
    in the last ``cooldown`` seconds (measured from the first within-limit observation after it)."""
    g = StormGuard(max_unhealthy=IntOrPercent(limit), cooldown=cooldown)
    state: StormState | None = None
    now = 0.0
    last_storm_end: float | None = None
    in_storm = False
    for unhealthy, dt in steps:
        now += dt
        state = evaluate(g, 10, unhealthy, state, now)
        over = unhealthy > limit
        if over:
            in_storm = True
            assert state.active and state.storm
        else:
            if in_storm:
                last_storm_end = now
                in_storm = False
            expect_active = last_storm_end is not None and now < last_storm_end + cooldown
            assert state.active is expect_active
