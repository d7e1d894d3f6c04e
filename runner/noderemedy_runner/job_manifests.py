"""The Jobs of remediation pods, as manifests (pure: builds the Job and Pod spec dicts; the
Jobs are created, adopted and read by :class:`noderemedy_runner.jobs.JobRuns`).

Two kinds of Job: a playbook run of the state machines (:func:`job_manifest`: the runner's own
image runs ``noderemedy-runner --job-run`` on the run described in ``$NODEREMEDY_JOB``) and a pod
remedy (:func:`remedy_job_manifest`: the user's PodTemplateSpec). Both: ``backoffLimit: 0``
(retries belong to the state machine or the escalation), ``activeDeadlineSeconds``,
``ttlSecondsAfterFinished`` and an owner reference to the custom resource clean it up, and the
pod never lands on the node being fenced (required node affinity ``NotIn``); it takes the runner
pod's node selector and tolerations (so it runs wherever the runner may, also while other nodes
are tainted). A run's Job is named after the run's ident (:func:`job_name`), so a restarted or
newly elected runner asking for the same run finds it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from noderemedy_runner.kube.resources import NODEFENCE

#: Environment of the Job's pod: the run (JSON) and the node under remediation.
JOB_ENV = "NODEREMEDY_JOB"
NODE_ENV = "NODEREMEDY_NODE"
#: Environment of a pod remedy's containers: the remedy's name.
REMEDY_ENV = "NODEREMEDY_REMEDY"
#: Environment of a run's pod: its own Job's name and uid (the Job controller's labels on the pod,
#: through the downward API), so a batch's outcomes can be written to a ConfigMap the Job owns.
JOB_NAME_ENV, JOB_UID_ENV = "NODEREMEDY_JOB_NAME", "NODEREMEDY_JOB_UID"
#: Label of a Job that runs a batch (one run for several custom resources), and the annotation
#: listing the idents of its runs (JSON), by which a restarted runner finds the Job of its run.
BATCH_LABEL = "remediation.noderemedy.io/batch"
RUNS_ANNOTATION = "remediation.noderemedy.io/runs"
#: Where the pod writes its outcome (the container's ``terminationMessagePath``).
TERMINATION_LOG = "/dev/termination-log"
#: Finished Jobs are deleted this long after they end (seconds), unless their owner goes first.
JOB_TTL_SECONDS = 3600
#: Labels on every Job (and its pod) of the runner.
JOB_LABELS = {
    "app.kubernetes.io/managed-by": "noderemedy-runner",
    "app.kubernetes.io/component": "remediation",
}
#: The Job controller's labels on a Job's pods (Kubernetes 1.27+): the Job's name and uid.
_JOB_NAME_LABEL, _JOB_UID_LABEL = "batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid"
#: Custom resources that own their runs' Jobs: kind -> apiVersion.
OWNER_KINDS = {NODEFENCE[3]: f"{NODEFENCE[0]}/{NODEFENCE[1]}"}


def job_name(ident: str) -> str:
    """The Job name of run ``ident``: the ident lowercased when it is a DNS-1123 label (at most 63
    characters), else its first 52 characters and a 10-hex hash of the whole (still unique)."""
    name = ident.lower().replace("_", "-").replace(".", "-").strip("-")
    if len(name) <= 63 and name == ident.lower():
        return name
    digest = hashlib.sha256(ident.encode()).hexdigest()[:10]
    return f"{name[:52].rstrip('-')}-{digest}"


def job_owner(kind: str, name: str, uid: str, namespace: str | None) -> dict[str, Any] | None:
    """The owner of a run's Job: custom resource ``kind`` ``name`` (``uid``) when it is one of
    :data:`OWNER_KINDS` and cluster-scoped (``namespace`` None: a namespaced object cannot own a
    Job of another namespace, so its Jobs go by their TTL), else None. Pure."""
    group_version = OWNER_KINDS.get(kind)
    if not group_version or not uid or namespace is not None:
        return None
    return {"apiVersion": group_version, "kind": kind, "metadata": {"name": name, "uid": uid}}


def job_manifest(
    *,
    name: str,
    namespace: str,
    node: str,
    run: Mapping[str, Any],
    pod: Mapping[str, Any],
    deadline: float,
    owner: Mapping[str, Any] | None,
    batch: Sequence[str] = (),
    owners: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The Job of one run, or of one batch of runs (pure).

    Args:
        name: the Job name (:func:`job_name`).
        namespace: the runner's namespace.
        node: the node under remediation (``$NODEREMEDY_NODE``; the pod is kept off it); a batch:
            ``""``, its nodes are ``batch``.
        run: the run description the pod executes (``playbook``, ``ident``, ``extravars``:
            references only, checked by :class:`~noderemedy_runner.machines.actions.Action`; a
            batch: ``playbook``, ``ident`` and ``runs``, a list of ``ident``, ``kind``, ``name``,
            ``extravars``).
        pod: the runner pod's own spec (image, ServiceAccount, security contexts, node selector,
            tolerations and pull policy are taken from it).
        deadline: the run deadline, seconds (``activeDeadlineSeconds``).
        owner: the custom resource (apiVersion, kind, metadata.name/uid) the Job belongs to.
        batch: the nodes of a batch: the pod is kept off every one of them, ``$NODEREMEDY_NODE``
            lists them (comma-separated), the Job carries :data:`BATCH_LABEL` and, in
            :data:`RUNS_ANNOTATION`, the idents of ``run["runs"]``.
        owners: more custom resources the Job belongs to (a batch's; the Job is garbage-collected
            once every one of them is gone).
    """
    spec = pod.get("spec") or {}
    runner = (spec.get("containers") or [{}])[0]
    off = sorted({n for n in batch if n}) or [node]
    keep_off = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": off}]}
    affinity: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [keep_off]}}
    }
    container = {
        "name": "remedy",
        "image": runner.get("image"),
        "imagePullPolicy": runner.get("imagePullPolicy", "IfNotPresent"),
        "args": ["noderemedy-runner", "--job-run"],
        "env": [
            {"name": JOB_ENV, "value": json.dumps(dict(run), sort_keys=True)},
            {"name": NODE_ENV, "value": ",".join(off) if batch else node},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {
                "name": JOB_NAME_ENV,
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{_JOB_NAME_LABEL}']"}},
            },
            {
                "name": JOB_UID_ENV,
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{_JOB_UID_LABEL}']"}},
            },
        ],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if runner.get("securityContext"):
        container["securityContext"] = runner["securityContext"]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": spec.get("serviceAccountName", "default"),
        "affinity": affinity,
        "tolerations": list(spec.get("tolerations") or []),
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    for key in ("securityContext", "nodeSelector", "priorityClassName"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    labels = (
        {**JOB_LABELS, BATCH_LABEL: "true"}
        if batch
        else {**JOB_LABELS, "remediation.noderemedy.io/node": node}
    )
    job = _job(
        name, namespace, labels, owner, deadline, {"metadata": {"labels": labels}, "spec": pod_spec}, owners
    )
    if batch:
        idents = [str(r.get("ident")) for r in run.get("runs") or []]
        job["metadata"]["annotations"] = {RUNS_ANNOTATION: json.dumps(idents)}
    return job


def _job(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any] | None,
    deadline: float,
    template: Mapping[str, Any],
    owners: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A run's Job around pod ``template``: ``labels``, an owner reference to ``owner`` (when
    given) and to each of ``owners``, no retries, ``deadline`` seconds, the TTL."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    refs = [
        {
            "apiVersion": o.get("apiVersion"),
            "kind": o.get("kind"),
            "name": (o.get("metadata") or {}).get("name"),
            "uid": (o.get("metadata") or {}).get("uid"),
        }
        for o in ([owner] if owner is not None else []) + list(owners)
    ]
    if refs:
        meta["ownerReferences"] = refs
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(round(deadline))),
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
            "template": dict(template),
        },
    }


def remedy_job_manifest(
    *,
    name: str,
    namespace: str,
    node: str,
    remedy: str,
    template: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    deadline: float,
    owner: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The Job of a pod remedy (the seed's ``remedyConfigs[].podTemplate``), pure.

    The user's PodTemplateSpec runs as it is, with: ``restartPolicy: Never`` (retries belong to
    the escalation), a required node affinity keeping it off ``node`` (added to each of the
    template's own required terms), ``$NODEREMEDY_NODE``, ``$NODEREMEDY_REMEDY``, ``$POD_NAME`` and
    ``$POD_NAMESPACE`` in every container (the seed: the node comes in through the environment),
    and, when the template sets none, the runner pod's node selector and tolerations (so it runs
    wherever the runner may, also while other nodes are tainted). Its ServiceAccount is the
    template's own (else the namespace's ``default``): the pod reads what it needs itself.

    Args:
        name: the Job name (:func:`noderemedy_runner.machines.remedies.remedy_job_name`).
        namespace: the runner's namespace.
        node: the node under remediation.
        remedy: the remedy's name (label and env).
        template: the PodTemplateSpec (``metadata``, ``spec``), already shape-checked by the
            configuration; the API server has the last word (a refused Job is a failed remedy).
        pod: the runner pod's own object, or None (a runner outside the cluster).
        deadline: seconds (``activeDeadlineSeconds``: the remedy's period, else the run deadline).
        owner: the NodeFence (apiVersion, kind, metadata.name/uid), or None.
    """
    tmeta = dict(template.get("metadata") or {})
    spec = json.loads(json.dumps(template.get("spec") or {}))  # a deep copy
    runner = (pod or {}).get("spec") or {}
    keep_off = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [node]}
    required = (
        spec.setdefault("affinity", {})
        .setdefault("nodeAffinity", {})
        .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    )
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {**t, "matchExpressions": [*(t.get("matchExpressions") or []), keep_off]} for t in terms
    ]
    env: list[dict[str, Any]] = [
        {"name": NODE_ENV, "value": node},
        {"name": REMEDY_ENV, "value": remedy},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    ours = {str(e["name"]) for e in env}
    for c in spec.get("containers") or []:
        c["env"] = [*(e for e in c.get("env") or [] if e.get("name") not in ours), *env]
    spec["restartPolicy"] = "Never"
    for key in ("nodeSelector", "tolerations"):
        if not spec.get(key) and runner.get(key):
            spec[key] = runner[key]
    labels = {
        **{str(k): str(v) for k, v in (tmeta.get("labels") or {}).items()},
        **JOB_LABELS,
        "remediation.noderemedy.io/node": node,
        "remediation.noderemedy.io/remedy": remedy,
    }
    return _job(
        name, namespace, labels, owner, deadline, {"metadata": {**tmeta, "labels": labels}, "spec": spec}
    )


__all__ = [
    "BATCH_LABEL",
    "JOB_ENV",
    "JOB_NAME_ENV",
    "JOB_UID_ENV",
    "RUNS_ANNOTATION",
    "JOB_LABELS",
    "JOB_TTL_SECONDS",
    "NODE_ENV",
    "OWNER_KINDS",
    "REMEDY_ENV",
    "TERMINATION_LOG",
    "job_manifest",
    "job_name",
    "job_owner",
    "remedy_job_manifest",
]
