"""Run the state machines' playbook actions with ansible-runner.

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

What a run did is a :class:`~noderemedy_runner.outcomes.RunOutcome`, read from its job events
(:mod:`noderemedy_runner.outcomes`).
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noderemedy_runner.machines.actions import Action
from noderemedy_runner.outcomes import FINAL_STATUSES, RunOutcome, outcome_from_events
from noderemedy_runner.run_processes import RUN_MARKER, kill_run_processes, new_token, write_settings

log = logging.getLogger(__name__)

_IDENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_NAME_RE = re.compile(r"[^A-Za-z0-9._-]")
#: Why a canceled run ended, among its failed tasks.
CANCELED = "canceled: the runner is stopping or the custom resource was deleted"


class ExecutorError(RuntimeError):
    """The executor cannot run a playbook at all (no playbook for the action, bad ident, missing
    playbook file); the message names what is wrong."""


@dataclass(frozen=True)
class RunRequest:
    """One run asked of an executor (:meth:`Executor.run`), its ident and extravars settled.

    ``action`` (its ``playbook`` is not None); ``ident`` (checked by :func:`check_ident`);
    ``extravars`` (the action's and the caller's extra ones, references only); ``kind``, ``name``,
    ``namespace`` (None: cluster-scoped) and ``uid`` of the custom resource the run is for;
    ``cancel`` (set: stop the run); ``priority`` (lower first, :class:`Slots`).
    """

    action: Action
    ident: str
    extravars: Mapping[str, Any]
    kind: str
    name: str
    namespace: str | None
    uid: str
    cancel: threading.Event
    priority: int

    @property
    def playbook(self) -> str:
        """The action's playbook (a file name in the playbook dir)."""
        return str(self.action.playbook)


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


#: Run priority from which a run is "after release" work (see :class:`Slots`): a NodeFence whose
#: node carries the out-of-service taint adds it to its tries (``loops/nodefence.py``; the run
#: brings a released node back), and the fence device check runs far above it.
AFTER_RELEASE_PRIORITY = 1_000


class Slots:
    """``n`` run slots handed out in priority order: the waiter with the lowest ``priority`` gets
    the next free slot, equal priorities first come, first served. A run that releases a node's
    workloads on its first try thus never queues behind the retries of other remediations whose
    devices keep failing (``bench/watcher.py``: 100 nodes failing at once, 4 slots).

    Runs at :data:`AFTER_RELEASE_PRIORITY` or above hold at most ``n - 1`` slots (all of them when
    ``n`` is 1): priority orders the queue, but cannot take back a slot already held, and when a
    rack fails, the nodes released first start their recovery runs while the last nodes to turn
    NotReady have not asked yet. With every slot held by recovery, the last node's fence waited
    14.7 s (``bench/rack.py``, 40 nodes, 4 slots); the slot kept back lets it start at once.

    ``in_flight`` is the number of slots taken (never above ``n``); ``peak`` the most ever taken.
    Thread-safe.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self.in_flight = 0
        self.peak = 0
        self._late = 0  # slots held at AFTER_RELEASE_PRIORITY or above
        self._cond = threading.Condition()
        self._waiting: list[tuple[int, int]] = []  # heap of (priority, arrival)
        self._arrivals = itertools.count()

    def _free_for(self, priority: int) -> bool:
        if self.in_flight >= self.n:
            return False
        return priority < AFTER_RELEASE_PRIORITY or self.n == 1 or self._late < self.n - 1

    def acquire(self, priority: int, cancel: threading.Event, poll: float = 0.2) -> bool:
        """Wait for a slot; False (no slot taken) once ``cancel`` is set. ``poll``: seconds
        between looks at ``cancel``. Give the slot back with :meth:`release` and the same
        ``priority``."""
        ticket = (priority, next(self._arrivals))
        with self._cond:
            heapq.heappush(self._waiting, ticket)
            try:
                while not self._free_for(priority) or self._waiting[0] != ticket:
                    if cancel.is_set():
                        return False
                    self._cond.wait(poll)
                heapq.heappop(self._waiting)
                self.in_flight += 1
                self._late += priority >= AFTER_RELEASE_PRIORITY
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

    def release(self, priority: int) -> None:
        """Give back a slot taken by :meth:`acquire` with ``priority``; RuntimeError if no slot
        of that kind is taken."""
        late = priority >= AFTER_RELEASE_PRIORITY
        with self._cond:
            if (
                self.in_flight <= 0
                or (late and self._late <= 0)
                or (not late and self.in_flight <= self._late)
            ):
                raise RuntimeError(f"release of a slot that was not taken (priority {priority})")
            self.in_flight -= 1
            self._late -= late
            self._cond.notify_all()


#: Default niceness added to playbook runs (``nice(1)``'s default increment).
RUN_NICE = 10
#: Niceness added on top of a run's for runs at :data:`AFTER_RELEASE_PRIORITY` or above (at most
#: 19 in all): when a rack fails, the recovery runs of the nodes released first load the cores
#: while the last nodes are still being fenced, and a fence run shares them with those runs as
#: 110 to 15 (the kernel's weights of nice 10 and 19, sched(7)) instead of evenly.
AFTER_RELEASE_NICE = 9


def nice_for(run_nice: int, priority: int) -> int:
    """Niceness of a run of ``priority`` when runs get ``run_nice``: ``run_nice`` (0: none, for
    every run), raised by :data:`AFTER_RELEASE_NICE` up to 19 for runs after a release."""
    if run_nice <= 0 or priority < AFTER_RELEASE_PRIORITY:
        return run_nice
    return min(19, run_nice + AFTER_RELEASE_NICE)


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

    def ansible_run(
        self,
        private: Path,
        playbook: str,
        ident: str,
        hosts: Mapping[str, Mapping[str, Any]],
        extravars: Mapping[str, Any],
        token: str,
        cancel_callback: Callable[[], bool],
        env: Mapping[str, str] | None = None,
        priority: int = 0,
        **more: Any,
    ) -> Any:
        """``ansible_runner.run`` of ``playbook`` as every run of the executor goes: in private data
        dir ``private`` under ``ident``, at the added niceness (:func:`run_niced`), killed past the
        run deadline, artifacts rotated, no env files written (``suppress_env_files``), quiet.

        ``hosts``: the inventory, each host's variables with a local connection through this
        Python added; ``token``: the run's :data:`~noderemedy_runner.run_processes.RUN_MARKER`
        (its processes are killed by it); ``env``: more environment on top of :meth:`envvars`;
        ``priority``: the run's slot priority, which sets its niceness (:func:`nice_for`);
        ``more``: further ``ansible_runner.run`` arguments (``event_handler``). Returns
        ansible-runner's Runner (``status``, ``rc``, ``events``); raises what it raises."""
        import ansible_runner  # type: ignore[import-untyped]  # heavy import

        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        return run_niced(
            nice_for(self.run_nice, priority),
            ansible_runner.run,
            private_data_dir=str(private),
            project_dir=str(self.playbook_dir),
            playbook=playbook,
            ident=ident,
            inventory={"all": {"hosts": {host: {**v, **local} for host, v in hosts.items()}}},
            extravars=dict(extravars),
            envvars={**self.envvars(), RUN_MARKER: token, **(env or {})},
            suppress_env_files=True,
            rotate_artifacts=self.rotate_artifacts,
            timeout=max(1, int(round(self.run_deadline))),
            cancel_callback=cancel_callback,
            quiet=True,
            **more,
        )

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
        rc_text = rc_file.read_text().strip()
        rc = int(rc_text) if rc_text.lstrip("-").isdigit() else None
        return outcome_from_events(ident, status, rc, events, recovered=True, artifact_dir=str(art))

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
        each run's start line). Raises :class:`ExecutorError` for an action without a playbook,
        a missing playbook file or a malformed ident
        (:class:`~noderemedy_runner.machines.actions.ActionError` for extravars that are not
        references); a canceled wait for a slot returns status ``canceled``.

        Subclasses run the request elsewhere by overriding :meth:`perform`.
        """
        if action.playbook is None:
            raise ExecutorError(f"action {action.kind} has no playbook")
        run_ident = check_ident(ident or action.ident or f"{action.kind}-{int(time.time() * 1000)}")
        extravars = dict(action.extravars)
        if extra_extravars:
            # the same references-only check as Action's (raises ActionError)
            Action(kind="none", extravars=dict(extra_extravars))
            extravars.update(extra_extravars)
        request = RunRequest(
            action=action,
            ident=run_ident,
            extravars=extravars,
            kind=kind,
            name=name,
            namespace=namespace,
            uid=uid,
            cancel=cancel or threading.Event(),
            priority=priority,
        )
        return self.perform(request)

    def finished_before(self, req: RunRequest) -> tuple[Path, RunOutcome | None]:
        """The private data dir of ``req``'s run (created), and the run's outcome when it already
        finished in an earlier process (:meth:`recover`; logged, not repeated), else None. Raises
        :class:`ExecutorError` when the playbook file is missing."""
        playbook = self.playbook_dir / req.playbook
        if not playbook.is_file():
            raise ExecutorError(f"playbook {playbook} not found (action {req.action.kind})")
        private = self.private_data_dir(req.kind, req.name, req.namespace, req.uid)
        done = self.recover(private, req.ident)
        if done is not None:
            log.info(
                "run %s of %s %s already finished (%s): not repeated",
                req.ident,
                req.kind,
                req.name,
                done.status,
            )
        return private, done

    def perform(self, req: RunRequest) -> RunOutcome:
        """Run ``req`` in this process (ansible-runner), as :meth:`run` describes."""
        private, done = self.finished_before(req)
        if done is not None:
            return done
        if not self.slots.acquire(req.priority, req.cancel):
            return RunOutcome(req.ident, "canceled", None)
        in_flight = self.slots.in_flight
        started = time.monotonic()
        log.info(
            "run %s: %s for %s %s",
            req.ident,
            req.playbook,
            req.kind,
            req.name,
            extra={"in_flight": in_flight, "priority": req.priority},
        )
        token = new_token()
        write_settings(private)

        def canceled() -> bool:  # at once: the run's detached workers hold its pty open
            if req.cancel.is_set():
                kill_run_processes(token)
                return True
            return False

        try:
            runner = self.ansible_run(
                private,
                req.playbook,
                req.ident,
                {"localhost": {}},
                req.extravars,
                token,
                canceled,
                priority=req.priority,
            )
            status = str(runner.status)
            if status == "timeout":  # the detached workers and modules outlive the killed group
                kill_run_processes(token)
        finally:
            self.slots.release(req.priority)
        log.info("run %s: %s in %.2f s", req.ident, status, time.monotonic() - started)
        notes = {"timeout": f"deadline: killed after {self.run_deadline:g} s", "canceled": CANCELED}
        return outcome_from_events(
            req.ident,
            status,
            runner.rc if isinstance(runner.rc, int) else None,
            list(runner.events),
            seconds=time.monotonic() - started,
            artifact_dir=str(private / "artifacts" / req.ident),
            notes=(notes[status],) if status in notes else (),
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
    "AFTER_RELEASE_NICE",
    "AFTER_RELEASE_PRIORITY",
    "CANCELED",
    "Executor",
    "ExecutorError",
    "RUN_NICE",
    "RunRequest",
    "Slots",
    "check_ident",
    "link_collection",
    "private_dir_name",
    "nice_for",
    "run_niced",
]
