"""The seam between the reconcilers (which act) and observability (metrics, logs): the reconcilers
call an :class:`Observer`; :class:`NullObserver` does nothing, the metrics module implements it
with prometheus_client. Kubernetes Events are written by the reconcilers themselves.

All durations are in seconds. ``kind`` is ``"NodeFence"`` or ``"Metal3Remediation"``.
"""

from __future__ import annotations

from typing import Protocol


class Observer(Protocol):
    """What the reconcilers report. Implementations must be thread-safe and never raise."""

    def remediation_started(self, kind: str, name: str, node: str) -> None:
        """A remediation of ``node`` began (NodeFence New, Metal3Remediation first Running)."""

    def remediation_finished(self, kind: str, name: str, node: str, result: str) -> None:
        """A remediation reached a terminal state; ``result`` is the final status/phase."""

    def fence_verified(self, method: str, node: str, seconds: float) -> None:
        """A fence of ``node`` by ``method`` (ipmi, pdu, fc) was verified, ``seconds`` after its run started."""

    def run_finished(self, kind: str, name: str, playbook: str, status: str, seconds: float) -> None:
        """An ansible-runner run ended with ``status`` (successful, failed, timeout, canceled), or
        was read back from an earlier process's artifacts. Runs in flight are not reported here:
        the executor counts them itself (``Executor.in_flight``)."""

    def reconcile_error(self, kind: str, name: str, error: str) -> None:
        """A reconcile raised; it will be retried."""


class NullObserver:
    """An :class:`Observer` that records nothing."""

    def remediation_started(self, kind: str, name: str, node: str) -> None:
        return None

    def remediation_finished(self, kind: str, name: str, node: str, result: str) -> None:
        return None

    def fence_verified(self, method: str, node: str, seconds: float) -> None:
        return None

    def run_finished(self, kind: str, name: str, playbook: str, status: str, seconds: float) -> None:
        return None

    def reconcile_error(self, kind: str, name: str, error: str) -> None:
        return None
