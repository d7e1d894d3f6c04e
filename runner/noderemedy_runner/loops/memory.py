"""What the reconcilers share: :class:`InMemory`, the little each one keeps about a custom resource
between two decisions (lost on a restart: the machines never depend on it for correctness), the
requeue delays, and the out-of-service taint Events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from noderemedy_runner.kube.resources import (
    KubeIO,
)
from noderemedy_runner.machines.actions import (
    FENCE_FRESH_SECONDS,
    Action,
    FenceReading,
)
from noderemedy_runner.machines.conditions import parse_time
from noderemedy_runner.machines.nodefence import (
    StepResult,
)

#: Seconds a fence reading held in memory may license a taint; older → verify_fence again.
READING_FRESH_SECONDS = float(FENCE_FRESH_SECONDS)
#: Seconds before retrying after an error the machine cannot see (bad config, API error, failed taint run).
ERROR_REQUEUE_SECONDS = 10.0


@dataclass
class InMemory:
    """What a reconciler keeps in memory about one custom resource between two decisions: the last
    step result, the last fence reading with the module evidence that proves it, and the count of
    failed power runs. Lost on a restart, by design: the status holds what the machines need, and
    a lost reading only makes the machine read the fence back again."""

    result: StepResult | None = None
    reading: FenceReading | None = None
    evidence: dict[str, Any] | None = None
    power_failures: int = 0
    power_refused: bool = False
    notes: list[str] = field(default_factory=list)

    def evidence_for(self, action: Action) -> dict[str, Any] | None:
        """The fence evidence that licenses ``action`` (a ``taint_out_of_service``), or None.

        Safety invariant 1 (DESIGN.md): the taint is applied only with the evidence of the very
        reading that made the machine ask for it. Anything else forgets the reading, so the fence
        is read again before another try. Both reconcilers go through here.
        """
        if action.fence is None or action.fence != self.reading or self.evidence is None:
            self.reading, self.evidence = None, None
            return None
        return self.evidence


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj["metadata"]`` as a mapping ({} when absent or malformed)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def created_at(obj: Mapping[str, Any], default: float) -> float:
    """``metadata.creationTimestamp`` of ``obj`` in seconds since the epoch, else ``default``."""
    stamp = meta_of(obj).get("creationTimestamp")
    return parse_time(stamp) if isinstance(stamp, str) else default


def taint_event(
    kube: KubeIO, obj: Mapping[str, Any], node: str, type_: str, reason: str, message: str
) -> None:
    """Record an out-of-service taint Event (added, removed, refused, failed) on the custom
    resource ``obj`` and on Node ``node`` too (an Event on the Node for each transition and
    refusal), so ``kubectl describe node`` shows why its pods went away. Best effort, as
    :meth:`KubeIO.event`."""
    kube.event(obj, type_, reason, message)
    node_obj = kube.get_node(node) if node else None
    if node_obj is not None:
        kube.event({**node_obj, "apiVersion": "v1", "kind": "Node"}, type_, reason, message)


__all__ = [
    "ERROR_REQUEUE_SECONDS",
    "READING_FRESH_SECONDS",
    "InMemory",
    "created_at",
    "meta_of",
    "taint_event",
]
