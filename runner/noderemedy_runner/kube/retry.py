"""Retries with jittered exponential back-off, for the errors worth retrying.

The shape of amazon.aws's ``AWSRetry.jittered_backoff``: a decorator (or :func:`call`) that
retries on a :class:`~noderemedy_runner.kube.errors.KubeError` whose reason is in ``retry_on``
(default: the transient ones, :data:`~noderemedy_runner.kube.errors.RETRYABLE`), sleeping a
random time up to ``min(max_delay, delay * 2**try)`` ("full jitter"), or the API's
``Retry-After`` when it gave one. Other errors, and the last failure, propagate.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from noderemedy_runner.kube.errors import RETRYABLE, KubeError

T = TypeVar("T")


def call(
    fn: Callable[[], T],
    *,
    tries: int = 4,
    delay: float = 0.2,
    max_delay: float = 5.0,
    retry_on: Collection[str] = RETRYABLE,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, tried up to ``tries`` times (>= 1) while it raises a :class:`KubeError` whose
    ``reason`` is in ``retry_on``; delays in seconds. Raises the last error, or ValueError for
    ``tries`` < 1."""
    if tries < 1:
        raise ValueError(f"tries = {tries}: must be >= 1")
    for attempt in range(tries):
        try:
            return fn()
        except KubeError as exc:
            if exc.reason not in retry_on or attempt == tries - 1:
                raise
            wait = (
                exc.retry_after
                if exc.retry_after is not None
                else random.uniform(0, min(max_delay, delay * 2**attempt))
            )
            sleep(min(wait, max_delay))
    raise AssertionError("unreachable")  # pragma: no cover


def jittered_backoff(
    tries: int = 4, delay: float = 0.2, max_delay: float = 5.0, retry_on: Collection[str] = RETRYABLE
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator form of :func:`call` (``@jittered_backoff(retry_on={"conflict"})``)."""

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            return call(
                lambda: fn(*args, **kwargs), tries=tries, delay=delay, max_delay=max_delay, retry_on=retry_on
            )

        return wrapper

    return decorate


__all__ = ["call", "jittered_backoff"]
