"""What the NodeFence reconciler does with the threshold a NodeFence records
(:mod:`noderemedy_runner.machines.threshold`) beyond judging the node: its condition reason, and
the storage release of a node that is unhealthy although Ready.

A threshold on another condition than Ready (``DiskPressure``, node-problem-detector's
``KernelDeadlock``...) makes a NodeFence for a node that is still Ready. Its storage fence (fc
ports read back down) stops everything the node reaches through those ports whether its kubelet
runs or not, so the pods on that storage may go: the run that verified the fence releases them
with ``node_taint``'s ``release_ready_node`` (extravar of the same name, passed by
``playbooks/fence_step.yml``). The out-of-service taint never comes of it: ``node_taint`` keeps
that for a NotReady node whose power fence was verified (KEP-2268; docs/concepts.md "What a
fence releases"). A NodeFence without a threshold, or with a Ready threshold, releases as before
(only a NotReady node).
"""

from __future__ import annotations

from dataclasses import replace

from noderemedy_runner.config.remedy import Threshold
from noderemedy_runner.machines.actions import Action

#: Processing=False reason of a NodeFence whose ``spec.threshold`` cannot be read.
THRESHOLD_INVALID = "ThresholdInvalid"
#: The extravar of ``playbooks/fence_step.yml`` that lets a storage-only fence release the pods on
#: the fenced storage of a Ready node.
RELEASE_READY_NODE = "release_ready_node"


def with_ready_node_release(action: Action, threshold: Threshold | None) -> Action:
    """``action`` (a ``run_step`` that releases workloads) with extravar
    :data:`RELEASE_READY_NODE` true when ``threshold`` is on a condition other than Ready; every
    other action as it is."""
    if (
        threshold is None
        or threshold.condition_type == "Ready"
        or action.kind != "run_step"
        or not action.extravars.get("release_workloads")
    ):
        return action
    return replace(action, extravars={**action.extravars, RELEASE_READY_NODE: True})


__all__ = ["RELEASE_READY_NODE", "THRESHOLD_INVALID", "with_ready_node_release"]
