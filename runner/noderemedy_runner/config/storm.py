"""The storm guard of a remedy Configuration (``stormGuard``): MachineHealthCheck's ``maxUnhealthy``
and ``unhealthyRange``, NodeHealthCheck's ``minHealthy`` (its default, ``51%``), and a
``cooldown``. The decision that uses it is :mod:`noderemedy_runner.machines.storm`; this module
only holds the values and parses them (errors: :class:`~noderemedy_runner.config.selectors.FieldError`
naming the field).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noderemedy_runner.config.selectors import FieldError, parse_seconds

#: The default storm guard (NodeHealthCheck's default ``minHealthy``), and its cooldown in seconds.
DEFAULT_MIN_HEALTHY = "51%"
DEFAULT_COOLDOWN_SECONDS = 300.0

_STORM_FIELDS = {"maxUnhealthy", "minHealthy", "unhealthyRange", "cooldown", "enabled"}
_RANGE_RE = re.compile(r"^\[(\d+)-(\d+)\]$")
_PERCENT_RE = re.compile(r"^(\d+)%$")


@dataclass(frozen=True)
class IntOrPercent:
    """An ``intstr.IntOrString`` count: ``value`` is a count, or a percentage when ``percent``."""

    value: int
    percent: bool = False

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True)
class StormGuard:
    """The storm guard of one Configuration (MachineHealthCheck ``maxUnhealthy`` /
    ``unhealthyRange``, NodeHealthCheck ``minHealthy``); at most one of the three is set.
    ``cooldown``: seconds after a storm ends before fencing resumes. ``enabled=False`` turns it
    off (only when said explicitly). Rounding of percentages: :mod:`noderemedy_runner.machines.storm`."""

    max_unhealthy: IntOrPercent | None = None
    min_healthy: IntOrPercent | None = None
    unhealthy_range: tuple[int, int] | None = None
    cooldown: float = DEFAULT_COOLDOWN_SECONDS
    enabled: bool = True

    def describe(self) -> str:
        """``maxUnhealthy=40%`` (the active rule) or ``disabled``."""
        if not self.enabled:
            return "disabled"
        if self.max_unhealthy is not None:
            return f"maxUnhealthy={self.max_unhealthy}"
        if self.unhealthy_range is not None:
            return f"unhealthyRange=[{self.unhealthy_range[0]}-{self.unhealthy_range[1]}]"
        return f"minHealthy={self.min_healthy}"


def _count(value: Any, where: str) -> IntOrPercent:
    if isinstance(value, bool):
        raise FieldError(f"{where}: {value!r} is not a count or a percentage like 40%")
    if isinstance(value, int):
        if value < 0:
            raise FieldError(f"{where}: {value} must not be negative")
        return IntOrPercent(value)
    if isinstance(value, str):
        m = _PERCENT_RE.match(value.strip())
        if m:
            pct = int(m.group(1))
            if pct > 100:
                raise FieldError(f"{where}: {value!r} is over 100%")
            return IntOrPercent(pct, True)
        if value.strip().isdigit():
            return IntOrPercent(int(value.strip()))
    raise FieldError(f"{where}: {value!r} is not a count or a percentage like 40%")


def parse_storm_guard(data: Any, where: str) -> StormGuard:
    """A :class:`StormGuard` from a Configuration's ``stormGuard`` map (None: the default,
    ``minHealthy: 51%``). ``where`` names the field for errors. Raises
    :class:`~noderemedy_runner.config.selectors.FieldError` on unknown fields, more than one rule,
    a bad count, percentage, range or cooldown."""
    if data is None:
        return StormGuard(min_healthy=IntOrPercent(51, True))
    if not isinstance(data, Mapping):
        raise FieldError(f"{where}: a map with maxUnhealthy, minHealthy or unhealthyRange, and cooldown")
    unknown = sorted(set(map(str, data)) - _STORM_FIELDS)
    if unknown:
        raise FieldError(f"{where}: unknown fields {unknown} (allowed: {', '.join(sorted(_STORM_FIELDS))})")
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise FieldError(f"{where}.enabled: {enabled!r} is not true or false")
    rules = [k for k in ("maxUnhealthy", "minHealthy", "unhealthyRange") if data.get(k) is not None]
    if len(rules) > 1:
        raise FieldError(f"{where}: set only one of maxUnhealthy, minHealthy, unhealthyRange (got {rules})")
    cooldown = (
        parse_seconds(data["cooldown"], f"{where}.cooldown")
        if "cooldown" in data
        else DEFAULT_COOLDOWN_SECONDS
    )
    if not rules:
        return StormGuard(min_healthy=IntOrPercent(51, True), cooldown=cooldown, enabled=enabled)
    rule = rules[0]
    if rule == "unhealthyRange":
        text = data[rule]
        m = _RANGE_RE.match(text.strip()) if isinstance(text, str) else None
        if not m or int(m.group(1)) > int(m.group(2)):
            raise FieldError(f'{where}.unhealthyRange: {text!r} is not a range like "[1-3]" (min <= max)')
        return StormGuard(
            unhealthy_range=(int(m.group(1)), int(m.group(2))), cooldown=cooldown, enabled=enabled
        )
    count = _count(data[rule], f"{where}.{rule}")
    if rule == "maxUnhealthy":
        return StormGuard(max_unhealthy=count, cooldown=cooldown, enabled=enabled)
    return StormGuard(min_healthy=count, cooldown=cooldown, enabled=enabled)


__all__ = [
    "DEFAULT_COOLDOWN_SECONDS",
    "DEFAULT_MIN_HEALTHY",
    "IntOrPercent",
    "StormGuard",
    "parse_storm_guard",
]
