"""The Metal3Remediation reconciler: observe (the remediation, its Machine, BareMetalHost and Node)
→ the pure :func:`noderemedy_runner.machines.metal3.decide` → act (power through the BMC,
out-of-service taint, finalizer, ``OwnerRemediated`` on the Machine). The one promise holds as for
NodeFence: the taint only with the evidence of the very power-off read-back (:meth:`InMemory.evidence_for`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from noderemedy_runner import logs
from noderemedy_runner.config.selectors import LabelSelector
from noderemedy_runner.executor import Executor
from noderemedy_runner.kube.errors import Conflict
from noderemedy_runner.kube.resources import (
    BAREMETALHOST,
    MACHINE,
    METAL3REMEDIATION,
    KubeIO,
    ready_condition,
)
from noderemedy_runner.loops.memory import (
    ERROR_REQUEUE_SECONDS,
    InMemory,
    Reconciler,
    meta_of,
    out_of_service_tainted,
)
from noderemedy_runner.loops.release import ReleaseLedger, observe_left
from noderemedy_runner.machines import metal3 as m3
from noderemedy_runner.machines import metal3_escalate as m3e
from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.observer import Observer

log = logging.getLogger(__name__)

#: Annotation (``namespace/name`` or ``name``) naming a Machine's / Metal3Remediation's BareMetalHost.
BMH_ANNOTATION = "metal3.io/BareMetalHost"
#: Consecutive failed power runs after which the host counts as not powerable (phase Failed).
POWER_FAILURE_LIMIT = 3
#: Module error classes meaning the BMC refuses power changes (no point retrying).
POWER_REFUSED = ("auth", "privilege")


class Metal3RemediationReconciler(Reconciler):
    """Drives opted-in Metal3Remediation objects through :func:`noderemedy_runner.machines.metal3.decide`.

    The BareMetalHost is found from the annotation ``metal3.io/BareMetalHost`` (``ns/name``) on
    the Machine or the Metal3Remediation, else the host named like the Machine's node. The Machine
    is the Metal3Remediation's owner (ownerReferences kind Machine), else the Machine with its name
    (CAPI names remediations after their Machine).

    ``releases``: the runner's release rate ledger, shared with the NodeFence reconciler so the
    limit counts both kinds of release (None: no limit).
    """

    kind = "Metal3Remediation"

    def __init__(
        self,
        kube: KubeIO,
        executor: Executor,
        *,
        selector: LabelSelector | None = None,
        observer: Observer | None = None,
        clock: Callable[[], float] = time.time,
        dry_run: bool = False,
        releases: ReleaseLedger | None = None,
    ) -> None:
        super().__init__(kube, executor, observer=observer, clock=clock, dry_run=dry_run)
        self.selector = selector
        self.releases = releases or ReleaseLedger(0)

    def _note_once(self, obj: Mapping[str, Any], held: InMemory, reason: str, message: str) -> None:
        """A Normal Event ``reason`` with ``message``, once per remediation (kept in ``held.notes``)."""
        if reason not in held.notes:
            held.notes.append(reason)
            self.kube.event(obj, "Normal", reason, message)

    def _find_host(
        self, obj: Mapping[str, Any], machine: Mapping[str, Any] | None, node: str | None
    ) -> dict[str, Any]:
        namespace = str(meta_of(obj).get("namespace"))
        for source in (machine, obj):
            if source is None:
                continue
            ref = (meta_of(source).get("annotations") or {}).get(BMH_ANNOTATION)
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
            f"Metal3Remediation {namespace}/{meta_of(obj).get('name')}: no BareMetalHost (annotation "
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
            meta = meta_of(obj)
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
            taint = out_of_service_tainted(node_obj)
            # safe return: what the taint has not yet released, looked at before the power-on
            left = (
                observe_left(self.kube, str(node), None)
                if node_obj is not None and taint and status.phase in (m3.PHASE_RUNNING, m3.PHASE_POWER_OFF)
                else None
            )
            # a Machine already gone (its owner deleted it) has nothing left to mark
            owner_false = machine is None and status.phase == m3.PHASE_DELETING_MACHINE
            if machine is not None:
                for c in (machine.get("status") or {}).get("conditions") or []:
                    if c.get("type") == m3.OWNER_REMEDIATED and c.get("status") == "False":
                        owner_false = True
            obs = m3.Metal3Observations(
                now=now,
                node=node,
                node_exists=node_obj is not None,
                node_ready=ready,
                taint_present=taint,
                left_on_node=left,
                power=held.fresh_reading(now),
                power_failed=held.power_refused or held.power_failures >= POWER_FAILURE_LIMIT,
                power_failure=held.power_failure,
                has_finalizer=m3.FINALIZER in (meta.get("finalizers") or []),
                owner_remediated_false=owner_false,
            )
            decide = m3e.decide if strategy.type == m3.ESCALATE_STRATEGY else m3.decide
            action = decide(name, namespace, machine_name, status, strategy, host, obs)
            if action.releases_workloads and not self.dry_run:  # the release rate limit
                hold = self.releases.hold(self.kube, str(node), now)
                if hold is not None:
                    obs = replace(obs, release_hold=hold)
                    action = decide(name, namespace, machine_name, status, strategy, host, obs)
                    self._note_once(obj, held, m3.RELEASE_RATE_LIMITED, hold.message)
            if action.reason in (m3.WAIT_FOR_DETACH, "WaitNodeDrained") and left is not None:
                self._note_once(
                    obj, held, action.reason, f"node {node}: the power-on waits until the out-of-service "
                    f"taint has released {left.summary()}",
                )  # fmt: skip
            if self.dry_run_stops(log, where, action):
                return None
            if action.kind == "wait":
                return action.seconds
            if action.kind == "none":
                if action.reason == "RemediationDone" and "done" not in held.notes:
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
        held: InMemory,
        host: m3.HostRef,
        node: str | None,
        cancel: threading.Event,
    ) -> bool:
        meta = meta_of(obj)
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        if action.kind == "write_status":
            assert action.status is not None
            self.kube.replace_status(METAL3REMEDIATION, obj, action.status)
            new = m3.Metal3RemediationStatus.from_dict(action.status)
            if old.phase == "" and new.phase == m3.PHASE_RUNNING:
                self.observer.remediation_started(self.kind, name, str(node))
            ends = (m3.PHASE_DELETING, m3.PHASE_FAILED, m3.PHASE_DELETING_MACHINE)
            if new.phase in ends and new.phase != old.phase:
                self.observer.remediation_finished(self.kind, name, str(node), new.phase)
            warn = new.phase in ends or action.reason == m3e.ATTEMPT_FAILED
            text = f"phase {old.phase or '-'} -> {new.phase}, retryCount {new.retry_count}"
            changed = [c for c in new.conditions if c not in old.conditions]
            if changed:
                text += "; " + "; ".join(
                    f"{c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
                    for c in changed
                )
            self.kube.event(obj, "Warning" if warn else "Normal", action.reason, text)
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
                action.reason,
                f"Machine {action.extravars['machine']}: OwnerRemediated=False (its owner deletes it)",
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
                # the power is unknown after a failed run: an earlier reading no longer holds
                held.reading, held.evidence = None, None
                held.power_failure = m3.PowerFailure(
                    state=state,
                    attempt=max(1, old.retry_count),
                    error=(res.error or "failed") if res is not None else "run",
                    reading=m3.last_reading(res.state, res.msg) if res is not None else None,
                    message=res.msg if res is not None else outcome.summary(),
                    seconds=res.seconds if res is not None and res.seconds is not None else outcome.seconds,
                    at=self.clock(),
                )
                self.kube.event(
                    obj, "Warning", "PowerFailed",
                    f"power {state} at BMC {host.bmc_address}: {outcome.summary()}",
                )  # fmt: skip
                # escalate counts it as a failed attempt at once; Reboot retries after a pause
                return m3.strategy_type(obj.get("spec")) == m3.ESCALATE_STRATEGY
            held.power_failures, held.power_refused, held.power_failure = 0, False, None
            off = res.fence.get("verified") is True
            held.reading = FenceReading(
                node or host.name, off, "power_off", f"BareMetalHost {namespace}/{host.name}", self.clock()
            )
            held.evidence = dict(res.fence) if off else None
            if off:
                self.observer.fence_verified(res.device_type, node or host.name, outcome.seconds)
            self.kube.event(
                obj,
                "Normal",
                "Power" + state.capitalize(),
                f"power {state} read back {res.state}: {outcome.summary()}",
            )
            return True
        if action.kind in ("taint_out_of_service", "untaint_out_of_service"):
            return self.run_taint(obj, str(node or ""), action, held, cancel)
        raise ValueError(f"Metal3Remediation {namespace}/{name}: unexpected action {action.kind}")


__all__ = ["BMH_ANNOTATION", "Metal3RemediationReconciler", "POWER_FAILURE_LIMIT", "POWER_REFUSED"]
