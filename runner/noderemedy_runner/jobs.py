"""Remediation pods: each playbook run of the state machines as a Kubernetes Job from the
runner's own image, as the node remedy design describes ("On detection remediation pod will be
executed ... Remediation pod contains the service-account to execute Ansible playbook").

The Job's pod runs ``noderemedy-runner --job-run``: the same in-process :class:`Executor` run, in
the pod, on the run description in ``$NODEREMEDY_JOB`` (playbook, ident, extravars: references
only, so the Job spec carries no secret; the fencing modules read their Secrets themselves through
the pod's ServiceAccount) and the node under remediation in ``$NODEREMEDY_NODE``. It writes the
run's outcome as JSON to its termination message (``/dev/termination-log``, at most 4,096 bytes:
:func:`outcome_to_dict` keeps it short), which :class:`JobExecutor` reads back: the exit code and
the structured summary of the fence evidence, never the pod's log.

The Job (:func:`noderemedy_runner.job_manifests.job_manifest`): ``backoffLimit: 0`` (retries
belong to the state machine), ``activeDeadlineSeconds`` = the run deadline,
``ttlSecondsAfterFinished`` and an owner reference to the custom resource clean it up, its pod never lands on the node being fenced (required node
affinity ``NotIn``) and takes the runner pod's own image, ServiceAccount, security context,
node selector and tolerations (so it runs wherever the runner may, also while other nodes are
tainted). The Job's name is the run's ident: a restarted or newly elected runner asking for the
same run finds the Job, adopts it while it runs, and reads its outcome once it has finished, so
no run is started twice and no finished result is lost.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from noderemedy_runner.executor import Executor, RunRequest
from noderemedy_runner.job_manifests import (
    BATCH_LABEL,
    JOB_ENV,
    RUNS_ANNOTATION,
    TERMINATION_LOG,
    job_manifest,
    job_name,
    job_owner,
)
from noderemedy_runner.kube.client import api, own_pod_name
from noderemedy_runner.kube.errors import KubeError, NotFound
from noderemedy_runner.kube.resources import read_json
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.outcomes import ModuleResult, Release, RunOutcome, StepEvidence
from noderemedy_runner.playbooks import playbook_root

log = logging.getLogger(__name__)

#: The kubelet keeps at most this many bytes of a termination message.
MAX_MESSAGE = 4096
#: The node remedy seed's Node annotations: when the node's latest remediation pod started (RFC 3339)
#: and which Job runs it (``<namespace>/<name>``).
TIMESTAMP_ANNOTATION = "remediation.noderemedy.io/remediation-timestamp"
JOB_ANNOTATION = "remediation.noderemedy.io/remediation-job"
#: Seconds between two reads of a Job in flight.
POLL_SECONDS = 1.0


def outcome_to_dict(outcome: RunOutcome) -> dict[str, Any]:
    """``outcome`` as JSON-able data for the termination message: everything but the artifact
    dir; failed task messages are cut so the whole stays under :data:`MAX_MESSAGE` bytes."""
    doc = asdict(outcome)
    doc.pop("artifact_dir", None)
    doc["failed_tasks"] = [t[:300] for t in outcome.failed_tasks[:3]]
    while len(json.dumps(doc)) > MAX_MESSAGE and doc["modules"]:
        doc["modules"] = doc["modules"][:-1]  # the evidence and the release stay: the machines need them
    return doc


def outcome_from_dict(doc: Mapping[str, Any], recovered: bool = False) -> RunOutcome:
    """The :class:`RunOutcome` of a Job's termination message (:func:`outcome_to_dict`).
    Raises ValueError (naming the field) on a message that is not one."""
    try:
        release = doc.get("release")
        evidence = doc.get("evidence")
        return RunOutcome(
            ident=str(doc["ident"]),
            status=str(doc["status"]),
            rc=int(doc["rc"]) if doc.get("rc") is not None else None,
            ok=int(doc.get("ok", 0)),
            changed=int(doc.get("changed", 0)),
            failed=int(doc.get("failed", 0)),
            failed_tasks=tuple(str(t) for t in doc.get("failed_tasks") or ()),
            modules=tuple(ModuleResult(**m) for m in doc.get("modules") or ()),
            seconds=float(doc.get("seconds", 0.0)),
            recovered=recovered,
            release=Release(
                **{**release, **{k: tuple(release.get(k) or ()) for k in ("deleted_pods", "kept_pods")}}
            )
            if isinstance(release, Mapping)
            else None,
            evidence=StepEvidence(**evidence) if isinstance(evidence, Mapping) else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"termination message: not a run outcome ({exc})") from exc


#: Reasons a container of a Job's pod waits with that will not pass by themselves: the run ends
#: at once as failed, naming it, instead of at its deadline.
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


class JobRuns:
    """Jobs in ``namespace`` as runs: create or adopt one, wait for it to end, read its outcome
    (the one place the runner creates, reads and deletes Jobs; every call through the kube layer).

    Args:
        api_client: the runner's ApiClient.
        namespace: where the Jobs live (the runner's own namespace).
    """

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.batch = api(api_client, client.BatchV1Api)
        self.core = api(api_client, client.CoreV1Api)

    def start(
        self, body: Mapping[str, Any], *, ident: str, uid: str, node: str, kind: str, name: str
    ) -> tuple[dict[str, Any] | None, bool, str]:
        """Adopt Job ``body.metadata.name`` when it exists, is not being deleted (a stopped runner
        canceled it) and belongs to the object ``uid`` (or to no object); delete it first when it belongs to an earlier object of the same name (the
        detector re-creates a node's NodeFence: never take its predecessor's outcome); else create
        it and annotate ``node`` (:meth:`annotate`). Returns (the Job, adopted, error): the Job
        None and the API's refusal in ``error`` when the create is refused (an invalid spec: 422).
        Raises :class:`KubeError` for other API failures (the caller retries)."""
        jname = str(body["metadata"]["name"])
        existing = self.read(jname)
        if existing is not None and uid and not owned_by(existing, uid):
            log.info("run %s: Job %s belongs to an earlier %s %s: deleted", ident, jname, kind, name)
            self.delete_and_wait(jname)
            existing = None
        if existing is not None and (existing.get("metadata") or {}).get("deletionTimestamp"):
            # a stopped runner canceled it: its pod is going, and it never ends with an outcome
            log.info("run %s: Job %s is being deleted: waiting for it to go, then created anew", ident, jname)
            self.delete_and_wait(jname)
            existing = None
        if existing is not None:
            log.info("run %s: Job %s already exists: adopted", ident, jname)
            return existing, True, ""
        try:
            created = read_json(
                self.batch.create_namespaced_job(self.namespace, cast(Any, body), _preload_content=False)
            )
        except KubeError as exc:
            if exc.retryable:
                raise
            return None, False, f"Job {jname}: {exc}"
        self.annotate(node, jname)
        return created, False, ""

    def annotate(self, node: str, jname: str) -> None:
        """The node remedy seed's annotations on the Node: when its remediation pod started
        (:data:`TIMESTAMP_ANNOTATION`) and which (:data:`JOB_ANNOTATION`), for admins and tools
        looking at the Node. A failure is logged, never fatal: the Job itself is the record a
        restarted runner adopts (its name comes from the run)."""
        if not node:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        body = {
            "metadata": {
                "annotations": {TIMESTAMP_ANNOTATION: stamp, JOB_ANNOTATION: f"{self.namespace}/{jname}"}
            }
        }
        try:
            self.core.patch_node(node, body)
        except KubeError as exc:
            log.warning("annotating node %s with its remediation Job %s: %s", node, jname, exc)

    def delete_and_wait(self, jname: str, timeout: float = 60.0) -> None:
        """Delete Job ``jname`` with its pods (foreground) and wait until it is gone; KubeError
        ``timeout`` naming it when it is still there after ``timeout`` seconds."""
        try:
            self.batch.delete_namespaced_job(jname, self.namespace, propagation_policy="Foreground")
        except NotFound:
            return
        deadline = time.monotonic() + timeout
        while self.read(jname) is not None:
            if time.monotonic() > deadline:
                raise KubeError(f"Job {jname}: still there {timeout:g} s after its deletion", "timeout")
            time.sleep(POLL_SECONDS)

    def batch_of(self, ident: str, uid: str) -> dict[str, Any] | None:
        """The Job of a batch (:data:`~noderemedy_runner.job_manifests.BATCH_LABEL`) whose runs
        (:data:`~noderemedy_runner.job_manifests.RUNS_ANNOTATION`) include run ``ident`` of the
        object ``uid`` (:func:`owned_by`), or None."""
        resp = self.batch.list_namespaced_job(
            self.namespace, label_selector=f"{BATCH_LABEL}=true", _preload_content=False
        )
        for job in read_json(resp).get("items") or []:
            notes = (job.get("metadata") or {}).get("annotations") or {}
            try:
                idents = json.loads(notes.get(RUNS_ANNOTATION) or "[]")
            except ValueError:
                continue
            if isinstance(idents, list) and ident in idents and (not uid or owned_by(job, uid)):
                return dict(job)
        return None

    def read(self, jname: str) -> dict[str, Any] | None:
        """Job ``jname``, or None when it does not exist."""
        try:
            resp = self.batch.read_namespaced_job(jname, self.namespace, _preload_content=False)
        except NotFound:
            return None
        return read_json(resp)

    def pods(self, jname: str) -> list[dict[str, Any]]:
        """The pods of Job ``jname``."""
        resp = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"job-name={jname}", _preload_content=False
        )
        return list(read_json(resp).get("items") or [])

    def wait(
        self,
        job: Mapping[str, Any],
        ident: str,
        cancel: threading.Event,
        recovered: bool,
        message_required: bool = True,
    ) -> RunOutcome:
        """Until Job ``job`` ends (its Complete or Failed condition), then its pod's outcome
        (:meth:`outcome`). A pod stuck in one of :data:`STUCK_REASONS` (an image that does not exist,
        a config it cannot start with) ends the run at once as failed, its Job deleted: waiting for
        the deadline would change nothing. ``cancel``: the Job is deleted (its pod with it) and the
        outcome is ``canceled``."""
        jname = str(job["metadata"]["name"])
        started = time.monotonic()
        while True:
            conds = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []}
            done = [t for t in ("Complete", "Failed") if (conds.get(t) or {}).get("status") == "True"]
            if done:
                return self.outcome(
                    jname, ident, done[0], conds[done[0]], recovered, started, message_required
                )
            if cancel.wait(POLL_SECONDS):
                try:
                    self.batch.delete_namespaced_job(jname, self.namespace, propagation_policy="Background")
                except NotFound:
                    pass
                return RunOutcome(ident, "canceled", None, failed_tasks=("canceled: the Job was deleted",))
            try:
                again = self.read(jname)
                stuck = (
                    self.stuck(jname)
                    if again is not None and (again.get("status") or {}).get("active")
                    else ""
                )
            except KubeError as exc:
                log.warning("run %s: reading Job %s: %s", ident, jname, exc)
                continue
            if again is None:
                return RunOutcome(ident, "error", None, failed_tasks=(f"Job {jname} was deleted",))
            if stuck:
                log.info("run %s: Job %s cannot start: %s; deleted", ident, jname, stuck)
                try:
                    self.batch.delete_namespaced_job(jname, self.namespace, propagation_policy="Background")
                except NotFound:
                    pass
                return RunOutcome(
                    ident, "failed", None, failed_tasks=(f"Job {jname}: {stuck}",),
                    seconds=time.monotonic() - started, recovered=recovered,
                )  # fmt: skip
            job = again

    def stuck(self, jname: str) -> str:
        """``"pod <name> container <c>: <reason>: <message>"`` for the first container of Job
        ``jname``'s pods waiting with one of :data:`STUCK_REASONS`; ``""`` when none is."""
        for pod in self.pods(jname):
            status = pod.get("status") or {}
            for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in STUCK_REASONS:
                    message = str(waiting.get("message") or "")[:300]
                    return f"pod {pod['metadata']['name']} container {cs.get('name')}: {waiting['reason']}: {message}"
        return ""

    def outcome(
        self,
        jname: str,
        ident: str,
        ended: str,
        cond: Mapping[str, Any],
        recovered: bool,
        started: float,
        message_required: bool = True,
    ) -> RunOutcome:
        """The outcome from the Job's pod's termination message (a run of ours:
        :func:`outcome_from_dict`); a Job that ended without one (deadline, a pod that never
        started) is a failed run naming why. With ``message_required`` False (a user's pod
        template), a Complete Job is a successful run and a Failed one names its pod's exit."""
        exits: list[str] = []
        for pod in self.pods(jname):
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                term = (cs.get("state") or {}).get("terminated") or {}
                message = term.get("message")
                if term:
                    exits.append(
                        f"container {cs.get('name')} exited {term.get('exitCode')} ({term.get('reason', '')})"
                        + (f": {str(message)[:300]}" if message and not message_required else "")
                    )
                if message and message_required:
                    try:
                        out = outcome_from_dict(json.loads(message), recovered=recovered)
                    except ValueError as exc:
                        return RunOutcome(
                            ident, "error", term.get("exitCode"), failed_tasks=(f"Job {jname}: {exc}",)
                        )
                    log.info("run %s: Job %s %s: %s", ident, jname, ended, out.status)
                    return out
        seconds = time.monotonic() - started
        if not message_required and ended == "Complete":
            log.info("run %s: Job %s Complete", ident, jname)
            return RunOutcome(ident, "successful", 0, seconds=seconds, recovered=recovered)
        reason = f"{cond.get('reason', ended)}: {cond.get('message', '')}".strip(": ")
        if exits:
            reason += "; " + "; ".join(exits[:3])
        status = "timeout" if cond.get("reason") == "DeadlineExceeded" else "failed"
        log.info("run %s: Job %s %s without an outcome (%s)", ident, jname, ended, reason)
        return RunOutcome(
            ident,
            status,
            None,
            failed_tasks=(f"Job {jname}: {reason}",),
            seconds=seconds,
            recovered=recovered,
        )


class JobExecutor(Executor):
    """Runs each playbook action as a Job (module docstring) instead of in this process; the
    same :meth:`run` contract as :class:`Executor` (slots, deadline, cancel, a finished run not
    repeated). Device checks and everything else keep the interface.

    Args:
        api_client: the runner's ApiClient.
        namespace: where the Jobs are created (the runner's own, where its ServiceAccount lives).
        pod: the runner pod's own object (:func:`own_pod`).
        *args, **kwargs: :class:`Executor`'s.

    A cluster-scoped custom resource (NodeFence) owns its runs' Jobs; a namespaced one
    (Metal3Remediation) cannot own an object of another namespace, so its Jobs rely on their TTL.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *args: Any,
        namespace: str,
        pod: Mapping[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.namespace = namespace
        self.pod = pod
        self.jobs = JobRuns(api_client, namespace)

    def perform(self, req: RunRequest) -> RunOutcome:
        """:meth:`Executor.run` as a Job named after the run's ident (see the module docstring)."""
        jname = job_name(req.ident)
        existing = self.jobs.read(jname)
        if existing is not None and (not req.uid or owned_by(existing, req.uid)):
            log.info("run %s: Job %s already exists: adopted", req.ident, jname)
            return self.jobs.wait(existing, req.ident, req.cancel, recovered=True)
        if not self.slots.acquire(req.priority, req.cancel):
            return RunOutcome(req.ident, "canceled", None)
        try:
            return self.start_and_wait(req)
        finally:
            self.slots.release(req.priority)

    def start_and_wait(self, req: RunRequest) -> RunOutcome:
        """The Job of ``req`` created (or adopted: :meth:`JobRuns.start`) and waited for, the
        caller holding its slot; :meth:`perform` without the slot and the first adoption check."""
        node = str(req.extravars.get("node") or "")
        jname = job_name(req.ident)
        owner = job_owner(req.kind, req.name, req.uid, req.namespace)
        body = job_manifest(
            name=jname,
            namespace=self.namespace,
            node=node,
            run={"playbook": req.playbook, "ident": req.ident, "extravars": dict(req.extravars)},
            pod=self.pod,
            deadline=self.run_deadline,
            owner=owner,
        )
        log.info("run %s: %s for %s %s as Job %s", req.ident, req.playbook, req.kind, req.name, jname)
        try:
            job, adopted, error = self.jobs.start(
                body, ident=req.ident, uid=req.uid, node=node, kind=req.kind, name=req.name
            )
        except KubeError as exc:
            return RunOutcome(req.ident, "error", None, failed_tasks=(f"Job {jname}: {exc}",))
        if job is None:
            return RunOutcome(req.ident, "error", None, failed_tasks=(error,))
        return self.jobs.wait(job, req.ident, req.cancel, recovered=adopted)


def owned_by(job: Mapping[str, Any], uid: str) -> bool:
    """Whether ``job`` belongs to the object with metadata.uid ``uid`` (its owner reference), or
    has no owner at all (a Job of a namespaced custom resource, matched by name alone)."""
    refs = (job.get("metadata") or {}).get("ownerReferences") or []
    return not refs or any(r.get("uid") == uid for r in refs)


def own_pod(api_client: client.ApiClient) -> dict[str, Any]:
    """The runner's own pod (``$POD_NAME`` in ``$POD_NAMESPACE``, the Deployment's downward API).
    Raises ValueError when they are not set (the Job executor runs only in a pod)."""
    pod = own_pod_name()
    if pod is None:
        raise ValueError("--executor job: POD_NAME and POD_NAMESPACE must be set (it runs in a pod)")
    name, namespace = pod
    core = api(api_client, client.CoreV1Api)
    return read_json(core.read_namespaced_pod(name, namespace, _preload_content=False))


def job_run(playbook_dir: Path | None = None, data_dir: Path = Path("/tmp/noderemedy-job")) -> int:
    """The remediation pod's side (``noderemedy-runner --job-run``): run ``$NODEREMEDY_JOB`` with
    the in-process :class:`Executor`, write the outcome to :data:`TERMINATION_LOG`, and exit 0 when
    the run succeeded, 1 when it did not, 2 when the description is unusable."""
    try:
        run = json.loads(os.environ[JOB_ENV])
        action = Action(kind="none", playbook=str(run["playbook"]), extravars=dict(run["extravars"]))
        ident = str(run["ident"])
    except (KeyError, TypeError, ValueError) as exc:
        print(f"noderemedy-runner --job-run: ${JOB_ENV}: {exc}", file=sys.stderr)
        return 2
    playbooks, collections = playbook_root(playbook_dir, data_dir)
    executor = Executor(data_dir / "runs", playbooks, collections_path=collections, max_concurrent_runs=1)
    outcome = executor.run(action, kind="Job", name=ident, ident=ident)
    message = json.dumps(outcome_to_dict(outcome))
    try:
        Path(TERMINATION_LOG).write_text(message)
    except OSError as exc:
        print(f"noderemedy-runner --job-run: {TERMINATION_LOG}: {exc}", file=sys.stderr)
    print(outcome.summary(), file=sys.stderr)
    return 0 if outcome.succeeded else 1


__all__ = [
    "JOB_ANNOTATION",
    "MAX_MESSAGE",
    "STUCK_REASONS",
    "JobRuns",
    "TIMESTAMP_ANNOTATION",
    "JobExecutor",
    "job_run",
    "outcome_from_dict",
    "outcome_to_dict",
    "own_pod",
    "owned_by",
]
