"""metav1.Condition values and the pure helper that sets one (RFC 3339 times: :mod:`noderemedy_runner.times`).

Shape (Kubernetes API conventions, ``k8s.io/apimachinery/pkg/apis/meta/v1.Condition``)::

    {"type": "Processing", "status": "True", "reason": "FenceAgentRunning",
     "message": "...", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}

Times are held as float seconds since the Unix epoch inside the runner and written as RFC 3339
UTC strings with second precision (the API server's ``metav1.Time`` format).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from noderemedy_runner.times import format_time as format_time
from noderemedy_runner.times import parse_time as parse_time

ConditionStatus = Literal["True", "False", "Unknown"]
CONDITION_STATUSES: tuple[ConditionStatus, ...] = ("True", "False", "Unknown")

#: metav1.Condition ``reason``: CamelCase, 1..1024 chars (the API's validation pattern).
_REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
#: metav1.Condition ``type``: optional DNS-1123 prefix and a qualified name, at most 316 chars.
_TYPE_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)


@dataclass(frozen=True)
class Condition:
    """One metav1.Condition.

    ``last_transition_time`` is seconds since the epoch; ``observed_generation`` is the
    ``metadata.generation`` the condition was computed from (0 when unknown).
    Raises ValueError on a ``type``/``reason`` the API server would reject or a bad ``status``.
    """

    type: str
    status: ConditionStatus
    reason: str
    message: str = ""
    last_transition_time: float = 0.0
    observed_generation: int = 0

    def __post_init__(self) -> None:
        if not _TYPE_RE.match(self.type) or len(self.type) > 316:
            raise ValueError(f"condition type {self.type!r} is not a qualified name")
        if self.status not in CONDITION_STATUSES:
            raise ValueError(f"condition {self.type}: status {self.status!r} not in {CONDITION_STATUSES}")
        if not _REASON_RE.match(self.reason) or len(self.reason) > 1024:
            raise ValueError(f"condition {self.type}: reason {self.reason!r} is not CamelCase")
        if self.observed_generation < 0:
            raise ValueError(f"condition {self.type}: observedGeneration {self.observed_generation} < 0")

    def to_dict(self) -> dict[str, Any]:
        """The condition as the API's JSON object (camelCase keys, RFC 3339 time)."""
        out: dict[str, Any] = {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": format_time(self.last_transition_time),
        }
        if self.observed_generation:
            out["observedGeneration"] = self.observed_generation
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Condition:
        """Inverse of :meth:`to_dict`. Raises ValueError (naming the field) on a malformed object."""
        try:
            return cls(
                type=str(data["type"]),
                status=data["status"],
                reason=str(data["reason"]),
                message=str(data.get("message", "")),
                last_transition_time=parse_time(str(data["lastTransitionTime"])),
                observed_generation=int(data.get("observedGeneration", 0)),
            )
        except KeyError as exc:
            raise ValueError(f"condition {dict(data)!r} lacks field {exc.args[0]!r}") from exc


def find_condition(conditions: Iterable[Condition], type_: str) -> Condition | None:
    """The condition of type ``type_`` or None."""
    for cond in conditions:
        if cond.type == type_:
            return cond
    return None


def is_true(conditions: Iterable[Condition], type_: str) -> bool:
    """Whether the condition ``type_`` exists with status ``True``."""
    cond = find_condition(conditions, type_)
    return cond is not None and cond.status == "True"


def set_condition(
    conditions: Iterable[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: float,
    observed_generation: int = 0,
) -> tuple[Condition, ...]:
    """Conditions with ``type_`` set (added or replaced in place; order otherwise kept).

    ``lastTransitionTime`` becomes ``now`` (seconds) only when the status changes or the
    condition is new; reason, message and observedGeneration are always updated. This is
    ``meta.SetStatusCondition`` from k8s.io/apimachinery. Pure: the input is not modified.
    """
    new = Condition(type_, status, reason, message, now, observed_generation)
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type == type_:
            found = True
            ltt = cond.last_transition_time if cond.status == status else now
            out.append(replace(new, last_transition_time=ltt))
        else:
            out.append(cond)
    if not found:
        out.append(new)
    return tuple(out)


def remove_condition(conditions: Iterable[Condition], type_: str) -> tuple[Condition, ...]:
    """Conditions without ``type_`` (``meta.RemoveStatusCondition``)."""
    return tuple(c for c in conditions if c.type != type_)
