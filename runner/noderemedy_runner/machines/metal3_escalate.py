"""The Metal3Remediation ``escalate`` strategy as a pure decision function: power-cycle the host
through its BMC up to ``deleteAfterRetries`` attempts, then hand the Machine to its owner for
deletion through cluster-api's external remediation contract.

Sources: the machine health checking design (cluster-api, docs/proposals/20191030-machine-health-
checking.md: "an escalation path from failed external remediation attempts to machine deletion";
the seed's template fields ``strategy: escalate``, ``deleteAfterRetries``,
``powerOnTimeoutSeconds``, ``powerOffTimeoutSeconds`` and its ``status.phase: power-off``,
``retryCount``), and cluster-api's contract for an external remediator: the owner (MachineSet,
KubeadmControlPlane) deletes a Machine whose ``OwnerRemediated`` condition is False
(util/collections ``IsUnhealthyAndOwnerRemediated``).

Phases (``status.phase``) and ``retryCount`` (the attempt under way, from 1)::

    ""                → power-off, retryCount 1, lastRemediated = now
    power-off         add finalizer; power the host off, bounded by powerOffTimeoutSeconds, and
                      read it back off; taint the node out-of-service (only with that verified
                      reading: invariant 1); wait until the taint has released the node (old
                      pods gone, VolumeAttachments detached) → power-on (PowerVerified=True)
    power-on          power the host on, bounded by powerOnTimeoutSeconds, read back on; once
                      the node is Ready remove the taint, then the finalizer (done; CAPI deletes
                      the object when the Machine is healthy)
    deleting-machine  set ``OwnerRemediated=False`` on the Machine (once), then remove the
                      finalizer (the Machine's deletion garbage-collects this object); nothing else
    Failed            the host cannot be powered at all (``spec.online`` false, no BMC address or
                      credentials Secret), as the Reboot strategy

A failed attempt is a power run that did not read the state back within its bound (a timeout,
a BMC that lies, a BMC that does not answer, refused credentials), or a node still not Ready
``timeout`` seconds after the attempt began. It writes ``PowerVerified=False`` (or
``NodeNotReady``) naming the BMC address and its last reading, then, while ``retryCount <
deleteAfterRetries``, the next attempt (power-off, ``retryCount + 1``, ``lastRemediated = now``);
else ``deleting-machine``. Each of these is a status write before the next action (invariant
4), so a restarted runner resumes at the same attempt.

The escalation path never taints: a host whose power was never read back off is not fenced, and
no workload is released (the one promise). A taint already placed by an earlier attempt's
verified power-off stays (it never releases more than that attempt licensed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.conditions import format_time
from noderemedy_runner.machines.metal3 import (
    DEFAULT_POWER_TIMEOUT_SECONDS,
    FINALIZER,
    NODE_NOT_READY,
    PHASE_DELETING_MACHINE,
    PHASE_FAILED,
    PHASE_POWER_OFF,
    PHASE_POWER_ON,
    POWER_FAILED,
    POWER_TIMED_OUT,
    POWER_VERIFIED,
    HostRef,
    Metal3Observations,
    Metal3RemediationStatus,
    PowerFailure,
    RemediationStrategy,
    owner_remediated_action,
    power_off_step,
    power_on_step,
)

#: The Machine's OwnerRemediated message when the attempts are exhausted.
ESCALATION_MESSAGE = "power-cycle attempts exhausted (deleteAfterRetries): the owner deletes the Machine"
#: Our condition after an attempt whose node stayed NotReady (False, reason ``NodeNotReady``).
NODE_READY = "NodeReady"
#: Reasons of the status writes (and of the Events the loop records with them).
ATTEMPT_FAILED = "RemediationAttemptFailed"
ESCALATED = "EscalatedToMachineDeletion"


def _condition(status: str, reason: str, message: str, now: float) -> dict[str, Any]:
    return {
        "type": POWER_VERIFIED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(now),
    }


def failure_message(f: PowerFailure, host: HostRef, strategy: RemediationStrategy, attempts: int) -> str:
    """The message of the condition and Event of failed power attempt ``f``: the attempt, the
    BMC address, what went wrong, the bound and the BMC's last reading, e.g. ``attempt 1 of 2:
    power off at BMC ipmi://127.0.0.1:623 timed out (timeout) after 5.1 s (powerOffTimeoutSeconds
    5); last reading: none (no answer): <module message>``."""
    bound = strategy.power_timeout(f.state)
    key = "powerOffTimeoutSeconds" if f.state == "off" else "powerOnTimeoutSeconds"
    limit = f"{key} {bound:g}" if bound is not None else f"default {DEFAULT_POWER_TIMEOUT_SECONDS:g} s"
    what = "timed out" if f.timed_out else "failed"
    reading = f.reading if f.reading else "none (no answer)"
    return (
        f"attempt {f.attempt} of {attempts}: power {f.state} at BMC {host.bmc_address} {what} ({f.error}) "
        f"after {f.seconds:.1f} s ({limit}); last reading: {reading}: {f.message}"
    )


def _failed_attempt(
    s: Metal3RemediationStatus, strategy: RemediationStrategy, cond: dict[str, Any], now: float
) -> Action:
    """Count the attempt under way as failed: the next attempt, or escalation when it was the last."""
    attempt = max(1, s.retry_count)
    s = s.with_condition(cond)
    if attempt < strategy.delete_after_retries:
        nxt = replace(s, phase=PHASE_POWER_OFF, retry_count=attempt + 1, last_remediated=now)
        return act.write_status(nxt.to_dict(), ATTEMPT_FAILED)
    return act.write_status(
        replace(s, phase=PHASE_DELETING_MACHINE, retry_count=attempt).to_dict(), ESCALATED
    )


def decide(
    name: str,
    namespace: str,
    machine: str,
    status: Metal3RemediationStatus,
    strategy: RemediationStrategy,
    host: HostRef,
    obs: Metal3Observations,
) -> Action:
    """The next action for Metal3Remediation ``namespace/name`` (strategy ``escalate``) of
    Machine ``machine`` (pure; see the module docs). Same inputs → same action; every change of
    phase or attempt is a ``write_status`` before the action that depends on it."""
    s = status
    now, node = obs.now, obs.node
    ref = {"name": name, "namespace": namespace}
    attempt = max(1, s.retry_count)

    if s.phase == PHASE_FAILED:
        return act.nothing(PHASE_FAILED)
    if s.phase == PHASE_DELETING_MACHINE:
        if not obs.owner_remediated_false:
            return owner_remediated_action(machine, namespace, ESCALATED, ESCALATION_MESSAGE)
        if obs.has_finalizer:  # the Machine's deletion garbage-collects this object: let it go
            return Action(
                kind="remove_finalizer", extravars={**ref, "finalizer": FINALIZER}, reason=ESCALATED
            )
        return act.nothing(ESCALATED)
    if not host.online or not host.can_be_powered:
        return act.write_status(replace(s, phase=PHASE_FAILED).to_dict(), "HostCannotBePowered")
    if s.phase == "":
        started = replace(s, phase=PHASE_POWER_OFF, retry_count=1, last_remediated=now)
        return act.write_status(started.to_dict(), "RemediationStarted")
    f = obs.power_failure
    wanted = "off" if s.phase == PHASE_POWER_OFF else "on"
    if f is not None and f.attempt == attempt and f.state == wanted:
        reason = POWER_TIMED_OUT if f.timed_out else POWER_FAILED
        message = failure_message(f, host, strategy, strategy.delete_after_retries)
        return _failed_attempt(s, strategy, _condition("False", reason, message, f.at), now)

    if s.phase == PHASE_POWER_OFF:
        step = power_off_step(name, namespace, host, obs, attempt, strategy.power_off_timeout_seconds)
        if step is not None:
            return step
        msg = f"attempt {attempt}: power read back off at BMC {host.bmc_address}"
        off = replace(s, phase=PHASE_POWER_ON).with_condition(_condition("True", "PoweredOff", msg, now))
        return act.write_status(off.to_dict(), "PoweredOff")

    # power-on
    step = power_on_step(
        name, namespace, host, obs, attempt, s.last_remediated, strategy.timeout_seconds,
        strategy.power_on_timeout_seconds,
    )  # fmt: skip
    if step is not None:
        return step
    message = (
        f"attempt {attempt} of {strategy.delete_after_retries}: node {node} not Ready "
        f"{strategy.timeout_seconds:g} s after the attempt began (power read back on at BMC {host.bmc_address})"
    )
    cond = {**_condition("False", NODE_NOT_READY, message, now), "type": NODE_READY}
    return _failed_attempt(s, strategy, cond, now)


__all__ = [
    "ATTEMPT_FAILED",
    "ESCALATED",
    "NODE_READY",
    "decide",
    "failure_message",
    "owner_remediated_action",
]
