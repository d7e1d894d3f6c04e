"""RFC 3339 time conversion, as the API server writes ``metav1.Time``.

Times are held as float seconds since the Unix epoch inside the runner and written as RFC 3339
UTC strings with second precision. The Kubernetes layer (:mod:`noderemedy_runner.kube`) reads
them as much as the machines' conditions do, so the conversion lives below both.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(seconds: float) -> str:
    """RFC 3339 UTC string (``YYYY-MM-DDTHH:MM:SSZ``) for ``seconds`` since the epoch (truncated)."""
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> float:
    """Seconds since the epoch from an RFC 3339 string (``Z`` or an offset; fractions allowed).

    Raises ValueError naming the value when it is not RFC 3339.
    """
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 time: {value!r}") from exc
    if parsed.tzinfo is None:
        raise ValueError(f"RFC 3339 time without a zone offset: {value!r}")
    return parsed.timestamp()
