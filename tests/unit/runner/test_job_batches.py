"""A batch of runs as one Job (pure parts): the batch's manifest (kept off every node of the
batch, owned by each custom resource, its runs listed for adoption), its run description, the
outcomes ConfigMap the pod writes and the runner reads, and a run the pod left without one."""

from __future__ import annotations

import json

import pytest
from test_jobs import RUNNER_POD, manifest

from noderemedy_runner.job_batches import (
    OUTCOMES_KEY,
    batch_forks,
    batch_message,
    batch_runs,
    missing_outcome,
    outcomes_configmap,
    outcomes_from_configmap,
)
from noderemedy_runner.job_manifests import (
    BATCH_LABEL,
    JOB_ENV,
    JOB_NAME_ENV,
    JOB_UID_ENV,
    NODE_ENV,
    RUNS_ANNOTATION,
    job_manifest,
)
from noderemedy_runner.outcomes import ModuleResult, Release, RunOutcome, StepEvidence


def run(i: int) -> dict:
    return {
        "ident": f"nf-{i}-r0-power-management-a0",
        "kind": "NodeFence",
        "name": f"nf-{i}",
        "extravars": {"node": f"rack-{i}", "methods": [{"name": "pdu-off", "secret_name": "pdu"}]},
    }


def owner(i: int) -> dict:
    return {
        "apiVersion": "remediation.noderemedy.io/v1alpha1",
        "kind": "NodeFence",
        "metadata": {"name": f"nf-{i}", "uid": f"u-{i}"},
    }


def batch_job() -> dict:
    runs = [run(i) for i in range(3)]
    return job_manifest(
        name="batch-1-1",
        namespace="noderemedy-system",
        node="",
        run={"playbook": "fence_step.yml", "ident": "batch-1-1", "runs": runs},
        pod=RUNNER_POD,
        deadline=240.0,
        owner=None,
        batch=[r["extravars"]["node"] for r in runs],
        owners=[owner(i) for i in range(3)],
    )


def test_a_batch_job_is_kept_off_every_node_of_the_batch():
    pod = batch_job()["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {
        "matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["rack-0", "rack-1", "rack-2"]}
        ]
    }
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env[NODE_ENV]["value"] == "rack-0,rack-1,rack-2"


def test_a_batch_job_belongs_to_each_custom_resource_and_lists_its_runs_for_adoption():
    job = batch_job()
    assert [r["uid"] for r in job["metadata"]["ownerReferences"]] == ["u-0", "u-1", "u-2"]
    assert json.loads(job["metadata"]["annotations"][RUNS_ANNOTATION]) == [run(i)["ident"] for i in range(3)]
    assert job["metadata"]["labels"][BATCH_LABEL] == "true"
    assert "remediation.noderemedy.io/node" not in job["metadata"]["labels"]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env[JOB_ENV]["value"])["runs"] == [run(i) for i in range(3)]
    # the pod learns its own Job from the Job controller's labels (downward API), for the outcomes' owner
    assert (
        env[JOB_NAME_ENV]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['batch.kubernetes.io/job-name']"
    )
    assert (
        env[JOB_UID_ENV]["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['batch.kubernetes.io/controller-uid']"
    )


def test_a_run_of_its_own_keeps_its_node_label_and_one_owner():
    job = manifest()
    assert job["metadata"]["labels"]["remediation.noderemedy.io/node"] == "worker-3"
    assert BATCH_LABEL not in job["metadata"]["labels"] and "annotations" not in job["metadata"]
    assert len(job["metadata"]["ownerReferences"]) == 1


def test_a_batch_description_is_checked_naming_the_field():
    assert batch_runs({"runs": [run(0), run(1)]}) == [run(0), run(1)]
    with pytest.raises(ValueError, match=r"^runs: "):
        batch_runs({"runs": []})
    with pytest.raises(ValueError, match=r"runs\[1\]\.name"):
        batch_runs({"runs": [run(0), {**run(1), "name": ""}]})
    with pytest.raises(ValueError, match=r"runs\[0\]\.extravars"):
        batch_runs({"runs": [{**run(0), "extravars": "node=x"}]})
    with pytest.raises(ValueError, match=r"runs\[1\]\.ident: .* twice"):
        batch_runs({"runs": [run(0), run(0)]})


def test_a_batch_pods_forks_are_the_runners_batch_size_or_its_runs_for_an_older_job():
    assert batch_forks({"runs": [], "forks": 20}, 100) == 20
    assert batch_forks({"runs": []}, 7) == 7  # a Job written before the field
    for bad in (0, -1, "20", True, 2.5):
        with pytest.raises(ValueError, match=r"^forks: "):
            batch_forks({"forks": bad}, 3)


def outcome(ident: str, **kw) -> RunOutcome:
    base = {
        "ident": ident,
        "status": "successful",
        "rc": 0,
        "ok": 4,
        "modules": (ModuleResult("noderemedy.core.pdu_outlet", "pdu", True, "off", {"verified": True}),),
        "release": Release(added=True, deleted_pods=tuple(f"default/web-{i}" for i in range(30))),
        "evidence": StepEvidence(
            True, "power_off", "pdu-off", {"verified": True, "method": "pdu", "plugs": ["7"]}
        ),
    }
    base.update(kw)
    return RunOutcome(**base)


def test_twenty_hosts_outcomes_go_whole_through_the_configmap_where_a_termination_message_could_not_hold_them():
    outs = {f"nf-{i}-a0": outcome(f"nf-{i}-a0") for i in range(20)}
    cm = outcomes_configmap("batch-1-1", "ns", outs, {"name": "batch-1-1", "uid": "j-1"})
    assert len(cm["data"][OUTCOMES_KEY]) > 4096  # what the kubelet keeps of a termination message
    assert cm["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "batch-1-1", "uid": "j-1"}
    ]
    back = outcomes_from_configmap(json.loads(json.dumps(cm))["data"], recovered=True)
    assert set(back) == set(outs)
    for ident, out in outs.items():
        assert back[ident].evidence == out.evidence and back[ident].release == out.release
        assert back[ident].recovered is True and back[ident].succeeded
    assert "ownerReferences" not in outcomes_configmap("b", "ns", outs, None)["metadata"]
    message = batch_message("batch-1-1", outs, "configmap/batch-1-1")
    assert len(message) <= 4096 and json.loads(message)["status"]["nf-3-a0"] == "successful"


def test_a_configmap_without_outcomes_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=OUTCOMES_KEY):
        outcomes_from_configmap({})
    with pytest.raises(ValueError, match=OUTCOMES_KEY):
        outcomes_from_configmap({OUTCOMES_KEY: "[1, 2]"})
    with pytest.raises(ValueError, match="termination message"):
        outcomes_from_configmap({OUTCOMES_KEY: json.dumps({"x": {"status": "successful"}})})


def test_a_run_the_pod_left_without_an_outcome_fails_alone_naming_the_job():
    whole = RunOutcome("batch-1-1", "successful", 0)
    out = missing_outcome("nf-1-a0", whole, "batch-1-1")
    assert out.ident == "nf-1-a0" and out.status == "failed" and not out.succeeded
    assert out.failed_tasks == ("Job batch-1-1: no outcome of run nf-1-a0",)
    ended = RunOutcome("batch-1-1", "timeout", None, failed_tasks=("Job batch-1-1: DeadlineExceeded",))
    late = missing_outcome("nf-2-a0", ended, "batch-1-1")
    assert late.status == "timeout" and late.failed_tasks[0].endswith("DeadlineExceeded")
