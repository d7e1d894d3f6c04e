"""The reconcilers: observe → pure decide → act, for NodeFence and Metal3Remediation.

Each :meth:`reconcile` call loops: read the custom resource and what the machine needs (node,
fence ConfigMaps, BareMetalHost, Machine), build the observations, ask the pure ``decide``
(:mod:`noderemedy_runner.nodefence`, :mod:`noderemedy_runner.metal3`) for the one next action,
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
verified :class:`~noderemedy_runner.actions.FenceReading` of that node, runs with the evidence of
that reading only (:meth:`_Held.evidence_for`). docs/runner.md "The one promise".

Events (medik8s style, message prefixed ``[remediation]``) are recorded for every state change,
every run's outcome (ok/changed/failed counts and failed task messages) and every taint change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from noderemedy_runner import logs
from noderemedy_runner import metal3 as m3
from noderemedy_runner.actions import (
    OUT_OF_SERVICE_TAINT_EFFECT,
    OUT_OF_SERVICE_TAINT_KEY,
    Action,
    FenceReading,
)
from noderemedy_runner.conditions import find_condition, parse_time, set_condition
from noderemedy_runner.executor import Executor, RunOutcome, fence_reading
from noderemedy_runner.fencecfg import (
    FenceConfig,
    FenceConfigError,
    config_map_name,
    parse_fence_config,
    required_templates,
)
from noderemedy_runner.guards import Hold
from noderemedy_runner.interop import release_medik8s_lease, start_holds, take_medik8s_lease
from noderemedy_runner.kubeio import (
    BAREMETALHOST,
    MACHINE,
    METAL3REMEDIATION,
    NODEFENCE,
    Conflict,
    KubeIO,
    has_taint,
    ready_condition,
)
from noderemedy_runner.nodefence import (
    CONFIRM_DOWN_ANNOTATION,
    CONFIRM_MISSING_NODE_ANNOTATION,
    HOLD_REASONS,
    STOP_ANNOTATION,
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    StepResult,
    decide,
    is_terminal,
    new_level_outcomes,
)
from noderemedy_runner.observe import NullObserver, Observer

log = logging.getLogger(__name__)

#: Seconds a fence reading held in memory may license a taint; older → verify_fence again.
READING_FRESH_SECONDS = 60.0
#: Seconds before retrying after an error the machine cannot see (bad config, API error, failed taint run).
ERROR_REQUEUE_SECONDS = 10.0
#: Condition reason when the fence configuration cannot be used.
FENCE_CONFIG_INVALID = "FenceConfigInvalid"
#: Annotation (``namespace/name`` or ``name``) naming a Machine's / Metal3Remediation's BareMetalHost.
BMH_ANNOTATION = "metal3.io/BareMetalHost"
#: Consecutive failed power runs after which the host counts as not powerable (phase Failed).
POWER_FAILURE_LIMIT = 3
#: Module error classes meaning the BMC refuses power changes (no point retrying).
POWER_REFUSED = ("auth", "privilege")


@dataclass
class _Held:
    """In-memory, per custom resource: last step result, fence reading and its evidence."""

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


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _created(obj: Mapping[str, Any], default: float) -> float:
    stamp = _meta(obj).get("creationTimestamp")
    return parse_time(stamp) if isinstance(stamp, str) else default


def load_fence_config(kube: KubeIO, namespace: str, node: str) -> FenceConfig:
    """Read and parse ``fence-config-<node>`` and its templates from ``namespace``.

    Raises :class:`~noderemedy_runner.fencecfg.FenceConfigError` naming the ConfigMap and key: a
    missing ``fence-config-<node>``, a template it names that does not exist, anything the parser
    refuses."""
    name = config_map_name(node)
    data = kube.get_configmap_data(namespace, name)
    if data is None:
        raise FenceConfigError(name, None, f"not found in namespace {namespace!r}")
    templates: dict[str, Any] = {}
    for tname in sorted(required_templates(name, data, node)):
        tdata = kube.get_configmap_data(namespace, tname)
        if tdata is not None:
            templates[tname] = tdata
    return parse_fence_config(name, data, templates, node)


class NodeFenceReconciler:
    """Drives NodeFence objects (cluster-scoped) through :func:`noderemedy_runner.nodefence.decide`.

    Args:
        kube: API access.
        executor: runs the playbooks.
        namespace: where the fence ConfigMaps and credentials Secrets live.
        policy: the machine's tunables (seconds).
        observer: metrics/logging seam (never raises).
        clock: wall-clock seconds (injectable for tests).
        dry_run: decide and log, perform nothing.
    """

    kind = "NodeFence"

    def __init__(
        self,
        kube: KubeIO,
        executor: Executor,
        *,
        namespace: str,
        policy: NodeFencePolicy,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
    ) -> None:
        self.kube = kube
        self.executor = executor
        self.namespace = namespace
        self.policy = policy
        self.observer: Observer = observer or NullObserver()
        self.clock = clock
        self.dry_run = dry_run
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def held(self, name: str) -> _Held:
        """The in-memory state of NodeFence ``name`` (created on first use)."""
        with self._lock:
            return self._held.setdefault(name, _Held())

    def forget(self, name: str) -> None:
        """Drop the in-memory state of a deleted NodeFence."""
        with self._lock:
            self._held.pop(name, None)

    def _config_error(self, obj: dict[str, Any], err: FenceConfigError) -> None:
        status = NodeFenceStatus.from_dict(obj.get("status"))
        message = str(err)[:1024]
        cond = find_condition(status.conditions, "Processing")
        if cond is not None and cond.reason == FENCE_CONFIG_INVALID and cond.message == message:
            return
        conds = set_condition(
            status.conditions, "Processing", "False", FENCE_CONFIG_INVALID, message, self.clock(),
            status.observed_generation,
        )  # fmt: skip
        new = replace(status, conditions=conds).to_dict()
        try:
            self.kube.replace_status(NODEFENCE, obj, new)
        except Conflict:
            return
        self.kube.event(obj, "Warning", FENCE_CONFIG_INVALID, message)

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
        for _ in range(max_actions):
            if cancel.is_set():
                return None
            obj = self.kube.get_custom(NODEFENCE, name)
            if obj is None:
                self.forget(name)
                return None
            meta = _meta(obj)
            node = str((obj.get("spec") or {}).get("node", ""))
            logs.set_node(node)
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
                config = load_fence_config(self.kube, self.namespace, node)
            except FenceConfigError as err:
                self._config_error(obj, err)
                return ERROR_REQUEUE_SECONDS
            now = self.clock()
            node_obj = self.kube.get_node(node)
            ready, since = ready_condition(node_obj) if node_obj is not None else (False, None)
            if not ready and since is None:
                since = _created(obj, now)
            reading = held.reading
            if reading is not None and now - reading.observed_at > READING_FRESH_SECONDS:
                reading = None
            obs = NodeFenceObservations(
                node=node,
                now=now,
                node_ready=ready,
                not_ready_since=None if ready else since,
                taint_present=node_obj is not None
                and has_taint(node_obj, OUT_OF_SERVICE_TAINT_KEY, OUT_OF_SERVICE_TAINT_EFFECT),
                fence=reading,
                result=held.result,
                generation=int(meta.get("generation") or 0),
                node_exists=node_obj is not None,
                missing_node_confirmed=str(
                    (meta.get("annotations") or {}).get(CONFIRM_MISSING_NODE_ANNOTATION, "")
                )
                .strip()
                .lower()
                == "true",
                stop_requested=str((meta.get("annotations") or {}).get(STOP_ANNOTATION, "")).strip().lower()
                == "true",
                down_confirmed=str((meta.get("annotations") or {}).get(CONFIRM_DOWN_ANNOTATION, ""))
                .strip()
                .lower()
                == "true",
            )
            action = decide(name, status, obs, config, self.policy, self.namespace)
            if action.reason in ("StartIsolation", "StartPowerManagement"):  # guards: docs/concepts.md
                holds = start_holds(
                    self.kube.api, obj, node, now, self.policy.max_restarts, self.policy.max_power_fencing
                )
                if not holds and node_obj is not None:  # medik8s node Lease: others see us act
                    holder = take_medik8s_lease(self.kube.api, node_obj, now)
                    if holder is not None:
                        holds = {
                            step: Hold("LeaseHeld", f"the medik8s Lease of node {node} is held by {holder}")
                            for step in ("Isolation", "PowerManagement")
                        }
                if holds:
                    obs = replace(obs, start_holds=holds)
                    action = decide(name, status, obs, config, self.policy, self.namespace)
            log.debug("NodeFence %s: %s (%s)", name, action.kind, action.reason)
            if self.dry_run:
                log.info("dry run: NodeFence %s would %s (%s)", name, action.kind, action.reason)
                return None
            if action.kind == "wait":
                return action.seconds
            if action.kind == "none":
                return None
            if action.kind == "write_status":
                self._write(obj, status, action)  # on a 409 nothing was written: re-read, re-decide
                continue
            if action.kind in ("run_step", "verify_fence"):
                if not self._run_fence(obj, node, action, held, cancel):
                    return None if cancel.is_set() else ERROR_REQUEUE_SECONDS
                continue
            if action.kind in ("taint_out_of_service", "untaint_out_of_service"):
                if not self._taint(obj, node, action, held, cancel):
                    return ERROR_REQUEUE_SECONDS
                continue
            raise ValueError(f"NodeFence {name}: unexpected action {action.kind}")
        return 1.0

    # --- performing ----------------------------------------------------------------------------
    def _write(self, obj: dict[str, Any], old: NodeFenceStatus, action: Action) -> bool:
        assert action.status is not None
        name = str(_meta(obj).get("name"))
        try:
            self.kube.replace_status(NODEFENCE, obj, action.status)
        except Conflict:
            log.info("NodeFence %s: status conflict, re-reading", name)
            return False
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
            except Exception as exc:  # noqa: BLE001 - best effort: the Lease expires on its own
                log.warning("NodeFence %s: releasing the medik8s Lease: %s", name, exc)
            self.observer.remediation_finished(self.kind, name, node, new.status)
        elif action.reason == "RestartLimitReached":
            self.kube.event(
                obj, "Warning", "RestartLimitReached", f"{new.restarts} restarts used; staying Error"
            )
        return True

    def _run_fence(
        self, obj: dict[str, Any], node: str, action: Action, held: _Held, cancel: threading.Event
    ) -> bool:
        """Run a ``run_step``/``verify_fence`` action and keep its result and reading in ``held``.
        False when the run was canceled (the runner is stopping, or the NodeFence went away): no
        result is kept, and the caller stops instead of asking for the same run again."""
        name = str(_meta(obj).get("name"))
        ident = action.ident or f"{name}-verify-{int(self.clock() * 1000)}"
        playbook = action.playbook or ""
        # verify_fence_action() carries no namespace; the playbook needs it to find the Secrets
        extra = {} if action.extravars.get("namespace") else {"namespace": self.namespace}
        outcome = self.executor.run(
            action,
            kind=self.kind,
            name=name,
            uid=str(_meta(obj).get("uid", "")),
            ident=ident,
            extra_extravars=extra,
            cancel=cancel,
            # earlier tries of this NodeFence: a first fence runs before other fences' retries
            priority=NodeFenceStatus.from_dict(obj.get("status")).restarts
            + int(action.extravars.get("attempt") or 0),
        )
        self.observer.run_finished(self.kind, name, playbook, outcome.status, outcome.seconds)
        if outcome.status == "canceled":
            return False
        now = self.clock()
        methods = list(action.extravars.get("methods") or [])
        reading, evidence = fence_reading(node, methods, outcome, now)
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
        held.result = StepResult(
            ident=ident,
            ok=outcome.succeeded,
            timed_out=outcome.timed_out,
            message=outcome.summary(),
            fence=reading,
        )
        self._run_event(obj, action, outcome, str(action.step))
        release = outcome.release
        if release is not None and release.added:
            kind = reading.kind if reading is not None else "fence"
            taint_event(
                self.kube,
                obj,
                node,
                "Normal",
                "OutOfServiceTaintAdded",
                f"out-of-service taint added to node {node} ({kind} verified in run {ident})",
            )
        elif release is not None and release.message:
            taint_event(
                self.kube, obj, node, "Warning", "OutOfServiceTaintRefused", f"node {node}: {release.message}"
            )
        return True

    def _run_event(self, obj: Mapping[str, Any], action: Action, outcome: RunOutcome, what: str) -> None:
        if outcome.succeeded:
            self.kube.event(obj, "Normal", "FenceAgentSucceeded", f"{what}: {outcome.summary()}")
        else:
            reason = "FenceAgentTimedOut" if outcome.timed_out else "FenceAgentFailed"
            self.kube.event(obj, "Warning", reason, f"{what}: {outcome.summary()}")

    def _taint(
        self, obj: dict[str, Any], node: str, action: Action, held: _Held, cancel: threading.Event
    ) -> bool:
        name = str(_meta(obj).get("name"))
        extra: dict[str, Any] = {}
        if (
            action.kind == "taint_out_of_service"
            and action.fence is not None
            and action.fence.kind == "admin_confirmed"
        ):
            # the admin's own verified fence (stonith_admin --confirm): recorded as such, first
            extra["fence_evidence"] = {
                "verified": True,
                "method": "admin",
                "state": "confirmed-down",
                "target": f"annotation {CONFIRM_DOWN_ANNOTATION} on NodeFence {name}",
                "verified_at": action.fence.observed_at,
            }
            taint_event(
                self.kube, obj, node, "Warning", "FenceConfirmedByAdmin",
                f"an admin confirmed node {node} is down ({CONFIRM_DOWN_ANNOTATION}=true on NodeFence {name}): "
                "its workloads are released on that confirmation, without a fence device",
            )  # fmt: skip
        elif action.kind == "taint_out_of_service":
            evidence = held.evidence_for(action)
            if evidence is None:
                return False
            extra["fence_evidence"] = evidence
        verb = "add" if action.kind == "taint_out_of_service" else "remove"
        outcome = self.executor.run(
            action,
            kind=self.kind,
            name=name,
            uid=str(_meta(obj).get("uid", "")),
            ident=f"{name}-taint-{verb}-{int(self.clock() * 1000)}",
            extra_extravars=extra,
            cancel=cancel,
        )
        if outcome.succeeded:
            what = (
                f"out-of-service taint added to node {node} ({action.fence.kind if action.fence else ''} verified)"
                if verb == "add"
                else f"out-of-service taint removed from node {node}"
            )
            reason = "OutOfServiceTaintAdded" if verb == "add" else "OutOfServiceTaintRemoved"
            taint_event(self.kube, obj, node, "Normal", reason, what)
            return True
        if verb == "add":
            held.reading, held.evidence = None, None  # read the fence again before another try
        taint_event(
            self.kube,
            obj,
            node,
            "Warning",
            "OutOfServiceTaintFailed",
            f"{verb} taint on {node}: {outcome.summary()}",
        )
        return False


class Metal3RemediationReconciler:
    """Drives opted-in Metal3Remediation objects through :func:`noderemedy_runner.metal3.decide`.

    The BareMetalHost is found from the annotation ``metal3.io/BareMetalHost`` (``ns/name``) on
    the Machine or the Metal3Remediation, else the host named like the Machine's node. The Machine
    is the Metal3Remediation's owner (ownerReferences kind Machine), else the Machine with its name
    (CAPI names remediations after their Machine).
    """

    kind = "Metal3Remediation"

    def __init__(
        self,
        kube: KubeIO,
        executor: Executor,
        *,
        selector: m3.LabelSelector | None = None,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
    ) -> None:
        self.kube = kube
        self.executor = executor
        self.selector = selector
        self.observer: Observer = observer or NullObserver()
        self.clock = clock
        self.dry_run = dry_run
        self._held: dict[tuple[str, str], _Held] = {}
        self._lock = threading.Lock()

    def held(self, namespace: str, name: str) -> _Held:
        """In-memory state of one Metal3Remediation."""
        with self._lock:
            return self._held.setdefault((namespace, name), _Held())

    def forget(self, namespace: str, name: str) -> None:
        """Drop the in-memory state of a deleted Metal3Remediation."""
        with self._lock:
            self._held.pop((namespace, name), None)

    def _find_host(
        self, obj: Mapping[str, Any], machine: Mapping[str, Any] | None, node: str | None
    ) -> dict[str, Any]:
        namespace = str(_meta(obj).get("namespace"))
        for source in (machine, obj):
            if source is None:
                continue
            ref = (_meta(source).get("annotations") or {}).get(BMH_ANNOTATION)
            if ref:
                ns, _, hname = str(ref).rpartition("/")
                bmh = self.kube.get_custom(BAREMETALHOST, hname, ns or namespace)
                if bmh is None:
                    raise m3.Metal3Error(
                        f"BareMetalHost {ns or namespace}/{hname} (annotation {BMH_ANNOTATION}) not found"
                    )
                return bmh
        if node:
            bmh = self.kube.get_custom(BAREMETALHOST, node, namespace)
            if bmh is not None:
                return bmh
        raise m3.Metal3Error(
            f"Metal3Remediation {namespace}/{_meta(obj).get('name')}: no BareMetalHost (annotation "
            f"{BMH_ANNOTATION} on the Machine, or a host named like node {node!r})"
        )

    def reconcile(
        self, namespace: str, name: str, cancel: threading.Event | None = None, max_actions: int = 100
    ) -> float | None:
        """Reconcile Metal3Remediation ``namespace/name`` until it waits (delay in seconds) or
        has nothing to do (None). Every log line written meanwhile names the object and, once
        known, its node (:func:`logs.scope`)."""
        with logs.scope(resource=f"Metal3Remediation/{namespace}/{name}"):
            return self._reconcile(namespace, name, cancel, max_actions)

    def _reconcile(
        self, namespace: str, name: str, cancel: threading.Event | None, max_actions: int
    ) -> float | None:
        cancel = cancel or threading.Event()
        held = self.held(namespace, name)
        where = f"Metal3Remediation {namespace}/{name}"
        for _ in range(max_actions):
            if cancel.is_set():
                return None
            obj = self.kube.get_custom(METAL3REMEDIATION, name, namespace)
            if obj is None:
                self.forget(namespace, name)
                return None
            meta = _meta(obj)
            try:
                if not m3.opted_in(meta, self.selector):
                    return None
                status = m3.Metal3RemediationStatus.from_dict(obj.get("status"))
                strategy = m3.RemediationStrategy.from_spec(obj.get("spec"), where)
            except (ValueError, m3.Metal3Error) as exc:
                self.kube.event(obj, "Warning", "InvalidRemediation", str(exc))
                return None
            if status.phase in (m3.PHASE_DELETING, m3.PHASE_FAILED):
                return None
            owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "Machine"]
            machine_name = str(owners[0]["name"]) if owners else str(meta.get("name"))
            machine = self.kube.get_custom(MACHINE, machine_name, namespace)
            node = None
            if machine is not None:
                node = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
            logs.set_node(node)
            try:
                host = m3.HostRef.from_object(self._find_host(obj, machine, node))
            except m3.Metal3Error as exc:
                self.kube.event(obj, "Warning", "HostNotFound", str(exc))
                return ERROR_REQUEUE_SECONDS
            now = self.clock()
            node_obj = self.kube.get_node(node) if node else None
            ready = ready_condition(node_obj)[0] if node_obj is not None else False
            taint = node_obj is not None and has_taint(
                node_obj, OUT_OF_SERVICE_TAINT_KEY, OUT_OF_SERVICE_TAINT_EFFECT
            )
            drained = True
            if node_obj is not None and taint:
                drained = not [p for p in self.kube.pods_on_node(str(node)) if not _tolerates_oos(p)]
            owner_false = False
            if machine is not None:
                for c in (machine.get("status") or {}).get("conditions") or []:
                    if c.get("type") == m3.OWNER_REMEDIATED and c.get("status") == "False":
                        owner_false = True
            reading = held.reading
            if reading is not None and now - reading.observed_at > READING_FRESH_SECONDS:
                reading = None
            obs = m3.Metal3Observations(
                now=now,
                node=node,
                node_exists=node_obj is not None,
                node_ready=ready,
                taint_present=taint,
                node_drained=drained,
                power=reading,
                power_failed=held.power_refused or held.power_failures >= POWER_FAILURE_LIMIT,
                has_finalizer=m3.FINALIZER in (meta.get("finalizers") or []),
                owner_remediated_false=owner_false,
            )
            action = m3.decide(name, namespace, machine_name, status, strategy, host, obs)
            log.debug("%s: %s (%s)", where, action.kind, action.reason)
            if self.dry_run:
                log.info("dry run: %s would %s (%s)", where, action.kind, action.reason)
                return None
            if action.kind == "wait":
                return action.seconds
            if action.kind == "none":
                if action.reason == "RemediationDone" and not held.notes:
                    held.notes.append("done")
                    self.kube.event(
                        obj, "Normal", "RemediationDone", f"node {node} Ready again; finalizer removed"
                    )
                    self.observer.remediation_finished(self.kind, name, str(node), "done")
                return None
            try:
                ok = self._perform(obj, status, action, held, host, node, cancel)
            except Conflict:
                continue
            if not ok:
                return ERROR_REQUEUE_SECONDS
        return 1.0

    def _perform(
        self,
        obj: dict[str, Any],
        old: m3.Metal3RemediationStatus,
        action: Action,
        held: _Held,
        host: m3.HostRef,
        node: str | None,
        cancel: threading.Event,
    ) -> bool:
        meta = _meta(obj)
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        if action.kind == "write_status":
            assert action.status is not None
            self.kube.replace_status(METAL3REMEDIATION, obj, action.status)
            new = m3.Metal3RemediationStatus.from_dict(action.status)
            if old.phase == "" and new.phase == m3.PHASE_RUNNING:
                self.observer.remediation_started(self.kind, name, str(node))
            if new.phase in (m3.PHASE_DELETING, m3.PHASE_FAILED):
                self.observer.remediation_finished(self.kind, name, str(node), new.phase)
            type_ = "Warning" if new.phase in (m3.PHASE_DELETING, m3.PHASE_FAILED) else "Normal"
            self.kube.event(
                obj, type_, action.reason,
                f"phase {old.phase or '-'} -> {new.phase}, retryCount {new.retry_count}",
            )  # fmt: skip
            return True
        if action.kind in ("add_finalizer", "remove_finalizer"):
            self.kube.patch_finalizers(METAL3REMEDIATION, obj, m3.FINALIZER, action.kind == "add_finalizer")
            return True
        if action.kind == "set_owner_remediated":
            cond = dict(action.extravars["condition"])
            self.kube.set_machine_condition(namespace, str(action.extravars["machine"]), cond)
            self.kube.event(
                obj,
                "Warning",
                "RetryLimitReached",
                f"Machine {action.extravars['machine']}: OwnerRemediated=False",
            )
            return True
        if action.kind == "power":
            state = str(action.extravars.get("state"))
            outcome = self.executor.run(
                action,
                kind=self.kind,
                name=name,
                uid=str(meta.get("uid", "")),
                namespace=namespace,
                ident=f"{action.ident}-{int(self.clock() * 1000)}",
                cancel=cancel,
                priority=old.retry_count,  # a first remediation runs before other hosts' retries
            )
            self.observer.run_finished(self.kind, name, "bmh_power.yml", outcome.status, outcome.seconds)
            if outcome.status == "canceled":
                return False
            res = outcome.modules[-1] if outcome.modules else None
            if not outcome.succeeded or res is None:
                held.power_failures += 1
                held.power_refused = res is not None and res.error in POWER_REFUSED
                self.kube.event(obj, "Warning", "PowerFailed", f"power {state}: {outcome.summary()}")
                return False
            held.power_failures, held.power_refused = 0, False
            off = res.fence.get("verified") is True
            held.reading = FenceReading(
                node or host.name, off, "power_off", f"BareMetalHost {namespace}/{host.name}", self.clock()
            )
            held.evidence = dict(res.fence) if off else None
            if off:
                self.observer.fence_verified("ipmi", node or host.name, outcome.seconds)
            self.kube.event(
                obj,
                "Normal",
                "Power" + state.capitalize(),
                f"power {state} read back {res.state}: {outcome.summary()}",
            )
            return True
        if action.kind in ("taint_out_of_service", "untaint_out_of_service"):
            extra: dict[str, Any] = {}
            if action.kind == "taint_out_of_service":
                evidence = held.evidence_for(action)
                if evidence is None:
                    return False
                extra["fence_evidence"] = evidence
            verb = "add" if action.kind == "taint_out_of_service" else "remove"
            outcome = self.executor.run(
                action,
                kind=self.kind,
                name=name,
                uid=str(meta.get("uid", "")),
                namespace=namespace,
                ident=f"{name}-taint-{verb}-{int(self.clock() * 1000)}",
                extra_extravars=extra,
                cancel=cancel,
            )
            if not outcome.succeeded:
                if verb == "add":
                    held.reading, held.evidence = None, None
                taint_event(
                    self.kube,
                    obj,
                    str(node or ""),
                    "Warning",
                    "OutOfServiceTaintFailed",
                    f"{verb}: {outcome.summary()}",
                )
                return False
            reason = "OutOfServiceTaint" + ("Added" if verb == "add" else "Removed")
            taint_event(self.kube, obj, str(node or ""), "Normal", reason, f"node {node}")
            return True
        raise ValueError(f"Metal3Remediation {namespace}/{name}: unexpected action {action.kind}")


def taint_event(
    kube: KubeIO, obj: Mapping[str, Any], node: str, type_: str, reason: str, message: str
) -> None:
    """Record an out-of-service taint Event (added, removed, refused, failed) on the custom
    resource ``obj`` and on Node ``node`` too (issue 7: Events on the Node for each transition and
    refusal), so ``kubectl describe node`` shows why its pods went away. Best effort, as
    :meth:`KubeIO.event`."""
    kube.event(obj, type_, reason, message)
    node_obj = kube.get_node(node) if node else None
    if node_obj is not None:
        kube.event({**node_obj, "apiVersion": "v1", "kind": "Node"}, type_, reason, message)


def _resting(status: NodeFenceStatus, policy: NodeFencePolicy) -> bool:
    """Terminal and fully written: Final, or Error at the restart limit with Succeeded=False
    (RestartLimitReached) already recorded (the machine writes it as its last act)."""
    if not is_terminal(status, policy):
        return False
    if status.status == "Final":
        return True
    cond = find_condition(status.conditions, "Succeeded")
    return cond is not None and cond.reason == "RestartLimitReached"


def _tolerates_oos(pod: Mapping[str, Any]) -> bool:
    """Whether a pod stays despite the out-of-service taint (tolerates it, or already finished)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return True
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("operator") == "Exists" and not t.get("key"):
            return True
        if t.get("key") == OUT_OF_SERVICE_TAINT_KEY:
            return True
    return False


__all__ = [
    "ERROR_REQUEUE_SECONDS",
    "FENCE_CONFIG_INVALID",
    "Metal3RemediationReconciler",
    "NodeFenceReconciler",
    "load_fence_config",
]
