"""One error type for every Kubernetes API call of the runner, classified once.

:func:`classify` turns what the kubernetes client raises -- ``ApiException`` for an answer,
urllib3 and socket errors for no answer -- into a :class:`KubeError` with a ``reason``. Callers
branch on the reason (or on the subclasses :class:`NotFound` and :class:`Conflict`), never on
HTTP codes or library exception types. The reasons follow the API's own status reasons
(``metav1.StatusReason``), plus ``unreachable`` and ``timeout`` for transport failures.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

#: HTTP status → reason.
_REASONS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    410: "gone",
    422: "invalid",
    429: "too_many_requests",
    500: "internal_error",
    503: "service_unavailable",
    504: "timeout",
}
#: Reasons a later try of the same request may overcome (API Priority and Fairness throttling,
#: an apiserver restarting, a dropped connection).
RETRYABLE = frozenset(
    {"too_many_requests", "internal_error", "service_unavailable", "timeout", "unreachable"}
)


class KubeError(RuntimeError):
    """A Kubernetes API call failed.

    Attributes:
        reason: ``not_found``, ``conflict``, ``forbidden``, ``unauthorized``, ``invalid``,
            ``gone``, ``too_many_requests``, ``internal_error``, ``service_unavailable``,
            ``timeout`` (no answer in time), ``unreachable`` (no connection), ``bad_request``,
            ``method_not_allowed`` or ``error`` (any other status).
        status: the HTTP status, None when there was no answer.
        retry_after: seconds the API asked to wait (``Retry-After``), None if it did not.
    The message names the request (``what``) and the API's own message; never a secret.
    """

    def __init__(
        self, message: str, reason: str = "error", status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (see :data:`RETRYABLE`)."""
        return self.reason in RETRYABLE


class NotFound(KubeError):
    """404: the object (or the resource type: a CRD not installed) does not exist."""


class Conflict(KubeError):
    """409: the object changed since it was read (resourceVersion precondition) or already
    exists: re-read, decide again."""


def _api_message(exc: ApiException) -> str:
    try:
        body: Any = json.loads(exc.body or "{}")
        return str(body.get("message") or exc.reason or "")
    except (ValueError, AttributeError):
        return str(exc.reason or "")


def _retry_after(exc: ApiException) -> float | None:
    headers = exc.headers or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def classify(exc: BaseException, what: str) -> KubeError:
    """The :class:`KubeError` for ``exc`` raised by the request ``what`` (e.g. ``get Node n1``).

    ``ApiException`` keeps its status, reason and ``Retry-After``; a status 0 ApiException (the
    client's own wrapper of a transport failure), urllib3 errors and ``OSError`` become
    ``timeout`` (read or connect timed out) or ``unreachable``. A :class:`KubeError` is returned
    as it is.
    """
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException) and exc.status:
        status = int(exc.status)
        reason = _REASONS.get(status, "internal_error" if status >= 500 else "error")
        cls = NotFound if status == 404 else Conflict if status == 409 else KubeError
        return cls(f"{what}: HTTP {status} {_api_message(exc)}".strip(), reason, status, _retry_after(exc))
    cause = exc.reason if isinstance(exc, MaxRetryError) else exc
    # urllib3's NewConnectionError is a ConnectTimeoutError by inheritance, but means "refused"
    timed_out = not isinstance(cause, NewConnectionError) and isinstance(
        cause, ReadTimeoutError | Urllib3Timeout | socket.timeout | TimeoutError
    )
    if timed_out:
        return KubeError(f"{what}: no answer in time ({type(exc).__name__})", "timeout")
    if isinstance(exc, NewConnectionError | Urllib3Error | OSError | ApiException):
        return KubeError(f"{what}: API server unreachable ({type(exc).__name__}: {exc})", "unreachable")
    return KubeError(f"{what}: {type(exc).__name__}: {exc}")


#: What :func:`classify` understands; anything else is a programming error and is not caught.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (ApiException, Urllib3Error, OSError)

__all__ = ["RETRYABLE", "TRANSPORT_ERRORS", "Conflict", "KubeError", "NotFound", "classify"]
