"""The NodeFence transition function: :func:`decide` maps (status, observations) to the next
action. This is what a reader opens to learn the automaton (the package's docs draw it; DESIGN.md
"NodeFence"); the words it uses are in :mod:`.vocabulary`, the steps, segments and levels in
:mod:`.steps`, the status types in :mod:`noderemedy_runner.machines.fencestatus`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action, FenceReading, Step
from noderemedy_runner.machines.conditions import (
    ConditionStatus,
    find_condition,
    is_true,
    set_condition,
)
from noderemedy_runner.machines.fencestatus import (
    LevelOutcome,
    LevelResult,
    NodeFenceObservations,
    NodeFenceStatus,
    Phase,
    RunRef,
    StepResult,
)
from noderemedy_runner.machines.guards import HOLD_RECHECK_SECONDS, Hold
from noderemedy_runner.machines.nodefence.steps import (
    applied_fences,
    run_ident,
    run_step_action,
    segment_methods,
    step_segments,
    verify_fence_action,
)
from noderemedy_runner.machines.nodefence.vocabulary import (
    CONFIRM_DOWN_ANNOTATION,
    CONFIRM_MISSING_NODE_ANNOTATION,
    FENCE_AGENT_ACTION_SUCCEEDED,
    FENCE_VERIFIED,
    FENCED_STORAGE_RELEASED,
    MAX_LEVEL_OUTCOMES,
    MAX_MESSAGE,
    NODE_NOT_FOUND,
    NODE_NOT_FOUND_RECHECK_SECONDS,
    PROCESSING,
    RELEASE_RATE_LIMITED,
    RELEASE_RECHECK_SECONDS,
    STOP_ANNOTATION,
    STOPPED,
    SUCCEEDED,
    WAITING_FOR_DETACH,
    WAITING_FOR_KUBELET,
    WORKLOADS_RELEASED,
    NodeFencePolicy,
    claimed_fence_kind,
    fence_verified_message,
    is_stopped,
)
from noderemedy_runner.machines.release import RateHold
from noderemedy_runner.machines.remedies import ChainRemedy, decide_remedy, exhausted


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


def _storage_claim_awaiting_power(s: NodeFenceStatus, config: FenceConfig) -> bool:
    """Whether ``s`` (Running: Isolation done, PowerManagement not yet) claims a verified fence
    of a kind that licenses no taint (:data:`~noderemedy_runner.machines.actions.TAINT_KINDS`),
    with power-management methods still to run. Such a claim is not read again when its reading
    goes stale (:data:`~noderemedy_runner.machines.actions.FENCE_FRESH_SECONDS`): a new reading
    could release nothing (the pods on fenced storage go only with the read-back of the run that
    fenced it, and only a power fence licenses the taint), and the PowerManagement run reads its
    own fence back before any release. Reading it again cost a ``fence_verify.yml`` run per
    waiting node a minute while ``--max-power-fencing`` held the power step, and delayed the step
    by that run when it could start. A claim whose message names no kind is read again, as
    before. Pure."""
    if s.status != "Running" or not config.power_management:
        return False
    kind = claimed_fence_kind(s)
    return kind is not None and kind not in act.TAINT_KINDS


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
                fence_verified_message(r.fence),
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
                for m in segment_methods(config, run)
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
            if obs.fence is not None:
                new = _cond(
                    s,
                    FENCE_VERIFIED,
                    "False",
                    "FenceNotHeld",
                    f"read back: {obs.fence.kind} not holding",
                    now,
                )
                return _write(new, "FenceNotHeld")
            if not _storage_claim_awaiting_power(s, config):
                return verify_fence_action(name, config, s)

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
