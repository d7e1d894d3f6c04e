"""JSON logs: one object per line with ``time`` (RFC 3339 UTC, milliseconds), ``level``,
``logger``, ``msg``, and on *every* line ``resource`` (``Kind/name`` of the custom resource the
line is about, or null) and ``node`` (or null); extra keys given with ``extra={...}`` and the
exception text (``exc``) follow.

Use :func:`bind` for a logger that stamps a resource and node on each line::

    log = bind(logging.getLogger(__name__), resource="NodeFence/lab-node-1", node="lab-node-1")
    log.info("created")

or :func:`scope` to stamp every line written in this thread (context) meanwhile, including the
lines of code that knows nothing of the resource (the executor, the API client)::

    with scope(resource="NodeFence/lab-node-1"):
        set_node("lab-node-1")  # once it is known
        run_playbook()

A value given with :func:`bind` or ``extra=`` wins over the scope's.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

#: (resource, node) stamped on lines that do not name their own: see :func:`scope`.
_SCOPE: ContextVar[tuple[str | None, str | None]] = ContextVar("noderemedy_log_scope", default=(None, None))

#: LogRecord attributes that are not user extras.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line (see module docs). Values that are not JSON are
    rendered with ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        scoped = _SCOPE.get()
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
            + f"{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "resource": getattr(record, "resource", None) or scoped[0],
            "node": getattr(record, "node", None) or scoped[1],
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, sort_keys=False)


class _Bound(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs


def bind(
    logger: logging.Logger, *, resource: str | None = None, node: str | None = None
) -> logging.LoggerAdapter:  # type: ignore[type-arg]
    """``logger`` with ``resource`` (``Kind/name``) and ``node`` on every line it writes."""
    return _Bound(logger, {"resource": resource, "node": node})


@contextmanager
def scope(*, resource: str | None = None, node: str | None = None) -> Iterator[None]:
    """Stamp ``resource`` (``Kind/name``) and ``node`` on every line logged in this context
    (thread) until the block ends; the previous scope is restored after. Nests."""
    token = _SCOPE.set((resource, node))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def set_node(node: str | None) -> None:
    """Inside a :func:`scope`: stamp ``node`` as well from now on (it is often learned only
    once the resource has been read). Undone when the enclosing scope ends."""
    _SCOPE.set((_SCOPE.get()[0], node or None))


def setup(level: str = "info", stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (stderr) as JSON lines at ``level``
    (debug/info/warning/error). Raises ValueError on an unknown level."""
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int):
        raise ValueError(f"--log-level {level!r}: expected debug, info, warning or error")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
    # the kubernetes client's leader election logs every retry at info
    logging.getLogger("leaderelection").setLevel(max(lvl, logging.WARNING))
    logging.getLogger("urllib3").setLevel(max(lvl, logging.WARNING))


__all__ = ["JsonFormatter", "bind", "scope", "set_node", "setup"]
