"""NodeFence status and observations: the types the fence flow and the remedy escalation share.

``NodeFence.status`` (:class:`NodeFenceStatus`, with its committed run :class:`RunRef`, the
fencing levels' outcomes :class:`LevelOutcome` and the current remedy :class:`RemedyStatus`) and
its JSON (de)serialization, plus what a decision is given: :class:`NodeFenceObservations` (with
the executor's :class:`StepResult` and a pod remedy's :class:`PodRemedyResult`). The fence flow
(:mod:`noderemedy_runner.machines.nodefence`) and the remedy escalation in front of it
(:mod:`noderemedy_runner.machines.remedies`) both read and write these; they live here, owned by
neither, as controller-runtime operators keep their API types apart from the logic that uses them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from noderemedy_runner.machines.actions import STEPS, FenceReading, Step
from noderemedy_runner.machines.conditions import Condition, format_time, parse_time
from noderemedy_runner.machines.guards import Hold
from noderemedy_runner.machines.release import LeftOnNode, RateHold

Phase = Literal["New", "Running", "Done", "Final", "Error"]
PHASES: tuple[Phase, ...] = ("New", "Running", "Done", "Final", "Error")
RemedyResult = Literal["Running", "Succeeded", "Failed", "TimedOut"]
RESULTS: tuple[RemedyResult, ...] = ("Running", "Succeeded", "Failed", "TimedOut")


@dataclass(frozen=True)
class RunRef:
    """The step run the status has committed to: ansible-runner ``ident``, ``step``, ``attempt``
    (0-based, equals ``retries`` when started), ``not_before`` (seconds; retry back-off),
    ``segment`` (0-based index into :func:`step_segments` of the level's methods), ``segments``
    (how many the level has; 1 for methods that all act in one direction), ``level`` (1-based,
    Pacemaker's numbering) and ``levels`` (how many the step has)."""

    ident: str
    step: Step
    attempt: int
    not_before: float
    segment: int = 0
    segments: int = 1
    level: int = 1
    levels: int = 1

    def to_dict(self) -> dict[str, Any]:
        """JSON shape in ``status.currentRun``."""
        return {
            "ident": self.ident,
            "step": self.step,
            "attempt": self.attempt,
            "notBefore": format_time(self.not_before),
            "segment": self.segment,
            "segments": self.segments,
            "level": self.level,
            "levels": self.levels,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRef:
        """Inverse of :meth:`to_dict` (a status without ``segment`` is at segment 0 of 1, one
        without ``level`` at level 1 of 1); ValueError on a malformed object."""
        step = data["step"]
        if step not in STEPS:
            raise ValueError(f"status.currentRun.step {step!r} not in {STEPS}")
        segment, segments = int(data.get("segment", 0)), int(data.get("segments", 1))
        if not 0 <= segment < max(1, segments):
            raise ValueError(f"status.currentRun.segment {segment} not in 0..{segments - 1}")
        level, levels = int(data.get("level", 1)), int(data.get("levels", 1))
        if not 1 <= level <= max(1, levels):
            raise ValueError(f"status.currentRun.level {level} not in 1..{levels}")
        return cls(
            str(data["ident"]),
            step,
            int(data["attempt"]),
            parse_time(str(data["notBefore"])),
            segment,
            segments,
            level,
            levels,
        )


LevelResult = Literal["Succeeded", "Failed"]


@dataclass(frozen=True)
class LevelOutcome:
    """How one fencing level of a step ended (``status.fenceLevels[]``): ``step``, ``level``
    (1-based), ``restarts`` and ``attempt`` (which pass and try of the step), ``methods`` (the
    level's method names, space separated), ``result`` (``Succeeded``: every method succeeded and
    was read back; ``Failed``), ``message`` (the failure, no secrets) and ``time`` (seconds)."""

    step: Step
    level: int
    restarts: int
    attempt: int
    methods: str
    result: LevelResult
    message: str
    time: float

    def to_dict(self) -> dict[str, Any]:
        """JSON shape in ``status.fenceLevels[]``."""
        return {
            "step": self.step,
            "level": self.level,
            "restarts": self.restarts,
            "attempt": self.attempt,
            "methods": self.methods,
            "result": self.result,
            "message": self.message,
            "time": format_time(self.time),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LevelOutcome:
        """Inverse of :meth:`to_dict`; ValueError naming the field on a malformed object."""
        step, result = data.get("step"), data.get("result")
        if step not in STEPS:
            raise ValueError(f"status.fenceLevels[].step {step!r} not in {STEPS}")
        if result not in ("Succeeded", "Failed"):
            raise ValueError(f"status.fenceLevels[].result {result!r} not Succeeded or Failed")
        return cls(
            step,
            int(data["level"]),
            int(data.get("restarts", 0)),
            int(data.get("attempt", 0)),
            str(data.get("methods", "")),
            result,
            str(data.get("message", "")),
            parse_time(str(data["time"])),
        )


@dataclass(frozen=True)
class RemedyStatus:
    """``status.remedy``: the current remedy ``name`` and its ``index`` in the chain,
    ``start_time`` (seconds), ``timeout`` (its period in seconds, None: unbounded), ``job`` (the
    Job of a pod remedy; ``""`` for the fence flow), ``result`` and ``message``."""

    name: str
    index: int
    start_time: float
    timeout: float | None = None
    job: str = ""
    result: RemedyResult = "Running"
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON shape in ``status.remedy``."""
        out: dict[str, Any] = {
            "name": self.name,
            "index": self.index,
            "startTime": format_time(self.start_time),
            "result": self.result,
        }
        if self.timeout is not None:
            out["timeoutSeconds"] = self.timeout
        if self.job:
            out["job"] = self.job
        if self.message:
            out["message"] = self.message
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RemedyStatus:
        """Inverse of :meth:`to_dict`; ValueError naming the field."""
        result = data.get("result", "Running")
        if result not in RESULTS:
            raise ValueError(f"status.remedy.result {result!r} not in {RESULTS}")
        timeout = data.get("timeoutSeconds")
        return cls(
            str(data["name"]),
            int(data.get("index", 0)),
            parse_time(str(data["startTime"])),
            float(timeout) if timeout is not None else None,
            str(data.get("job", "")),
            result,
            str(data.get("message", "")),
        )


@dataclass(frozen=True)
class PodRemedyResult:
    """How a pod remedy's Job ended: ``job`` (its name), ``ok``, ``timed_out`` (its deadline, the
    period, passed) and ``message`` (why it failed: the pod's exit, the image, the API's refusal)."""

    job: str
    ok: bool
    timed_out: bool = False
    message: str = ""


@dataclass(frozen=True)
class NodeFenceStatus:
    """``NodeFence.status``: ``status`` (phase), ``step``, ``retries`` (of the current step),
    ``restarts`` (of the whole flow), ``jobs`` (idents of finished runs, oldest first),
    ``current_run``, ``conditions``, ``observed_generation``, ``start_time`` and
    ``last_transition_time`` (seconds; when fencing started / when ``status`` last changed),
    ``fence_levels`` (how each fencing level ended, oldest first; steps with several levels),
    ``remedy`` (the current remedy of a chain with a pod remedy,
    :mod:`noderemedy_runner.machines.remedies`; None otherwise)."""

    status: Phase = "New"
    step: Step = "Isolation"
    retries: int = 0
    restarts: int = 0
    jobs: tuple[str, ...] = ()
    current_run: RunRef | None = None
    conditions: tuple[Condition, ...] = ()
    observed_generation: int = 0
    start_time: float | None = None
    last_transition_time: float | None = None
    fence_levels: tuple[LevelOutcome, ...] = ()
    remedy: RemedyStatus | None = None

    def to_dict(self) -> dict[str, Any]:
        """The status subresource's JSON (camelCase, RFC 3339 times; optional fields omitted)."""
        out: dict[str, Any] = {
            "status": self.status,
            "step": self.step,
            "retries": self.retries,
            "restarts": self.restarts,
            "jobs": list(self.jobs),
            "conditions": [c.to_dict() for c in self.conditions],
            "observedGeneration": self.observed_generation,
        }
        if self.current_run is not None:
            out["currentRun"] = self.current_run.to_dict()
        if self.start_time is not None:
            out["startTime"] = format_time(self.start_time)
        if self.last_transition_time is not None:
            out["lastTransitionTime"] = format_time(self.last_transition_time)
        if self.fence_levels:
            out["fenceLevels"] = [lv.to_dict() for lv in self.fence_levels]
        if self.remedy is not None:
            out["remedy"] = self.remedy.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> NodeFenceStatus:
        """Parse ``.status`` (None or ``{}`` → a fresh New status). ValueError names the field."""
        if not data:
            return cls()
        phase = data.get("status", "New")
        if phase not in PHASES:
            raise ValueError(f"status.status {phase!r} not in {PHASES}")
        step = data.get("step", "Isolation")
        if step not in STEPS:
            raise ValueError(f"status.step {step!r} not in {STEPS}")
        run = data.get("currentRun")
        return cls(
            status=phase,
            step=step,
            retries=int(data.get("retries", 0)),
            restarts=int(data.get("restarts", 0)),
            jobs=tuple(str(j) for j in data.get("jobs", ())),
            current_run=RunRef.from_dict(run) if run else None,
            conditions=tuple(Condition.from_dict(c) for c in data.get("conditions", ())),
            observed_generation=int(data.get("observedGeneration", 0)),
            start_time=parse_time(data["startTime"]) if data.get("startTime") else None,
            last_transition_time=parse_time(data["lastTransitionTime"])
            if data.get("lastTransitionTime")
            else None,
            fence_levels=tuple(LevelOutcome.from_dict(lv) for lv in data.get("fenceLevels", ())),
            remedy=RemedyStatus.from_dict(data["remedy"]) if data.get("remedy") else None,
        )


@dataclass(frozen=True)
class StepResult:
    """What the executor reports for run ``ident``: ``ok``; ``timed_out`` (the run hit its
    timeout); ``message`` (no secrets); ``fence``: the read-back at the end of the run, if any;
    ``released_storage``: the run's fence was storage-only and it released these pods
    (``namespace/name``) on the fenced storage, no taint (None: no such release)."""

    ident: str
    ok: bool
    timed_out: bool = False
    message: str = ""
    fence: FenceReading | None = None
    released_storage: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NodeFenceObservations:
    """Fresh facts for one decision. ``now`` and ``not_ready_since`` are seconds since the epoch
    (``not_ready_since``: the Ready condition's lastTransitionTime while it is not True; when the
    node has no Ready condition or no longer exists, pass the NodeFence's creationTimestamp --
    None counts the grace period from ``now``, i.e. never starts fencing).
    ``fence``: a read-back made for this decision (verify_fence) or by the run just finished;
    ``result``: the executor's result for ``status.current_run`` when known (lost on a crash).
    ``generation``: the NodeFence's ``metadata.generation``. ``node_exists``: the Node object
    exists; ``missing_node_confirmed``: an admin confirmed fencing without one
    (:data:`~noderemedy_runner.machines.nodefence.CONFIRM_MISSING_NODE_ANNOTATION`). ``start_holds``: per step, why it may not start
    now (:func:`noderemedy_runner.machines.guards.start_hold`: maintenance, another remediator's Lease,
    etcd quorum, one control-plane node at a time, the power fencing limit); a step already
    committed is not held. ``stop_requested``: an admin asked the NodeFence to stop
    (:data:`~noderemedy_runner.machines.nodefence.STOP_ANNOTATION`). ``down_confirmed``: an admin confirmed by hand that the machine
    is down (:data:`~noderemedy_runner.machines.nodefence.CONFIRM_DOWN_ANNOTATION`). ``left_on_node``: what the release left on the node
    (old pods, VolumeAttachments; :mod:`noderemedy_runner.machines.release`), looked at while the
    NodeFence is Done with no committed run, the node tainted and Ready (or Recovery done); None:
    not looked at (recovery and the removal of the taint then wait). ``release_hold``: the
    release rate limit holds releases now. ``stale_on_node``: after a storage-only release
    (``WorkloadsReleased`` reason :data:`~noderemedy_runner.machines.nodefence.FENCED_STORAGE_RELEASED`), the pods the node's kubelet
    still runs that the API no longer has (:func:`~noderemedy_runner.machines.release.stale_pods`),
    looked at while the node is Ready; None: not looked at (recovery then waits).
    ``remedy_result``: how the current pod remedy's Job ended, when known
    (:mod:`noderemedy_runner.machines.remedies`). ``healthy``/``unhealthy_since``: the node judged
    by the threshold the NodeFence records (:func:`noderemedy_runner.machines.threshold.judge`);
    None: it records none, and "healthy" is Ready (:attr:`node_healthy`, :attr:`unhealthy_from`).
    ``node_ready`` stays what the safety rules look at (taint, release, return)."""

    node: str
    now: float
    node_ready: bool
    not_ready_since: float | None = None
    taint_present: bool = False
    fence: FenceReading | None = None
    result: StepResult | None = None
    generation: int = 0
    node_exists: bool = True
    missing_node_confirmed: bool = False
    start_holds: Mapping[str, Hold] = field(default_factory=dict)
    stop_requested: bool = False
    down_confirmed: bool = False
    left_on_node: LeftOnNode | None = None
    release_hold: RateHold | None = None
    stale_on_node: tuple[str, ...] | None = None
    remedy_result: PodRemedyResult | None = None
    healthy: bool | None = None
    unhealthy_since: float | None = None

    @property
    def node_healthy(self) -> bool:
        """Whether the node is healthy: by the recorded threshold, else Ready."""
        return self.node_ready if self.healthy is None else self.healthy

    @property
    def unhealthy_from(self) -> float | None:
        """Since when the node is unhealthy (seconds; the grace period counts from it): by the
        recorded threshold, else ``not_ready_since``."""
        return self.not_ready_since if self.healthy is None else self.unhealthy_since


__all__ = [
    "PHASES",
    "RESULTS",
    "LevelOutcome",
    "LevelResult",
    "NodeFenceObservations",
    "NodeFenceStatus",
    "Phase",
    "PodRemedyResult",
    "RemedyResult",
    "RemedyStatus",
    "RunRef",
    "StepResult",
]
