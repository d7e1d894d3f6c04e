"""What a deleted NodeFence does to its node before it goes: the cleanup behind its finalizer.

A NodeFence deleted halfway (an admin cleaning up, a GitOps tool pruning it) must not leave a node
out of service with nothing left to say why: the out-of-service taint (NoExecute) evicting every
pod, its storage ports disabled, its power off. medik8s fence-agents-remediation and
self-node-remediation put a finalizer on their remediation objects for the same reason and clean
the node up before they remove it; ansible-operator runs a finalizer playbook and removes its
finalizer only once that playbook succeeds. Here:

- :data:`FINALIZER` goes on the NodeFence before the first action that touches a device or the
  node (:func:`needs_finalizer`). A NodeFence deleted before that has no finalizer and simply goes.
- On deletion (``metadata.deletionTimestamp`` set) the reconciler stops the fencing flow and asks
  :func:`decide_cleanup`, which undoes what the flow did, with the same safety rules as recovery
  (KEP-2268; DESIGN.md invariant 7):

  1. ``PowerOn``: every power ``off`` method the flow ran or may have run (a finished run in
     ``status.jobs``, or the committed ``status.currentRun``) is run again with action ``on``,
     unless a later finished run of the flow switched that device and plug back on (an ``on`` or
     ``reboot`` method, as a PowerManagement of ``off`` then ``on`` does) or the flow's own Recovery
     ran. A flow whose Isolation or PowerManagement only switched the power off (``isolation=ipmi-off``,
     ``recovery=ipmi-on``) has it off at Done: deleted then, it is switched back on. Only ``on``
     actions are run: never a second power cycle.
  2. ``Unfence``: every ``off`` method of Isolation (and the non-power ``off`` methods of
     PowerManagement: storage and network ports) is run again with action ``on``, unless the
     flow's own Recovery ran -- only once the node is Ready and, while it carries the taint, its
     old pods are gone from the API and no VolumeAttachment names it (after a storage-only
     release: once its kubelet runs none of the released pods).
  3. ``Untaint``: the out-of-service taint is removed under the same conditions, after ``Unfence``.
     Only a NodeFence that started fencing and did not finish its own Recovery removes it (one that
     never acted, or ended Final after removing its taint, did not put the one there now).

  Then the finalizer is removed. The cleanup never blocks deletion forever: once
  ``recovery_timeout_seconds`` have passed since the deletion, the finalizer goes anyway, and the
  action names what was left undone (the reconciler records it in a Warning Event).

The progress lives in ``status.cleanup`` (:class:`CleanupStatus`): the parts done, the failed
attempts of the current part (each retry after ``retry_delay_seconds`` gets a new ansible-runner
ident; a replay of the same ident after a crash returns the finished run or repeats an ``on``,
which changes nothing), and the last wait said (so each change is one Event).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from noderemedy_runner.config.fence import ACTION_STATES, FenceConfig, FenceMethod
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action, Step
from noderemedy_runner.machines.conditions import (
    ConditionStatus,
    find_condition,
    format_time,
    parse_time,
    set_condition,
)
from noderemedy_runner.machines.nodefence import (
    FENCED_STORAGE_RELEASED,
    MAX_MESSAGE,
    PROCESSING,
    RELEASE_RECHECK_SECONDS,
    SUCCEEDED,
    WORKLOADS_RELEASED,
    NodeFencePolicy,
    NodeFenceStatus,
    StepResult,
    step_segments,
)
from noderemedy_runner.machines.release import LeftOnNode

#: The NodeFence finalizer (DNS-prefixed, as Kubernetes asks of finalizers that are not its own).
FINALIZER = "remediation.noderemedy.io/nodefence-cleanup"
#: Action kinds that touch a device or the node: the finalizer is on the NodeFence before any runs.
DEVICE_ACTIONS = frozenset({"run_step", "run_remedy", "taint_out_of_service"})
#: Device types that switch a machine's power (fc ports and the Node's cordon are undone with
#: ``Unfence``; a method whose device has no ``on``, such as kdump's wait, has nothing to undo).
POWER_DEVICES = frozenset({"ipmi", "redfish", "pdu", "aws", "vmware"})

CleanupPart = Literal["PowerOn", "Unfence"]
CLEANUP_PARTS: tuple[CleanupPart, ...] = ("PowerOn", "Unfence")

#: ``Processing`` reasons (and Event reasons) of the cleanup.
CLEANUP_WAITING = "CleanupWaiting"
CLEANUP_STEP_SUCCEEDED = "CleanupStepSucceeded"
CLEANUP_STEP_FAILED = "CleanupStepFailed"
#: ``remove_finalizer`` reasons: everything undone / the recovery timeout passed first.
CLEANUP_FINISHED = "CleanupFinished"
CLEANUP_TIMED_OUT = "CleanupTimedOut"

_SLUG: dict[CleanupPart, str] = {"PowerOn": "power-on", "Unfence": "unfence"}
_RUN_RE = re.compile(r"-r(\d+)-(isolation|power-management)-a\d+(?:-l(\d+))?(?:-s(\d+))?$")
_SLUG_STEP: dict[str, Step] = {"isolation": "Isolation", "power-management": "PowerManagement"}


def needs_finalizer(action_kind: str) -> bool:
    """Whether an action of this kind touches a device or the node (:data:`DEVICE_ACTIONS`), so
    the NodeFence must carry :data:`FINALIZER` before it is performed."""
    return action_kind in DEVICE_ACTIONS


@dataclass(frozen=True)
class CleanupStatus:
    """``status.cleanup``: ``done`` (the parts finished, :data:`CLEANUP_PARTS`), ``attempts``
    (failed runs of the current part), ``not_before`` (seconds; its retry does not start before),
    ``waiting`` (the last wait the cleanup said, so it is said once)."""

    done: tuple[CleanupPart, ...] = ()
    attempts: int = 0
    not_before: float | None = None
    waiting: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON shape in ``status.cleanup`` (optional fields omitted)."""
        out: dict[str, Any] = {"done": list(self.done), "attempts": self.attempts}
        if self.not_before is not None:
            out["notBefore"] = format_time(self.not_before)
        if self.waiting:
            out["waiting"] = self.waiting
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> CleanupStatus:
        """Inverse of :meth:`to_dict` (None or ``{}``: nothing done). ValueError names the field."""
        if not data:
            return cls()
        done = tuple(data.get("done") or ())
        for part in done:
            if part not in CLEANUP_PARTS:
                raise ValueError(f"status.cleanup.done: {part!r} not in {CLEANUP_PARTS}")
        attempts = int(data.get("attempts", 0))
        if attempts < 0:
            raise ValueError(f"status.cleanup.attempts {attempts} < 0")
        nb = data.get("notBefore")
        return cls(done, attempts, parse_time(str(nb)) if nb else None, str(data.get("waiting", "")))


@dataclass(frozen=True)
class CleanupObservations:
    """Fresh facts for one cleanup decision. ``now`` and ``deleted_at`` (the NodeFence's
    ``metadata.deletionTimestamp``) are seconds since the epoch; ``has_finalizer``: the NodeFence
    still carries :data:`FINALIZER`; ``node_exists``, ``node_ready`` and ``taint_present`` (the
    out-of-service taint) describe the Node; ``left_on_node``: the node's old pods and
    VolumeAttachments, looked at while it is tainted and Ready (None: not looked at, the cleanup
    then waits); ``stale_on_node``: after a storage-only release, the released pods the node's
    kubelet still runs, looked at while it is Ready (None: not looked at); ``result``: the outcome
    of the cleanup run just finished, when known; ``config_error``: why the fence configuration
    could not be read (None: it was), which leaves the devices as they are."""

    node: str
    now: float
    deleted_at: float
    has_finalizer: bool = True
    node_exists: bool = True
    node_ready: bool = False
    taint_present: bool = False
    left_on_node: LeftOnNode | None = None
    stale_on_node: tuple[str, ...] | None = None
    result: StepResult | None = None
    config_error: str | None = None


@dataclass(frozen=True)
class CleanupPlan:
    """What is left to undo: ``power_on`` and ``unfence`` (the ``on`` counterparts of the flow's
    ``off`` methods, in the flow's order, each device and plug once) and ``untaint``."""

    power_on: tuple[FenceMethod, ...] = ()
    unfence: tuple[FenceMethod, ...] = ()
    untaint: bool = False
    history: bool = field(default=False, compare=False)

    @property
    def empty(self) -> bool:
        """Nothing left to undo."""
        return not self.power_on and not self.unfence and not self.untaint


def fenced_methods(status: NodeFenceStatus, config: FenceConfig) -> list[FenceMethod]:
    """Every ``off`` method with an ``on`` counterpart that a run of the flow ran or may have run,
    any pass, and that no later finished run of the flow switched back on: the runs of Isolation
    and PowerManagement in ``status.jobs`` and the committed ``status.currentRun`` (idents as
    :func:`noderemedy_runner.machines.nodefence.run_ident` builds them), in order, each device and
    plug once. An ``on`` or ``reboot`` method leaves its device and plug on once its step
    finished (:func:`_step_finished`: every run of the step then succeeded); one of a step that
    failed or is still under way may not have run, so it does not count."""
    idents = list(status.jobs) + ([status.current_run.ident] if status.current_run else [])
    off: dict[tuple[str, str | None], FenceMethod] = {}
    for ident in idents:
        m = _RUN_RE.search(ident)
        if m is None:
            continue
        step, level, segment = _SLUG_STEP[m.group(2)], int(m.group(3) or 1), int(m.group(4) or 0)
        done = _step_finished(status, step)
        segs = step_segments(config.methods(step, level))
        for method in segs[segment] if segment < len(segs) else ():
            key = (method.template.configmap, method.plug)
            undoable = "on" in ACTION_STATES.get(method.template.device_type, {})
            if method.action == "off" and undoable:
                off.setdefault(key, method)
            elif method.action in ("on", "reboot") and done:
                off.pop(key, None)
    return list(off.values())


def _step_finished(status: NodeFenceStatus, step: Step) -> bool:
    """Whether the flow's ``step`` (Isolation or PowerManagement) finished with every run of it
    successful: the flow went past it (PowerManagement: Done with no power run committed, Final
    after a recovery, or Error because the node did not come back after it)."""
    run = status.current_run
    if run is not None and run.step == step:
        return False
    if step == "Isolation":
        return status.step != "Isolation" or status.status in ("Done", "Final")
    if run is not None and run.step != "Recovery":
        return False
    if status.status in ("Done", "Final"):
        return status.status == "Done" or power_restored(status)
    processing = find_condition(status.conditions, PROCESSING)
    return status.status == "Error" and processing is not None and processing.reason == "NodeNotReadyTimeout"


def power_restored(status: NodeFenceStatus) -> bool:
    """Whether the flow's own Recovery ran to the end (Final with ``Succeeded=True``): its ``on``
    methods switched back on what the flow left off. Before that, what is still off is told per
    device and plug by :func:`fenced_methods` (a finished PowerManagement of ``off`` then ``on``
    left the power on; one of ``off`` alone, or an Isolation of ``ipmi-off``, did not)."""
    succeeded = find_condition(status.conditions, SUCCEEDED)
    return status.status == "Final" and succeeded is not None and succeeded.status == "True"


def recovered(status: NodeFenceStatus) -> bool:
    """Whether the flow's own Recovery step ran (Final with ``Succeeded=True``, or Done with step
    Recovery and no run committed): storage and network are then unfenced."""
    if status.status == "Done" and status.step == "Recovery" and status.current_run is None:
        return True
    succeeded = find_condition(status.conditions, SUCCEEDED)
    return status.status == "Final" and succeeded is not None and succeeded.status == "True"


def _on(method: FenceMethod) -> FenceMethod:
    return replace(method, name=f"undo-{method.name}", action="on")


def cleanup_plan(
    status: NodeFenceStatus, cleanup: CleanupStatus, config: FenceConfig | None, taint_present: bool
) -> CleanupPlan:
    """What is left to undo on the node of a deleted NodeFence (see the module docs); without a
    fence configuration (``config`` None) only the taint is planned."""
    fenced = fenced_methods(status, config) if config is not None else []
    power = [m for m in fenced if m.template.device_type in POWER_DEVICES]
    ports = [m for m in fenced if m.template.device_type not in POWER_DEVICES]
    started = status.start_time is not None or bool(status.jobs) or status.current_run is not None
    return CleanupPlan(
        power_on=tuple(_on(m) for m in power)
        if power and "PowerOn" not in cleanup.done and not power_restored(status)
        else (),
        unfence=tuple(_on(m) for m in ports)
        if ports and "Unfence" not in cleanup.done and not recovered(status)
        else (),
        # a flow that ended Final after its Recovery removed its own taint: one there now is not its
        untaint=taint_present and started and not (status.status == "Final" and recovered(status)),
        history=started,
    )


def left_undone(plan: CleanupPlan, node: str) -> list[str]:
    """What ``plan`` still has to undo, in words, for the Warning Event of a cleanup that gives up."""
    out = []
    if plan.power_on:
        out.append("power not switched back on: " + ", ".join(_describe(m) for m in plan.power_on))
    if plan.unfence:
        out.append("ports not switched back on: " + ", ".join(_describe(m) for m in plan.unfence))
    if plan.untaint:
        out.append(f"the out-of-service taint on node {node}")
    return out


def _describe(method: FenceMethod) -> str:
    plug = f" plug {method.plug}" if method.plug else ""
    return f"{method.name.removeprefix('undo-')} ({method.template.configmap}{plug})"


def cleanup_ident(name: str, part: CleanupPart, attempt: int) -> str:
    """The ansible-runner ident of a cleanup run: ``<name>-cleanup-<part>-a<attempt>`` (names
    over 200 characters shortened as :func:`~noderemedy_runner.machines.nodefence.run_ident` does)."""
    if len(name) > 200:
        name = f"{name[:191]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return f"{name}-cleanup-{_SLUG[part]}-a{attempt}"


def _unsafe(status: NodeFenceStatus, obs: CleanupObservations) -> str | None:
    """Why storage may not be unfenced nor the taint removed yet (recovery's rules), or None."""
    node = obs.node
    if not obs.node_exists:
        return f"node {node} does not exist: waiting for it to register"
    if not obs.node_ready:
        return f"waiting for node {node} to be Ready"
    if obs.taint_present:
        left = obs.left_on_node
        if left is None:
            return f"waiting to look at what the release left on node {node}"
        if not left.empty:
            return f"waiting until the old pods of node {node} are gone and its volumes detached: {left.summary()} left"
        return None
    released = find_condition(status.conditions, WORKLOADS_RELEASED)
    if released is not None and released.status == "True" and released.reason == FENCED_STORAGE_RELEASED:
        stale = obs.stale_on_node
        if stale is None:
            return f"waiting to look at what the kubelet of node {node} still runs"
        if stale:
            return f"waiting until the kubelet of node {node} has stopped the pods released on the fenced storage: {len(stale)} still running"
    return None


def _write(status: NodeFenceStatus, cleanup: CleanupStatus, reason: str, message: str, now: float) -> Action:
    truthy: ConditionStatus = "False" if reason == CLEANUP_STEP_FAILED else "True"
    conds = set_condition(
        status.conditions, PROCESSING, truthy, reason, message[:MAX_MESSAGE], now, status.observed_generation
    )
    return act.write_status(
        {**replace(status, conditions=conds).to_dict(), "cleanup": cleanup.to_dict()}, reason
    )


def _run(
    name: str,
    part: CleanupPart,
    attempt: int,
    methods: tuple[FenceMethod, ...],
    config: FenceConfig,
    namespace: str | None,
) -> Action:
    step: Step = "PowerManagement" if part == "PowerOn" else "Recovery"
    return Action(
        kind="run_step",
        playbook=act.PLAYBOOKS["run_step"],
        step=step,
        ident=cleanup_ident(name, part, attempt),
        extravars={
            "node": config.node,
            "nodefence": name,
            "step": step,
            "attempt": attempt,
            "segment": 0,
            "level": 1,
            "fence_config": config.configmap,
            "namespace": namespace,
            "methods": [m.to_extravars() for m in methods],
            "release_workloads": False,
            "fenced_storage": [],
            "fence_max_age": act.FENCE_FRESH_SECONDS,
        },
        reason=f"Cleanup{part}",
    )


def decide_cleanup(
    name: str,
    status: NodeFenceStatus,
    cleanup: CleanupStatus,
    obs: CleanupObservations,
    config: FenceConfig | None,
    policy: NodeFencePolicy,
    namespace: str | None = None,
) -> Action:
    """The next action for deleted NodeFence ``name`` (pure; see the module docs).

    Returns ``remove_finalizer`` (``extravars.finalizer``; ``extravars.left``: what was left
    undone, in words, non-empty only with reason :data:`CLEANUP_TIMED_OUT`) once nothing is left
    to undo or ``policy.recovery_timeout_seconds`` have passed since ``obs.deleted_at``;
    ``write_status`` for progress (the NodeFence status with ``cleanup`` and a ``Processing``
    condition); ``run_step`` for an ``on`` run (ident :func:`cleanup_ident`);
    ``untaint_out_of_service``; ``wait``; ``none`` when the finalizer is already gone.
    """
    now = obs.now
    if not obs.has_finalizer:
        return act.nothing("FinalizerRemoved")
    plan = cleanup_plan(status, cleanup, config, obs.taint_present)
    part: CleanupPart | None = "PowerOn" if plan.power_on else "Unfence" if plan.unfence else None
    # the outcome of the run just finished
    if (
        part is not None
        and obs.result is not None
        and obs.result.ident == cleanup_ident(name, part, cleanup.attempts)
    ):
        methods = plan.power_on if part == "PowerOn" else plan.unfence
        names = " ".join(m.name for m in methods)
        if obs.result.ok:
            new = replace(cleanup, done=(*cleanup.done, part), attempts=0, not_before=None, waiting="")
            return _write(status, new, CLEANUP_STEP_SUCCEEDED, f"cleanup {part} succeeded ({names})", now)
        new = replace(cleanup, attempts=cleanup.attempts + 1, not_before=now + policy.retry_delay_seconds)
        message = f"cleanup {part} attempt {cleanup.attempts} failed ({names}): {obs.result.message}"
        return _write(status, new, CLEANUP_STEP_FAILED, message, now)
    if plan.empty:
        return Action(
            kind="remove_finalizer", extravars={"finalizer": FINALIZER, "left": []}, reason=CLEANUP_FINISHED
        )
    remaining = obs.deleted_at + policy.recovery_timeout_seconds - now
    if remaining <= 0:
        left = left_undone(plan, obs.node)
        if obs.config_error is not None and plan.history:
            left.append(
                f"the fence devices, not looked at: the fence configuration cannot be read ({obs.config_error})"
            )
        return Action(
            kind="remove_finalizer",
            extravars={"finalizer": FINALIZER, "left": left},
            reason=CLEANUP_TIMED_OUT,
        )
    if cleanup.not_before is not None and now < cleanup.not_before:
        return act.wait(min(cleanup.not_before - now, remaining), "CleanupRetryDelay")
    if obs.config_error is not None and plan.history:
        unreadable = f"the fence configuration cannot be read: {obs.config_error}"
        return _say(status, cleanup, unreadable, now, remaining)
    if part == "PowerOn" and config is not None:
        return _run(name, "PowerOn", cleanup.attempts, plan.power_on, config, namespace)
    why = _unsafe(status, obs)
    if why is not None:
        return _say(status, cleanup, why, now, remaining)
    if part == "Unfence" and config is not None:
        return _run(name, "Unfence", cleanup.attempts, plan.unfence, config, namespace)
    return act.untaint_out_of_service(obs.node)


def _say(status: NodeFenceStatus, cleanup: CleanupStatus, why: str, now: float, remaining: float) -> Action:
    """Say a wait once (``write_status``), then look again every few seconds."""
    why = why[:MAX_MESSAGE]
    if cleanup.waiting != why:
        return _write(status, replace(cleanup, waiting=why), CLEANUP_WAITING, why, now)
    return act.wait(min(RELEASE_RECHECK_SECONDS, remaining), CLEANUP_WAITING)


__all__ = [
    "CLEANUP_FINISHED",
    "CLEANUP_PARTS",
    "CLEANUP_STEP_FAILED",
    "CLEANUP_STEP_SUCCEEDED",
    "CLEANUP_TIMED_OUT",
    "CLEANUP_WAITING",
    "DEVICE_ACTIONS",
    "FINALIZER",
    "POWER_DEVICES",
    "CleanupObservations",
    "CleanupPart",
    "CleanupPlan",
    "CleanupStatus",
    "cleanup_ident",
    "cleanup_plan",
    "decide_cleanup",
    "fenced_methods",
    "left_undone",
    "needs_finalizer",
    "power_restored",
    "recovered",
]
