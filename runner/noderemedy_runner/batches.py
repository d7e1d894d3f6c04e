"""Fan-out: one ansible-runner run serves many custom resources that need the same playbook at once.

When a rack fails, tens of NodeFences ask for the same playbook (``fence_step.yml``: their
PowerManagement step) within a second, and each run costs about 1.3 s of ``ansible-playbook``
start-up (``bench/results/fencing.json``). :class:`BatchingExecutor` gathers the runs requested
for one playbook until ``batch_window`` seconds pass without another (:func:`gather_deadline`), or
while every slot is busy (at most ``batch_size`` of them), into one ansible-runner run whose
inventory has one host per custom resource; a run that finds its playbook idle starts at once, so
one failed node pays no window (:meth:`BatchingExecutor.idle`). A host's variables are that
resource's own extravars (references only, checked as
:class:`~noderemedy_runner.machines.actions.Action` checks them: invariant 5), Ansible's forks are
the batch's size and its strategy is ``free``, so each host runs its tasks as fast as its own
device answers -- a slow device delays only its host.
Batches are formed per playbook *and* per shared device of the runs' first method
(:mod:`noderemedy_runner.shared_devices`): the hosts of a batch on one PDU or FC switch get one
module call for all their plugs, each host then taking its own plug's read-back, so a slow shared
device delays only the hosts on it. Such a batch holds up to ``shared_batch_size`` hosts (its
forks stay at most ``batch_size``).

Every safety decision stays per custom resource: batching happens below the state machines, after
each one's own ``decide`` (guards, storm guard, quorum, maintenance, levels, the release rate
limit) asked for its run; a batch only shares the process that performs them.

Per-host results are streamed from the job events (ansible-runner's ``event_handler``): a host is
done at its ``runner_on_failed`` (not ignored) or ``runner_on_unreachable`` -- Ansible takes it out
of the play there -- or at the ``runner_on_ok`` of the playbook's last task, which sets the fact
:data:`DONE_FACT`. Its events then go back to its own caller at once, as the
:class:`~noderemedy_runner.outcomes.RunOutcome` a run of its own would have given (counts from its
own events, its own failed tasks, fence evidence and release), while the other hosts go on.

Restart safety stays per custom resource: each caller's status already names its run (the machine
writes its segment's ident before asking for the run), and a host's events, ``rc`` and ``status``
are written into the caller's own private data dir under that ident as soon as the host is done
(``status`` last). A runner killed mid-batch (``kill -9``) or stopped (SIGTERM cancels the batch)
thus finds the finished hosts' outcomes (:meth:`~noderemedy_runner.executor.Executor.recover`,
not repeated) and replays only the interrupted hosts' segments, once, as for a run of its own
(docs/runner.md "What a restart repeats").

A caller whose cancel event is set (its custom resource was deleted, the runner is stopping) gets
``canceled`` at once, and the batch is stopped (every process of the run is killed); its callers
not done yet go into a new batch, their segment again from its start (an idempotent repeat).
"""

from __future__ import annotations

import contextvars
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from noderemedy_runner.batch_hosts import (
    finish_host_artifacts,
    host_outcome,
    rotate_batches,
    start_host_artifacts,
    write_host_event,
)
from noderemedy_runner.executor import CANCELED, Executor, RunRequest
from noderemedy_runner.outcomes import RunOutcome
from noderemedy_runner.run_processes import (
    CANCEL_POLL_SECONDS,
    kill_run_processes,
    new_token,
    write_settings,
)
from noderemedy_runner.shared_devices import SHARED_VAR, shared_device, shared_key
from noderemedy_runner.shared_results import DONE_FACT, SHARED_PLAYBOOK, served_events

log = logging.getLogger(__name__)
#: the per-run lines (``run <ident>: ...``) go where a run of its own logs them
run_log = logging.getLogger("noderemedy_runner.executor")

#: Playbooks whose plays run on ``{{ noderemedy_hosts | default('localhost') }}`` and end with the
#: task setting :data:`DONE_FACT`: the only ones batched. ``out_of_service_taint.yml``: when a rack
#: comes back, its nodes' taints are removed within seconds of each other, each run otherwise
#: paying ``ansible-playbook``'s start-up (about 1.5 CPU seconds) for one module call.
BATCHED_PLAYBOOKS = ("fence_step.yml", "fence_verify.yml", "out_of_service_taint.yml")
#: The extra variable naming the batch's hosts (the inventory group ``all``).
HOSTS_VAR = "noderemedy_hosts"
#: Default seconds a batch waits for more runs of its playbook before it starts.
BATCH_WINDOW = 0.25
#: A batch whose runs keep coming gathers them until a window passes with none, for at most this
#: many windows from its first run (:func:`gather_deadline`).
GATHER_WINDOWS = 8
#: Default most hosts in one batch (and Ansible forks of its run).
BATCH_SIZE = 20
#: Default most hosts in one batch whose runs switch plugs of one shared PDU or FC switch first:
#: their step costs them one module call for all their plugs, not a fork each.
SHARED_BATCH_SIZE = 100
#: :class:`BatchingExecutor`'s own keyword arguments (the others are :class:`Executor`'s).
BATCH_OPTIONS = ("batch_window", "batch_size", "shared_batch_size", "idle_start", "busy_resources")
#: Seconds past the run deadline a canceled caller waits for its batch's processes to be gone.
STOP_GRACE_SECONDS = 30.0
_HOST_RE = re.compile(r"[^A-Za-z0-9._-]")
_HOST_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")


def host_name(name: str) -> str:
    """The inventory host of custom resource ``name`` (its name, characters outside
    ``[A-Za-z0-9._-]`` replaced by ``-``)."""
    return _HOST_RE.sub("-", name) or "unnamed"


def event_host(event: Mapping[str, Any]) -> str | None:
    """The inventory host a job event is about (``event_data.host``), or None (play, task and
    stats events)."""
    host = (event.get("event_data") or {}).get("host")
    return str(host) if host else None


def ends_host(event: Mapping[str, Any]) -> str | None:
    """How ``event`` ends its host's part of the run: ``"done"`` (the play's last task set
    :data:`DONE_FACT`), ``"failed"`` (a failed task that is not ignored: Ansible takes the host out
    of the play), ``"unreachable"``, or None (the host goes on). Pure."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    if kind == "runner_on_unreachable":
        return "unreachable"
    if kind == "runner_on_failed" and not data.get("ignore_errors"):
        return "failed"
    if kind == "runner_on_ok":
        res = data.get("res") or {}
        facts = res.get("ansible_facts") if isinstance(res, Mapping) else None
        if isinstance(facts, Mapping) and facts.get(DONE_FACT) is True:
            return "done"
    return None


def gather_deadline(first: float, last: float, window: float) -> float:
    """When a batch whose first run joined at ``first`` and latest at ``last`` (monotonic seconds)
    stops gathering: ``window`` seconds after its latest run, and no later than
    :data:`GATHER_WINDOWS` windows after its first. When a rack fails, its nodes' NodeFences ask
    for their runs over a second or two, a few at a time; a fixed window would cut them into many
    small batches, each paying ``ansible-playbook``'s start-up, where gathering while they keep
    coming makes a few large ones. A run that finds its playbook idle does not gather at all
    (:class:`BatchingExecutor` ``idle_start``). Pure."""
    return min(last + window, first + window * GATHER_WINDOWS)


@dataclass(eq=False)
class _Request:
    """One caller's run inside a batch."""

    host: str
    ident: str
    kind: str
    name: str
    extravars: dict[str, Any]
    private: Path
    cancel: threading.Event
    priority: int
    done: threading.Event = field(default_factory=threading.Event)
    outcome: RunOutcome | None = None
    #: the batch stopped for another caller's cancel before this host was done: run it again
    again: bool = False
    #: the caller's context: its log scope (the NodeFence and its node) for the lines about its run
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    #: the batch it is in
    batch: _Batch | None = None
    #: the custom resource's metadata.uid and namespace (None: cluster-scoped)
    uid: str = ""
    namespace: str | None = None


@dataclass(eq=False)
class _Batch:
    playbook: str
    #: what the batch's runs have in common besides the playbook (``shared_devices.shared_key``)
    key: str = ""
    requests: list[_Request] = field(default_factory=list)
    #: monotonic seconds its first and its latest run joined
    first_join: float = field(default_factory=time.monotonic)
    last_join: float = field(default_factory=time.monotonic)
    closed: bool = False
    #: started without gathering: its first run found the playbook idle (``idle_start``)
    at_once: bool = False
    full: threading.Event = field(default_factory=threading.Event)
    #: set once the batch holds its slot (its run may start), and once it is over
    running: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)

    def hosts(self) -> set[str]:
        return {r.host for r in self.requests}


class BatchingExecutor(Executor):
    """An :class:`~noderemedy_runner.executor.Executor` whose runs of the same playbook, asked for
    within ``batch_window`` seconds, go as one ansible-runner run (module docstring).

    Args (besides :class:`~noderemedy_runner.executor.Executor`'s):
        batch_window: seconds a batch waits for more runs after its latest one (> 0), for at
            most :data:`GATHER_WINDOWS` windows (:func:`gather_deadline`); a batch that is full
            (``batch_size`` hosts) starts at once.
        batch_size: most hosts in one run, and its Ansible forks (>= 1). A batch takes one of
            the ``max_concurrent_runs`` slots: at most ``max_concurrent_runs * batch_size``
            forks run at once.
        shared_batch_size: most hosts in one batch whose runs switch plugs of one shared device
            first (``shared_devices.shared_key``; >= 1): one module call serves them all, and
            the hosts it settles need no fork, so such a batch may hold more hosts than forks
            (its forks stay at most ``batch_size``): a rack of 40 goes in one batch per step.
        idle_start: a run that finds its playbook idle (:meth:`idle`) starts at once: one
            failed node pays no window. False: every batch gathers.
        busy_resources: how many custom resources are being reconciled now (the watcher's
            workers, :meth:`idle`); None: not asked.

    Only :data:`BATCHED_PLAYBOOKS` are batched; other runs go as before, one run each.
    Raises ValueError on ``batch_window`` <= 0, ``batch_size`` or ``shared_batch_size`` < 1 (and
    what the base raises).
    """

    def __init__(
        self,
        data_dir: Path,
        playbook_dir: Path,
        *,
        batch_window: float = BATCH_WINDOW,
        batch_size: int = BATCH_SIZE,
        shared_batch_size: int = SHARED_BATCH_SIZE,
        idle_start: bool = True,
        busy_resources: Callable[[], int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(data_dir, playbook_dir, **kwargs)
        if batch_window <= 0:
            raise ValueError(f"batch_window = {batch_window}: must be > 0 seconds")
        if batch_size < 1:
            raise ValueError(f"batch_size = {batch_size}: must be >= 1")
        if shared_batch_size < 1:
            raise ValueError(f"shared_batch_size = {shared_batch_size}: must be >= 1")
        self.batch_window = batch_window
        self.batch_size = batch_size
        self.shared_batch_size = shared_batch_size
        self.idle_start = idle_start
        self.busy_resources = busy_resources
        self._lock = threading.Lock()
        self._pending: dict[str, _Batch] = {}
        #: per playbook: its batches gathering or running, and when the latest one ended
        self._busy, self._ended = dict[str, int](), dict[str, float]()
        self._serial = 0
        #: batches started, and hosts they served (the runs a batch saved: hosts - batches)
        self.batches_started = 0
        self.hosts_served = 0

    def perform(self, request: RunRequest) -> RunOutcome:
        """As :meth:`Executor.perform <noderemedy_runner.executor.Executor.perform>`; a run of a
        :data:`BATCHED_PLAYBOOKS` playbook joins a batch and returns as soon as its own host is
        done (or at once, ``canceled``, when ``cancel`` is set)."""
        if request.playbook not in BATCHED_PLAYBOOKS:
            return super().perform(request)
        private, done = self.finished_before(request)
        if done is not None:
            return done
        req = _Request(
            host_name(request.name), request.ident, request.kind, request.name, dict(request.extravars),
            private, request.cancel, request.priority, uid=request.uid, namespace=request.namespace,
        )  # fmt: skip
        canceled = RunOutcome(req.ident, "canceled", None, failed_tasks=(CANCELED,))
        while True:
            self._join(request.playbook, req)
            while not req.done.wait(CANCEL_POLL_SECONDS):
                if req.cancel.is_set():
                    if req.batch is not None and req.batch.running.is_set():
                        # as a run of its own: back once every process of the run is gone
                        req.batch.ended.wait(self.run_deadline + STOP_GRACE_SECONDS)
                    return canceled
            if req.again and not req.cancel.is_set():
                req.again, req.outcome = False, None
                req.done.clear()
                continue
            return req.outcome or canceled

    # --- gathering -----------------------------------------------------------------------------
    def idle(self, playbook: str, now: float) -> bool:
        """Whether a run of ``playbook`` asked at ``now`` (monotonic seconds) starts at once:
        ``idle_start`` is on, no batch of it is gathering or running or ended within the last
        ``batch_window`` seconds, and no other custom resource is being reconciled. A rack's
        NodeFences are all at work when the first asks for its run, and a batch's hosts ask for
        their next runs as it ends: those gather (a lone first run would take a slot and CPU)."""
        ended = self._ended.get(playbook, float("-inf"))
        if not self.idle_start or self._busy.get(playbook) or now - ended < self.batch_window:
            return False
        return self.busy_resources is None or self.busy_resources() <= 1

    def _join(self, playbook: str, req: _Request) -> None:
        """Put ``req`` into the open batch of ``playbook`` and of its first method's shared device
        (``shared_devices.shared_key``; a new batch, whose runner thread this starts, when there
        is none, it is full or it has a host of the same name)."""
        device = shared_key(playbook, req.extravars)
        key = f"{playbook}\0{device}"
        size = self.shared_batch_size if device else self.batch_size
        with self._lock:
            batch = self._pending.get(key)
            lead = batch is None or batch.closed or req.host in batch.hosts()
            if lead:
                batch = _Batch(playbook, key, at_once=self.idle(playbook, time.monotonic()))
                self._pending[key] = batch
                self._busy[playbook] = self._busy.get(playbook, 0) + 1
            assert batch is not None
            batch.requests.append(req)
            batch.last_join = time.monotonic()
            req.batch = batch
            if len(batch.requests) >= size:
                batch.closed = True
                batch.full.set()
                if self._pending.get(key) is batch:
                    del self._pending[key]
        if lead:
            threading.Thread(target=self._lead, args=(batch,), name=f"batch-{playbook}", daemon=True).start()

    def _lead(self, batch: _Batch) -> None:
        """Gather runs into ``batch`` until :func:`gather_deadline` or it is full (not at all
        when it starts at once: :meth:`idle`), then run it."""
        while not batch.at_once:
            left = gather_deadline(batch.first_join, batch.last_join, self.batch_window) - time.monotonic()
            if left <= 0 or batch.full.wait(left):
                break
        self._run_batch(batch)

    def _close(self, batch: _Batch) -> None:
        with self._lock:
            batch.closed = True
            if self._pending.get(batch.key) is batch:
                del self._pending[batch.key]

    # --- running -------------------------------------------------------------------------------
    def _run_batch(self, batch: _Batch) -> None:
        """Wait for a slot -- the batch still takes more runs meanwhile, up to ``batch_size``: when
        every slot is busy, the runs asked for while it waits go in it --, then run the batch;
        every caller's ``done`` is set at the end."""
        try:
            priority = min(r.priority for r in batch.requests)
            if self.slots.acquire(priority, _AllSet(batch.requests)):
                self._close(batch)
                try:
                    batch.running.set()
                    live = [r for r in batch.requests if not r.cancel.is_set()]
                    if live:
                        self._run_live(batch, live)
                finally:
                    self.slots.release(priority)
        except Exception as exc:  # every caller gets an outcome, never a hang
            log.exception("batch of %s failed to run", batch.playbook)
            for r in batch.requests:
                if r.outcome is None and not r.again:
                    r.outcome = RunOutcome(r.ident, "error", None, failed_tasks=(f"batch: {exc}"[:400],))
        finally:
            self._close(batch)
            with self._lock:
                self._busy[batch.playbook] -= 1
                self._ended[batch.playbook] = time.monotonic()
            batch.ended.set()
            for r in batch.requests:
                r.done.set()  # a caller without an outcome returns canceled

    def _run_live(self, batch: _Batch, live: list[_Request]) -> None:
        """Run ``batch``'s playbook for ``live`` (its callers still waiting), holding a slot: here,
        one ansible-runner run (subclasses run it elsewhere: ``job_batches``)."""
        with self._lock:
            self._serial += 1
            self.batches_started += 1
            self.hosts_served += len(live)
            serial = self._serial
        by_host = {r.host: r for r in live}
        host_events: dict[str, list[dict[str, Any]]] = {h: [] for h in by_host}
        started = time.monotonic()
        ident = f"batch-{int(time.time() * 1000)}-{serial}"
        # a private data dir per batch: ansible-runner writes the run's inventory into it, and
        # batches of one playbook run at once
        batches_dir = self.data_dir / "batches" / Path(batch.playbook).stem
        private = batches_dir / ident
        private.mkdir(parents=True, exist_ok=True)
        log.info(
            "batch %s: %s for %d hosts (%s)", ident, batch.playbook, len(live), ", ".join(sorted(by_host)),
            extra={"in_flight": self.slots.in_flight},
        )  # fmt: skip
        for r in live:  # each caller's run, logged as a run of its own is
            r.context.run(
                run_log.info,
                "run %s: %s for %s %s",
                r.ident,
                batch.playbook,
                r.kind,
                r.name,
                extra={"batch": ident},
            )
            start_host_artifacts(r.private / "artifacts" / r.ident)

        def deliver(req: _Request, outcome: RunOutcome, events: Sequence[Mapping[str, Any]]) -> None:
            art = req.private / "artifacts" / req.ident
            try:
                finish_host_artifacts(art, req.host, events, outcome)
                outcome = _with_artifacts(outcome, str(art))
            except OSError as exc:  # the outcome still goes back; a restart replays the run
                log.warning("batch %s: artifacts of %s: %s", ident, req.ident, exc)
            req.context.run(
                run_log.info, "run %s: %s in %.2f s", req.ident, outcome.status, time.monotonic() - started
            )
            req.outcome = outcome
            req.done.set()

        node_hosts = {str(r.extravars.get("node")): r.host for r in live}

        shares = batch.playbook == SHARED_PLAYBOOK

        def on_event(ev: dict[str, Any]) -> bool:
            split = served_events(ev, node_hosts) if shares else None  # a shared call's tasks
            for host, own in split if split is not None else [(event_host(ev), ev)]:
                on_host_event(host, own)
            return True

        def on_host_event(host: str | None, ev: dict[str, Any]) -> None:
            req = by_host.get(host or "")
            if req is None or req.done.is_set() or ev.get("event") not in _HOST_EVENTS:
                return
            host_events[req.host].append(ev)
            write_host_event(req.private / "artifacts" / req.ident, ev, len(host_events[req.host]))
            end = ends_host(ev)
            if end is not None:
                outcome = host_outcome(
                    req.ident, req.host, host_events[req.host], end, None, time.monotonic() - started
                )
                deliver(req, outcome, host_events[req.host])

        token = new_token()
        write_settings(private)

        def canceled() -> bool:  # a caller gave up: stop the run (the others go again)
            if any(r.cancel.is_set() and not r.done.is_set() for r in live):
                kill_run_processes(token)
                return True
            return False

        hostvars = {r.host: r.extravars for r in live}
        extravars: dict[str, Any] = {HOSTS_VAR: "all"}
        shared = shared_device(batch.playbook, hostvars)
        if shared is not None:
            extravars[SHARED_VAR] = shared
            log.info(
                "batch %s: one %s call for the plugs of %d hosts (%s)",
                ident, shared["method"].get("device_type"), len(shared["hosts"]), ", ".join(shared["plugs"]),
            )  # fmt: skip
        try:
            runner = self.ansible_run(
                private,
                batch.playbook,
                ident,
                hostvars,
                extravars,
                token,
                canceled,
                env={"ANSIBLE_FORKS": str(min(len(live), self.batch_size)), "ANSIBLE_STRATEGY": "free"},
                priority=min(r.priority for r in live),
                event_handler=on_event,
            )
            status = str(runner.status)
            if status in ("timeout", "canceled"):
                kill_run_processes(token)
        except BaseException:
            kill_run_processes(token)
            raise
        seconds = time.monotonic() - started
        log.info("batch %s: %s in %.2f s", ident, status, seconds)
        rotate_batches(batches_dir, self.rotate_artifacts)
        for req in live:
            if req.done.is_set():
                continue
            if status == "canceled" and not req.cancel.is_set():  # stopped for another caller
                shutil.rmtree(req.private / "artifacts" / req.ident, ignore_errors=True)
                req.again = True
                req.done.set()
                continue
            outcome = host_outcome(req.ident, req.host, host_events[req.host], None, status, seconds)
            if status == "timeout":
                outcome = _with_failed(outcome, f"deadline: killed after {self.run_deadline:g} s")
            deliver(req, outcome, host_events[req.host])


class _AllSet(threading.Event):
    """An event that reads as set once every caller of a batch is canceled (they all gave up
    waiting for a slot); only :meth:`is_set` is meaningful."""

    def __init__(self, requests: list[_Request]) -> None:
        super().__init__()
        self._requests = requests  # the batch's own list: runs that join it later count too

    def is_set(self) -> bool:
        return all(r.cancel.is_set() for r in list(self._requests))


def _with_artifacts(outcome: RunOutcome, art: str) -> RunOutcome:
    return replace(outcome, artifact_dir=art)


def _with_failed(outcome: RunOutcome, message: str) -> RunOutcome:
    return replace(outcome, failed_tasks=(*outcome.failed_tasks, message))


__all__ = [
    "BATCHED_PLAYBOOKS", "BATCH_OPTIONS", "BATCH_SIZE", "BATCH_WINDOW", "DONE_FACT", "HOSTS_VAR",
    "BatchingExecutor", "ends_host", "event_host", "gather_deadline", "host_name",
]  # fmt: skip
