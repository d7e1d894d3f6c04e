"""Run the state machines' playbook actions with ansible-runner, and read back what they did.

Shape follows ansible-operator (operator-framework/ansible-operator-plugins ``internal/ansible/runner``):
a private data dir per custom resource (``<data_dir>/<kind>/<namespace or _cluster>_<name>_<uid[:8]>/``,
:func:`private_dir_name`), an ``ident`` per run (the state machine's deterministic ident, so a
replayed run finds its artifacts), artifacts rotated (``rotate_artifacts``), and -- unlike
ansible-operator, which writes the whole CR into ``env/extravars`` -- extravars holding *references
only* (DESIGN.md invariant 5): the fencing modules read their Secrets themselves
(``credentials_secret``). ``suppress_env_files`` keeps ansible-runner from writing ``env/envvars``,
``env/extravars`` or ``env/settings``.

Every run has a deadline (``timeout``: ansible-runner kills the process group past it, and the
run's detached workers and modules are killed after it, :mod:`noderemedy_runner.run_processes`;
status ``timeout``), the number of runs in flight is bounded by :class:`Slots` (lowest priority first, then
first come, first served), each run is started at the added niceness ``run_nice``, and a run is
canceled when the caller's cancel event is set (the custom resource was deleted, or the runner
is stopping; looked at every
:data:`~noderemedy_runner.run_processes.CANCEL_POLL_SECONDS`, and every process of the run is gone
when :meth:`Executor.run` returns; status ``canceled``). A run whose ident already has complete artifacts is not repeated: its outcome is
read back.

The outcome (:class:`RunOutcome`) carries ansible's per-host counts (ok/changed/failed), the
messages of failed tasks, the results of the fencing module tasks in the order they ran
(:class:`ModuleResult`, the ``fence`` evidence of ``noderemedy.core.ipmi_power``/``pdu_outlet``/
``fc_port``) and the fence evidence the run itself chose (:class:`StepEvidence`: the result of the
fence step role's evidence task, ``roles/fence_step/tasks/evidence.yml``, the one place the rule
"which read-back is a verified fence" lives), which :func:`fence_reading` turns into the
:class:`~noderemedy_runner.machines.actions.FenceReading` the machines reason about.
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noderemedy_runner.machines.actions import FENCE_KINDS, Action, FenceKind, FenceReading
from noderemedy_runner.run_processes import RUN_MARKER, kill_run_processes, new_token, write_settings

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
#: The fact the fence step role's evidence task sets (``roles/fence_step/tasks/evidence.yml``):
#: ``{"fenced": bool, "kind": "power_off" | "storage_isolated", "source": method names}``, or {}.
READING_FACT = "fence_step_reading"
#: The fact holding the fencing module's own ``fence`` result that proves a fenced reading ({} unless fenced).
EVIDENCE_FACT = "fence_step_evidence"
#: ansible-runner's final statuses.
FINAL_STATUSES = ("successful", "failed", "timeout", "canceled", "error")
#: Longest failed-task message kept (characters).
MAX_TASK_MESSAGE = 400
_IDENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_NAME_RE = re.compile(r"[^A-Za-z0-9._-]")


class ExecutorError(RuntimeError):
    """The executor cannot run a playbook at all (no playbook for the action, bad ident, missing
    playbook file); the message names what is wrong."""


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
        if str(data.get("resolved_action") or data.get("task_action") or "") != RELEASE_MODULE:
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


def private_dir_name(kind: str, name: str, namespace: str | None = None, uid: str = "") -> str:
    """``<kind>/<namespace>_<name>[_<uid[:8]>]`` (``_cluster`` for cluster-scoped objects), safe as
    a path. The uid keeps a re-created object with the same name from finding the artifacts (and
    so the "already finished" runs) of its predecessor."""
    ns = namespace or "_cluster"
    tail = f"_{_NAME_RE.sub('-', uid[:8])}" if uid else ""
    return f"{_NAME_RE.sub('-', kind.lower())}/{_NAME_RE.sub('-', ns)}_{_NAME_RE.sub('-', name)}{tail}"


def link_collection(collections_dir: Path, collection_root: Path) -> Path:
    """Make ``collections_dir/ansible_collections/noderemedy/core`` a symlink to ``collection_root``
    (a checkout used as the ``noderemedy.core`` collection); returns ``collections_dir``."""
    ns = collections_dir / "ansible_collections" / "noderemedy"
    ns.mkdir(parents=True, exist_ok=True)
    link = ns / "core"
    if link.is_symlink() and Path(os.readlink(link)) == collection_root:
        return collections_dir
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(collection_root)
    return collections_dir


class Slots:
    """``n`` run slots handed out in priority order: the waiter with the lowest ``priority`` gets
    the next free slot, equal priorities first come, first served. A run that releases a node's
    workloads on its first try thus never queues behind the retries of other remediations whose
    devices keep failing (``bench/watcher.py``: 100 nodes failing at once, 4 slots).

    ``in_flight`` is the number of slots taken (never above ``n``); ``peak`` the most ever taken.
    Thread-safe.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.in_flight = 0
        self.peak = 0
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, int]] = []  # heap of (priority, arrival)
        self._arrivals = itertools.count()

    def acquire(self, priority: int, cancel: threading.Event, poll: float = 0.2) -> bool:
        """Wait for a slot; False (no slot taken) once ``cancel`` is set. ``poll``: seconds
        between looks at ``cancel``."""
        ticket = (priority, next(self._arrivals))
        with self._cond:
            heapq.heappush(self._waiting, ticket)
            try:
                while self.in_flight >= self.n or self._waiting[0] != ticket:
                    if cancel.is_set():
                        return False
                    self._cond.wait(poll)
                heapq.heappop(self._waiting)
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                return True
            finally:
                if ticket in self._waiting:  # canceled: leave the queue
                    self._waiting.remove(ticket)
                    heapq.heapify(self._waiting)
                self._cond.notify_all()

    @property
    def queued(self) -> int:
        """Waiters in :meth:`acquire` now."""
        with self._cond:
            return len(self._waiting)

    def release(self) -> None:
        """Give a slot back (one taken by :meth:`acquire`); RuntimeError if none is taken."""
        with self._cond:
            if self.in_flight <= 0:
                raise RuntimeError("release of a slot that was not taken")
            self.in_flight -= 1
            self._cond.notify_all()


#: Default niceness added to playbook runs (``nice(1)``'s default increment).
RUN_NICE = 10


def run_niced(nice: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a new thread whose niceness is raised by ``nice`` (0: called here).

    Linux keeps a niceness per thread (``setpriority(PRIO_PROCESS, tid)``, see sched(7)), and a
    process forked from a thread inherits that thread's: the ``ansible-playbook`` that
    ansible-runner spawns in the new thread runs at the raised niceness, while the runner's other
    threads (watches, detection, status writes) keep theirs. A dedicated thread because niceness,
    once raised, cannot be lowered again without CAP_SYS_NICE. Where threads have no niceness of
    their own (not Linux) the call runs unchanged.

    Returns what ``fn`` returns; raises what it raises.
    """
    if nice <= 0 or not sys.platform.startswith("linux"):
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"{threading.current_thread().name}-run", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class Executor:
    """Runs playbook actions through ``ansible_runner.run``.

    Args:
        data_dir: root of the private data dirs (created).
        playbook_dir: the collection's ``playbooks/`` directory.
        collections_path: value of ``ANSIBLE_COLLECTIONS_PATH`` (where ``noderemedy.core`` is
            found); None keeps ansible's default (an installed collection).
        kubeconfig: passed to the modules as ``K8S_AUTH_KUBECONFIG`` (a path, not a secret);
            None: in-cluster service account.
        max_concurrent_runs: runs in flight at once (>= 1); further runs wait.
        run_deadline: seconds a run may take; past it ansible-runner kills it (status timeout).
        rotate_artifacts: artifact dirs kept per private data dir (ansible-runner rotation).
        extra_env: more environment for the runs (e.g. ``SNMP_PERSISTENT_DIR``); never secrets.
        run_nice: niceness added to each run (its ``ansible-playbook`` process and the thread
            reading its events), as ``nice(1)`` does (default 10, nice's own default; 0: none).
            Detection and reconciliation keep the runner's priority: when runs load every core,
            a node that fails is still seen at once (see :func:`run_niced`). Only ever an increase, so no privilege is needed.

    Raises ValueError on ``max_concurrent_runs`` < 1, ``run_deadline`` <= 0 or ``run_nice``
    outside 0..19.
    """

    def __init__(
        self,
        data_dir: Path,
        playbook_dir: Path,
        *,
        collections_path: Path | None = None,
        kubeconfig: Path | None = None,
        max_concurrent_runs: int = 4,
        run_deadline: float = 300.0,
        rotate_artifacts: int = 30,
        extra_env: Mapping[str, str] | None = None,
        run_nice: int = RUN_NICE,
    ) -> None:
        if max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs = {max_concurrent_runs}: must be >= 1")
        if run_deadline <= 0:
            raise ValueError(f"run_deadline = {run_deadline}: must be > 0 seconds")
        if not 0 <= run_nice <= 19:
            raise ValueError(f"run_nice = {run_nice}: must be 0..19 (an increase of niceness)")
        self.run_nice = run_nice
        self.data_dir = Path(data_dir)
        self.playbook_dir = Path(playbook_dir)
        self.collections_path = collections_path
        self.kubeconfig = kubeconfig
        self.max_concurrent_runs = max_concurrent_runs
        self.run_deadline = run_deadline
        self.rotate_artifacts = rotate_artifacts
        self.extra_env = dict(extra_env or {})
        self.slots = Slots(max_concurrent_runs)

    @property
    def in_flight(self) -> int:
        """Runs holding a slot now."""
        return self.slots.in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most runs that ever held a slot at once."""
        return self.slots.peak

    def private_data_dir(self, kind: str, name: str, namespace: str | None = None, uid: str = "") -> Path:
        """The private data dir of one custom resource (created); ``uid``: its metadata.uid."""
        path = self.data_dir / private_dir_name(kind, name, namespace, uid)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def envvars(self) -> dict[str, str]:
        """The environment of every run (references only: paths and switches)."""
        bindir = str(Path(sys.executable).parent)
        env = {
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_LOCALHOST_WARNING": "False",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_PIPELINING": "True",
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if self.collections_path is not None:
            env["ANSIBLE_COLLECTIONS_PATH"] = str(self.collections_path)
        if self.kubeconfig is not None:
            env["K8S_AUTH_KUBECONFIG"] = str(self.kubeconfig)
        env.update(self.extra_env)
        return env

    def recover(self, private_dir: Path, ident: str) -> RunOutcome | None:
        """The outcome of a run ``ident`` that finished before this process started (its
        artifacts hold a final ``status`` and ``rc``), or None. Incomplete artifacts (the runner
        died mid-run) and those of a ``canceled`` run (stopped by a graceful shutdown, so it never
        finished) are removed: the run is replayed cleanly. The machine replays one segment of a
        step at most, which is idempotent (:func:`noderemedy_runner.machines.nodefence.step_segments`)."""
        art = private_dir / "artifacts" / ident
        if not art.is_dir():
            return None
        status_file, rc_file = art / "status", art / "rc"
        status = status_file.read_text().strip() if status_file.is_file() else ""
        if status not in FINAL_STATUSES or status == "canceled" or not rc_file.is_file():
            shutil.rmtree(art, ignore_errors=True)
            return None
        events: list[dict[str, Any]] = []
        for path in sorted((art / "job_events").glob("*.json"), key=_event_counter):
            try:
                events.append(json.loads(path.read_text()))
            except (OSError, json.JSONDecodeError):
                continue
        counts, failed, modules = parse_events(events)
        rc_text = rc_file.read_text().strip()
        return RunOutcome(
            ident,
            status,
            int(rc_text) if rc_text.lstrip("-").isdigit() else None,
            counts["ok"],
            counts["changed"],
            counts["failed"],
            tuple(failed),
            tuple(modules),
            0.0,
            recovered=True,
            artifact_dir=str(art),
            release=release_from_events(events),
            evidence=evidence_from_events(events),
        )

    def run(
        self,
        action: Action,
        *,
        kind: str,
        name: str,
        namespace: str | None = None,
        uid: str = "",
        ident: str | None = None,
        extra_extravars: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
        priority: int = 0,
    ) -> RunOutcome:
        """Run ``action``'s playbook for custom resource ``kind`` ``namespace/name`` (``uid``: its
        metadata.uid, part of the private data dir).

        ``ident`` defaults to ``action.ident`` (else one is made from the action kind and the
        time). A run with the same ident that already finished (artifacts of an earlier process)
        is not repeated: its outcome is returned with ``recovered=True``. ``extra_extravars``
        adds non-secret extravars (fence evidence for the taint); they pass the same references-
        only check as the action's. Blocks for a free slot (``max_concurrent_runs``; slots go to
        the lowest ``priority`` first -- the reconcilers pass the number of earlier tries, so
        first tries run before retries: :class:`Slots`), then until the run ends, its deadline
        passes or ``cancel`` is set. ``in_flight`` counts the runs holding a slot (logged with
        each run's start line). Raises :class:`ExecutorError` for an action without a playbook or
        a malformed ident; a canceled wait for a slot returns status ``canceled``.
        """
        import ansible_runner  # type: ignore[import-untyped]  # heavy import

        if action.playbook is None:
            raise ExecutorError(f"action {action.kind} has no playbook")
        playbook = self.playbook_dir / action.playbook
        if not playbook.is_file():
            raise ExecutorError(f"playbook {playbook} not found (action {action.kind})")
        run_ident = check_ident(ident or action.ident or f"{action.kind}-{int(time.time() * 1000)}")
        extravars = dict(action.extravars)
        if extra_extravars:
            # the same references-only check as Action's (raises ActionError)
            Action(kind="none", extravars=dict(extra_extravars))
            extravars.update(extra_extravars)
        private = self.private_data_dir(kind, name, namespace, uid)
        done = self.recover(private, run_ident)
        if done is not None:
            log.info(
                "run %s of %s %s already finished (%s): not repeated", run_ident, kind, name, done.status
            )
            return done

        cancel = cancel or threading.Event()
        if not self.slots.acquire(priority, cancel):
            return RunOutcome(run_ident, "canceled", None)
        in_flight = self.slots.in_flight
        started = time.monotonic()
        log.info(
            "run %s: %s for %s %s",
            run_ident,
            action.playbook,
            kind,
            name,
            extra={"in_flight": in_flight, "priority": priority},
        )
        token = new_token()
        write_settings(private)

        def canceled() -> bool:  # at once: the run's detached workers hold its pty open
            if cancel.is_set():
                kill_run_processes(token)
                return True
            return False

        try:
            runner = run_niced(
                self.run_nice,
                ansible_runner.run,
                private_data_dir=str(private),
                project_dir=str(self.playbook_dir),
                playbook=action.playbook,
                ident=run_ident,
                inventory={
                    "all": {
                        "hosts": {
                            "localhost": {
                                "ansible_connection": "local",
                                "ansible_python_interpreter": sys.executable,
                            }
                        }
                    }
                },
                extravars=extravars,
                envvars={**self.envvars(), RUN_MARKER: token},
                suppress_env_files=True,
                rotate_artifacts=self.rotate_artifacts,
                timeout=max(1, int(round(self.run_deadline))),
                cancel_callback=canceled,
                quiet=True,
            )
            status = str(runner.status)
            if status == "timeout":  # the detached workers and modules outlive the killed group
                kill_run_processes(token)
        finally:
            self.slots.release()
        events = list(runner.events)
        counts, failed, modules = parse_events(events)
        log.info("run %s: %s in %.2f s", run_ident, status, time.monotonic() - started)
        if status == "timeout":
            failed.append(f"deadline: killed after {self.run_deadline:g} s")
        elif status == "canceled":
            failed.append("canceled: the runner is stopping or the custom resource was deleted")
        return RunOutcome(
            run_ident,
            status,
            runner.rc if isinstance(runner.rc, int) else None,
            counts["ok"],
            counts["changed"],
            counts["failed"],
            tuple(failed),
            tuple(modules),
            time.monotonic() - started,
            recovered=False,
            artifact_dir=str(private / "artifacts" / run_ident),
            release=release_from_events(events),
            evidence=evidence_from_events(events),
        )


def check_ident(ident: str) -> str:
    """``ident`` when it is a usable run ident (``[A-Za-z0-9._-]``, at most 253 characters,
    starting alphanumeric: ansible-runner's artifacts dir and a Job name come from it); raises
    :class:`ExecutorError` naming it otherwise."""
    if not _IDENT_RE.match(ident):
        raise ExecutorError(f"ident {ident!r} is not [A-Za-z0-9._-], at most 253 characters")
    return ident


def _event_counter(path: Path) -> int:
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else 0


__all__ = [
    "EVIDENCE_FACT",
    "FENCE_MODULES",
    "READING_FACT",
    "Executor",
    "ExecutorError",
    "ModuleResult",
    "RUN_NICE",
    "Release",
    "RunOutcome",
    "Slots",
    "StepEvidence",
    "check_ident",
    "evidence_from_events",
    "fence_reading",
    "link_collection",
    "parse_events",
    "private_dir_name",
    "release_from_events",
    "run_niced",
]
