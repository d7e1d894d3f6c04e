"""The NodeFence state machine (node remedy seed's automaton), as a pure decision function.

``decide(name, status, observations, config, policy) -> Action``: no I/O, no clock; the caller
passes ``now`` in the observations. The reconciler loops: observe → decide → perform the action
→ (for ``write_status``) persist the status → decide again. Everything needed to resume is in
the persisted :class:`NodeFenceStatus` (DESIGN.md invariant 4); a run's result that is lost in a
crash is recovered by replaying the same run (same ``ident``; every action is idempotent).

Automaton (DESIGN.md "NodeFence"; docs/state-machines.md has the diagram; the transitions are
:func:`~noderemedy_runner.machines.nodefence.transitions.decide`)::

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

The package: :mod:`~noderemedy_runner.machines.fencestatus` holds the status types and their
(de)serialization (shared with the remedy escalation), :mod:`.steps` the step, segment and level
vocabulary (run idents, segments, the step and read-back actions), :mod:`.vocabulary` the
condition types, reasons, annotations, the policy and the resting states, and
:mod:`.transitions` the transition function. The package re-exports the status types and the
vocabulary whole (their modules' ``__all__``), so a new name is listed in one place.
"""

from __future__ import annotations

from noderemedy_runner.machines import fencestatus
from noderemedy_runner.machines.fencestatus import *  # noqa: F403 (re-exported whole)
from noderemedy_runner.machines.nodefence import vocabulary
from noderemedy_runner.machines.nodefence.steps import (
    applied_fences,
    fenced_level,
    run_ident,
    run_step_action,
    step_segments,
    verify_fence_action,
)
from noderemedy_runner.machines.nodefence.transitions import HOLD_REASONS, decide
from noderemedy_runner.machines.nodefence.vocabulary import *  # noqa: F403 (re-exported whole)

__all__ = [
    "HOLD_REASONS",
    "applied_fences",
    "decide",
    "fenced_level",
    "run_ident",
    "run_step_action",
    "step_segments",
    "verify_fence_action",
]
__all__ += fencestatus.__all__
__all__ += vocabulary.__all__
