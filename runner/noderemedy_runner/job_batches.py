"""Remediation pods for batches: with the Job executor, the runs a rack's NodeFences ask for at once
go as one Job, whose pod runs them as one ansible-runner run (the fan-out of
:mod:`noderemedy_runner.batches`, inside the pod).

Without it each run is a Job of its own (:mod:`noderemedy_runner.jobs`): one pod start on a node,
then ``ansible-playbook``'s start-up in it, for every run. A 40-node rack made 200 Jobs, four at a
time (``--max-concurrent-runs``), and its last taint came minutes after the failure
(``bench/results/rack.json``).

**Runner side** (:class:`JobBatchingExecutor`). Runs are gathered exactly as in process (same
playbooks, window, size, shared device key, one slot per batch). A batch of one run is that run's
own Job, as before (named after its ident). A batch of several is one Job named after the batch
(``batch-<ms>-<serial>``) that:

- carries every run of it in ``$NODEREMEDY_JOB`` (``playbook``, ``ident``, ``runs``: each run's
  ``ident``, ``kind``, ``name`` and extravars -- references only, as for a run of its own);
- is kept off every node of the batch (required node affinity ``NotIn``), belongs to every
  custom resource of it (one owner reference each), and lists the runs' idents in its
  ``remediation.noderemedy.io/runs`` annotation, by which a restarted runner asking for one of
  these runs finds and adopts it (:meth:`JobRuns.batch_of
  <noderemedy_runner.jobs.JobRuns.batch_of>`), as it adopts a run's own Job by name;
- annotates each node as its remediation Job (the node remedy seed's annotations).

When the Job ends, each run's outcome is read from the ConfigMap its pod wrote (below) and given
to its own caller: same conditions, Events and metrics as a run of its own. A run missing there
(the pod died, hit its deadline or could not write) fails alone, naming the Job's end; the
machines retry it. A caller canceled while the Job runs (its custom resource was deleted, the
runner is stopping) has the Job deleted; the batch's other callers go again in a new batch, their
segment from its start (an idempotent repeat, as in process).

Releases are not delayed by the batch: each host's release is done by its own playbook run inside
the pod, as soon as its own read-back is in; only the status writes wait for the Job's end.

**Pod side** (:func:`job_run`, ``noderemedy-runner --job-run``). A description with ``runs`` is
run with the in-process :class:`~noderemedy_runner.batches.BatchingExecutor` (one
ansible-runner run, a host per run, one shared device call per PDU or switch); the outcomes, every
run's :func:`~noderemedy_runner.jobs.outcome_to_dict` keyed by its ident, go into a ConfigMap named
after the Job and owned by it (deleted with it), key :data:`OUTCOMES_KEY`: a termination message
holds at most 4,096 bytes, and 20 hosts' evidence and releases take several times that. The
termination message then only names each run's status. The pod reads nothing but its run
description and the Secrets its modules name; it writes nothing but that ConfigMap (the runner's
ServiceAccount may create ConfigMaps in its namespace: ``deploy/rbac/role.yaml``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from noderemedy_runner.batches import BATCH_OPTIONS, BATCHED_PLAYBOOKS, BatchingExecutor, _Batch, _Request
from noderemedy_runner.executor import RunRequest, Slots
from noderemedy_runner.job_manifests import (
    JOB_ENV,
    JOB_NAME_ENV,
    JOB_UID_ENV,
    TERMINATION_LOG,
    job_manifest,
    job_name,
    job_owner,
)
from noderemedy_runner.jobs import JobExecutor, outcome_from_dict, outcome_to_dict, owned_by
from noderemedy_runner.jobs import job_run as single_job_run
from noderemedy_runner.kube import retry
from noderemedy_runner.kube.client import api, new_client
from noderemedy_runner.kube.errors import KubeError, NotFound
from noderemedy_runner.kube.resources import read_json
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.outcomes import RunOutcome
from noderemedy_runner.playbooks import playbook_root

log = logging.getLogger(__name__)
#: the per-run lines (``run <ident>: ...``) go where a run of its own logs them
run_log = logging.getLogger("noderemedy_runner.executor")

#: The key of a batch's outcomes in its ConfigMap: JSON ``{ident: outcome_to_dict(outcome)}``.
OUTCOMES_KEY = "outcomes.json"
#: Tries to read a batch's outcomes after its Job ended (:func:`noderemedy_runner.kube.retry.call`:
#: the API may be briefly unreachable).
READ_TRIES = 3


def batch_runs(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The runs of a batch's description (``run["runs"]``): each a dict with ``ident``, ``kind``,
    ``name`` (strings) and ``extravars`` (a dict). Pure. Raises ValueError naming the field
    (``runs[i].ident``) when one is missing or of the wrong type, or an ident repeats."""
    runs = run.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ValueError("runs: a non-empty list is required")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, r in enumerate(runs):
        if not isinstance(r, Mapping):
            raise ValueError(f"runs[{i}]: a mapping is required")
        for key in ("ident", "kind", "name"):
            if not isinstance(r.get(key), str) or not r.get(key):
                raise ValueError(f"runs[{i}].{key}: a non-empty string is required")
        if not isinstance(r.get("extravars"), Mapping):
            raise ValueError(f"runs[{i}].extravars: a mapping is required")
        if r["ident"] in seen:
            raise ValueError(f"runs[{i}].ident: {r['ident']!r} appears twice")
        seen.add(r["ident"])
        out.append(
            {"ident": r["ident"], "kind": r["kind"], "name": r["name"], "extravars": dict(r["extravars"])}
        )
    return out


def batch_forks(run: Mapping[str, Any], runs: int) -> int:
    """The Ansible forks of a batch's pod: ``run["forks"]``, the runner's ``--batch-size`` (a
    batch on a shared device may hold more hosts than that: ``--shared-batch-size``), or ``runs``
    when the description has none (a Job written before the field). Pure. Raises ValueError
    naming ``forks`` when it is not a positive integer."""
    forks = run.get("forks", runs)
    if isinstance(forks, bool) or not isinstance(forks, int) or forks < 1:
        raise ValueError(f"forks: a positive integer is required, got {forks!r}")
    return forks


def outcomes_configmap(
    name: str, namespace: str, outcomes: Mapping[str, RunOutcome], owner: Mapping[str, str] | None
) -> dict[str, Any]:
    """The ConfigMap of a batch's ``outcomes`` (ident -> outcome), named ``name`` in ``namespace``,
    owned by ``owner`` (the Job: ``{"name", "uid"}``) when given. Pure."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": owner["name"], "uid": owner["uid"]}
        ]
    doc = {ident: outcome_to_dict(o) for ident, o in sorted(outcomes.items())}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {OUTCOMES_KEY: json.dumps(doc)},
    }


def outcomes_from_configmap(data: Mapping[str, Any], recovered: bool = False) -> dict[str, RunOutcome]:
    """The outcomes of a batch's ConfigMap ``data`` (:func:`outcomes_configmap`), by ident. Pure.
    Raises ValueError (naming the key) when it holds none or one is not an outcome."""
    try:
        doc = json.loads(str(data[OUTCOMES_KEY]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{OUTCOMES_KEY}: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ValueError(f"{OUTCOMES_KEY}: a mapping of idents to outcomes is required")
    return {str(ident): outcome_from_dict(o, recovered=recovered) for ident, o in doc.items()}


def missing_outcome(ident: str, whole: RunOutcome, jname: str) -> RunOutcome:
    """The outcome of run ``ident`` of a batch whose Job ended as ``whole`` without one for it: a
    failed run naming the Job's end (a successful Job without it is failed too). Pure."""
    status = "failed" if whole.status == "successful" else whole.status
    why = f"Job {jname}: no outcome of run {ident}"
    return replace(whole, ident=ident, status=status, failed_tasks=(*whole.failed_tasks, why)[:3])


class _AnySet(threading.Event):
    """An event that reads as set once any caller of a batch is canceled; :meth:`is_set` and
    :meth:`wait` (polling, 0.1 s) are meaningful."""

    def __init__(self, requests: Sequence[_Request]) -> None:
        super().__init__()
        self._requests = list(requests)

    def is_set(self) -> bool:
        return any(r.cancel.is_set() for r in self._requests)

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.1 if end is None else max(0.0, min(0.1, end - time.monotonic())))
        return True


class JobBatchingExecutor(BatchingExecutor):
    """The Job executor with batches (module docstring): :class:`BatchingExecutor`'s gathering,
    each batch of several runs one Job; other runs, and batches of one, as
    :class:`~noderemedy_runner.jobs.JobExecutor` runs them.

    Args:
        api_client: the runner's ApiClient.
        namespace: where the Jobs (and the batches' ConfigMaps) are.
        pod: the runner pod's own object (image, ServiceAccount, placement of the Jobs).
        *args, **kwargs: :class:`BatchingExecutor`'s (``batch_window``, ``batch_size``,
            ``idle_start``, ``busy_resources``, and
            :class:`~noderemedy_runner.executor.Executor`'s).
    """

    def __init__(
        self, api_client: client.ApiClient, *args: Any, namespace: str, pod: Mapping[str, Any], **kwargs: Any
    ) -> None:
        self._single: JobExecutor | None = None
        super().__init__(*args, **kwargs)
        own = {k: v for k, v in kwargs.items() if k not in BATCH_OPTIONS}
        self._single = JobExecutor(api_client, *args, namespace=namespace, pod=pod, **own)
        self._single.slots = self.slots
        self.namespace = namespace
        self.pod = pod
        self.jobs = self._single.jobs
        self.core = api(api_client, client.CoreV1Api)

    @property
    def slots(self) -> Slots:
        """The slots of runs in flight, shared with the runs of their own (one bound)."""
        return self._slots

    @slots.setter
    def slots(self, value: Slots) -> None:
        self._slots = value
        if self._single is not None:
            self._single.slots = value

    def perform(self, request: RunRequest) -> RunOutcome:
        """A run of a batched playbook joins a batch unless a Job of it already exists (a run of
        its own, or a batch listing it: adopted, its outcome read when it ends); others run as
        :meth:`JobExecutor.perform <noderemedy_runner.jobs.JobExecutor.perform>`."""
        assert self._single is not None
        if request.playbook not in BATCHED_PLAYBOOKS:
            return self._single.perform(request)
        jname = job_name(request.ident)
        existing = self.jobs.read(jname)
        if existing is not None and (not request.uid or owned_by(existing, request.uid)):
            log.info("run %s: Job %s already exists: adopted", request.ident, jname)
            return self.jobs.wait(existing, request.ident, request.cancel, recovered=True)
        job = self.jobs.batch_of(request.ident, request.uid)
        if job is not None and (job.get("metadata") or {}).get("deletionTimestamp"):
            # a stopped runner canceled it: its pod is going; the run goes again once it is gone
            self.jobs.delete_and_wait(str(job["metadata"]["name"]))
            job = None
        if job is not None:
            bname = str(job["metadata"]["name"])
            log.info("run %s: Job %s already exists: adopted", request.ident, bname)
            return self._finish(job, [request.ident], request.cancel, recovered=True)[request.ident]
        return super().perform(request)

    def _finish(
        self, job: Mapping[str, Any], idents: Sequence[str], cancel: threading.Event, recovered: bool
    ) -> dict[str, RunOutcome]:
        """Wait for batch Job ``job`` to end, then the outcome of each of ``idents`` (canceled:
        ``canceled`` for each; :func:`missing_outcome` for one the pod did not write)."""
        jname = str(job["metadata"]["name"])
        whole = self.jobs.wait(job, jname, cancel, recovered, message_required=False)
        if whole.status == "canceled":
            return {i: replace(whole, ident=i) for i in idents}
        found: dict[str, RunOutcome] = {}
        try:
            cm = retry.call(
                lambda: read_json(
                    self.core.read_namespaced_config_map(jname, self.namespace, _preload_content=False)
                ),
                tries=READ_TRIES,
            )
            found = outcomes_from_configmap(cm.get("data") or {}, recovered=recovered)
        except NotFound:
            pass  # the pod wrote none: each run is missing_outcome
        except (KubeError, ValueError) as exc:
            log.warning("batch Job %s: reading its outcomes: %s", jname, exc)
        return {i: found.get(i) or missing_outcome(i, whole, jname) for i in idents}

    def _run_live(self, batch: _Batch, live: list[_Request]) -> None:
        """``live`` as one Job (module docstring), holding the batch's slot; a lone run as its
        own Job."""
        assert self._single is not None
        with self._lock:
            self._serial += 1
            self.batches_started += 1
            self.hosts_served += len(live)
            serial = self._serial
        started = time.monotonic()
        if len(live) == 1:
            r = live[0]
            action = Action(kind="none", playbook=batch.playbook, extravars=dict(r.extravars))
            req = RunRequest(
                action, r.ident, r.extravars, r.kind, r.name, r.namespace, r.uid, r.cancel, r.priority
            )
            r.outcome = r.context.run(self._single.start_and_wait, req)
            r.done.set()
            return
        ident = f"batch-{int(time.time() * 1000)}-{serial}"
        jname = job_name(ident)
        runs = [
            {"ident": r.ident, "kind": r.kind, "name": r.name, "extravars": dict(r.extravars)} for r in live
        ]
        nodes = [str(r.extravars.get("node") or "") for r in live]
        owners = [o for r in live if (o := job_owner(r.kind, r.name, r.uid, r.namespace)) is not None]
        body = job_manifest(
            name=jname,
            namespace=self.namespace,
            node="",
            run={"playbook": batch.playbook, "ident": ident, "runs": runs, "forks": self.batch_size},
            pod=self.pod,
            deadline=self.run_deadline,
            owner=None,
            batch=nodes,
            owners=owners,
        )
        log.info(
            "batch %s: %s for %d hosts (%s) as Job %s", ident, batch.playbook, len(live),
            ", ".join(sorted(r.host for r in live)), jname, extra={"in_flight": self.slots.in_flight},
        )  # fmt: skip
        for r in live:
            r.context.run(
                run_log.info, "run %s: %s for %s %s as Job %s", r.ident, batch.playbook, r.kind, r.name, jname,
                extra={"batch": ident},
            )  # fmt: skip
        try:
            job, _, error = self.jobs.start(body, ident=ident, uid="", node="", kind="batch", name=ident)
        except KubeError as exc:
            job, error = None, f"Job {jname}: {exc}"
        if job is None:
            for r in live:
                r.outcome = RunOutcome(r.ident, "error", None, failed_tasks=(error,))
                r.done.set()
            return
        for node in nodes:
            self.jobs.annotate(node, jname)
        outcomes = self._finish(job, [r.ident for r in live], _AnySet(live), recovered=False)
        seconds = time.monotonic() - started
        log.info("batch %s: Job %s ended in %.2f s", ident, jname, seconds)
        for r in live:
            out = outcomes[r.ident]
            if out.status == "canceled" and not r.cancel.is_set():  # stopped for another caller
                r.again = True
                r.done.set()
                continue
            r.context.run(run_log.info, "run %s: %s in %.2f s", r.ident, out.status, seconds)
            r.outcome = out
            r.done.set()


def batch_message(ident: str, outcomes: Mapping[str, RunOutcome], written: str) -> str:
    """The termination message of a batch's pod: JSON ``{"batch", "outcomes" (the ConfigMap, or
    "" when it could not be written), "status": {ident: status}}``, cut to 4,096 bytes. Pure."""
    doc = {"batch": ident, "outcomes": written, "status": {i: o.status for i, o in sorted(outcomes.items())}}
    return json.dumps(doc)[:4096]


def _batch_job_run(run: Mapping[str, Any], playbook_dir: Path | None, data_dir: Path) -> int:
    """The pod's side of a batch (module docstring); exit code as :func:`job_run`."""
    try:
        runs = batch_runs(run)
        forks = batch_forks(run, len(runs))
        playbook, ident = str(run["playbook"]), str(run["ident"])
    except (KeyError, ValueError) as exc:
        print(f"noderemedy-runner --job-run: ${JOB_ENV}: {exc}", file=sys.stderr)
        return 2
    playbooks, collections = playbook_root(playbook_dir, data_dir)
    executor = BatchingExecutor(
        data_dir / "runs",
        playbooks,
        collections_path=collections,
        max_concurrent_runs=1,
        batch_size=forks,  # the runner's own: no batch off a shared device holds more
        shared_batch_size=len(runs),
    )
    outcomes: dict[str, RunOutcome] = {}

    def one(r: Mapping[str, Any]) -> None:
        try:
            action = Action(kind="none", playbook=playbook, extravars=r["extravars"])
            outcomes[r["ident"]] = executor.run(action, kind=r["kind"], name=r["name"], ident=r["ident"])
        except Exception as exc:  # that run fails alone
            outcomes[r["ident"]] = RunOutcome(r["ident"], "error", None, failed_tasks=(f"{exc}"[:300],))

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jname = os.environ.get(JOB_NAME_ENV) or job_name(ident)
    uid = os.environ.get(JOB_UID_ENV) or ""
    written = ""
    try:
        body = outcomes_configmap(
            jname,
            os.environ.get("POD_NAMESPACE") or "default",
            outcomes,
            {"name": jname, "uid": uid} if uid else None,
        )
        api(new_client(None), client.CoreV1Api).create_namespaced_config_map(
            body["metadata"]["namespace"], cast(Any, body)
        )
        written = f"configmap/{jname}"
    except Exception as exc:  # the runner then fails every run of the batch, naming the Job
        print(f"noderemedy-runner --job-run: writing the outcomes: {exc}", file=sys.stderr)
    try:
        Path(TERMINATION_LOG).write_text(batch_message(ident, outcomes, written))
    except OSError as exc:
        print(f"noderemedy-runner --job-run: {TERMINATION_LOG}: {exc}", file=sys.stderr)
    for o in outcomes.values():
        print(o.summary(), file=sys.stderr)
    return 0 if written and all(o.succeeded for o in outcomes.values()) else 1


def job_run(playbook_dir: Path | None = None, data_dir: Path = Path("/tmp/noderemedy-job")) -> int:
    """The remediation pod's side (``noderemedy-runner --job-run``): a batch (a description with
    ``runs``) as the module docstring says, else one run (:func:`noderemedy_runner.jobs.job_run`).
    Exit 0 when every run succeeded (and a batch's outcomes were written), 1 when one did not, 2
    when the description is unusable."""
    try:
        run = json.loads(os.environ[JOB_ENV])
    except (KeyError, ValueError) as exc:
        print(f"noderemedy-runner --job-run: ${JOB_ENV}: {exc}", file=sys.stderr)
        return 2
    if isinstance(run, Mapping) and "runs" in run:
        return _batch_job_run(run, playbook_dir, data_dir)
    return single_job_run(playbook_dir, data_dir)


__all__ = [
    "OUTCOMES_KEY",
    "JobBatchingExecutor",
    "batch_message",
    "batch_forks",
    "batch_runs",
    "job_run",
    "missing_outcome",
    "outcomes_configmap",
    "outcomes_from_configmap",
]
