"""The remediation pod's Job (pure): its name, its manifest (placement, deadline, retries, owner,
no secret) and the outcome carried in its termination message."""

from __future__ import annotations

import json

import pytest

from noderemedy_runner.job_manifests import JOB_ENV, NODE_ENV, job_manifest, job_name
from noderemedy_runner.jobs import MAX_MESSAGE, outcome_from_dict, outcome_to_dict, owned_by
from noderemedy_runner.outcomes import ModuleResult, Release, RunOutcome, StepEvidence

RUNNER_POD = {
    "spec": {
        "serviceAccountName": "noderemedy-runner",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "nodeSelector": {"lab.noderemedy.io/real": "true"},
        "tolerations": [
            {"key": "lab.noderemedy.io/real", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ],
        "containers": [
            {
                "name": "runner",
                "image": "noderemedy/remediation:0.1.0",
                "imagePullPolicy": "Never",
                "securityContext": {"readOnlyRootFilesystem": True},
                "env": [{"name": "SOMETHING", "value": "of the runner only"}],
            }
        ],
    }
}
RUN = {
    "playbook": "fence_step.yml",
    "ident": "nf-a-isolation-a0",
    "extravars": {"node": "worker-3", "methods": [{"name": "fc-off", "secret_name": "fc-switch"}]},
}


def manifest(**kw):
    args = {
        "name": "nf-a-isolation-a0",
        "namespace": "noderemedy-system",
        "node": "worker-3",
        "run": RUN,
        "pod": RUNNER_POD,
        "deadline": 240.0,
        "owner": {
            "apiVersion": "remediation.noderemedy.io/v1alpha1",
            "kind": "NodeFence",
            "metadata": {"name": "nf-a", "uid": "u-1"},
        },
    }
    args.update(kw)
    return job_manifest(**args)


def test_the_job_never_lands_on_the_node_it_fences_and_takes_the_runners_placement():
    job = manifest()
    pod = job["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["worker-3"]}]}
    ]
    assert pod["serviceAccountName"] == "noderemedy-runner"
    assert pod["nodeSelector"] == RUNNER_POD["spec"]["nodeSelector"]
    assert pod["tolerations"] == RUNNER_POD["spec"]["tolerations"]
    assert pod["securityContext"] == RUNNER_POD["spec"]["securityContext"]
    (c,) = pod["containers"]
    assert c["image"] == "noderemedy/remediation:0.1.0" and c["imagePullPolicy"] == "Never"
    assert c["args"] == ["noderemedy-runner", "--job-run"]
    assert c["securityContext"] == {"readOnlyRootFilesystem": True}
    assert pod["restartPolicy"] == "Never"


def test_the_job_has_no_retries_the_run_deadline_a_ttl_and_its_owner():
    job = manifest()
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 240
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    (ref,) = job["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "remediation.noderemedy.io/v1alpha1",
        "kind": "NodeFence",
        "name": "nf-a",
        "uid": "u-1",
    }
    assert "ownerReferences" not in manifest(owner=None)["metadata"]


def test_the_job_carries_the_run_and_the_node_in_env_and_nothing_of_the_runner_pods_env():
    env = {e["name"]: e for e in manifest()["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env[JOB_ENV]["value"]) == RUN
    assert env[NODE_ENV]["value"] == "worker-3"
    assert "SOMETHING" not in env
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize(
    ("ident", "expected"),
    [("nf-a-isolation-a0", "nf-a-isolation-a0"), ("NF_a.b", None), ("x" * 80, None)],
)
def test_job_names_are_dns_labels_and_unique(ident, expected):
    name = job_name(ident)
    assert len(name) <= 63 and name == name.lower() and name[0].isalnum() and name[-1].isalnum()
    if expected is not None:
        assert name == expected
    else:
        assert name != job_name(ident + "y")


def outcome(**kw) -> RunOutcome:
    base = {
        "ident": "nf-a-power-management-a0",
        "status": "successful",
        "rc": 0,
        "ok": 5,
        "changed": 2,
        "failed": 0,
        "modules": (ModuleResult("noderemedy.core.ipmi_power", "ipmi", True, "off", {"verified": True}),),
        "seconds": 3.2,
        "release": Release(added=True),
        "evidence": StepEvidence(
            True, "power_off", "ipmi-off", {"verified": True, "method": "ipmi", "state": "off"}
        ),
        "artifact_dir": "/tmp/x",
    }
    base.update(kw)
    return RunOutcome(**base)


def test_an_outcome_survives_the_termination_message():
    out = outcome()
    back = outcome_from_dict(json.loads(json.dumps(outcome_to_dict(out))), recovered=True)
    assert back.evidence == out.evidence and back.release == out.release and back.modules == out.modules
    assert (back.status, back.rc, back.ok, back.changed, back.succeeded) == ("successful", 0, 5, 2, True)
    assert back.recovered is True and back.artifact_dir == ""


def test_the_message_stays_under_the_kubelets_limit_keeping_evidence_and_release():
    many = tuple(
        ModuleResult("noderemedy.core.fc_port", "fc", True, "disabled", {"x": "y" * 200}) for _ in range(40)
    )
    doc = outcome_to_dict(outcome(modules=many, failed_tasks=tuple("t" * 1000 for _ in range(10))))
    assert len(json.dumps(doc)) <= MAX_MESSAGE
    back = outcome_from_dict(doc)
    assert back.evidence is not None and back.evidence.fenced and back.release == Release(added=True)
    assert len(back.failed_tasks) == 3 and all(len(t) <= 300 for t in back.failed_tasks)


def test_a_message_that_is_not_an_outcome_is_refused_naming_it():
    with pytest.raises(ValueError, match="termination message"):
        outcome_from_dict({"status": "successful"})
    with pytest.raises(ValueError, match="termination message"):
        outcome_from_dict({"ident": "x", "status": "successful", "rc": 0, "evidence": {"fenced": True}})


def test_a_job_is_adopted_only_by_the_object_that_owns_it():
    job = manifest()
    assert owned_by(job, "u-1")
    assert not owned_by(job, "u-2"), (
        "a re-created NodeFence of the same name must not adopt its predecessor's Job"
    )
    assert owned_by(manifest(owner=None), "u-2"), "a Job without owner is matched by name"
