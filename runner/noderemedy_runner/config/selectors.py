"""The shared vocabulary of the runner's configuration: metav1.LabelSelector (JSON form and the
label-selector string syntax of ``kubectl -l``) and Go durations (metav1.Duration).

Used by the remedy Configuration (:mod:`noderemedy_runner.config.remedy`), the runner's
``--metal3-selector`` and the Metal3Remediation spec (:mod:`noderemedy_runner.machines.metal3`).
Pure parsing; every error is a :class:`FieldError` naming the field it read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
#: apimachinery's qualified label key (optional DNS-subdomain prefix) and label value.
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


class FieldError(ValueError):
    """A label selector or duration that cannot be used; the message starts with ``where`` (the
    source and field, e.g. ``--metal3-selector`` or ``Metal3Remediation ns/a spec.strategy.timeout``)."""


def parse_duration(value: str, where: str) -> float:
    """Seconds in a metav1.Duration string (Go ``time.ParseDuration``: ``300s``, ``5m0s``,
    ``1h30m``, ``0``). Negative durations are refused. Raises :class:`FieldError` naming ``where``."""
    text = value.strip() if isinstance(value, str) else value
    if text == "0":
        return 0.0
    if not isinstance(text, str) or not _DURATION_RE.match(text):
        raise FieldError(f"{where}: {value!r} is not a duration like 300s, 5m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART_RE.findall(text))


def parse_seconds(value: Any, where: str) -> float:
    """Seconds from a number of seconds (int or float, >= 0) or a Go duration string
    (:func:`parse_duration`). Raises :class:`FieldError` naming ``where`` on a bool, a negative
    number or a malformed string."""
    if isinstance(value, bool):
        raise FieldError(f"{where}: {value!r} is not a duration like 30s, 5m or 1h30m")
    if isinstance(value, int | float):
        if value < 0:
            raise FieldError(f"{where}: {value!r} must not be negative")
        return float(value)
    return parse_duration(value, where)


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions`` entry: ``key``, ``operator`` (In, NotIn, Exists, DoesNotExist), ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabelSelector:
    """A metav1.LabelSelector (``matchLabels`` and ``matchExpressions``, ANDed)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every term (apimachinery semantics; an empty selector
        matches everything)."""
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for r in self.match_expressions:
            present = r.key in labels
            if r.operator == "In" and (not present or labels[r.key] not in r.values):
                return False
            if r.operator == "NotIn" and present and labels[r.key] in r.values:
                return False
            if r.operator == "Exists" and not present:
                return False
            if r.operator == "DoesNotExist" and present:
                return False
        return True


def parse_label_selector(data: Any, where: str) -> LabelSelector:
    """A :class:`LabelSelector` from its JSON form. ``where`` names the source for errors (e.g.
    ``"ConfigMap noderemedy-runner key metal3RemediationSelector"``). Raises
    :class:`FieldError` on unknown fields, non-string labels, unknown operators, values given
    with Exists/DoesNotExist or missing with In/NotIn."""
    if not isinstance(data, Mapping):
        raise FieldError(f"{where}: a label selector is an object, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise FieldError(f"{where}: unknown label selector fields {unknown}")
    labels = data.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise FieldError(f"{where}: matchLabels must map strings to strings")
    reqs: list[Requirement] = []
    for i, expr in enumerate(data.get("matchExpressions") or []):
        at = f"{where}: matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str) or not expr.get("key"):
            raise FieldError(f"{at}: needs a string key")
        op = expr.get("operator")
        values = expr.get("values") or []
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise FieldError(f"{at}: operator {op!r} not one of In, NotIn, Exists, DoesNotExist")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise FieldError(f"{at}: values must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise FieldError(f"{at}: operator {op} needs values")
        if op in ("Exists", "DoesNotExist") and values:
            raise FieldError(f"{at}: operator {op} takes no values")
        reqs.append(Requirement(expr["key"], op, tuple(values)))
    return LabelSelector(tuple(sorted(labels.items())), tuple(reqs))


def parse_selector_string(text: str, where: str) -> LabelSelector:
    """A :class:`LabelSelector` from the label-selector string syntax (the seed's
    ``type=compute``; ``kubectl -l``): comma-separated ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``,
    ``k in (a,b)``, ``k notin (a,b)``. Raises :class:`FieldError` naming ``where``."""
    reqs: list[Requirement] = []
    labels: list[tuple[str, str]] = []
    # split on commas outside parentheses
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for raw in parts:
        term = raw.strip()
        if not term:
            if text.strip():
                raise FieldError(f"{where}: empty term in selector {text!r}")
            continue
        m = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", term)
        if m:
            key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            if not all(vals) or not all(_LABEL_VALUE_RE.match(v) for v in vals):
                raise FieldError(f"{where}: bad values in {term!r}")
            _check_key(key, where, term)
            reqs.append(Requirement(key, "In" if op == "in" else "NotIn", tuple(vals)))
            continue
        m = re.match(r"^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$", term)
        if m:
            key, op, val = m.groups()
            _check_key(key, where, term)
            if not _LABEL_VALUE_RE.match(val):
                raise FieldError(f"{where}: bad label value {val!r} in {term!r}")
            if op == "!=":
                reqs.append(Requirement(key, "NotIn", (val,)))
            else:
                labels.append((key, val))
            continue
        if term.startswith("!"):
            _check_key(term[1:].strip(), where, term)
            reqs.append(Requirement(term[1:].strip(), "DoesNotExist"))
            continue
        _check_key(term, where, term)
        reqs.append(Requirement(term, "Exists"))
    return LabelSelector(tuple(sorted(labels)), tuple(reqs))


def _check_key(key: str, where: str, term: str) -> None:
    if not _LABEL_KEY_RE.match(key) or len(key) > 317:
        raise FieldError(f"{where}: {key!r} in {term!r} is not a label key")


__all__ = [
    "LabelSelector",
    "Requirement",
    "FieldError",
    "parse_duration",
    "parse_label_selector",
    "parse_seconds",
    "parse_selector_string",
]
