"""Pod remedies: a ``run_remedy`` action of the escalation
(:mod:`noderemedy_runner.machines.remedies`) performed as a Job of the user's PodTemplateSpec.

The template is looked up in this runner's own Configurations (the NodeFence annotation
``remediation.noderemedy.io/configuration`` names the Configuration; the action the remedy), never
read from the NodeFence: who may create a NodeFence may not choose what runs. The Job
(:func:`noderemedy_runner.job_manifests.remedy_job_manifest`) is created or adopted by its name
(the same after a restart, so a runner killed during a remedy adopts the Job instead of starting a second
one), and its end is read back from the Job's conditions and its pod's container states: a
Complete Job is a remedy that succeeded; a failed pod, the deadline (the remedy's period), an image
that cannot be pulled, a template that cannot be rendered into a Job or that the API server
refuses are a remedy that failed, with the reason (never an exception that stalls the loop). A pod remedy takes a run slot of the reconciler's executor (``--max-concurrent-runs``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from noderemedy_runner.config.remedy import ConfigurationSet
from noderemedy_runner.executor import Executor
from noderemedy_runner.job_manifests import OWNER_KINDS, remedy_job_manifest
from noderemedy_runner.jobs import JobRuns
from noderemedy_runner.loops.memory import meta_of
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.remedies import PodRemedyResult

log = logging.getLogger(__name__)

#: NodeFence annotation naming the Configuration that made it (written by the detector).
CONFIGURATION_ANNOTATION = "remediation.noderemedy.io/configuration"


class PodRemedies:
    """Runs pod remedies as Jobs in ``jobs.namespace``.

    Args:
        jobs: the Job layer (:class:`~noderemedy_runner.jobs.JobRuns`).
        configs: this runner's remedy Configurations (where the pod templates come from).
        pod: the runner's own pod (node selector and tolerations for templates without), or None.
        run_deadline: the Job's deadline when the remedy has no period, seconds.
    """

    def __init__(
        self,
        jobs: JobRuns,
        configs: ConfigurationSet,
        *,
        pod: Mapping[str, Any] | None = None,
        run_deadline: float = 300.0,
    ) -> None:
        self.jobs = jobs
        self.configs = configs
        self.pod = pod
        self.run_deadline = run_deadline

    def template(self, obj: Mapping[str, Any], remedy: str) -> dict[str, Any] | str:
        """The PodTemplateSpec of ``remedy`` for NodeFence ``obj`` (a fresh dict), or why there is
        none (a str naming the remedy and the Configuration)."""
        meta = meta_of(obj)
        cname = str((meta.get("annotations") or {}).get(CONFIGURATION_ANNOTATION) or "")
        cfg = self.configs.named(cname) if cname else None
        if cfg is None:
            return f"remedy {remedy}: Configuration {cname or '(none)'} is not one of this runner's"
        rc = cfg.remedy_config(remedy)
        if rc is None or rc.pod_template is None:
            return f"remedy {remedy}: Configuration {cname} has no remedyConfigs podTemplate for it"
        return dict(json.loads(rc.pod_template))

    def run(
        self, obj: Mapping[str, Any], action: Action, executor: Executor, cancel: threading.Event
    ) -> PodRemedyResult | None:
        """Create or adopt the Job of ``action`` (a ``run_remedy``) and wait for its end. None when
        ``cancel`` was set meanwhile (nothing is known). Raises
        :class:`~noderemedy_runner.kube.errors.KubeError` for API failures other than a refused
        create (the caller requeues)."""
        meta = meta_of(obj)
        jname = str(action.ident)
        node = str(action.extravars.get("node") or "")
        remedy = str(action.extravars.get("remedy") or "")
        found = self.template(obj, remedy)
        if isinstance(found, str):
            return PodRemedyResult(jname, False, message=found)
        deadline = action.extravars.get("deadline")
        kind = str(obj.get("kind") or "NodeFence")
        owner = (
            {"apiVersion": OWNER_KINDS[kind], "kind": kind, "metadata": meta} if kind in OWNER_KINDS else None
        )
        try:
            body = remedy_job_manifest(
                name=jname,
                namespace=self.jobs.namespace,
                node=node,
                remedy=remedy,
                template=found,
                pod=self.pod,
                deadline=float(deadline) if deadline else self.run_deadline,
                owner=owner,
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # a template the configuration let through that still cannot be rendered: this remedy
            # fails (condition, Event, escalation); the loop goes on for this node and the others
            log.warning("remedy %s: its Job cannot be rendered: %r", remedy, exc)
            return PodRemedyResult(
                jname, False, message=f"remedy {remedy}: its Job cannot be rendered: {exc!r}"
            )
        if not executor.slots.acquire(0, cancel):
            return None
        try:
            job, adopted, error = self.jobs.start(
                body,
                ident=jname,
                uid=str(meta.get("uid") or ""),
                node=node,
                kind=kind,
                name=str(meta.get("name")),
            )
            if job is None:
                return PodRemedyResult(jname, False, message=f"remedy {remedy}: {error}")
            log.info("remedy %s: Job %s %s", remedy, jname, "adopted" if adopted else "created")
            outcome = self.jobs.wait(job, jname, cancel, recovered=adopted, message_required=False)
        finally:
            executor.slots.release(0)
        if outcome.status == "canceled":
            return None
        message = "; ".join(outcome.failed_tasks) or f"Job {jname} Complete"
        return PodRemedyResult(jname, outcome.succeeded, outcome.timed_out, message)


__all__ = ["CONFIGURATION_ANNOTATION", "PodRemedies"]
