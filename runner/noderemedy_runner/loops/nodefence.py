"""The reconcilers: observe → pure decide → act, for NodeFence and Metal3Remediation.

Each :meth:`reconcile` call loops: read the custom resource and what the machine needs (node,
fence ConfigMaps, BareMetalHost, Machine), build the observations, ask the pure ``decide``
(:mod:`noderemedy_runner.machines.nodefence`, :mod:`noderemedy_runner.machines.metal3`) for the one next action,
perform it, and decide again -- until the machine asks to wait (the delay is returned) or has
nothing to do (None). A ``write_status`` is a PUT with the resourceVersion; a 409 re-reads and
re-decides (DESIGN.md invariant 4). The reconcilers keep no state that matters for correctness:
in memory there are only the last run's result (lost on a crash: the machine replays the same
run ident, and the executor returns a finished run's outcome from its artifacts instead of
repeating it) and the last fence reading with the module evidence that proves it (lost on a
crash: the machine asks for ``verify_fence``).

The one promise (invariant 1): the out-of-service taint is added only by
``noderemedy.core.node_taint`` given a fencing module's own evidence of a verified fence, which it
checks together with the node being NotReady. Two paths get it there: a fence step run with
``release_workloads`` passes the evidence of the fence that very run read back
(``playbooks/fence_step.yml``); and a ``taint_out_of_service`` action, constructible only from a
verified :class:`~noderemedy_runner.machines.actions.FenceReading` of that node, runs with the evidence of
that reading only (:meth:`InMemory.evidence_for`). docs/runner.md "The one promise".

Events (medik8s style, message prefixed ``[remediation]``) are recorded for every state change,
every run's outcome (ok/changed/failed counts and failed task messages) and every taint change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from noderemedy_runner import logs
from noderemedy_runner.config.fence import (
    CloudDefaults,
    FenceConfig,
    FenceConfigError,
    cloud_default_config,
    config_map_name,
    parse_fence_config,
    required_templates,
)
from noderemedy_runner.executor import AFTER_RELEASE_PRIORITY, Executor
from noderemedy_runner.kube.errors import Conflict, KubeError
from noderemedy_runner.kube.resources import (
    NODEFENCE,
    KubeIO,
    ready_condition,
)
from noderemedy_runner.loops.adopt import needs_record, record_adopted_release
from noderemedy_runner.loops.deletion import AGAIN, NodeFenceCleanup, deleted_at
from noderemedy_runner.loops.interop import claim_start, release_medik8s_lease
from noderemedy_runner.loops.memory import (
    ERROR_REQUEUE_SECONDS,
    InMemory,
    created_at,
    meta_of,
    out_of_service_tainted,
    taint_event,
)
from noderemedy_runner.loops.release import ReleaseLedger, observe_left, observe_stale, record_release
from noderemedy_runner.loops.remedies import PodRemedies
from noderemedy_runner.loops.thresholds import THRESHOLD_INVALID, with_ready_node_release
from noderemedy_runner.machines.actions import (
    Action,
    FenceReading,
)
from noderemedy_runner.machines.conditions import find_condition, set_condition
from noderemedy_runner.machines.deletion import needs_finalizer
from noderemedy_runner.machines.nodefence import (
    CONFIRM_DOWN_ANNOTATION,
    CONFIRM_MISSING_NODE_ANNOTATION,
    FENCED_STORAGE_RELEASED,
    HOLD_REASONS,
    NODE_NOT_FOUND,
    RELEASE_RATE_LIMITED,
    STOP_ANNOTATION,
    WAITING_FOR_DETACH,
    WAITING_FOR_KUBELET,
    WORKLOADS_RELEASED,
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    StepResult,
    decide,
    is_terminal,
    new_level_outcomes,
    verify_fence_action,
)
from noderemedy_runner.machines.remedies import (
    CHAIN_ANNOTATION,
    REMEDIES_EXHAUSTED,
    REMEDY_ESCALATED,
    REMEDY_FAILED,
    REMEDY_STARTED,
    REMEDY_SUCCEEDED,
    ChainError,
    ChainRemedy,
    PodRemedyResult,
    parse_chain,
)
from noderemedy_runner.machines.threshold import ThresholdError, judge, threshold_from_spec
from noderemedy_runner.observer import Observer
from noderemedy_runner.outcomes import RunOutcome, fence_reading

log = logging.getLogger(__name__)

#: Condition reason when the fence configuration cannot be used.
FENCE_CONFIG_INVALID = "FenceConfigInvalid"
#: Condition reason when the remedy chain annotation cannot be read.
REMEDY_CHAIN_INVALID = "RemedyChainInvalid"
#: Condition reason when a remedy asks for an executor this runner does not have.
EXECUTOR_UNAVAILABLE = "ExecutorUnavailable"
#: Remedy escalation reasons recorded as an Event each (Warning: a remedy that failed).
REMEDY_EVENTS = {
    REMEDY_STARTED: "Normal",
    REMEDY_SUCCEEDED: "Normal",
    REMEDY_ESCALATED: "Normal",
    REMEDY_FAILED: "Warning",
}


def load_fence_config(
    kube: KubeIO, namespace: str, node: str, cloud: CloudDefaults | None = None
) -> FenceConfig:
    """Read and parse ``fence-config-<node>`` and its templates from ``namespace``.

    Without that ConfigMap and with ``cloud`` set, a node whose ``spec.providerID`` names a cloud
    provider gets the seed's default cloud configuration (:func:`~noderemedy_runner.config.fence.cloud_default_config`).
    Raises :class:`~noderemedy_runner.config.fence.FenceConfigError` naming the ConfigMap and key: a
    missing ``fence-config-<node>`` (and no default), a template it names that does not exist,
    anything the parser refuses."""
    name = config_map_name(node)
    data = kube.get_configmap_data(namespace, name)
    if data is None:
        if cloud is not None:
            node_obj = kube.get_node(node) or {}
            provider_id = str((node_obj.get("spec") or {}).get("providerID") or "")
            return cloud_default_config(node, provider_id, cloud)
        raise FenceConfigError(name, None, f"not found in namespace {namespace!r}")
    templates: dict[str, Any] = {}
    for tname in sorted(required_templates(name, data, node)):
        tdata = kube.get_configmap_data(namespace, tname)
        if tdata is not None:
            templates[tname] = tdata
    return parse_fence_config(name, data, templates, node)


class NodeFenceReconciler(NodeFenceCleanup):
    """Drives NodeFence objects (cluster-scoped) through :func:`noderemedy_runner.machines.nodefence.decide`.

    Args (besides :class:`~noderemedy_runner.loops.memory.Reconciler`'s):
        namespace: where the fence ConfigMaps and credentials Secrets live.
        policy: the machine's tunables (seconds).
        cloud: the seed's default fence configuration for cloud nodes without a ConfigMap.
        remedies: runs the pod remedies of remedy chains (:class:`~noderemedy_runner.loops.remedies.PodRemedies`);
            None: a chain with a pod remedy fails that remedy, saying so.
        executors: the fence flow's executors by name (``job``, ``inprocess``) for a remedy that
            names one (``remedyConfigs[].executor``); ``executor`` is the default.
    """

    kind = "NodeFence"

    def __init__(
        self,
        kube: KubeIO,
        executor: Executor,
        *,
        namespace: str,
        policy: NodeFencePolicy,
        cloud: CloudDefaults | None = None,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
        remedies: PodRemedies | None = None,
        executors: Mapping[str, Executor] | None = None,
    ) -> None:
        super().__init__(kube, executor, observer=observer, clock=clock, dry_run=dry_run)
        self.namespace = namespace
        self.policy = policy
        self.cloud = cloud
        self.remedies = remedies
        self.executors = dict(executors or {})
        self.releases = ReleaseLedger(policy.max_pods_released_per_minute)

    def _config_error(self, obj: dict[str, Any], reason: str, message: str) -> None:
        """Processing=False ``reason`` with ``message`` and a Warning Event, once (the same
        condition is not written again): the NodeFence cannot go on until an admin fixes it."""
        status = NodeFenceStatus.from_dict(obj.get("status"))
        message = message[:1024]
        cond = find_condition(status.conditions, "Processing")
        if cond is not None and cond.reason == reason and cond.message == message:
            return
        conds = set_condition(
            status.conditions, "Processing", "False", reason, message, self.clock(),
            status.observed_generation,
        )  # fmt: skip
        new = replace(status, conditions=conds).to_dict()
        try:
            self.kube.replace_status(NODEFENCE, obj, new)
        except Conflict:
            return
        self.kube.event(obj, "Warning", reason, message)

    def _flow_executor(self, chain: tuple[ChainRemedy, ...]) -> Executor | str:
        """The executor of the chain's fence flow (its remedy's ``executor``, else the default),
        or why it cannot run (a str naming the remedy)."""
        flow = next((r for r in chain if not r.pod), None)
        if flow is None or flow.executor is None:
            return self.executor
        found = self.executors.get(flow.executor)
        if found is None:
            return (
                f"remedy {flow.name}: executor {flow.executor} is not available in this runner "
                f"(has: {', '.join(sorted(self.executors)) or 'its default only'}); "
                "the job executor needs the runner in a pod"
            )
        return found

    def reconcile(
        self, name: str, cancel: threading.Event | None = None, max_actions: int = 100
    ) -> float | None:
        """Reconcile NodeFence ``name`` until the machine waits (returns the delay, seconds) or
        has nothing to do (None). Returns None at once when the object is gone or ``cancel``
        is set. Errors talking to the API propagate (the caller requeues). Every log line
        written meanwhile names the NodeFence and its node (:func:`logs.scope`)."""
        with logs.scope(resource=f"NodeFence/{name}"):
            return self._reconcile(name, cancel, max_actions)

    def _reconcile(self, name: str, cancel: threading.Event | None, max_actions: int) -> float | None:
        cancel = cancel or threading.Event()
        held = self.held(name)
        written: dict[str, Any] | None = None  # our own write's answer: no GET after it
        # the Node as read for the decision that wrote (status or finalizer): such a write changes no
        # Node, so the next decision takes that reading; any other action is followed by a read
        seen: tuple[str, dict[str, Any] | None] | None = None
        for _ in range(max_actions):
            if cancel.is_set():
                return None
            obj = written if written is not None else self.kube.get_custom(NODEFENCE, name)
            after_write, written = written is not None, None
            if obj is None:
                self.forget(name)
                return None
            meta = meta_of(obj)
            node = str((obj.get("spec") or {}).get("node", ""))
            logs.set_node(node)
            if deleted_at(obj) is not None:  # deleted: the flow stops, the cleanup takes over
                try:
                    found: FenceConfig | str = load_fence_config(self.kube, self.namespace, node, self.cloud)
                except FenceConfigError as err:
                    found = str(err)
                delay = self.cleanup(obj, found, held, cancel)
                if delay == AGAIN:
                    continue
                return delay
            try:
                status = NodeFenceStatus.from_dict(obj.get("status"))
            except ValueError as exc:
                self.kube.event(obj, "Warning", "InvalidStatus", f"status unreadable: {exc}")
                return ERROR_REQUEUE_SECONDS
            if _resting(status, self.policy) and status.observed_generation == int(
                meta.get("generation") or 0
            ):
                return None
            try:
                config = load_fence_config(self.kube, self.namespace, node, self.cloud)
                chain = parse_chain((meta.get("annotations") or {}).get(CHAIN_ANNOTATION))
                threshold = threshold_from_spec(obj.get("spec"))
            except FenceConfigError as err:
                self._config_error(obj, FENCE_CONFIG_INVALID, str(err))
                return ERROR_REQUEUE_SECONDS
            except ChainError as err:
                self._config_error(obj, REMEDY_CHAIN_INVALID, str(err))
                return ERROR_REQUEUE_SECONDS
            except ThresholdError as err:
                self._config_error(obj, THRESHOLD_INVALID, str(err))
                return ERROR_REQUEUE_SECONDS
            now = self.clock()
            node_obj = (
                seen[1] if after_write and seen is not None and seen[0] == node else self.kube.get_node(node)
            )
            seen = (node, node_obj)
            ready, since = ready_condition(node_obj) if node_obj is not None else (False, None)
            if not ready and since is None:
                since = created_at(obj, now)
            taint = out_of_service_tainted(node_obj)
            if needs_record(status, held, taint) and not _annotated(meta, CONFIRM_DOWN_ANNOTATION):
                if not self._record_adopted(  # a release whose runner died before recording it
                    obj, node, status, held, config, chain, cancel, now
                ):
                    return None
            # safe return: what the release left on the node, looked at before recovery may start
            left = (
                observe_left(self.kube, node, status.start_time)
                if taint
                and status.status == "Done"
                and status.current_run is None
                and (ready or status.step == "Recovery")  # when the machine asks for it
                else None
            )
            # safe return after a storage-only release: what the kubelet still runs of it, looked
            # at once the node is healthy (when the machine asks: Ready, and the threshold cleared)
            released = find_condition(status.conditions, WORKLOADS_RELEASED)
            health = judge(node_obj, threshold) if threshold is not None else None
            stale = (
                observe_stale(self.kube, node)
                if not taint
                and (ready if health is None else health.healthy)
                and status.status == "Done"
                and status.current_run is None
                and released is not None
                and released.reason == FENCED_STORAGE_RELEASED
                else None
            )
            obs = NodeFenceObservations(
                node=node,
                now=now,
                node_ready=ready,
                not_ready_since=None if ready else since,
                taint_present=taint,
                fence=held.fresh_reading(now),
                result=held.result,
                generation=int(meta.get("generation") or 0),
                node_exists=node_obj is not None,
                missing_node_confirmed=_annotated(meta, CONFIRM_MISSING_NODE_ANNOTATION),
                stop_requested=_annotated(meta, STOP_ANNOTATION),
                down_confirmed=_annotated(meta, CONFIRM_DOWN_ANNOTATION),
                left_on_node=left,
                stale_on_node=stale,
                remedy_result=held.remedy_result,
                healthy=health.healthy if health is not None else None,
                unhealthy_since=health.unhealthy_since if health is not None else None,
            )
            action = decide(name, status, obs, config, self.policy, self.namespace, chain)
            if not self.dry_run and (
                action.releases_workloads
                or (action.kind == "run_step" and action.extravars.get("release_workloads"))
            ):  # the release rate limit (docs/concepts.md): a held release waits, the fencing goes
                # on (and may decide to start a step: the guards below are asked then)
                rate_hold = self.releases.hold(self.kube, node, now)
                if rate_hold is not None:
                    obs = replace(obs, release_hold=rate_hold)
                    action = decide(name, status, obs, config, self.policy, self.namespace, chain)
            if action.reason in ("StartIsolation", "StartPowerManagement"):  # guards: docs/concepts.md
                holds = claim_start(  # and the medik8s node Lease, so others see us act
                    self.kube, obj, node_obj, now, self.policy.max_restarts, self.policy.max_power_fencing
                )
                if holds:
                    obs = replace(obs, start_holds=holds)
                    action = decide(name, status, obs, config, self.policy, self.namespace, chain)
            if self.dry_run_stops(log, f"NodeFence {name}", action):
                return None
            if needs_finalizer(action.kind):  # before the first action on a device or the node
                again, written = self.ensure_finalizer(obj, node, held)
                if again:  # decided again on the patch's answer (or read again)
                    continue
            if action.kind == "wait":
                return action.seconds
            if action.kind == "none":
                return None
            if action.kind == "write_status":
                written = self._write(obj, status, action)  # None: a 409, re-read, re-decide
                continue
            if action.kind == "run_remedy":
                result = (
                    self.remedies.run(obj, action, self.executor, cancel)
                    if self.remedies is not None
                    else PodRemedyResult(
                        str(action.ident),
                        False,
                        message="this runner has no Configurations with pod remedies",
                    )
                )
                if result is None:
                    return None  # canceled: the Job is adopted by the next reconcile
                held.remedy_result = result
                continue
            if action.kind in ("run_step", "verify_fence"):
                action = with_ready_node_release(action, threshold)
                executor = self._flow_executor(chain)
                if isinstance(executor, str):
                    self._config_error(obj, EXECUTOR_UNAVAILABLE, executor)
                    return ERROR_REQUEUE_SECONDS
                if not self._run_fence(obj, node, action, held, cancel, executor, released=taint):
                    return None if cancel.is_set() else ERROR_REQUEUE_SECONDS
                continue
            if action.kind in ("taint_out_of_service", "untaint_out_of_service"):
                if not self._taint(obj, node, action, held, cancel):
                    return ERROR_REQUEUE_SECONDS
                continue
            raise ValueError(f"NodeFence {name}: unexpected action {action.kind}")
        return 1.0

    # --- performing ----------------------------------------------------------------------------
    def _write(self, obj: dict[str, Any], old: NodeFenceStatus, action: Action) -> dict[str, Any] | None:
        """Write ``action``'s status on ``obj`` (its resourceVersion), then its Events, Lease and
        observer calls; the object as stored, or None on a 409 (nothing written: read it again)."""
        assert action.status is not None
        name = str(meta_of(obj).get("name"))
        try:
            stored = self.kube.replace_status(NODEFENCE, obj, action.status)
        except Conflict:
            log.info("NodeFence %s: status conflict, re-reading", name)
            return None
        new = NodeFenceStatus.from_dict(action.status)
        node = str((obj.get("spec") or {}).get("node", ""))
        if old.start_time is None and new.start_time is not None:
            self.observer.remediation_started(self.kind, name, node)
        if new.status != old.status or new.current_run != old.current_run:
            cond = find_condition(new.conditions, "Processing")
            detail = f": {cond.message}" if cond is not None and cond.message else ""
            type_ = "Warning" if new.status == "Error" else "Normal"
            moved = f"{old.status} -> {new.status}" if new.status != old.status else new.status
            run = f", run {new.current_run.ident}" if new.current_run is not None else ""
            self.kube.event(obj, type_, action.reason, f"{moved}, step {new.step}{run}{detail}")
        old_proc = find_condition(old.conditions, "Processing")
        if action.reason == RELEASE_RATE_LIMITED or (
            action.reason in (WAITING_FOR_DETACH, WAITING_FOR_KUBELET)
            and (old_proc is None or old_proc.reason != action.reason)
        ):  # a release that waits, or a return that waits for the release to finish: said once
            cond = find_condition(
                new.conditions, WORKLOADS_RELEASED if action.reason == RELEASE_RATE_LIMITED else "Processing"
            )
            taint_event(
                self.kube, obj, node, "Normal", action.reason, cond.message if cond else action.reason
            )
        if action.reason in REMEDY_EVENTS and new.status == old.status:  # the escalation, step by step
            cond = find_condition(new.conditions, "Processing")
            self.kube.event(
                obj, REMEDY_EVENTS[action.reason], action.reason, cond.message if cond else action.reason
            )
        if action.reason == NODE_NOT_FOUND:  # a refusal, like every other: a Warning beside it
            cond = find_condition(new.conditions, "Processing")
            self.kube.event(
                obj, "Warning", NODE_NOT_FOUND, cond.message if cond is not None else NODE_NOT_FOUND
            )
        if action.reason in HOLD_REASONS:  # a guard holds the start of a step: say why
            cond = find_condition(new.conditions, "Processing")
            self.kube.event(obj, "Normal", action.reason, cond.message if cond is not None else action.reason)
        for lv in new_level_outcomes(old, new):
            ok = lv.result == "Succeeded"
            self.kube.event(
                obj,
                "Normal" if ok else "Warning",
                "FenceLevelSucceeded" if ok else "FenceLevelFailed",
                f"{lv.step} level {lv.level} ({lv.methods}) {lv.result.lower()}"
                + ("" if ok else f": {lv.message}"),
            )
        if is_terminal(new, self.policy) and not is_terminal(old, self.policy):
            try:
                release_medik8s_lease(self.kube.api, node)
            except KubeError as exc:  # best effort: the Lease expires on its own
                log.warning("NodeFence %s: releasing the medik8s Lease: %s", name, exc)
            self.observer.remediation_finished(self.kind, name, node, new.status)
        elif action.reason == "RestartLimitReached":
            self.kube.event(
                obj, "Warning", "RestartLimitReached", f"{new.restarts} restarts used; staying Error"
            )
        return stored

    def _run_fence(
        self,
        obj: dict[str, Any],
        node: str,
        action: Action,
        held: InMemory,
        cancel: threading.Event,
        executor: Executor,
        released: bool = False,
    ) -> bool:
        """Run a ``run_step``/``verify_fence`` action and keep its result and reading in ``held``.
        False when the run was canceled (the runner is stopping, or the NodeFence went away): no
        result is kept, and the caller stops instead of asking for the same run again.
        ``released``: the node carries the out-of-service taint, so the run queues after those
        that lead to a release (:data:`~noderemedy_runner.executor.AFTER_RELEASE_PRIORITY`: free
        slots go lowest priority first, and such runs hold at most all but one, so when many nodes
        fail at once the runs StatefulSet pods wait on go first)."""
        name = str(meta_of(obj).get("name"))
        ident = action.ident or f"{name}-verify-{int(self.clock() * 1000)}"
        playbook = action.playbook or ""
        # verify_fence_action() carries no namespace; the playbook needs it to find the Secrets
        extra = {} if action.extravars.get("namespace") else {"namespace": self.namespace}
        outcome = executor.run(
            action,
            kind=self.kind,
            name=name,
            uid=str(meta_of(obj).get("uid", "")),
            ident=ident,
            extra_extravars=extra,
            cancel=cancel,
            # earlier tries of this NodeFence: a first fence runs before other fences' retries, and
            # every run before a release before those after one
            priority=NodeFenceStatus.from_dict(obj.get("status")).restarts
            + int(action.extravars.get("attempt") or 0)
            + (AFTER_RELEASE_PRIORITY if released else 0),
        )
        self.observer.run_finished(self.kind, name, playbook, outcome.status, outcome.seconds)
        if outcome.status == "canceled":
            return False
        now = self.clock()
        reading, evidence = fence_reading(node, outcome, now)
        if reading is not None and reading.fenced and evidence is not None:
            held.reading, held.evidence = reading, dict(evidence)
            method = str(evidence.get("method", "")) or reading.kind
            self.observer.fence_verified(method, node, outcome.seconds)
        if action.kind == "verify_fence":
            if reading is None or not reading.fenced:
                held.reading = reading or FenceReading(node, False, "power_off", "verify", now)
                held.evidence = None
            self._run_event(obj, action, outcome, "FenceVerify")
            return True
        storage = outcome.release if outcome.release is not None and outcome.release.fenced_storage else None
        held.result = StepResult(
            ident=ident,
            ok=outcome.succeeded,
            timed_out=outcome.timed_out,
            message=outcome.summary(),
            fence=reading,
            released_storage=storage.deleted_pods if storage is not None else None,
        )
        self._run_event(obj, action, outcome, str(action.step))
        recorded = record_release(
            self.kube, obj, node, outcome.release, reading.kind if reading else "fence", ident
        )
        if recorded is not None:
            held.release_recorded = recorded
        return True

    def _record_adopted(self, obj: dict[str, Any], node: str, status: NodeFenceStatus, held: InMemory,
                        config: FenceConfig, chain: tuple[ChainRemedy, ...], cancel: threading.Event,
                        now: float) -> bool:  # fmt: skip
        """Record a release whose runner died (:mod:`~noderemedy_runner.loops.adopt`); False when canceled."""
        executor = self._flow_executor(chain)
        action = verify_fence_action(str(meta_of(obj).get("name")), config, status)

        def verify() -> bool:
            return not isinstance(executor, str) and self._run_fence(
                obj, node, action, held, cancel, executor
            )

        return record_adopted_release(self.kube, obj, node, status, held, now, verify, cancel)

    def _run_event(self, obj: Mapping[str, Any], action: Action, outcome: RunOutcome, what: str) -> None:
        if outcome.succeeded:
            self.kube.event(obj, "Normal", "FenceAgentSucceeded", f"{what}: {outcome.summary()}")
        else:
            reason = "FenceAgentTimedOut" if outcome.timed_out else "FenceAgentFailed"
            self.kube.event(obj, "Warning", reason, f"{what}: {outcome.summary()}")

    def _taint(
        self, obj: dict[str, Any], node: str, action: Action, held: InMemory, cancel: threading.Event
    ) -> bool:
        fence = action.fence
        restarts = NodeFenceStatus.from_dict(obj.get("status")).restarts
        if action.kind != "taint_out_of_service" or fence is None or fence.kind != "admin_confirmed":
            return self.run_taint(obj, node, action, held, cancel, flow=restarts)
        # the admin's own verified fence (stonith_admin --confirm): recorded as such, first
        name = str(meta_of(obj).get("name"))
        taint_event(
            self.kube, obj, node, "Warning", "FenceConfirmedByAdmin",
            f"an admin confirmed node {node} is down ({CONFIRM_DOWN_ANNOTATION}=true on NodeFence {name}): "
            "its workloads are released on that confirmation, without a fence device",
        )  # fmt: skip
        evidence = {
            "verified": True,
            "method": "admin",
            "state": "confirmed-down",
            "target": f"annotation {CONFIRM_DOWN_ANNOTATION} on NodeFence {name}",
            "verified_at": fence.observed_at,
        }
        return self.run_taint(obj, node, action, held, cancel, fence_evidence=evidence, flow=restarts)


def _resting(status: NodeFenceStatus, policy: NodeFencePolicy) -> bool:
    """Terminal and fully written: Final, or Error at the restart limit with Succeeded=False
    (RestartLimitReached) already recorded (the machine writes it as its last act)."""
    if not is_terminal(status, policy):
        return False
    if status.status == "Final":
        return True
    cond = find_condition(status.conditions, "Succeeded")
    return cond is not None and cond.reason in ("RestartLimitReached", REMEDIES_EXHAUSTED)


def _annotated(meta: Mapping[str, Any], key: str) -> bool:
    """Whether annotation ``key`` is ``"true"`` (case and spaces ignored)."""
    return str((meta.get("annotations") or {}).get(key, "")).strip().lower() == "true"


__all__ = [
    "EXECUTOR_UNAVAILABLE",
    "FENCE_CONFIG_INVALID",
    "REMEDY_CHAIN_INVALID",
    "NodeFenceReconciler",
    "load_fence_config",
]
