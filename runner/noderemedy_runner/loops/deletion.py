"""The I/O of a deleted NodeFence's cleanup: observe the node, ask the pure
:func:`~noderemedy_runner.machines.deletion.decide_cleanup`, perform its one action, record an Event.

The NodeFence reconciler (a :class:`NodeFenceCleanup`) turns to :meth:`NodeFenceCleanup.cleanup` as soon as its
``metadata.deletionTimestamp`` is set (the fencing flow then stops at once) and loops on it as on
the flow: observe → decide → act → decide again. The decisions, the order (power on; then, once
the node is Ready and its release finished, unfence storage and remove the out-of-service taint;
then remove the finalizer) and the timeout are in :mod:`noderemedy_runner.machines.deletion`;
docs/runner.md "Deleting a NodeFence" says the same for the admin.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.kube.errors import Conflict, KubeError, NotFound
from noderemedy_runner.kube.resources import NODEFENCE, ready_condition
from noderemedy_runner.loops.memory import (
    ERROR_REQUEUE_SECONDS,
    InMemory,
    Reconciler,
    meta_of,
    out_of_service_tainted,
    taint_event,
)
from noderemedy_runner.loops.release import observe_left, observe_stale
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.conditions import find_condition, parse_time
from noderemedy_runner.machines.deletion import (
    CLEANUP_STEP_FAILED,
    CLEANUP_TIMED_OUT,
    FINALIZER,
    CleanupObservations,
    CleanupStatus,
    decide_cleanup,
)
from noderemedy_runner.machines.nodefence import (
    FENCED_STORAGE_RELEASED,
    PROCESSING,
    WORKLOADS_RELEASED,
    NodeFencePolicy,
    NodeFenceStatus,
    StepResult,
)

log = logging.getLogger(__name__)

#: Warning Event reason when the runner may not add its finalizer (RBAC without ``patch``).
FINALIZER_FORBIDDEN = "FinalizerForbidden"
#: What :meth:`NodeFenceCleanup.cleanup` returns when the reconciler should read the object and
#: decide again at once (anything else is the reconcile's result: a delay in seconds, or None).
AGAIN = -1.0


def deleted_at(obj: Mapping[str, Any]) -> float | None:
    """``metadata.deletionTimestamp`` of ``obj`` in seconds since the epoch; None when it is not
    being deleted."""
    stamp = meta_of(obj).get("deletionTimestamp")
    return parse_time(stamp) if isinstance(stamp, str) and stamp else None


class NodeFenceCleanup(Reconciler):
    """Performs the cleanup of deleted NodeFences (:mod:`noderemedy_runner.machines.deletion`):
    the base of :class:`~noderemedy_runner.loops.nodefence.NodeFenceReconciler`, so the cleanup
    and the fencing flow share one set of seams (kube, executor, observer, clock, dry run) and
    one taint path (:meth:`~noderemedy_runner.loops.memory.Reconciler.run_taint`).

    Attributes the subclass sets: ``namespace``, where the fence ConfigMaps and credentials
    Secrets live; ``policy``, the NodeFence tunables (``recovery_timeout_seconds`` bounds the
    cleanup, ``retry_delay_seconds`` spaces its retries).
    """

    namespace: str
    policy: NodeFencePolicy

    def ensure_finalizer(
        self, obj: Mapping[str, Any], node: str, held: InMemory
    ) -> tuple[bool, dict[str, Any] | None]:
        """Put :data:`~noderemedy_runner.machines.deletion.FINALIZER` on NodeFence ``obj`` before
        its first action on a device or the node. Returns (decide again, the object as stored):
        (True, the patch's answer) when the finalizer was added, so the next decision needs no
        read; (True, None) on a 409 or a refusal just said (read it again); (False, None) when the
        action may go on (the finalizer is there, or RBAC forbids it: fencing, which keeps the
        promise, then goes on without it, and a deletion will not clean up -- one Warning Event
        :data:`FINALIZER_FORBIDDEN`). Other API errors propagate."""
        if FINALIZER in (meta_of(obj).get("finalizers") or []) or FINALIZER_FORBIDDEN in held.notes:
            return False, None
        try:
            stored = self.kube.patch_finalizers(NODEFENCE, obj, FINALIZER, True)
        except Conflict:
            return True, None
        except KubeError as exc:
            if exc.reason != "forbidden":
                raise
            held.notes.append(FINALIZER_FORBIDDEN)
            self.kube.event(
                obj, "Warning", FINALIZER_FORBIDDEN,
                f"the runner may not patch NodeFences ({exc}): fencing goes on without the finalizer "
                f"{FINALIZER}, so deleting this NodeFence will not clean node {node} up; apply deploy/rbac",
            )  # fmt: skip
            return True, None
        self.kube.event(obj, "Normal", "FinalizerAdded", f"{FINALIZER}: a deletion cleans node {node} up")
        return True, stored

    def cleanup(
        self, obj: dict[str, Any], config: FenceConfig | str, held: InMemory, cancel: threading.Event
    ) -> float | None:
        """One cleanup decision for NodeFence ``obj`` (being deleted) and its action. Returns
        :data:`AGAIN` to decide again at once, a delay (seconds) or None (nothing more: the
        finalizer is gone). ``config`` is the node's fence configuration, or why it could not be
        read. API errors propagate."""
        config_error = config if isinstance(config, str) else None
        fence_config = config if not isinstance(config, str) else None
        meta = meta_of(obj)
        name = str(meta.get("name"))
        node = str((obj.get("spec") or {}).get("node", ""))
        raw = obj.get("status") or {}
        now = self.clock()
        try:
            status = NodeFenceStatus.from_dict(raw)
            cleanup = CleanupStatus.from_dict(raw.get("cleanup"))
        except ValueError as exc:
            return self._cleanup_unreadable(obj, name, node, str(exc), now)
        node_obj = self.kube.get_node(node) if node else None
        ready = ready_condition(node_obj)[0] if node_obj is not None else False
        taint = out_of_service_tainted(node_obj)
        released = find_condition(status.conditions, WORKLOADS_RELEASED)
        storage_only = released is not None and released.reason == FENCED_STORAGE_RELEASED
        obs = CleanupObservations(
            node=node,
            now=now,
            deleted_at=deleted_at(obj) or now,
            has_finalizer=FINALIZER in (meta.get("finalizers") or []),
            node_exists=node_obj is not None,
            node_ready=ready,
            taint_present=taint,
            left_on_node=observe_left(self.kube, node, status.start_time) if taint and ready else None,
            stale_on_node=observe_stale(self.kube, node) if storage_only and ready and not taint else None,
            result=held.result,
            config_error=config_error,
        )
        action = decide_cleanup(name, status, cleanup, obs, fence_config, self.policy, self.namespace)
        if self.dry_run_stops(log, f"NodeFence {name} (deleted)", action):
            return None
        if action.kind == "wait":
            return action.seconds
        if action.kind == "none":
            return None
        if action.kind == "write_status":
            assert action.status is not None
            try:
                self.kube.replace_status(NODEFENCE, obj, action.status)
            except Conflict:
                return AGAIN
            cond = find_condition(NodeFenceStatus.from_dict(action.status).conditions, PROCESSING)
            type_ = "Warning" if action.reason == CLEANUP_STEP_FAILED else "Normal"
            self.kube.event(obj, type_, action.reason, cond.message if cond is not None else action.reason)
            return AGAIN
        if action.kind == "run_step":
            return self._cleanup_run(obj, name, action, held, cancel)
        if action.kind == "untaint_out_of_service":
            return (
                AGAIN if self.run_taint(obj, node, action, held, cancel) else self.policy.retry_delay_seconds
            )
        if action.kind == "remove_finalizer":
            return self._let_go(obj, name, node, action)
        raise ValueError(f"NodeFence {name}: unexpected cleanup action {action.kind}")

    def _cleanup_run(
        self, obj: dict[str, Any], name: str, action: Action, held: InMemory, cancel: threading.Event
    ) -> float | None:
        """Run one ``on`` run of the cleanup; its outcome goes to ``held.result`` for the next decision."""
        ident = str(action.ident)
        methods = " ".join(str(m.get("name")) for m in action.extravars.get("methods") or [])
        self.kube.event(obj, "Normal", action.reason, f"NodeFence deleted: running {methods} (run {ident})")
        outcome = self.executor.run(
            action,
            kind="NodeFence",
            name=name,
            uid=str(meta_of(obj).get("uid", "")),
            ident=ident,
            cancel=cancel,
        )
        self.observer.run_finished("NodeFence", name, str(action.playbook), outcome.status, outcome.seconds)
        if outcome.status == "canceled":
            return None
        held.result = StepResult(ident, outcome.succeeded, outcome.timed_out, outcome.summary())
        return AGAIN

    def _cleanup_unreadable(
        self, obj: dict[str, Any], name: str, node: str, problem: str, now: float
    ) -> float | None:
        """A status the cleanup cannot read tells nothing of what the flow did: nothing is undone;
        a Warning Event per look, and after the recovery timeout the finalizer goes anyway (a
        deletion is never blocked forever)."""
        left = (deleted_at(obj) or now) + self.policy.recovery_timeout_seconds - now
        if left > 0 or FINALIZER not in (meta_of(obj).get("finalizers") or []):
            if FINALIZER in (meta_of(obj).get("finalizers") or []):
                self.kube.event(
                    obj, "Warning", "InvalidStatus", f"status unreadable, nothing undone yet: {problem}"
                )
            return min(left, ERROR_REQUEUE_SECONDS) if left > 0 else None
        action = Action(
            kind="remove_finalizer",
            extravars={
                "left": [
                    f"whatever the flow did (status unreadable: {problem}): check its power, ports and taint"
                ]
            },
            reason=CLEANUP_TIMED_OUT,
        )
        return self._let_go(obj, name, node, action)

    def _let_go(self, obj: dict[str, Any], name: str, node: str, action: Action) -> float | None:
        """Say how the cleanup ended (when it gave up, a Warning Event on the NodeFence and on its
        Node naming what was left), then remove the finalizer: the Events are written first, so a
        NodeFence seen gone already has them, and a runner that dies in between leaves the
        finalizer for the next one rather than a cleanup nobody recorded. A 409 on the finalizer
        patch decides again (the Events may then be written twice)."""
        left = [str(item) for item in action.extravars.get("left") or []]
        if action.reason == CLEANUP_TIMED_OUT:
            message = (
                f"NodeFence {name} deleted: the cleanup gave up after {self.policy.recovery_timeout_seconds:.0f} s "
                f"and let it go; left on node {node}: {'; '.join(left)}"
            )
            taint_event(self.kube, obj, node, "Warning", action.reason, message)
        else:
            self.kube.event(
                obj, "Normal", action.reason, f"NodeFence deleted: node {node} left as before fencing"
            )
        try:
            self.kube.patch_finalizers(NODEFENCE, obj, FINALIZER, False)
        except Conflict:
            return AGAIN
        except NotFound:  # gone already: nothing left to let go of
            pass
        return None


__all__ = ["AGAIN", "FINALIZER_FORBIDDEN", "NodeFenceCleanup", "deleted_at"]
