"""The NodeFence flow's words: condition types and reasons, the annotations an admin sets, the
policy's tunables (:class:`NodeFencePolicy`) and the resting states (:func:`is_terminal`)."""

from __future__ import annotations

from dataclasses import dataclass

from noderemedy_runner.machines.actions import FENCE_KINDS, FenceKind, FenceReading
from noderemedy_runner.machines.conditions import find_condition
from noderemedy_runner.machines.fencestatus import LevelOutcome, NodeFenceStatus
from noderemedy_runner.machines.remedies import exhausted

PROCESSING = "Processing"
FENCE_AGENT_ACTION_SUCCEEDED = "FenceAgentActionSucceeded"
SUCCEEDED = "Succeeded"
FENCE_VERIFIED = "FenceVerified"
WORKLOADS_RELEASED = "WorkloadsReleased"
#: ``Processing`` reason while recovery waits for the release to finish (safe return).
WAITING_FOR_DETACH = "WaitingForDetach"
#: ``WorkloadsReleased`` reason while a release waits for the release rate limit.
RELEASE_RATE_LIMITED = "ReleaseRateLimited"
#: ``WorkloadsReleased`` reason after a storage-only fence released the pods on the fenced storage
#: (no out-of-service taint), and the ``Processing`` reason while recovery (which unfences that
#: storage) waits for the node's kubelet to stop those pods.
FENCED_STORAGE_RELEASED = "FencedStorageReleased"
WAITING_FOR_KUBELET = "WaitingForKubelet"
#: Seconds between looks at a node whose release has not finished.
RELEASE_RECHECK_SECONDS = 5.0

#: Longest executor message copied into a condition (metav1.Condition allows 32768).
MAX_MESSAGE = 1024
#: Most ``status.fenceLevels`` entries kept (the oldest are dropped).
MAX_LEVEL_OUTCOMES = 64
#: Annotation by which an admin confirms that a NodeFence may fence a machine whose Node object
#: does not exist (value ``"true"``); without it such a NodeFence touches no device.
CONFIRM_MISSING_NODE_ANNOTATION = "remediation.noderemedy.io/fence-without-node"
#: Annotation by which an admin stops a NodeFence (value ``"true"``): it stops at the next safe
#: point (between two runs; a run in flight finishes), lists every fence it applied, and does
#: nothing more until the annotation is removed (it then starts over from New) or its node is
#: Ready again (it ends Final). Its Error is not terminal for the detector, so no new NodeFence
#: replaces it meanwhile.
STOP_ANNOTATION = "remediation.noderemedy.io/stop"
#: Annotation by which an admin who checked the machine by hand confirms it is down (Pacemaker's
#: ``stonith_admin --confirm``): ``"true"``. Its workloads are then released without a device, on
#: the admin's word, recorded as such in an Event, and the flow waits for the node to come back.
CONFIRM_DOWN_ANNOTATION = "remediation.noderemedy.io/confirm-node-down"
#: ``Succeeded``/``Processing`` reason of a stopped NodeFence.
STOPPED = "StoppedByAdmin"
#: Seconds between looks at a NodeFence whose node does not exist.
NODE_NOT_FOUND_RECHECK_SECONDS = 10.0
#: ``Processing=False`` reason (and Warning Event) of a NodeFence whose Node does not exist.
NODE_NOT_FOUND = "NodeNotFound"


@dataclass(frozen=True)
class NodeFencePolicy:
    """Tunables (all durations in seconds). ``step_retries``: extra attempts per step;
    ``max_restarts``: Error → New restarts of the whole flow; ``max_power_fencing``: nodes in
    their PowerManagement step at once (:mod:`noderemedy_runner.machines.guards`);
    ``max_pods_released_per_minute``: the release rate limit, in pods the out-of-service taint
    evicts per 60 s window (:func:`noderemedy_runner.machines.release.admit`; 0: no limit).
    Raises ValueError when negative (``max_power_fencing``: below 1)."""

    grace_seconds: float = 60.0
    step_retries: int = 2
    retry_delay_seconds: float = 10.0
    recovery_timeout_seconds: float = 600.0
    max_restarts: int = 1
    restart_delay_seconds: float = 30.0
    max_power_fencing: int = 1
    max_pods_released_per_minute: int = 0

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 0:
                raise ValueError(f"NodeFencePolicy.{name} = {getattr(self, name)} must be >= 0")
        if self.max_power_fencing < 1:
            raise ValueError(f"NodeFencePolicy.max_power_fencing = {self.max_power_fencing} must be >= 1")


def new_level_outcomes(old: NodeFenceStatus, new: NodeFenceStatus) -> tuple[LevelOutcome, ...]:
    """The ``status.fenceLevels`` entries in ``new`` that ``old`` does not have (for Events)."""
    seen = set(old.fence_levels)
    return tuple(lv for lv in new.fence_levels if lv not in seen)


def is_terminal(status: NodeFenceStatus, policy: NodeFencePolicy) -> bool:
    """Whether ``status`` is a resting state: Final, Error with the restart limit used, stopped
    by an admin (:func:`is_stopped`), or a remedy chain exhausted
    (:func:`noderemedy_runner.machines.remedies.exhausted`)."""
    return (
        status.status == "Final"
        or (status.status == "Error" and status.restarts >= policy.max_restarts)
        or is_stopped(status)
        or exhausted(status)
    )


def fence_verified_message(reading: FenceReading) -> str:
    """The ``FenceVerified=True`` message for ``reading``: ``"<kind> read back (<source>)"``, e.g.
    ``"power_off read back (ipmi-off)"`` (:func:`claimed_fence_kind` reads the kind back)."""
    return f"{reading.kind} read back ({reading.source})"


def claimed_fence_kind(status: NodeFenceStatus) -> FenceKind | None:
    """The kind of fence ``status``'s ``FenceVerified=True`` claims (written by
    :func:`fence_verified_message`), or None: no such claim, or a message of another shape (then
    nothing is known of the kind). Pure."""
    cond = find_condition(status.conditions, FENCE_VERIFIED)
    if cond is None or cond.status != "True":
        return None
    kind = cond.message.split(" ", 1)[0]
    return next((k for k in FENCE_KINDS if k == kind), None)


def is_stopped(status: NodeFenceStatus) -> bool:
    """Whether an admin stopped this NodeFence (Error with ``Succeeded=False``, ``StoppedByAdmin``)."""
    cond = find_condition(status.conditions, SUCCEEDED)
    return status.status == "Error" and cond is not None and cond.status == "False" and cond.reason == STOPPED


__all__ = [
    "CONFIRM_DOWN_ANNOTATION",
    "CONFIRM_MISSING_NODE_ANNOTATION",
    "FENCE_AGENT_ACTION_SUCCEEDED",
    "FENCE_VERIFIED",
    "FENCED_STORAGE_RELEASED",
    "MAX_LEVEL_OUTCOMES",
    "MAX_MESSAGE",
    "NODE_NOT_FOUND",
    "NODE_NOT_FOUND_RECHECK_SECONDS",
    "PROCESSING",
    "RELEASE_RATE_LIMITED",
    "RELEASE_RECHECK_SECONDS",
    "STOP_ANNOTATION",
    "STOPPED",
    "SUCCEEDED",
    "WAITING_FOR_DETACH",
    "WAITING_FOR_KUBELET",
    "WORKLOADS_RELEASED",
    "NodeFencePolicy",
    "claimed_fence_kind",
    "fence_verified_message",
    "is_stopped",
    "is_terminal",
    "new_level_outcomes",
]
