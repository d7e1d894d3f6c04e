"""The storm guard, as pure functions: (guard, counts, previous state, now) → state.

Node remedy seed, "Cluster remedy policies": skip fencing when a share of the hosts is
non-responsive (a switch or management-network failure makes many healthy nodes look dead).
The knobs and their meaning are MachineHealthCheck's (cluster-api) and NodeHealthCheck's
(medik8s):

* ``maxUnhealthy`` (count or percent): new fencing is allowed while ``unhealthy <= maxUnhealthy``.
* ``minHealthy`` (count or percent): allowed while ``total - unhealthy >= minHealthy``.
* ``unhealthyRange`` ``[min-max]``: allowed while ``min <= unhealthy <= max``.

**Rounding rule** (percentages of ``total`` selected nodes): always in the conservative
direction, which is what each source does for its own knob --
``maxUnhealthy`` rounds **down** (cluster-api ``GetScaledValueFromIntOrPercent(.., false)``:
40% of 3 nodes allows 1 unhealthy node) and ``minHealthy`` rounds **up** (NodeHealthCheck,
``roundUp=true``: 51% of 3 nodes requires 2 healthy nodes). Integer arithmetic, no floats.

**Cooldown**: when the count drops back within the limit, fencing stays blocked for
``cooldown`` seconds after the storm ended (reason ``Cooldown``); a new storm inside the
cooldown continues the old one (its ``since`` is kept).

While the guard is *active* (storm or cooldown) no new NodeFence is created; existing ones
(in-flight remediations) continue. ``total`` counts the nodes the Configuration selects;
``unhealthy`` those whose threshold condition matches now, period or not (excluded and paused
nodes included: they are unhealthy all the same; see :mod:`noderemedy_runner.machines.detection`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from noderemedy_runner.config.storm import IntOrPercent, StormGuard

REASON_WITHIN_LIMIT = "WithinLimit"
REASON_TOO_MANY = "TooManyUnhealthy"
REASON_COOLDOWN = "Cooldown"
REASON_DISABLED = "Disabled"


def scaled(value: IntOrPercent, total: int, round_up: bool) -> int:
    """``value`` as a count of ``total`` nodes (apimachinery ``GetScaledValueFromIntOrPercent``):
    a count is returned as is; a percentage is ``total * pct / 100`` rounded up or down."""
    if not value.percent:
        return value.value
    product = total * value.value
    return -(-product // 100) if round_up else product // 100


def allowed_unhealthy(guard: StormGuard, total: int) -> tuple[int, int]:
    """The inclusive range ``(low, high)`` of unhealthy counts that allow new fencing, for
    ``total`` selected nodes (``high`` may be below ``low``: nothing allowed)."""
    if not guard.enabled:
        return (0, total)
    if guard.max_unhealthy is not None:
        return (0, scaled(guard.max_unhealthy, total, round_up=False))
    if guard.unhealthy_range is not None:
        return guard.unhealthy_range
    min_healthy = guard.min_healthy if guard.min_healthy is not None else IntOrPercent(51, True)
    return (0, total - scaled(min_healthy, total, round_up=True))


def within_limit(guard: StormGuard, total: int, unhealthy: int) -> bool:
    """Whether ``unhealthy`` of ``total`` nodes allows new fencing (no cooldown considered).
    Raises ValueError unless ``0 <= unhealthy <= total``."""
    if not 0 <= unhealthy <= total:
        raise ValueError(f"unhealthy={unhealthy} must be within 0..total={total}")
    if unhealthy == 0:
        return True  # nothing to fence; never a storm
    low, high = allowed_unhealthy(guard, total)
    return low <= unhealthy <= high


@dataclass(frozen=True)
class StormState:
    """The guard's state for one Configuration. ``active``: no new fencing (storm or cooldown).
    ``storm``: over the limit right now. ``since``: when the current storm began (seconds);
    ``ended_at``: when the last storm ended (the cooldown runs from it). ``reason`` is one of
    WithinLimit, TooManyUnhealthy, Cooldown, Disabled; ``message`` says why and how many."""

    active: bool = False
    storm: bool = False
    since: float | None = None
    ended_at: float | None = None
    total: int = 0
    unhealthy: int = 0
    allowed: int = 0
    reason: str = REASON_WITHIN_LIMIT
    message: str = ""

    def cooldown_left(self, guard: StormGuard, now: float) -> float:
        """Seconds of cooldown left at ``now`` (0 when none)."""
        if self.storm or self.ended_at is None:
            return 0.0
        return max(0.0, self.ended_at + guard.cooldown - now)


def evaluate(
    guard: StormGuard, total: int, unhealthy: int, previous: StormState | None, now: float
) -> StormState:
    """The guard's state at ``now`` (seconds) from the counts and the previous state (None at
    start). Pure and deterministic. Raises ValueError on impossible counts."""
    prev = previous or StormState()
    low, high = allowed_unhealthy(guard, total)
    base = StormState(total=total, unhealthy=unhealthy, allowed=max(high, 0))
    rule = guard.describe()
    if not guard.enabled:
        within_limit(guard, total, unhealthy)  # validates the counts
        return replace(base, reason=REASON_DISABLED, message="storm guard disabled")
    if not within_limit(guard, total, unhealthy):
        since = prev.since if (prev.storm or (prev.active and prev.since is not None)) else now
        return replace(
            base,
            active=True,
            storm=True,
            since=since,
            reason=REASON_TOO_MANY,
            message=f"{unhealthy} of {total} nodes unhealthy, {rule} allows {low}..{high}: no new fencing",
        )
    ended_at = now if prev.storm else prev.ended_at
    if ended_at is not None and now < ended_at + guard.cooldown:
        return replace(
            base,
            active=True,
            since=prev.since,
            ended_at=ended_at,
            reason=REASON_COOLDOWN,
            message=(
                f"{unhealthy} of {total} nodes unhealthy ({rule}); storm ended, "
                f"fencing resumes in {ended_at + guard.cooldown - now:.0f}s"
            ),
        )
    return replace(
        base,
        ended_at=ended_at,
        message=f"{unhealthy} of {total} nodes unhealthy, {rule} allows {low}..{high}",
    )


__all__ = [
    "REASON_COOLDOWN",
    "REASON_DISABLED",
    "REASON_TOO_MANY",
    "REASON_WITHIN_LIMIT",
    "StormState",
    "allowed_unhealthy",
    "evaluate",
    "scaled",
    "within_limit",
]
