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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.machines.conditions import format_time, parse_time
from noderemedy_runner.machines.release import LeftOnNode, RateHold

PHASE_RUNNING = "Running"
PHASE_WAITING = "Waiting"
PHASE_DELETING = "Deleting machine"
PHASE_FAILED = "Failed"
PHASES = ("", PHASE_RUNNING, PHASE_WAITING, PHASE_DELETING, PHASE_FAILED)

REBOOT_STRATEGY = "Reboot"
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

_DURATION_RE = re.compile(r"^(?:(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class Metal3Error(ValueError):
    """A Metal3Remediation, BareMetalHost or selector we cannot act on; the message names the
    object (kind/namespace/name) and the field."""


def parse_duration(value: str, where: str) -> float:
    """Seconds in a metav1.Duration string (Go ``time.ParseDuration``: ``300s``, ``5m0s``,
    ``1h30m``, ``0``). Negative durations are refused. Raises :class:`Metal3Error` naming ``where``."""
    text = value.strip() if isinstance(value, str) else value
    if text == "0":
        return 0.0
    if not isinstance(text, str) or not _DURATION_RE.match(text):
        raise Metal3Error(f"{where}: {value!r} is not a duration like 300s, 5m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART_RE.findall(text))


@dataclass(frozen=True)
class RemediationStrategy:
    """``spec.strategy``: ``type`` (only Reboot is acted on), ``retry_limit`` (extra attempts;
    0 = none, as upstream's RetryLimitIsSet), ``timeout_seconds`` between attempts."""

    type: str = REBOOT_STRATEGY
    retry_limit: int = 0
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, where: str) -> RemediationStrategy:
        """From a Metal3Remediation ``spec``; ``where`` names the object for errors.
        Raises :class:`Metal3Error` on a negative retryLimit or a bad timeout."""
        strategy = (spec or {}).get("strategy") or {}
        if not isinstance(strategy, Mapping):
            raise Metal3Error(f"{where} spec.strategy: must be an object")
        limit = strategy.get("retryLimit", 0) or 0
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise Metal3Error(f"{where} spec.strategy.retryLimit: {limit!r} is not an integer >= 0")
        timeout = strategy.get("timeout")
        seconds = (
            DEFAULT_TIMEOUT_SECONDS
            if timeout in (None, "")
            else parse_duration(timeout, f"{where} spec.strategy.timeout")
        )
        return cls(str(strategy.get("type") or REBOOT_STRATEGY), limit, seconds)


@dataclass(frozen=True)
class Metal3RemediationStatus:
    """``status`` as upstream: ``phase``, ``retry_count``, ``last_remediated`` (seconds)."""

    phase: str = ""
    retry_count: int = 0
    last_remediated: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON for the status subresource (empty fields omitted, as upstream's omitempty)."""
        out: dict[str, Any] = {}
        if self.phase:
            out["phase"] = self.phase
        if self.retry_count:
            out["retryCount"] = self.retry_count
        if self.last_remediated is not None:
            out["lastRemediated"] = format_time(self.last_remediated)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Metal3RemediationStatus:
        """Parse ``.status``; ValueError on an unknown phase or malformed time."""
        data = data or {}
        phase = str(data.get("phase", ""))
        if phase not in PHASES:
            raise ValueError(f"status.phase {phase!r} not in {PHASES}")
        last = data.get("lastRemediated")
        return cls(phase, int(data.get("retryCount", 0)), parse_time(last) if last else None)


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
class Metal3Observations:
    """Fresh facts: ``now`` (seconds); ``node`` (Machine ``status.nodeRef.name`` or None);
    ``node_exists``/``node_ready``/``taint_present``; ``left_on_node``: what the taint has not yet
    released (old pods, VolumeAttachments naming the node; None: not looked at, which waits);
    ``release_hold``: the release rate limit holds the taint now;
    ``power``: the BMC's read-back as a :class:`FenceReading` (``fenced`` = read back off; None =
    not read this cycle); ``power_failed``: the executor could not power the host (after its own
    retries); ``has_finalizer``; ``owner_remediated_false``: the Machine already has
    ``OwnerRemediated=False``."""

    now: float
    node: str | None
    node_exists: bool = True
    node_ready: bool = False
    taint_present: bool = False
    left_on_node: LeftOnNode | None = None
    release_hold: RateHold | None = None
    power: FenceReading | None = None
    power_failed: bool = False
    has_finalizer: bool = False
    owner_remediated_false: bool = False


def power_action(name: str, host: HostRef, state: str, node: str | None, retry_count: int) -> Action:
    """``power`` via ``bmh_power.yml``: extravars name the host, its BMC address and the
    credentials Secret (``credentials_name``), never the credentials."""
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
        },
        reason=f"Power{state.capitalize()}",
    )


def _write(s: Metal3RemediationStatus, reason: str) -> Action:
    return act.write_status(s.to_dict(), reason)


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
    node = obs.node
    ref = {"name": name, "namespace": namespace}

    if s.phase in (PHASE_DELETING, PHASE_FAILED):
        return act.nothing(s.phase.replace(" ", ""))
    if not host.online or not host.can_be_powered or obs.power_failed:
        return _write(replace(s, phase=PHASE_FAILED), "HostCannotBePowered")
    if strategy.type != REBOOT_STRATEGY:
        return act.nothing("UnsupportedStrategy")
    if s.phase == "":
        return _write(replace(s, phase=PHASE_RUNNING, last_remediated=now), "RemediationStarted")

    if s.phase == PHASE_RUNNING:
        if not obs.has_finalizer:
            return Action(
                kind="add_finalizer", extravars={**ref, "finalizer": FINALIZER}, reason="AddFinalizer"
            )
        power = obs.power
        verified = power is not None and power.fenced and (node is None or power.node == node)
        if not verified or power is None:
            return power_action(name, host, "off", node, s.retry_count)
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
        return _write(replace(s, phase=PHASE_WAITING), "PoweredOff")

    # Waiting
    if obs.power is None or obs.power.fenced:
        return power_action(name, host, "on", node, s.retry_count)
    if node is not None and obs.node_exists and obs.node_ready:
        if obs.taint_present:
            return act.untaint_out_of_service(node)
        if obs.has_finalizer:
            return Action(
                kind="remove_finalizer", extravars={**ref, "finalizer": FINALIZER}, reason="RemediationDone"
            )
        return act.nothing("RemediationDone")
    started = s.last_remediated if s.last_remediated is not None else now
    remaining = started + strategy.timeout_seconds - now
    if remaining > 0:
        return act.wait(min(remaining, POLL_SECONDS), "WaitNodeReady")
    if strategy.retry_limit > 0 and s.retry_count < strategy.retry_limit:
        return _write(
            replace(s, phase=PHASE_RUNNING, retry_count=s.retry_count + 1, last_remediated=now),
            "RetryRemediation",
        )
    if not obs.owner_remediated_false:
        return Action(
            kind="set_owner_remediated",
            extravars={
                "machine": machine,
                "namespace": namespace,
                "condition": {
                    "type": OWNER_REMEDIATED,
                    "status": "False",
                    "reason": WAITING_FOR_REMEDIATION,
                    "severity": "Warning",
                },
            },
            reason="RetryLimitReached",
        )
    return _write(replace(s, phase=PHASE_DELETING), "RetryLimitReached")


# --- opt-in predicate ------------------------------------------------------------------------


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions`` entry: ``key``, ``operator`` (In, NotIn, Exists, DoesNotExist), ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabelSelector:
    """A metav1.LabelSelector (``matchLabels`` and ``matchExpressions``, ANDed)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every term (apimachinery semantics; an empty selector
        matches everything)."""
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        for r in self.match_expressions:
            present = r.key in labels
            if r.operator == "In" and (not present or labels[r.key] not in r.values):
                return False
            if r.operator == "NotIn" and present and labels[r.key] in r.values:
                return False
            if r.operator == "Exists" and not present:
                return False
            if r.operator == "DoesNotExist" and present:
                return False
        return True


def parse_label_selector(data: Any, where: str) -> LabelSelector:
    """A :class:`LabelSelector` from its JSON form. ``where`` names the source for errors (e.g.
    ``"ConfigMap noderemedy-runner key metal3RemediationSelector"``). Raises
    :class:`Metal3Error` on unknown fields, non-string labels, unknown operators, values given
    with Exists/DoesNotExist or missing with In/NotIn."""
    if not isinstance(data, Mapping):
        raise Metal3Error(f"{where}: a label selector is an object, got {type(data).__name__}")
    unknown = sorted(set(map(str, data)) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise Metal3Error(f"{where}: unknown label selector fields {unknown}")
    labels = data.get("matchLabels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise Metal3Error(f"{where}: matchLabels must map strings to strings")
    reqs: list[Requirement] = []
    for i, expr in enumerate(data.get("matchExpressions") or []):
        at = f"{where}: matchExpressions[{i}]"
        if not isinstance(expr, Mapping) or not isinstance(expr.get("key"), str) or not expr.get("key"):
            raise Metal3Error(f"{at}: needs a string key")
        op = expr.get("operator")
        values = expr.get("values") or []
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise Metal3Error(f"{at}: operator {op!r} not one of In, NotIn, Exists, DoesNotExist")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise Metal3Error(f"{at}: values must be a list of strings")
        if op in ("In", "NotIn") and not values:
            raise Metal3Error(f"{at}: operator {op} needs values")
        if op in ("Exists", "DoesNotExist") and values:
            raise Metal3Error(f"{at}: operator {op} takes no values")
        reqs.append(Requirement(expr["key"], op, tuple(values)))
    return LabelSelector(tuple(sorted(labels.items())), tuple(reqs))


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
