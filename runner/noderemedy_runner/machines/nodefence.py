"""The NodeFence state machine (node remedy seed's automaton), as a pure decision function.

``decide(name, status, observations, config, policy) -> Action``: no I/O, no clock; the caller
passes ``now`` in the observations. The reconciler loops: observe → decide → perform the action
→ (for ``write_status``) persist the status → decide again. Everything needed to resume is in
the persisted :class:`NodeFenceStatus` (DESIGN.md invariant 4); a run's result that is lost in a
crash is recovered by replaying the same run (same ``ident``; every action is idempotent).

Automaton (DESIGN.md "NodeFence"; docs/state-machines.md has the diagram)::

    New      node NotReady for grace_seconds → run Isolation → Running
             node Ready → Final (nothing done yet) or Done (after a restart: recover)
    Running  node Ready → Done; else run PowerManagement → Done
    Done     node Ready, its old pods and VolumeAttachments gone (safe return, below) → run
             Recovery, remove the out-of-service taint → Final;
             NotReady for recovery_timeout_seconds after entering Done → Error
    Error    after restart_delay_seconds → New (restarts + 1) while restarts < max_restarts;
             then stay Error (Succeeded=False, RestartLimitReached)
    Final    nothing (Succeeded=True)

A failed step run is retried ``step_retries`` times (``retries`` counts them) before Error.

A step runs in *segments* (:func:`step_segments`): its methods split wherever the direction of
the action changes (``off`` then ``on``), and a ``reboot`` method on its own. Each segment is one
run, and the status commits to the next segment before it starts. Repeating a segment repeats only
actions that are idempotent as a group (an off of what is off, an on of what is on), so a replay
after a crash or a graceful stop resumes after the last segment that finished: the off of a power
cycle is never repeated once its on has started. The progress lives in the custom resource's
status, not in run artifacts, which an empty data dir (a new leader, a rescheduled pod) has lost.

A step can have *fencing levels* (Pacemaker's fencing topology, :meth:`FenceConfig.levels`):
ordered alternatives, each a list of methods that must all succeed and be read back. When the
first segment of level *n* fails (nothing of that level was switched back on), level *n+1* starts
at once, in the same attempt; when the last level fails, the attempt counts as failed and the
retry starts again from level 1, as Pacemaker retries a topology. A later segment that fails (the
``on`` of a level whose ``off`` held) is retried on its own level: going on to another level would
cut a node that may be booting. Each level's outcome is kept in ``status.fenceLevels``.

A NodeFence whose node does not exist touches no device: ``Processing=False``, reason
``NodeNotFound``, until the Node exists or an admin confirms the fencing of a machine that has no
Node with the annotation :data:`CONFIRM_MISSING_NODE_ANNOTATION` (``"true"``). Without a Node
nothing is released (there is no Node to taint) and recovery waits for the Node to register.
In Running and Done (before Recovery) the node's workloads are released with the out-of-service
taint as soon as an observation shows a verified fence of this node; the taint action cannot be
built without one (:func:`noderemedy_runner.machines.actions.taint_out_of_service`, invariant 1). Isolation
and PowerManagement runs started while the node carries no taint release in the same run, on the
fence that run verified (:func:`run_step_action` ``release``); the taint action is then the
fallback for a run whose release was refused or lost.

Safe return (KEP-2268; DESIGN.md invariant 7): in Done, while the node carries the taint, the
Recovery step (which unfences storage) and the removal of the taint start only once the
observations show nothing left of the release (:class:`~noderemedy_runner.machines.release.LeftOnNode`:
the node's old pods gone from the API, no VolumeAttachment naming the node). Until then
``Processing=True``, reason :data:`WAITING_FOR_DETACH`, with the counts, and another look every
:data:`RELEASE_RECHECK_SECONDS`. Without the observation (``left_on_node`` None) it waits too.

Release rate (node remedy seed; :func:`~noderemedy_runner.machines.release.admit`): when the
observations carry a ``release_hold`` the machine releases nothing -- step runs go without
``release_workloads``, no ``taint_out_of_service`` -- and says so once in the condition
``WorkloadsReleased=False``, reason :data:`RELEASE_RATE_LIMITED`; the fencing itself goes on, and
no wait is longer than the hold's ``retry_seconds``. Once the taint is on, ``WorkloadsReleased``
turns True (``Released``).

Conditions (medik8s vocabulary): ``Processing``, ``FenceAgentActionSucceeded``, ``Succeeded``,
plus ``FenceVerified`` (the last step's read-back showed a fence holding) and, only after a
release had to wait for the rate limit, ``WorkloadsReleased``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from noderemedy_runner.config.fence import FenceConfig, FenceMethod
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action, FenceReading, Step
from noderemedy_runner.machines.conditions import (
    ConditionStatus,
    find_condition,
    is_true,
    set_condition,
)
from noderemedy_runner.machines.fencestatus import (
    PHASES,
    LevelOutcome,
    LevelResult,
    NodeFenceObservations,
    NodeFenceStatus,
    Phase,
    RunRef,
    StepResult,
)
from noderemedy_runner.machines.guards import HOLD_RECHECK_SECONDS, Hold
from noderemedy_runner.machines.release import RateHold
from noderemedy_runner.machines.remedies import ChainRemedy, decide_remedy, exhausted

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

_STEP_SLUG: dict[str, str] = {
    "Isolation": "isolation",
    "PowerManagement": "power-management",
    "Recovery": "recovery",
}


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


def run_ident(name: str, restarts: int, step: Step, attempt: int, segment: int = 0, level: int = 1) -> str:
    """Deterministic ansible-runner ident: ``<name>-r<restarts>-<step>-a<attempt>``, with
    ``-l<level>`` appended for fencing levels after the first and ``-s<segment>`` for segments
    after the first.

    Names longer than 200 characters are shortened to 191 characters plus 8 hex digits of their
    SHA-256, so the ident fits ``status.currentRun.ident`` (at most 253 characters).
    """
    if len(name) > 200:
        name = f"{name[:191]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    tail = (f"-l{level}" if level > 1 else "") + (f"-s{segment}" if segment else "")
    return f"{name}-r{restarts}-{_STEP_SLUG[step]}-a{attempt}{tail}"


def step_segments(methods: tuple[FenceMethod, ...]) -> tuple[tuple[FenceMethod, ...], ...]:
    """Split a step's ordered methods into segments, each idempotent as a whole.

    A segment is a maximal run of consecutive methods with the same ``action`` (``off`` or
    ``on``); a ``reboot`` method is a segment of its own. Performing a segment twice has the
    effect of performing it once (an off of what is off changes nothing), while a whole step
    such as ``ipmi-off ipmi-on`` does not: replayed after its on took effect, it would cut the
    power of a node that is booting again. The machine commits to each segment in the status
    before running it. A ``reboot`` alone is not idempotent: its replay power-cycles again, which
    is why docs/fence-config.md asks for ``off`` then ``on`` methods. Returns ``()`` for no methods.
    """
    out: list[list[FenceMethod]] = []
    for m in methods:
        if out and m.action != "reboot" and out[-1][-1].action == m.action:
            out[-1].append(m)
        else:
            out.append([m])
    return tuple(tuple(seg) for seg in out)


def _segment(config: FenceConfig, run: RunRef) -> tuple[FenceMethod, ...]:
    segs = step_segments(config.methods(run.step, run.level))
    return segs[run.segment] if run.segment < len(segs) else ()


def _methods_extravars(methods: tuple[FenceMethod, ...]) -> list[dict[str, Any]]:
    return [m.to_extravars() for m in methods]


def run_step_action(
    name: str, run: RunRef, config: FenceConfig, namespace: str | None = None, release: bool = False
) -> Action:
    """``run_step`` for ``run``: playbook ``fence_step.yml``, extravars with the node, the fence
    ConfigMap's name and the methods of the run's segment of the step (:func:`step_segments`;
    references only: addresses, plugs, Secret names).

    ``release`` (extravar ``release_workloads``): the same run then adds the out-of-service taint
    with the evidence of the fence *it* verified -- ``noderemedy.core.node_taint`` refuses anything
    but a verified, fresh fence of a NotReady node (invariant 1) -- which saves a second
    ansible-playbook run between the fence and the release (NodeFence creation → taint in about
    3 s, docs/benchmarks.md)."""
    return Action(
        kind="run_step",
        playbook=act.PLAYBOOKS["run_step"],
        step=run.step,
        ident=run.ident,
        extravars={
            "node": config.node,
            "nodefence": name,
            "step": run.step,
            "attempt": run.attempt,
            "segment": run.segment,
            "level": run.level,
            "fence_config": config.configmap,
            "namespace": namespace,
            "methods": _methods_extravars(_segment(config, run)),
            "release_workloads": release,
            "fenced_storage": [dict(m) for m in config.fenced_storage],
            "fence_max_age": act.FENCE_FRESH_SECONDS,
        },
        reason=f"Run{run.step}",
    )


_FENCE_STEPS: tuple[Step, ...] = ("Isolation", "PowerManagement")


def fenced_level(status: NodeFenceStatus, step: Step) -> int:
    """The fencing level of ``step`` that last succeeded in the current pass (``restarts``) of
    the flow, per ``status.fenceLevels``; 1 when none is recorded (a step with one level)."""
    for lv in reversed(status.fence_levels):
        if lv.step == step and lv.restarts == status.restarts and lv.result == "Succeeded":
            return lv.level
    return 1


def verify_fence_action(name: str, config: FenceConfig, status: NodeFenceStatus | None = None) -> Action:
    """``verify_fence``: read back (no change) the state of every ``off`` method of Isolation and
    PowerManagement (``fence_verify.yml``) -- of the level that fenced (:func:`fenced_level`, from
    ``status``; level 1 without one); the run's own evidence task reduces the read-backs to one
    reading (``roles/fence_step/tasks/evidence.yml``)."""
    s = status or NodeFenceStatus()
    methods = tuple(
        m for step in _FENCE_STEPS for m in config.methods(step, fenced_level(s, step)) if m.action == "off"
    )
    return Action(
        kind="verify_fence",
        playbook=act.PLAYBOOKS["verify_fence"],
        extravars={
            "node": config.node,
            "nodefence": name,
            "fence_config": config.configmap,
            "methods": _methods_extravars(methods),
        },
        reason="VerifyFence",
    )


def _cond(
    s: NodeFenceStatus, type_: str, status: ConditionStatus, reason: str, message: str, now: float
) -> NodeFenceStatus:
    return replace(
        s, conditions=set_condition(s.conditions, type_, status, reason, message, now, s.observed_generation)
    )


def _phase(s: NodeFenceStatus, phase: Phase, now: float) -> NodeFenceStatus:
    if s.status == phase:
        return s
    return replace(s, status=phase, last_transition_time=now)


def _start_run(
    name: str,
    s: NodeFenceStatus,
    step: Step,
    now: float,
    not_before: float,
    config: FenceConfig,
    segment: int = 0,
    level: int = 1,
) -> NodeFenceStatus:
    segs = step_segments(config.methods(step, level))
    levels = len(config.levels(step))
    run = RunRef(
        run_ident(name, s.restarts, step, s.retries, segment, level),
        step,
        s.retries,
        not_before,
        segment,
        len(segs),
        level,
        max(1, levels),
    )
    s = replace(s, step=step, current_run=run, start_time=s.start_time if s.start_time is not None else now)
    what = f"running {step} attempt {s.retries}"
    if levels > 1:
        what += f", level {level} of {levels}"
    if len(segs) > 1:
        names = " ".join(m.name for m in segs[segment])
        what += f", methods {names} (segment {segment + 1} of {len(segs)})"
    return _cond(s, PROCESSING, "True", "FenceAgentRunning", what, now)


#: What the flow does after each step succeeded (the ``Processing`` message).
_AFTER_STEP: dict[str, str] = {
    "Isolation": "Isolation succeeded; power management next unless the node is Ready",
    "PowerManagement": "PowerManagement succeeded; waiting for the node to be Ready",
    "Recovery": "Recovery succeeded; removing the out-of-service taint",
}


def _write(new: NodeFenceStatus, reason: str) -> Action:
    return act.write_status(new.to_dict(), reason)


#: Processing reasons of a NodeFence held by a guard (:mod:`noderemedy_runner.machines.guards`).
HOLD_REASONS = (
    "NodeUnderMaintenance",
    "LeaseHeld",
    "EtcdQuorumGuard",
    "ControlPlaneRemediationInProgress",
    "PowerFencingLimit",
)


def _held(s: NodeFenceStatus, hold: Hold, now: float) -> Action:
    """Hold before starting a step: say why in ``Processing`` (once), then look again."""
    cond = find_condition(s.conditions, PROCESSING)
    if cond is None or cond.status != "False" or (cond.reason, cond.message) != (hold.reason, hold.message):
        return _write(_cond(s, PROCESSING, "False", hold.reason, hold.message, now), hold.reason)
    return act.wait(HOLD_RECHECK_SECONDS, hold.reason)


def _release_unfinished(s: NodeFenceStatus, obs: NodeFenceObservations, now: float) -> Action | None:
    """Safe return: None when recovery may start and the taint may go (no taint, or nothing left
    on the node); else say what is left in ``Processing`` (when it changed) or look again."""
    if not obs.taint_present:
        return _stale_unstopped(s, obs, now)
    left = obs.left_on_node
    if left is not None and left.empty:
        return None
    if left is None:  # not looked at: never recover blind
        return act.wait(RELEASE_RECHECK_SECONDS, WAITING_FOR_DETACH)
    message = (
        f"the out-of-service taint stays and recovery waits until the old pods of node {obs.node} are "
        f"gone and its volumes detached: {left.summary()} left"
    )[:MAX_MESSAGE]
    cond = find_condition(s.conditions, PROCESSING)
    if cond is not None and (cond.status, cond.reason, cond.message) == ("True", WAITING_FOR_DETACH, message):
        return act.wait(RELEASE_RECHECK_SECONDS, WAITING_FOR_DETACH)
    return _write(_cond(s, PROCESSING, "True", WAITING_FOR_DETACH, message, now), WAITING_FOR_DETACH)


def _stale_unstopped(s: NodeFenceStatus, obs: NodeFenceObservations, now: float) -> Action | None:
    """Safe return after a storage-only release: None when there was none, or when the node's
    kubelet runs none of the pods the API no longer has; else say so (when it changed) or look
    again. The released pods may still run on a node that was only partitioned: the storage stays
    fenced until its kubelet has stopped them."""
    released = find_condition(s.conditions, WORKLOADS_RELEASED)
    if released is None or released.status != "True" or released.reason != FENCED_STORAGE_RELEASED:
        return None
    stale = obs.stale_on_node
    if stale is not None and not stale:
        return None
    if stale is None:
        return act.wait(RELEASE_RECHECK_SECONDS, WAITING_FOR_KUBELET)
    shown = ", ".join(stale[:3]) + (f", +{len(stale) - 3} more" if len(stale) > 3 else "")
    message = (
        f"the storage fence stays and recovery waits until the kubelet of node {obs.node} has stopped "
        f"the pods released on the fenced storage: {len(stale)} still running ({shown})"
    )[:MAX_MESSAGE]
    cond = find_condition(s.conditions, PROCESSING)
    if cond is not None and (cond.status, cond.reason, cond.message) == (
        "True",
        WAITING_FOR_KUBELET,
        message,
    ):
        return act.wait(RELEASE_RECHECK_SECONDS, WAITING_FOR_KUBELET)
    return _write(_cond(s, PROCESSING, "True", WAITING_FOR_KUBELET, message, now), WAITING_FOR_KUBELET)


def _rate_limited(s: NodeFenceStatus, hold: RateHold, now: float) -> Action | None:
    """A held release: write ``WorkloadsReleased=False`` (:data:`RELEASE_RATE_LIMITED`) once;
    None when it is already written."""
    cond = find_condition(s.conditions, WORKLOADS_RELEASED)
    if cond is not None and cond.status == "False" and cond.reason == RELEASE_RATE_LIMITED:
        return None
    new = _cond(s, WORKLOADS_RELEASED, "False", RELEASE_RATE_LIMITED, hold.message[:MAX_MESSAGE], now)
    return _write(new, RELEASE_RATE_LIMITED)


def _apply_result(
    name: str,
    s: NodeFenceStatus,
    r: StepResult,
    node: str,
    now: float,
    p: NodeFencePolicy,
    config: FenceConfig,
) -> NodeFenceStatus:
    run = s.current_run
    if run is None:
        raise ValueError("a step result without a committed run")
    levels = len(config.levels(run.step))
    level_methods = " ".join(m.name for m in config.methods(run.step, run.level))

    def outcome(s: NodeFenceStatus, result: LevelResult, message: str) -> NodeFenceStatus:
        if levels <= 1:
            return s
        lv = LevelOutcome(run.step, run.level, s.restarts, run.attempt, level_methods, result, message, now)
        return replace(s, fence_levels=(*s.fence_levels, lv)[-MAX_LEVEL_OUTCOMES:])

    if r.ok:
        segs = len(step_segments(config.methods(run.step, run.level)))
        done = (
            f"{run.step} succeeded"
            if segs <= 1
            else f"{run.step} segment {run.segment + 1} of {segs} succeeded"
        )
        if levels > 1:
            done += f" (level {run.level} of {levels}: {level_methods})"
        s = replace(s, jobs=(*s.jobs, run.ident))
        s = _cond(s, FENCE_AGENT_ACTION_SUCCEEDED, "True", "FenceAgentSucceeded", done, now)
        if r.released_storage is not None and r.fence is not None and r.fence.verifies(node):
            shown = ", ".join(r.released_storage[:3]) + (" ..." if len(r.released_storage) > 3 else "")
            s = _cond(
                s, WORKLOADS_RELEASED, "True", FENCED_STORAGE_RELEASED,
                f"{len(r.released_storage)} pod(s) on the fenced storage released ({shown or 'none'}); "
                "no out-of-service taint: that needs a power fence",
                now,
            )  # fmt: skip
        if r.fence is not None and r.fence.verifies(node):
            s = _cond(
                s,
                FENCE_VERIFIED,
                "True",
                "FenceVerified",
                f"{r.fence.kind} read back ({r.fence.source})",
                now,
            )
        if run.segment + 1 < segs:  # the next segment of the same attempt, committed before it runs
            return _start_run(name, s, run.step, now, now, config, run.segment + 1, run.level)
        s = outcome(s, "Succeeded", "")
        s = replace(s, retries=0, current_run=None)
        s = _cond(s, PROCESSING, "True", "StepSucceeded", _AFTER_STEP[run.step], now)
        if run.step == "Isolation":
            return _phase(s, "Running", now)
        if run.step == "PowerManagement":
            return _phase(s, "Done", now)
        return s  # Recovery: stays Done with step Recovery and no run → untaint, Final
    reason = "FenceAgentTimedOut" if r.timed_out else "FenceAgentFailed"
    s = replace(s, jobs=(*s.jobs, run.ident))
    where = f" level {run.level}" if levels > 1 else ""
    s = _cond(
        s,
        FENCE_AGENT_ACTION_SUCCEEDED,
        "False",
        reason,
        f"{run.step}{where} attempt {run.attempt}: {r.message[:MAX_MESSAGE]}",
        now,
    )
    if run.segment == 0:  # nothing of this level was switched back on: the level is abandoned
        s = outcome(s, "Failed", r.message[:MAX_MESSAGE])
        if run.level < levels:  # Pacemaker topology: the next level, at once, same attempt
            return _start_run(name, s, run.step, now, now, config, 0, run.level + 1)
    if s.retries < p.step_retries:
        s = replace(s, retries=s.retries + 1)
        if run.segment == 0:  # the whole topology again, from level 1
            return _start_run(name, s, run.step, now, now + p.retry_delay_seconds, config, 0, 1)
        return _start_run(name, s, run.step, now, now + p.retry_delay_seconds, config, run.segment, run.level)
    if run.segment > 0:
        s = outcome(s, "Failed", r.message[:MAX_MESSAGE])
    s = replace(s, current_run=None)
    s = _cond(
        s,
        PROCESSING,
        "False",
        reason,
        f"{run.step} failed after {s.retries + 1} attempts; last: {r.message[:MAX_MESSAGE]}",
        now,
    )
    return _phase(s, "Error", now)


def decide(
    name: str,
    status: NodeFenceStatus,
    obs: NodeFenceObservations,
    config: FenceConfig,
    policy: NodeFencePolicy,
    namespace: str | None = None,
    chain: Sequence[ChainRemedy] = (),
) -> Action:
    """The next action for NodeFence ``name`` (pure; see the module docs for the automaton).

    ``config`` is the node's parsed fence configuration; ``namespace`` the one holding its
    ConfigMaps and Secrets (passed through to extravars); ``chain`` the NodeFence's remedy chain
    (:func:`noderemedy_runner.machines.remedies.parse_chain`): its pod remedies run and escalate
    before the fence flow (:func:`~noderemedy_runner.machines.remedies.decide_remedy`). Returns ``write_status`` whenever the
    status must change (before any further action), else the action the status calls for.
    The same (status, observations) always yield the same action. Raises ValueError when
    ``config`` or ``obs`` are for another node than each other.
    """
    action = _decide(name, status, obs, config, policy, namespace, chain)
    hold = obs.release_hold
    if hold is not None and action.kind == "wait" and action.seconds > hold.retry_seconds:
        return act.wait(hold.retry_seconds, action.reason)  # the release is asked for again then
    return action


def _decide(
    name: str,
    status: NodeFenceStatus,
    obs: NodeFenceObservations,
    config: FenceConfig,
    policy: NodeFencePolicy,
    namespace: str | None,
    chain: Sequence[ChainRemedy] = (),
) -> Action:
    node = obs.node
    if config.node != node:
        raise ValueError(
            f"NodeFence {name}: fence configuration {config.configmap} is for node {config.node!r}, not {node!r}"
        )
    now = obs.now
    s = status

    if s.observed_generation != obs.generation:
        return _write(replace(s, observed_generation=obs.generation), "ObservedGeneration")

    # Stopped by an admin: nothing more, until the stop is cleared or the node is Ready again.
    if is_stopped(s):
        if not obs.stop_requested:
            new = replace(s, retries=0, step="Isolation", current_run=None)
            new = _cond(new, SUCCEEDED, "Unknown", "StopCleared", "the stop annotation was removed", now)
            new = _cond(
                new, PROCESSING, "True", "StopCleared", "the admin cleared the stop: starting over", now
            )
            return _write(_phase(new, "New", now), "StopCleared")
        if obs.node_healthy:
            new = _cond(s, SUCCEEDED, "False", STOPPED, "stopped by an admin; the node is healthy again", now)
            return _write(_phase(new, "Final", now), "NodeHealthy")
        return act.nothing(STOPPED)
    if obs.stop_requested and not (
        s.status == "Final" or (s.status == "Error" and s.restarts >= policy.max_restarts)
    ):
        applied = applied_fences(s, config)
        listed = ", ".join(applied) if applied else "none"
        message = (
            f"stopped by an admin ({STOP_ANNOTATION}); fences it applied, to undo by hand or with the "
            f"recovery methods: {listed}"
            + ("; the out-of-service taint is on the node" if obs.taint_present else "")
        )
        new = replace(s, current_run=None)
        new = _cond(new, PROCESSING, "False", STOPPED, message[:MAX_MESSAGE], now)
        new = _cond(new, SUCCEEDED, "False", STOPPED, message[:MAX_MESSAGE], now)
        return _write(_phase(new, "Error", now), STOPPED)

    # 0. No Node: no device is touched without an admin's confirmation.
    resting = (
        s.status == "Final" or (s.status == "Error" and s.restarts >= policy.max_restarts) or exhausted(s)
    )
    processing = find_condition(s.conditions, PROCESSING)
    if not obs.node_exists and not obs.missing_node_confirmed and not resting:
        message = (
            f"node {node} does not exist: no fence device is touched until it does, or until the "
            f"annotation {CONFIRM_MISSING_NODE_ANNOTATION}=true confirms fencing a machine without a Node"
        )
        if processing is None or processing.reason != "NodeNotFound" or processing.message != message:
            return _write(_cond(s, PROCESSING, "False", NODE_NOT_FOUND, message, now), NODE_NOT_FOUND)
        return act.wait(NODE_NOT_FOUND_RECHECK_SECONDS, "NodeNotFound")
    if obs.node_exists and processing is not None and processing.reason == "NodeNotFound":
        new = _cond(s, PROCESSING, "True", "NodeFound", f"node {node} exists again", now)
        return _write(new, "NodeFound")

    # 0b. An admin confirmed the machine is down (stonith_admin --confirm): release on that word,
    #     then wait for the node in Done. Not while a run is committed (it finishes first).
    if (
        obs.down_confirmed
        and obs.node_exists
        and not obs.node_ready
        and not resting
        and s.current_run is None
    ):
        if not obs.taint_present:
            if obs.release_hold is not None:
                return _rate_limited(s, obs.release_hold, now) or act.wait(
                    obs.release_hold.retry_seconds, RELEASE_RATE_LIMITED
                )
            return act.taint_out_of_service(node, FenceReading(node, True, "admin_confirmed", "admin", now))
        if s.status in ("New", "Running", "Error"):
            new = replace(s, step="PowerManagement", retries=0, start_time=s.start_time or now)
            new = _cond(
                new, PROCESSING, "True", "FenceConfirmedByAdmin",
                f"an admin confirmed node {node} is down ({CONFIRM_DOWN_ANNOTATION}); waiting for it to be Ready",
                now,
            )  # fmt: skip
            return _write(_phase(new, "Done", now), "FenceConfirmedByAdmin")

    # 0c. Pod remedies of the escalation chain, before the fence flow (it takes over when the chain
    #     reaches it, or after a clean-resources pod remedy).
    if not resting:
        escalation = decide_remedy(name, s, obs, chain, policy.grace_seconds)
        if escalation is not None:
            return escalation

    # 1. A committed run: consume its result, or (re)start it. Same ident → idempotent replay of
    #    one segment (step_segments).
    run = s.current_run
    if run is not None:
        if obs.result is not None and obs.result.ident == run.ident:
            return _write(_apply_result(name, s, obs.result, node, now, policy, config), "StepFinished")
        if now < run.not_before:
            return act.wait(run.not_before - now, "RetryBackoff")
        release = (
            run.step != "Recovery"
            and obs.node_exists
            and not obs.taint_present
            and obs.release_hold is None
            # an off that can release: a power off, or fc ports with storage named to release
            and any(
                m.action == "off" and (m.template.device_type != "fc" or bool(config.fenced_storage))
                for m in _segment(config, run)
            )
        )
        return run_step_action(name, run, config, namespace, release)

    # 2. Release workloads as soon as a fence is verified (invariant 1: only with a reading), and
    #    the release rate allows; a held release is said once and the fencing goes on meanwhile.
    released = find_condition(s.conditions, WORKLOADS_RELEASED)
    if (
        obs.taint_present
        and released is not None
        and released.reason in (RELEASE_RATE_LIMITED, FENCED_STORAGE_RELEASED)
    ):
        new = _cond(
            s, WORKLOADS_RELEASED, "True", "Released", f"node {node} carries the out-of-service taint", now
        )
        return _write(new, "Released")
    if s.status in ("Running", "Done") and s.step != "Recovery" and obs.node_exists and not obs.taint_present:
        # A storage-only fence licenses no taint (act.TAINT_KINDS): its run released the pods on
        # the fenced storage; the rest waits for a power fence (or the node's return).
        held = obs.fence is not None and obs.fence.verifies(node)
        if held and obs.fence is not None and obs.fence.licenses_taint(node):
            if obs.release_hold is None:
                return act.taint_out_of_service(node, obs.fence)
            held_write = _rate_limited(s, obs.release_hold, now)
            if held_write is not None:
                return held_write
        if not held and is_true(s.conditions, FENCE_VERIFIED):
            if obs.fence is None:
                return verify_fence_action(name, config, s)
            new = _cond(
                s, FENCE_VERIFIED, "False", "FenceNotHeld", f"read back: {obs.fence.kind} not holding", now
            )
            return _write(new, "FenceNotHeld")

    # 3. The automaton.
    if s.status == "New":
        if obs.node_healthy:
            if s.restarts == 0 and not obs.taint_present:
                new = _cond(s, PROCESSING, "False", "NodeHealthy", "node healthy before fencing started", now)
                return _write(_phase(new, "Final", now), "NodeHealthy")
            return _write(_phase(s, "Done", now), "NodeReady")
        since = obs.unhealthy_from if obs.unhealthy_from is not None else now
        remaining = since + policy.grace_seconds - now
        if remaining > 0:
            return act.wait(remaining, "GracePeriod")
        if config.isolation:
            hold = obs.start_holds.get("Isolation")
            if hold is not None:
                return _held(s, hold, now)
            return _write(_start_run(name, s, "Isolation", now, now, config), "StartIsolation")
        new = _cond(
            replace(s, start_time=now), PROCESSING, "True", "NoIsolationMethods", "no isolation methods", now
        )
        return _write(_phase(new, "Running", now), "NoIsolationMethods")

    if s.status == "Running":
        if obs.node_healthy:
            return _write(_phase(s, "Done", now), "NodeReady")
        if config.power_management:
            hold = obs.start_holds.get("PowerManagement")
            if hold is not None:
                return _held(s, hold, now)
            return _write(_start_run(name, s, "PowerManagement", now, now, config), "StartPowerManagement")
        new = replace(s, step="PowerManagement")
        return _write(_phase(new, "Done", now), "NoPowerManagementMethods")

    if s.status == "Done":
        if s.step == "Recovery":  # recovery methods finished (a failed run goes to Error)
            if obs.taint_present:
                return _release_unfinished(s, obs, now) or act.untaint_out_of_service(node)
            new = _cond(s, PROCESSING, "False", "RemediationFinished", "node recovered", now)
            new = _cond(new, SUCCEEDED, "True", "RemediationFinished", "node fenced and recovered", now)
            if find_condition(new.conditions, FENCE_VERIFIED) is not None:
                new = _cond(new, FENCE_VERIFIED, "False", "FenceReleased", "recovery ran", now)
            if (
                rel := find_condition(new.conditions, WORKLOADS_RELEASED)
            ) is not None and rel.status == "False":
                new = _cond(
                    new, WORKLOADS_RELEASED, "False", "NotReleased",
                    f"node {node} came back before the release rate limit let its workloads go", now,
                )  # fmt: skip
            return _write(_phase(new, "Final", now), "RemediationFinished")
        if obs.node_healthy:
            unfinished = _release_unfinished(s, obs, now)
            if unfinished is not None:
                return unfinished
            if config.recovery:
                return _write(_start_run(name, s, "Recovery", now, now, config), "StartRecovery")
            return _write(replace(s, step="Recovery"), "NoRecoveryMethods")
        if not obs.node_exists:  # fenced without a Node (confirmed): recovery waits for it to register
            return act.wait(NODE_NOT_FOUND_RECHECK_SECONDS, "NodeNotFound")
        entered = s.last_transition_time if s.last_transition_time is not None else now
        remaining = entered + policy.recovery_timeout_seconds - now
        if remaining > 0:
            return act.wait(remaining, "WaitNodeReady")
        new = _cond(s, PROCESSING, "False", "NodeNotReadyTimeout", "node not Ready after fencing", now)
        return _write(_phase(new, "Error", now), "NodeNotReadyTimeout")

    if s.status == "Error":
        if exhausted(s):
            return act.nothing("RemediesExhausted")
        if s.restarts < policy.max_restarts:
            entered = s.last_transition_time if s.last_transition_time is not None else now
            remaining = entered + policy.restart_delay_seconds - now
            if remaining > 0:
                return act.wait(remaining, "RestartDelay")
            new = replace(s, restarts=s.restarts + 1, retries=0, step="Isolation")
            new = _cond(
                new,
                PROCESSING,
                "True",
                "Restarted",
                f"restart {s.restarts + 1} of {policy.max_restarts}",
                now,
            )
            return _write(_phase(new, "New", now), "Restart")
        cond = find_condition(s.conditions, SUCCEEDED)
        if cond is None or cond.status != "False" or cond.reason != "RestartLimitReached":
            new = _cond(s, SUCCEEDED, "False", "RestartLimitReached", f"{s.restarts} restarts used", now)
            return _write(new, "RestartLimitReached")
        return act.nothing("RestartLimitReached")

    return act.nothing("Final")


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


def is_stopped(status: NodeFenceStatus) -> bool:
    """Whether an admin stopped this NodeFence (Error with ``Succeeded=False``, ``StoppedByAdmin``)."""
    cond = find_condition(status.conditions, SUCCEEDED)
    return status.status == "Error" and cond is not None and cond.status == "False" and cond.reason == STOPPED


_JOB_RE = re.compile(r"-r(\d+)-(isolation|power-management)-a\d+(?:-l(\d+))?(?:-s(\d+))?$")
_SLUG_STEP: dict[str, Step] = {"isolation": "Isolation", "power-management": "PowerManagement"}


def applied_fences(status: NodeFenceStatus, config: FenceConfig) -> list[str]:
    """Every ``off`` method a run of this pass (``restarts``) of the flow ran or may have run --
    finished runs in ``jobs`` and the committed ``current_run`` -- as ``<method> (<template>[
    plug <plug>])``, in order, each once: what an admin undoes after stopping the NodeFence."""
    idents = list(status.jobs) + ([status.current_run.ident] if status.current_run else [])
    out: list[str] = []
    for ident in idents:
        m = _JOB_RE.search(ident)
        if m is None or int(m.group(1)) != status.restarts:
            continue
        step, level, segment = _SLUG_STEP[m.group(2)], int(m.group(3) or 1), int(m.group(4) or 0)
        segs = step_segments(config.methods(step, level))
        for method in segs[segment] if segment < len(segs) else ():
            if method.action != "off":
                continue
            plug = f" plug {method.plug}" if method.plug else ""
            item = f"{method.name} ({method.template.configmap}{plug})"
            if item not in out:
                out.append(item)
    return out


__all__ = [
    "CONFIRM_DOWN_ANNOTATION",
    "CONFIRM_MISSING_NODE_ANNOTATION",
    "RELEASE_RATE_LIMITED",
    "RELEASE_RECHECK_SECONDS",
    "STOPPED",
    "WAITING_FOR_DETACH",
    "WORKLOADS_RELEASED",
    "STOP_ANNOTATION",
    "applied_fences",
    "is_stopped",
    "HOLD_REASONS",
    "PHASES",
    "LevelOutcome",
    "NodeFenceObservations",
    "NodeFencePolicy",
    "NodeFenceStatus",
    "Phase",
    "RunRef",
    "StepResult",
    "decide",
    "fenced_level",
    "is_terminal",
    "new_level_outcomes",
    "run_ident",
    "run_step_action",
    "step_segments",
    "verify_fence_action",
]
