"""Metal3Remediation as a pure decision function, following cluster-api-provider-metal3's
``Metal3RemediationReconciler`` (controllers/metal3remediation_controller.go, Reboot strategy
with the out-of-service taint enabled), with the BMC driven by our playbooks instead of the
BareMetalHost power-off annotation.

Phases (``status.phase``, upstream constants)::

    ""                → Running (lastRemediated = now)
    Running           add finalizer; power the host off and read it back off; taint the node
                      out-of-service (only with that verified reading, invariant 1; when the
                      release rate limit holds, wait); wait until the taint has released the
                      node: its old pods gone and its VolumeAttachments detached → Waiting
    Waiting           power on; once the node is Ready remove the taint, then the finalizer
                      (done: CAPI deletes the CR when the Machine is healthy). When
                      lastRemediated + timeout passes: retry (Running, retryCount + 1,
                      lastRemediated = now) while retryCount < retryLimit, else set
                      ``OwnerRemediated=False`` on the Machine → Deleting machine
    Deleting machine  nothing (the Machine's owner deletes it)
    Failed            nothing; entered when the host cannot be powered: BareMetalHost
                      ``spec.online`` false (upstream), no BMC address/credentials, or the
                      executor reports the BMC refusing power changes.

Safe return (KEP-2268, non-graceful node shutdown: "make sure the taint is only removed after
detach is finished"; :mod:`noderemedy_runner.machines.release`): upstream waits for the node's pods
only before it powers the host on. A host powered on while a VolumeAttachment still names it comes
back to volumes the control plane is moving elsewhere, so the power-on also waits for the node's
VolumeAttachments to go (:class:`~noderemedy_runner.machines.release.LeftOnNode`), the same rule
as a NodeFence's Recovery. The release rate limit (``--max-pods-released-per-minute``) holds the
taint as it holds a NodeFence's.

Our runner acts only on objects opted in (:func:`opted_in`): an annotation or a configured
label selector, so it can share a cluster with CAPM3's own controller.

This module also holds the vocabulary both strategies share (spec, status, host, observations,
the power action); the seed's ``escalate`` strategy is :mod:`noderemedy_runner.machines.metal3_escalate`.
Label selectors and durations come from :mod:`noderemedy_runner.config.selectors`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from noderemedy_runner.config.selectors import (
    FieldError,
    LabelSelector,
    parse_duration,
)
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.machines.conditions import format_time, parse_time
from noderemedy_runner.machines.release import LeftOnNode, RateHold

PHASE_RUNNING = "Running"
PHASE_WAITING = "Waiting"
PHASE_DELETING = "Deleting machine"
PHASE_FAILED = "Failed"
#: CAPM3's phases (the Reboot strategy).
PHASES = ("", PHASE_RUNNING, PHASE_WAITING, PHASE_DELETING, PHASE_FAILED)
#: The escalate strategy's phases, in the seed's words (machine health checking: ``phase:
#: power-off``): the host is being powered off, it is being powered on and its node awaited, the
#: Machine was handed to its owner for deletion.
PHASE_POWER_OFF = "power-off"
PHASE_POWER_ON = "power-on"
PHASE_DELETING_MACHINE = "deleting-machine"
ESCALATE_PHASES = ("", PHASE_POWER_OFF, PHASE_POWER_ON, PHASE_DELETING_MACHINE, PHASE_FAILED)
ALL_PHASES = (*PHASES, PHASE_POWER_OFF, PHASE_POWER_ON, PHASE_DELETING_MACHINE)

REBOOT_STRATEGY = "Reboot"
#: The seed's strategy: power-cycle up to ``deleteAfterRetries`` times, then machine deletion.
ESCALATE_STRATEGY = "escalate"
STRATEGIES = (REBOOT_STRATEGY, ESCALATE_STRATEGY)
#: escalate's attempts when ``deleteAfterRetries`` is absent.
DEFAULT_DELETE_AFTER_RETRIES = 3
#: roles/metal3_reboot's ``metal3_reboot_power_timeout`` when no power timeout is given, seconds.
DEFAULT_POWER_TIMEOUT_SECONDS = 20.0
#: Our condition on a Metal3Remediation: False after a failed power attempt (reason
#: :data:`POWER_TIMED_OUT` or :data:`POWER_FAILED`, the message naming the BMC address and its
#: last reading), True once the host read back off.
POWER_VERIFIED = "PowerVerified"
POWER_TIMED_OUT = "PowerTimedOut"
POWER_FAILED = "PowerFailed"
NODE_NOT_READY = "NodeNotReady"
FINALIZER = "metal3remediation.infrastructure.cluster.x-k8s.io"
#: cluster-api v1beta1: MachineOwnerRemediatedCondition, WaitingForRemediationReason.
OWNER_REMEDIATED = "OwnerRemediated"
WAITING_FOR_REMEDIATION = "WaitingForRemediation"
#: Upstream's requeue delay while waiting for power or drain (controller's defaultTimeout), seconds.
POLL_SECONDS = 5.0
#: Wait reasons: the node's VolumeAttachments are not detached yet (the power-on waits); the
#: release rate limit holds the taint.
WAIT_FOR_DETACH = "WaitForDetach"
RELEASE_RATE_LIMITED = "ReleaseRateLimited"
#: Used when spec.strategy.timeout is absent, seconds (CAPM3 docs' example value).
DEFAULT_TIMEOUT_SECONDS = 300.0

#: Opt-in annotation: "true" hands the object to noderemedy-runner, "false" keeps it away even
#: when the configured selector matches.
OPT_IN_ANNOTATION = "remediation.noderemedy.io/runner"


class Metal3Error(ValueError):
    """A Metal3Remediation, BareMetalHost or selector we cannot act on; the message names the
    object (kind/namespace/name) and the field."""


def _int_field(value: Any, where: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise Metal3Error(f"{where}: {value!r} is not an integer >= {minimum}")
    return value


@dataclass(frozen=True)
class RemediationStrategy:
    """What a Metal3Remediation ``spec`` asks for.

    CAPM3's ``spec.strategy``: ``type`` (:data:`STRATEGIES`: CAPM3's ``Reboot``, the seed's
    ``escalate``), ``retry_limit`` (Reboot: extra attempts; 0 = none, as upstream's
    RetryLimitIsSet), ``timeout_seconds`` (``timeout``, a Go duration, in v1beta1;
    ``timeoutSeconds`` in v1beta2): how long an attempt may wait for the node to be Ready.

    The seed's template fields (machine health checking), beside ``strategy`` in ``spec``:
    ``delete_after_retries`` (``deleteAfterRetries``: escalate's power-cycle attempts before the
    Machine is handed to its owner for deletion), ``power_off_timeout_seconds`` /
    ``power_on_timeout_seconds`` (``powerOffTimeoutSeconds`` / ``powerOnTimeoutSeconds``: each
    power transition, read back at the BMC, must finish within them; None: the role's default,
    :data:`DEFAULT_POWER_TIMEOUT_SECONDS`).
    """

    type: str = REBOOT_STRATEGY
    retry_limit: int = 0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    delete_after_retries: int = DEFAULT_DELETE_AFTER_RETRIES
    power_off_timeout_seconds: float | None = None
    power_on_timeout_seconds: float | None = None

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, where: str) -> RemediationStrategy:
        """From a Metal3Remediation ``spec`` (v1beta1 or v1beta2 shape); ``where`` names the
        object for errors. Raises :class:`Metal3Error` naming the field on an unknown strategy
        type, a negative retryLimit, a bad timeout or timeoutSeconds, a deleteAfterRetries below
        1 or a power timeout below 1 second. Nothing is half-read: it returns or raises."""
        spec = spec or {}
        if not isinstance(spec, Mapping):
            raise Metal3Error(f"{where} spec: must be an object")
        strategy = spec.get("strategy") or {}
        if not isinstance(strategy, Mapping):
            raise Metal3Error(f"{where} spec.strategy: must be an object")
        kind = strategy.get("type") or REBOOT_STRATEGY
        if kind not in STRATEGIES:
            raise Metal3Error(f"{where} spec.strategy.type: {kind!r} is not one of {', '.join(STRATEGIES)}")
        limit = _int_field(strategy.get("retryLimit", 0) or 0, f"{where} spec.strategy.retryLimit", 0)
        timeout, timeout_s = strategy.get("timeout"), strategy.get("timeoutSeconds")
        seconds = DEFAULT_TIMEOUT_SECONDS
        try:
            if timeout not in (None, ""):
                seconds = parse_duration(timeout, f"{where} spec.strategy.timeout")
            elif timeout_s is not None:
                seconds = float(_int_field(timeout_s, f"{where} spec.strategy.timeoutSeconds", 1))
        except FieldError as exc:
            raise Metal3Error(str(exc)) from exc
        retries = _int_field(
            spec.get("deleteAfterRetries", DEFAULT_DELETE_AFTER_RETRIES),
            f"{where} spec.deleteAfterRetries",
            1,
        )
        power: list[float | None] = []
        for key in ("powerOffTimeoutSeconds", "powerOnTimeoutSeconds"):
            value = spec.get(key)
            power.append(None if value is None else float(_int_field(value, f"{where} spec.{key}", 1)))
        return cls(str(kind), limit, seconds, retries, power[0], power[1])

    def power_timeout(self, state: str) -> float | None:
        """The bound of a power transition to ``state`` (``off`` or ``on``) in seconds, or None
        (the role's default)."""
        return self.power_off_timeout_seconds if state == "off" else self.power_on_timeout_seconds


@dataclass(frozen=True)
class Metal3RemediationStatus:
    """``status`` as upstream: ``phase``, ``retry_count``, ``last_remediated`` (epoch seconds);
    ours: ``conditions`` (metav1.Condition dicts, e.g. :data:`POWER_VERIFIED` naming the BMC and
    its last reading after a failed power attempt)."""

    phase: str = ""
    retry_count: int = 0
    last_remediated: float | None = None
    conditions: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON for the status subresource (empty fields omitted, as upstream's omitempty)."""
        out: dict[str, Any] = {}
        if self.phase:
            out["phase"] = self.phase
        if self.retry_count:
            out["retryCount"] = self.retry_count
        if self.last_remediated is not None:
            out["lastRemediated"] = format_time(self.last_remediated)
        if self.conditions:
            out["conditions"] = [dict(c) for c in self.conditions]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Metal3RemediationStatus:
        """Parse ``.status``; ValueError on an unknown phase, malformed time or conditions."""
        data = data or {}
        phase = str(data.get("phase", ""))
        if phase not in ALL_PHASES:
            raise ValueError(f"status.phase {phase!r} not in {ALL_PHASES}")
        last = data.get("lastRemediated")
        conds = data.get("conditions") or []
        if not isinstance(conds, list) or not all(isinstance(c, Mapping) and c.get("type") for c in conds):
            raise ValueError("status.conditions: must be a list of conditions with a type")
        return cls(
            phase,
            int(data.get("retryCount", 0)),
            parse_time(last) if last else None,
            tuple(dict(c) for c in conds),
        )

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        """The condition of type ``type_``, or None."""
        return next((c for c in self.conditions if c.get("type") == type_), None)

    def with_condition(self, cond: Mapping[str, Any]) -> Metal3RemediationStatus:
        """A copy with ``cond`` set (replacing the condition of its type)."""
        rest = tuple(c for c in self.conditions if c.get("type") != cond.get("type"))
        return replace(self, conditions=(*rest, dict(cond)))


@dataclass(frozen=True)
class HostRef:
    """The BareMetalHost of the remediated Machine: ``spec.bmc.address`` (``ipmi://``,
    ``redfish://``, ``redfish+http://``, ``redfish+https://``; roles/metal3_reboot picks the
    module), ``spec.bmc.credentialsName`` (a Secret name, never its data), ``spec.online``,
    ``spec.bmc.disableCertificateVerification``."""

    name: str
    namespace: str
    bmc_address: str
    credentials_name: str
    online: bool
    disable_certificate_verification: bool = False

    @classmethod
    def from_object(cls, bmh: Mapping[str, Any]) -> HostRef:
        """From a BareMetalHost object (``metal3.io/v1alpha1``). Missing ``spec.bmc`` fields give
        empty strings (the host then cannot be powered: phase Failed); raises
        :class:`Metal3Error` when metadata.name is missing or a field has the wrong type."""
        meta = bmh.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise Metal3Error("BareMetalHost without metadata.name")
        where = f"BareMetalHost {meta.get('namespace', '')}/{name}"
        spec = bmh.get("spec") or {}
        bmc = spec.get("bmc") or {}
        address = bmc.get("address", "")
        creds = bmc.get("credentialsName", "")
        online = spec.get("online", False)
        insecure = bmc.get("disableCertificateVerification", False)
        if (
            not isinstance(address, str)
            or not isinstance(creds, str)
            or not isinstance(online, bool)
            or not isinstance(insecure, bool)
        ):
            raise Metal3Error(
                f"{where}: spec.bmc.address/credentialsName must be strings, spec.online and "
                "spec.bmc.disableCertificateVerification bools"
            )
        return cls(name, str(meta.get("namespace", "")), address, creds, online, insecure)

    @property
    def can_be_powered(self) -> bool:
        """Whether we have what the power playbook needs: a BMC address and a credentials Secret."""
        return bool(self.bmc_address and self.credentials_name)


@dataclass(frozen=True)
class PowerFailure:
    """A power run that did not read the wanted state back: ``state`` asked (``off``/``on``),
    ``attempt`` (the ``retryCount`` it ran under), ``error`` (the module's class: ``timeout``,
    ``verify``, ``unreachable``, ``auth``, ...; ``run`` when the playbook failed before the
    module answered), ``reading`` (the BMC's last read-back: ``on``/``off``, None when it never
    answered), ``message`` (the module's, never secret), ``seconds`` (how long the module tried),
    ``at`` (epoch seconds)."""

    state: str
    attempt: int
    error: str
    reading: str | None
    message: str
    seconds: float
    at: float

    @property
    def timed_out(self) -> bool:
        """Whether the BMC did not reach the state (or did not answer) within the bound."""
        return self.error in ("timeout", "verify", "unreachable")


@dataclass(frozen=True)
class Metal3Observations:
    """Fresh facts: ``now`` (seconds); ``node`` (Machine ``status.nodeRef.name`` or None);
    ``node_exists``/``node_ready``/``taint_present``; ``left_on_node``: what the taint has not yet
    released (old pods, VolumeAttachments naming the node; None: not looked at, which waits);
    ``release_hold``: the release rate limit holds the taint now;
    ``power``: the BMC's read-back as a :class:`FenceReading` (``fenced`` = read back off; None =
    not read this cycle); ``power_failed``: the executor could not power the host (after its own
    retries); ``power_failure``: the last power run of this process that failed
    (:class:`PowerFailure`; escalate counts it as a failed attempt); ``has_finalizer``;
    ``owner_remediated_false``: the Machine already has ``OwnerRemediated=False``."""

    now: float
    node: str | None
    node_exists: bool = True
    node_ready: bool = False
    taint_present: bool = False
    left_on_node: LeftOnNode | None = None
    release_hold: RateHold | None = None
    power: FenceReading | None = None
    power_failed: bool = False
    power_failure: PowerFailure | None = None
    has_finalizer: bool = False
    owner_remediated_false: bool = False


_READ_BACK_RE = re.compile(r"read back: (?:[\w.-]+=)?(on|off)\b")


def last_reading(state: str | None, message: str) -> str | None:
    """The BMC's last power reading after a failed power run: the module's ``power_state`` when
    it gave one, else the read-back its verify error names (plugins/module_utils/_fence.py:
    ``not verified off within power_timeout=5s ... (read back: chassis=on)``); None when the BMC
    never answered."""
    if state in ("on", "off"):
        return state
    found = _READ_BACK_RE.search(message or "")
    return found.group(1) if found else None


def strategy_type(spec: Any) -> str:
    """``spec.strategy.type`` of a Metal3Remediation ``spec`` (Reboot when absent or malformed;
    :meth:`RemediationStrategy.from_spec` is the validating reader)."""
    strategy = spec.get("strategy") if isinstance(spec, Mapping) else None
    kind = strategy.get("type") if isinstance(strategy, Mapping) else None
    return str(kind or REBOOT_STRATEGY)


def power_action(
    name: str, host: HostRef, state: str, node: str | None, retry_count: int, timeout: float | None = None
) -> Action:
    """``power`` via ``bmh_power.yml``: extravars name the host, its BMC address and the
    credentials Secret (``credentials_name``), never the credentials; ``power_timeout``: the
    seconds the module may take to read ``state`` back (``timeout``; omitted when None, the
    role's default :data:`DEFAULT_POWER_TIMEOUT_SECONDS`)."""
    extra: dict[str, Any] = {} if timeout is None else {"power_timeout": timeout}
    return Action(
        kind="power",
        playbook=act.PLAYBOOKS["power"],
        ident=f"{name}-retry{retry_count}-power-{state}",
        extravars={
            "host": host.name,
            "namespace": host.namespace,
            "bmc_address": host.bmc_address,
            "credentials_name": host.credentials_name,
            "disable_certificate_verification": host.disable_certificate_verification,
            "state": state,
            "node": node,
            **extra,
        },
        reason=f"Power{state.capitalize()}",
    )


def _write(s: Metal3RemediationStatus, reason: str) -> Action:
    return act.write_status(s.to_dict(), reason)


def owner_remediated_action(machine: str, namespace: str, reason: str, message: str | None = None) -> Action:
    """``set_owner_remediated``: ``OwnerRemediated=False`` (reason ``WaitingForRemediation``,
    severity Warning, ``message`` when given) on Machine ``namespace/machine``: cluster-api's
    external remediation contract's signal that the Machine's owner should delete it. ``reason``:
    the Event's."""
    condition: dict[str, Any] = {
        "type": OWNER_REMEDIATED,
        "status": "False",
        "reason": WAITING_FOR_REMEDIATION,
        "severity": "Warning",
    }
    if message is not None:
        condition["message"] = message
    return Action(
        kind="set_owner_remediated",
        extravars={"machine": machine, "namespace": namespace, "condition": condition},
        reason=reason,
    )


def power_off_step(
    name: str,
    namespace: str,
    host: HostRef,
    obs: Metal3Observations,
    attempt: int,
    timeout: float | None = None,
) -> Action | None:
    """The power-off phase's next action, shared by the strategies: our finalizer first, then
    power off (``timeout``: the seconds the BMC may take to read back, None = the role's default)
    until the power is read back off for this node, then the out-of-service taint (held by the
    release rate limit) and the wait until no pod or VolumeAttachment is left on the node. None
    when the power-off is done (verified, the node released): the caller moves to its next phase."""
    node = obs.node
    if not obs.has_finalizer:
        ref = {"name": name, "namespace": namespace, "finalizer": FINALIZER}
        return Action(kind="add_finalizer", extravars=ref, reason="AddFinalizer")
    power = obs.power
    verified = power is not None and power.fenced and (node is None or power.node == node)
    if not verified or power is None:
        return power_action(name, host, "off", node, attempt, timeout)
    if node is not None and obs.node_exists:
        if not obs.taint_present:
            if obs.release_hold is not None:
                return act.wait(min(POLL_SECONDS, obs.release_hold.retry_seconds), RELEASE_RATE_LIMITED)
            return act.taint_out_of_service(node, power)
        left = obs.left_on_node
        if left is None or left.pods:
            return act.wait(POLL_SECONDS, "WaitNodeDrained")
        if left.volume_attachments:
            return act.wait(POLL_SECONDS, WAIT_FOR_DETACH)
    return None


def power_on_step(
    name: str,
    namespace: str,
    host: HostRef,
    obs: Metal3Observations,
    attempt: int,
    began: float | None,
    timeout_seconds: float,
    power_timeout: float | None = None,
) -> Action | None:
    """The power-on phase's next action, shared by the strategies: power on (``power_timeout`` as
    in :func:`power_off_step`) until read back on, then, once the node is Ready, the taint removed
    and our finalizer let go; meanwhile wait for the node until ``timeout_seconds`` after ``began``
    (epoch seconds; None = now). None when that time has passed with the node not Ready: the
    caller retries or gives up, as its strategy says."""
    node, now = obs.node, obs.now
    if obs.power is None or obs.power.fenced:
        return power_action(name, host, "on", node, attempt, power_timeout)
    if node is not None and obs.node_exists and obs.node_ready:
        if obs.taint_present:
            return act.untaint_out_of_service(node)
        if obs.has_finalizer:
            ref = {"name": name, "namespace": namespace, "finalizer": FINALIZER}
            return Action(kind="remove_finalizer", extravars=ref, reason="RemediationDone")
        return act.nothing("RemediationDone")
    remaining = (began if began is not None else now) + timeout_seconds - now
    if remaining > 0:
        return act.wait(min(remaining, POLL_SECONDS), "WaitNodeReady")
    return None


def decide(
    name: str,
    namespace: str,
    machine: str,
    status: Metal3RemediationStatus,
    strategy: RemediationStrategy,
    host: HostRef,
    obs: Metal3Observations,
) -> Action:
    """The next action for Metal3Remediation ``namespace/name`` of Machine ``machine``
    (pure; see the module docs). Same inputs → same action; ``write_status`` precedes any
    action that depends on the new phase."""
    s = status
    now = obs.now

    if s.phase in (PHASE_DELETING, PHASE_FAILED):
        return act.nothing(s.phase.replace(" ", ""))
    if not host.online or not host.can_be_powered or obs.power_failed:
        return _write(replace(s, phase=PHASE_FAILED), "HostCannotBePowered")
    if strategy.type != REBOOT_STRATEGY:
        return act.nothing("UnsupportedStrategy")
    if s.phase == "":
        return _write(replace(s, phase=PHASE_RUNNING, last_remediated=now), "RemediationStarted")

    if s.phase == PHASE_RUNNING:
        step = power_off_step(name, namespace, host, obs, s.retry_count)
        return step if step is not None else _write(replace(s, phase=PHASE_WAITING), "PoweredOff")

    # Waiting
    step = power_on_step(
        name, namespace, host, obs, s.retry_count, s.last_remediated, strategy.timeout_seconds
    )
    if step is not None:
        return step
    if strategy.retry_limit > 0 and s.retry_count < strategy.retry_limit:
        return _write(
            replace(s, phase=PHASE_RUNNING, retry_count=s.retry_count + 1, last_remediated=now),
            "RetryRemediation",
        )
    if not obs.owner_remediated_false:
        return owner_remediated_action(machine, namespace, "RetryLimitReached")
    return _write(replace(s, phase=PHASE_DELETING), "RetryLimitReached")


def opted_in(metadata: Mapping[str, Any], selector: LabelSelector | None) -> bool:
    """Whether noderemedy-runner is the controller for the object with this ``metadata``.

    The annotation :data:`OPT_IN_ANNOTATION` decides when present (``"true"`` / ``"false"``,
    any case); otherwise the object is ours when ``selector`` (the runner's configured
    selector, None = none configured) matches its labels. Raises :class:`Metal3Error` naming
    the object on another annotation value.
    """
    annotations = metadata.get("annotations") or {}
    value = annotations.get(OPT_IN_ANNOTATION)
    if value is not None:
        low = str(value).strip().lower()
        if low in ("true", "false"):
            return low == "true"
        where = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        raise Metal3Error(f'{where}: annotation {OPT_IN_ANNOTATION}={value!r} must be "true" or "false"')
    if selector is None:
        return False
    return selector.matches(metadata.get("labels") or {})
