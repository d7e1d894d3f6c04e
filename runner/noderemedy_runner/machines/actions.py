"""The actions the state machines ask for, and the fence evidence that gates workload release.

An :class:`Action` is what a pure ``decide()`` returns and what an executor performs. Actions that
run a playbook carry its file name under ``playbooks/`` and extravars holding *references only*
(node, namespace, ConfigMap and Secret names, device addresses, plugs), never secret values
(DESIGN.md, safety invariant 5; the ansible-operator anti-pattern in STYLE.md).

Kinds (``Action.kind``):

=========================== ===================================================================
``write_status``            replace the CR's ``.status`` with ``status`` (a JSON dict): a PUT on
                            the status subresource with the object's resourceVersion (a merge
                            patch would keep fields the machine dropped, e.g. ``currentRun``);
                            always done before the next action starts (safety invariant 4)
``run_step``                NodeFence: run one fence step's methods (``fence_step.yml``)
``verify_fence``            NodeFence: read back, without changing anything, whether the node is
                            still fenced (``fence_verify.yml``)
``run_remedy``              NodeFence: run a pod remedy (a ``remedyConfigs`` podTemplate) as
                            the Job ``ident`` and wait for it to end
                            (:mod:`noderemedy_runner.machines.remedies`)
``taint_out_of_service``    add ``node.kubernetes.io/out-of-service:NoExecute`` (KEP-2268); only
                            constructible from a verified :class:`FenceReading` for that node
``untaint_out_of_service``  remove that taint
``power``                   Metal3Remediation: set a BareMetalHost's power through its BMC
                            (``bmh_power.yml``, ``state`` ``on``/``off``/``query``)
``add_finalizer`` /         Metal3Remediation: ``metal3remediation.infrastructure.cluster.x-k8s.io``
``remove_finalizer``        finalizer on the CR
``set_owner_remediated``    Metal3Remediation: set ``OwnerRemediated=False`` on the owner Machine
``wait``                    requeue after ``seconds`` (kopf's temporary error with a delay)
``none``                    nothing to do until something changes (a terminal or idle state)
=========================== ===================================================================

Every action is idempotent: performing it twice has the effect of performing it once, which is
what lets a restarted runner replay the decision from the persisted status (invariant 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from noderemedy_runner.vocabulary import STEPS as STEPS
from noderemedy_runner.vocabulary import Step as Step

ActionKind = Literal[
    "write_status",
    "run_step",
    "verify_fence",
    "run_remedy",
    "taint_out_of_service",
    "untaint_out_of_service",
    "power",
    "add_finalizer",
    "remove_finalizer",
    "set_owner_remediated",
    "wait",
    "none",
]


#: The out-of-service taint of KEP-2268 (GA in Kubernetes 1.28).
OUT_OF_SERVICE_TAINT_KEY = "node.kubernetes.io/out-of-service"
OUT_OF_SERVICE_TAINT_EFFECT = "NoExecute"
#: Seconds a verified fence licenses a release: the runner uses a reading it holds only while it is
#: this fresh (older: read the fence again), and passes the same window to ``node_taint`` as
#: ``fence_max_age`` with every release, so both refuse the same stale evidence.
FENCE_FRESH_SECONDS = 60

FenceKind = Literal["power_off", "storage_isolated", "network_isolated", "admin_confirmed"]
FENCE_KINDS: tuple[FenceKind, ...] = ("power_off", "storage_isolated", "network_isolated", "admin_confirmed")
#: The fence kinds that license the out-of-service taint: only a node that runs nothing any more
#: (its power read back off, or an admin confirmed it down) may have all its pods released. An
#: isolation of its storage or network leaves a partitioned node running its other pods; a storage
#: fence releases only the pods on the fenced storage (``node_taint``'s ``fenced_storage``).
TAINT_KINDS: tuple[FenceKind, ...] = ("power_off", "admin_confirmed")

#: Playbooks under ``playbooks/`` the executor maps actions to.
PLAYBOOKS: dict[str, str] = {
    "run_step": "fence_step.yml",
    "verify_fence": "fence_verify.yml",
    "taint_out_of_service": "out_of_service_taint.yml",
    "untaint_out_of_service": "out_of_service_taint.yml",
    "power": "bmh_power.yml",
}

#: Extravars keys whose names suggest a secret value: never allowed in an action.
_FORBIDDEN_EXTRAVAR_WORDS = (
    "password",
    "passwd",
    "community",
    "token",
    "secret_value",
    "auth_key",
    "priv_key",
)


class ActionError(ValueError):
    """An action that must not exist: a release without a verified fence, a secret in extravars."""


@dataclass(frozen=True)
class FenceReading:
    """What was read back from the fencing devices for ``node`` (not what was asked of them).

    ``fenced`` is True only when the read-back shows the fence holds: power read back off
    (``kind="power_off"``), or every storage/network port of the node read back down
    (``storage_isolated`` / ``network_isolated``) -- DESIGN.md "the one promise" -- or an admin
    checked the machine by hand and confirmed it down (``admin_confirmed``: Pacemaker's
    ``stonith_admin --confirm``; the admin's verified fence, recorded as such in an Event).
    ``source`` names what was read (a fence method, a BareMetalHost); ``observed_at`` is seconds
    since the epoch. Built by the executor from what a run's own evidence task chose
    (``roles/fence_step/tasks/evidence.yml``, by the rule of the filter
    ``plugins/filter/fence_evidence.py``, the one place it lives;
    :func:`noderemedy_runner.outcomes.fence_reading`), from a BareMetalHost's power read-back, or
    from an admin's confirmation.
    """

    node: str
    fenced: bool
    kind: FenceKind
    source: str
    observed_at: float

    def __post_init__(self) -> None:
        if self.kind not in FENCE_KINDS:
            raise ValueError(f"fence reading kind {self.kind!r} not in {FENCE_KINDS}")
        if not self.node:
            raise ValueError("fence reading without a node")

    def verifies(self, node: str) -> bool:
        """Whether this reading is a verified fence of ``node``."""
        return self.fenced and self.node == node

    def licenses_taint(self, node: str) -> bool:
        """Whether this reading licenses the out-of-service taint of ``node``: a verified fence of
        one of the :data:`TAINT_KINDS`."""
        return self.verifies(node) and self.kind in TAINT_KINDS


def _check_references_only(extravars: Mapping[str, Any], path: str = "extravars") -> None:
    for key, value in extravars.items():
        low = str(key).lower()
        if any(word in low for word in _FORBIDDEN_EXTRAVAR_WORDS):
            raise ActionError(f"{path}.{key}: extravars carry references only, never secret values")
        if isinstance(value, Mapping):
            _check_references_only(value, f"{path}.{key}")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    _check_references_only(item, f"{path}.{key}[{i}]")


@dataclass(frozen=True)
class Action:
    """One thing for the executor to do; build them with the constructors below.

    Fields: ``kind`` (see module docs), ``playbook`` (file under ``playbooks/`` or None),
    ``extravars`` (references only), ``step`` (NodeFence step for run_step/verify_fence),
    ``ident`` (ansible-runner ident: deterministic, so a replayed run reuses its artifacts),
    ``status`` (JSON dict for write_status), ``seconds`` (delay for wait), ``reason`` (CamelCase,
    why), ``fence`` (the verified reading that licenses a taint).

    Raises :class:`ActionError` for a ``taint_out_of_service`` without a reading that verifies
    the node's fence (safety invariant 1) and for extravars keys that look like secrets.
    """

    kind: ActionKind
    playbook: str | None = None
    extravars: Mapping[str, Any] = field(default_factory=dict)
    step: Step | None = None
    ident: str | None = None
    status: Mapping[str, Any] | None = None
    seconds: float = 0.0
    reason: str = ""
    fence: FenceReading | None = None

    def __post_init__(self) -> None:
        _check_references_only(self.extravars)
        if self.kind == "taint_out_of_service":
            node = self.extravars.get("node")
            if self.fence is None or not isinstance(node, str) or not self.fence.licenses_taint(node):
                raise ActionError(
                    f"out-of-service taint for node {node!r} without a verified power fence of that node "
                    f"(got {self.fence!r}; kinds {TAINT_KINDS}): safety invariant 1"
                )
        if self.kind == "write_status" and self.status is None:
            raise ActionError("write_status without a status")
        if self.kind == "wait" and self.seconds <= 0:
            raise ActionError(f"wait of {self.seconds} seconds: must be > 0")

    @property
    def releases_workloads(self) -> bool:
        """Whether performing this action releases the node's workloads (pods, volumes)."""
        return self.kind == "taint_out_of_service"


def write_status(status: Mapping[str, Any], reason: str) -> Action:
    """Patch the status subresource with ``status`` (the whole ``.status`` object)."""
    return Action(kind="write_status", status=status, reason=reason)


def wait(seconds: float, reason: str) -> Action:
    """Requeue after ``seconds`` (> 0)."""
    return Action(kind="wait", seconds=float(seconds), reason=reason)


def nothing(reason: str) -> Action:
    """Nothing to do until an observation changes."""
    return Action(kind="none", reason=reason)


def taint_out_of_service(node: str, fence: FenceReading) -> Action:
    """Release ``node``'s workloads with the out-of-service taint (KEP-2268).

    The only way to build this action; raises :class:`ActionError` unless ``fence`` is a
    verified fence of ``node`` of a kind that licenses the taint (:data:`TAINT_KINDS`; safety
    invariant 1).
    """
    return Action(
        kind="taint_out_of_service",
        playbook=PLAYBOOKS["taint_out_of_service"],
        extravars={
            "node": node,
            "state": "present",
            "fence_max_age": FENCE_FRESH_SECONDS,
            "fence_kind": fence.kind,
            "fence_source": fence.source,
        },
        fence=fence,
        reason="FenceVerified",
    )


def untaint_out_of_service(node: str) -> Action:
    """Remove the out-of-service taint from ``node`` (recovery)."""
    return Action(
        kind="untaint_out_of_service",
        playbook=PLAYBOOKS["untaint_out_of_service"],
        extravars={
            "node": node,
            "state": "absent",
        },
        reason="NodeRecovered",
    )
