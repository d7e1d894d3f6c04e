"""What one ansible-runner run did, read from its job events: :class:`RunOutcome`.

A run's outcome carries ansible's per-host counts (ok/changed/failed), the messages of failed
tasks, the results of the fencing module tasks in the order they ran (:class:`ModuleResult`, the
``fence`` evidence of ``noderemedy.core.ipmi_power``/``pdu_outlet``/``fc_port``), what the fence
step's release task did (:class:`Release`) and the fence evidence the run itself chose
(:class:`StepEvidence`: the result of the fence step role's evidence task,
``roles/fence_step/tasks/evidence.yml``, which applies the rule "which read-back is a verified
fence" from the one place it lives, the filter ``plugins/filter/fence_evidence.py``), which :func:`fence_reading` turns into the
:class:`~noderemedy_runner.machines.actions.FenceReading` the machines reason about.

Everything here is pure parsing of job events (:func:`outcome_from_events`): the same on a live
run (:class:`~noderemedy_runner.executor.Executor`), on one host of a batch
(:mod:`noderemedy_runner.batches`) and on the artifacts of a run that finished before a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from noderemedy_runner.machines.actions import FENCE_KINDS, FenceKind, FenceReading

log = logging.getLogger(__name__)

#: Fencing modules whose results are collected (FQCN → device type).
FENCE_MODULES: dict[str, str] = {
    "noderemedy.core.ipmi_power": "ipmi",
    "noderemedy.core.redfish_power": "redfish",
    "noderemedy.core.aws_instance_power": "aws",
    "noderemedy.core.vmware_vm_power": "vmware",
    "noderemedy.core.kdump_wait": "kdump",
    "noderemedy.core.pdu_outlet": "pdu",
    "noderemedy.core.fc_port": "fc",
}
#: The module fence_step.yml releases workloads with (``release_workloads``: the out-of-service taint).
RELEASE_MODULE = "noderemedy.core.node_taint"
#: The module fence_step.yml's first play releases the hosts of a shared device call with, in one
#: call: its result has one entry per node (``nodes``), which the batches hand to each node's host
#: as that host's own release result (:mod:`noderemedy_runner.shared_results`).
SHARED_RELEASE_MODULE = "noderemedy.core.node_release"
#: The fact the fence step role's evidence task sets (``roles/fence_step/tasks/evidence.yml``):
#: ``{"fenced": bool, "kind": "power_off" | "storage_isolated", "source": method names}``, or {}.
READING_FACT = "fence_step_reading"
#: The fact holding the fencing module's own ``fence`` result that proves a fenced reading ({} unless fenced).
EVIDENCE_FACT = "fence_step_evidence"
#: ansible-runner's final statuses.
FINAL_STATUSES = ("successful", "failed", "timeout", "canceled", "error")
#: Longest failed-task message kept (characters).
MAX_TASK_MESSAGE = 400


@dataclass(frozen=True)
class ModuleResult:
    """One fencing module task's result: ``module`` (FQCN), ``device_type`` (ipmi/pdu/fc),
    ``ok`` (not failed), ``state`` (the module's read-back: ``on``/``off`` or ``enabled``/
    ``disabled``; None when unknown), ``fence`` (the module's evidence dict: ``verified``,
    ``method``, ``target``, ``plugs``, ``state``, ``verified_at`` in epoch seconds), ``msg``,
    ``error`` (the module's error class on failure: auth, privilege, unreachable, rejected, ...),
    ``seconds`` (the task's own duration as ansible-runner timed it; None when not reported)."""

    module: str
    device_type: str
    ok: bool
    state: str | None
    fence: Mapping[str, Any]
    msg: str = ""
    error: str = ""
    seconds: float | None = None


@dataclass(frozen=True)
class StepEvidence:
    """What a fence step run read back, as its own evidence task chose it
    (``roles/fence_step/tasks/evidence.yml``, facts :data:`READING_FACT` and :data:`EVIDENCE_FACT`).

    ``fenced``: the read-back shows the fence holding; ``kind``: ``power_off`` (a power device
    asked off read back off) or ``storage_isolated`` (the step's fc ports asked off: all of them
    read back disabled, else ``fenced`` is False); ``source``: the method name(s) read;
    ``fence``: the fencing module's own ``fence`` result proving it (``verified``, ``method``,
    ``target``, ``plugs``, ``state``, ``verified_at`` in epoch seconds) -- {} unless ``fenced``.
    """

    fenced: bool
    kind: FenceKind
    source: str
    fence: Mapping[str, Any]


def evidence_from_events(events: Sequence[Mapping[str, Any]]) -> StepEvidence | None:
    """The :class:`StepEvidence` of a run from its job events: the facts the last ``runner_on_ok``
    of the role's evidence task set (the event whose ``res.ansible_facts`` holds
    :data:`READING_FACT`). None when that task did not run or failed (the play stopped at a
    failing method), or chose no fence ({}). Pure parsing: the rule itself is the task's.

    A malformed result never reads as a fence: an unknown ``kind`` or a missing ``source`` gives
    None, and a reading claimed ``fenced`` whose module evidence is not ``verified: true`` is
    read as not fenced, with no evidence.
    """
    facts: Mapping[str, Any] | None = None
    for ev in events:
        if ev.get("event") != "runner_on_ok":
            continue
        res = (ev.get("event_data") or {}).get("res") or {}
        found = res.get("ansible_facts") if isinstance(res, Mapping) else None
        if isinstance(found, Mapping) and READING_FACT in found:
            facts = found
    if facts is None:
        return None
    reading, fence = facts.get(READING_FACT), facts.get(EVIDENCE_FACT)
    if not isinstance(reading, Mapping) or not reading:
        return None
    kind, source = reading.get("kind"), reading.get("source")
    if kind not in FENCE_KINDS or not isinstance(source, str) or not source:
        log.warning("fence evidence task result unreadable (%s=%r): no evidence", READING_FACT, reading)
        return None
    fenced = reading.get("fenced") is True and isinstance(fence, Mapping) and fence.get("verified") is True
    return StepEvidence(fenced, kind, source, dict(fence) if fenced and isinstance(fence, Mapping) else {})


@dataclass(frozen=True)
class Release:
    """What the release task of a fence step run (``release_workloads``, playbooks/fence_step.yml)
    did: ``added`` -- it added the out-of-service taint with this run's verified fence as evidence;
    ``message`` -- node_taint's refusal (``reason: message``; never secret) when it did not;
    ``fenced_storage`` -- the run's fence was storage-only, so instead of the taint it released
    the pods ``deleted_pods`` on the fenced storage and left ``kept_pods`` (``namespace/name``)."""

    added: bool
    message: str = ""
    fenced_storage: bool = False
    deleted_pods: tuple[str, ...] = ()
    kept_pods: tuple[str, ...] = ()


def release_from_events(events: Sequence[Mapping[str, Any]]) -> Release | None:
    """The :class:`Release` of a run from its job events (the last ``noderemedy.core.node_taint``
    result), or None when the run had no release task or skipped it. The task runs with
    ``failed_when: false``, so a refusal shows as an ok event whose result has ``reason``."""
    out: Release | None = None
    for ev in events:
        if ev.get("event") not in ("runner_on_ok", "runner_on_failed"):
            continue
        data = ev.get("event_data") or {}
        if str(data.get("resolved_action") or data.get("task_action") or "") not in (
            RELEASE_MODULE,
            SHARED_RELEASE_MODULE,
        ):
            continue
        res = data.get("res") or {}
        if res.get("skipped"):
            continue
        if ev.get("event") == "runner_on_ok" and not res.get("reason") and "taints" in res:
            out = Release(
                added=bool(res.get("added")) and res.get("released") != "fenced_storage",
                fenced_storage=res.get("released") == "fenced_storage",
                deleted_pods=tuple(str(p) for p in res.get("deleted_pods") or ()),
                kept_pods=tuple(str(p) for p in res.get("kept_pods") or ()),
            )
        else:
            reason = str(res.get("reason") or "failed")
            out = Release(False, f"{reason}: {str(res.get('msg', ''))[:MAX_TASK_MESSAGE]}")
    return out


@dataclass(frozen=True)
class RunOutcome:
    """What one ansible-runner run did.

    ``ident``; ``status`` (ansible-runner: successful, failed, timeout, canceled, error); ``rc``;
    ``ok``/``changed``/``failed`` (task counts summed over hosts, failures include unreachable);
    ``failed_tasks`` (``"<task>: <msg>"``, secrets never included: no_log tasks are censored by
    ansible); ``modules`` (fencing module results in run order); ``seconds`` (wall time);
    ``recovered``: read back from the artifacts of an earlier process (the run was not repeated);
    ``release``: what a fence step's release task did (:class:`Release`), None when it did not run;
    ``evidence``: what the fence step role's evidence task chose (:class:`StepEvidence`), None
    when it did not run, failed or found no fence.
    """

    ident: str
    status: str
    rc: int | None
    ok: int = 0
    changed: int = 0
    failed: int = 0
    failed_tasks: tuple[str, ...] = ()
    modules: tuple[ModuleResult, ...] = ()
    seconds: float = 0.0
    recovered: bool = False
    artifact_dir: str = ""
    release: Release | None = None
    evidence: StepEvidence | None = None

    @property
    def succeeded(self) -> bool:
        """Whether the run ended ``successful`` with rc 0."""
        return self.status == "successful" and self.rc == 0

    @property
    def timed_out(self) -> bool:
        """Whether the run was killed at its deadline."""
        return self.status == "timeout"

    def summary(self) -> str:
        """One line for a condition message or an Event: status, counts, first failed tasks."""
        text = f"run {self.ident} {self.status}: ok={self.ok} changed={self.changed} failed={self.failed}"
        if self.failed_tasks:
            text += "; " + "; ".join(self.failed_tasks[:3])
        return text


def fence_reading(
    node: str, outcome: RunOutcome, now: float
) -> tuple[FenceReading | None, Mapping[str, Any] | None]:
    """The run's :class:`~noderemedy_runner.machines.actions.FenceReading` of ``node``
    (``observed_at`` = ``now``) and the module evidence that proves it (for
    ``noderemedy.core.node_taint``'s ``fence_evidence``; None unless fenced), both from the run's own
    evidence task (:attr:`RunOutcome.evidence`). (None, None) when that task gave none, and for runs
    recovered from old artifacts (a power cycle's off is a fence only while its read-back is fresh:
    docs/state-machines.md, known limit)."""
    ev = outcome.evidence
    if outcome.recovered or ev is None:
        return None, None
    reading = FenceReading(node, ev.fenced, ev.kind, ev.source, now)
    return reading, (dict(ev.fence) if ev.fenced else None)


def parse_events(events: Sequence[Mapping[str, Any]]) -> tuple[dict[str, int], list[str], list[ModuleResult]]:
    """From ansible-runner job events: (counts ``ok``/``changed``/``failed``, failed task messages,
    fencing module results in order). Pure; used on live runs and on recovered artifacts."""
    counts = {"ok": 0, "changed": 0, "failed": 0}
    failed: list[str] = []
    modules: list[ModuleResult] = []
    for ev in events:
        kind = ev.get("event")
        data = ev.get("event_data") or {}
        if kind == "playbook_on_stats":
            for key, name in (
                ("ok", "ok"),
                ("changed", "changed"),
                ("failures", "failed"),
                ("dark", "failed"),
            ):
                counts[name] += sum(int(v) for v in (data.get(key) or {}).values())
            continue
        if kind not in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            continue
        res = data.get("res") or {}
        action = str(data.get("resolved_action") or data.get("task_action") or "")
        is_failed = kind != "runner_on_ok" and not data.get("ignore_errors")
        if is_failed:
            msg = str(res.get("msg") or res.get("reason") or "failed")
            task = str(data.get("task") or action)
            failed.append(f"{task}: {msg[:MAX_TASK_MESSAGE]}")
        if action in FENCE_MODULES:
            state = res.get("power_state", res.get("state"))
            fence = res.get("fence") if isinstance(res.get("fence"), Mapping) else {}
            modules.append(
                ModuleResult(
                    module=action,
                    device_type=FENCE_MODULES[action],
                    ok=kind == "runner_on_ok",
                    state=str(state) if isinstance(state, str) else None,
                    fence=dict(fence or {}),
                    msg=str(res.get("msg", ""))[:MAX_TASK_MESSAGE],
                    error=str(res.get("error") or ""),
                    seconds=float(data["duration"])
                    if isinstance(data.get("duration"), int | float)
                    else None,
                )
            )
    return counts, failed, modules


def outcome_from_events(
    ident: str,
    status: str,
    rc: int | None,
    events: Sequence[Mapping[str, Any]],
    *,
    seconds: float = 0.0,
    recovered: bool = False,
    artifact_dir: str = "",
    notes: Sequence[str] = (),
) -> RunOutcome:
    """The :class:`RunOutcome` of run ``ident`` that ended with ansible-runner ``status`` and
    ``rc`` (None when unknown), from its job ``events`` (:func:`parse_events`,
    :func:`release_from_events`, :func:`evidence_from_events`); ``notes`` are added to its failed
    tasks (why the run was stopped: its deadline, a cancel). ``seconds``: wall time. Pure."""
    counts, failed, modules = parse_events(events)
    return RunOutcome(
        ident,
        status,
        rc,
        counts["ok"],
        counts["changed"],
        counts["failed"],
        (*failed, *notes),
        tuple(modules),
        seconds,
        recovered=recovered,
        artifact_dir=artifact_dir,
        release=release_from_events(events),
        evidence=evidence_from_events(events),
    )


__all__ = [
    "EVIDENCE_FACT",
    "FENCE_MODULES",
    "FINAL_STATUSES",
    "MAX_TASK_MESSAGE",
    "READING_FACT",
    "RELEASE_MODULE",
    "SHARED_RELEASE_MODULE",
    "ModuleResult",
    "Release",
    "RunOutcome",
    "StepEvidence",
    "evidence_from_events",
    "fence_reading",
    "outcome_from_events",
    "parse_events",
    "release_from_events",
]
