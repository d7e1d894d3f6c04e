"""Remedy escalation (machines/remedies.py through machines/nodefence.decide): pod remedies run
once each, escalate after their period or at once when they fail, hand over to the fence flow,
and never release anything themselves. Pure: no cluster."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from nodefence_world import NAME, NODE, T0, fence_config

from noderemedy_runner.job_manifests import NODE_ENV, REMEDY_ENV, remedy_job_manifest
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.conditions import find_condition
from noderemedy_runner.machines.nodefence import (
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    decide,
    is_terminal,
)
from noderemedy_runner.machines.remedies import (
    ChainError,
    ChainRemedy,
    PodRemedyResult,
    parse_chain,
    remedy_job_name,
)

POLICY = NodeFencePolicy(grace_seconds=10, step_retries=1, retry_delay_seconds=5, max_restarts=1)
CONFIG = fence_config()
NOW = float(T0 + 1000)
REPAIR = ChainRemedy("repair", 20.0, pod=True)
REBOOT = ChainRemedy("reboot", 30.0, pod=True)
FENCE = ChainRemedy("fence")
JOB = remedy_job_name(NAME, "repair")
NEW = NodeFenceStatus(observed_generation=1)


def obs(now: float = NOW, **kw: Any) -> NodeFenceObservations:
    base: dict[str, Any] = {
        "node": NODE,
        "now": now,
        "node_ready": False,
        "not_ready_since": float(T0),
        "generation": 1,
    }
    base.update(kw)
    return NodeFenceObservations(**base)


def step(s: NodeFenceStatus, o: NodeFenceObservations, chain: tuple[ChainRemedy, ...]) -> Action:
    return decide(NAME, s, o, CONFIG, POLICY, "fencing", chain)


def written(a: Action) -> NodeFenceStatus:
    assert a.kind == "write_status", a
    return NodeFenceStatus.from_dict(a.status)


def started(chain: tuple[ChainRemedy, ...]) -> NodeFenceStatus:
    a = step(NEW, obs(), chain)
    assert a.reason == "RemedyStarted"
    return written(a)


def reason(s: NodeFenceStatus, type_: str = "Processing") -> str:
    c = find_condition(s.conditions, type_)
    return c.reason if c is not None else ""


def test_a_pod_remedy_runs_as_its_job_then_escalates_to_the_fence_flow_after_its_period() -> None:
    chain = (REPAIR, FENCE)
    s = started(chain)
    assert s.remedy is not None and (s.remedy.name, s.remedy.index, s.remedy.job) == ("repair", 0, JOB)
    assert s.remedy.timeout == 20.0 and s.remedy.start_time == NOW and s.status == "New"
    run = step(s, obs(), chain)
    assert (run.kind, run.ident) == ("run_remedy", JOB)
    assert run.extravars == {"node": NODE, "nodefence": NAME, "remedy": "repair", "deadline": 20.0}
    s = written(step(s, obs(remedy_result=PodRemedyResult(JOB, True, message="Complete")), chain))
    assert s.remedy is not None and s.remedy.result == "Succeeded" and JOB in s.jobs
    assert reason(s) == "RemedySucceeded"
    waiting = step(s, obs(NOW + 10, remedy_result=PodRemedyResult(JOB, True)), chain)
    assert waiting.kind == "wait" and 0 < waiting.seconds <= 10
    s = written(step(s, obs(NOW + 20), chain))
    assert s.remedy is not None and (s.remedy.name, s.remedy.index) == ("fence", 1)
    assert reason(s) == "RemedyEscalated"
    assert "repair did not make the node Ready within 20 s; escalated to fence" in str(
        find_condition(s.conditions, "Processing")
    )
    # the fence flow takes over: its first step starts
    nxt = step(s, obs(NOW + 21), chain)
    assert nxt.reason == "StartIsolation" and written(nxt).current_run is not None, nxt


def test_a_failed_remedy_escalates_at_once_and_the_last_one_failing_is_terminal() -> None:
    chain = (REPAIR, REBOOT)
    s = started(chain)
    a = step(s, obs(remedy_result=PodRemedyResult(JOB, False, message="Job x: BackoffLimitExceeded")), chain)
    assert a.reason == "RemedyFailed"
    s = written(a)
    assert s.remedy is not None and s.remedy.name == "reboot" and s.remedy.index == 1
    assert "repair failed: Job x: BackoffLimitExceeded; escalated to reboot" in str(s.conditions)
    job2 = remedy_job_name(NAME, "reboot")
    assert step(s, obs(), chain).ident == job2
    a = step(
        s, obs(remedy_result=PodRemedyResult(job2, False, timed_out=True, message="DeadlineExceeded")), chain
    )
    s = written(a)
    assert s.status == "Error" and reason(s, "Succeeded") == "RemediesExhausted"
    assert "reboot timed out: DeadlineExceeded, and it was the last remedy" in str(s.conditions)
    assert is_terminal(s, POLICY)
    # terminal: nothing more, whatever is observed (no retry storm), even a Ready node
    for o in (obs(NOW + 3600), obs(NOW + 3600, node_ready=True, not_ready_since=None)):
        assert step(s, o, chain).kind == "none"


def test_a_remedy_that_made_the_node_ready_ends_final() -> None:
    chain = (REPAIR, FENCE)
    s = started(chain)
    s = written(step(s, obs(remedy_result=PodRemedyResult(JOB, True)), chain))
    s = written(step(s, obs(NOW + 5, node_ready=True, not_ready_since=None), chain))
    assert s.status == "Final" and reason(s, "Succeeded") == "RemedySucceeded"
    assert not s.fence_levels and s.current_run is None  # no device was touched


def test_clean_resources_hands_over_to_the_fence_flow_which_alone_releases() -> None:
    clean = replace(REPAIR, clean_resources=True)
    chain = (clean,)
    s = started(chain)
    s = written(step(s, obs(remedy_result=PodRemedyResult(JOB, True)), chain))
    assert "released once the fence flow has verified its fence" in str(s.conditions)
    nxt = step(s, obs(NOW + 1), chain)
    # the fence flow's first step, no release before a fence it verifies (invariant 1)
    assert nxt.reason == "StartIsolation" and not nxt.releases_workloads


@pytest.mark.parametrize("result", [None, PodRemedyResult(JOB, True), PodRemedyResult(JOB, False)])
def test_the_escalation_never_releases_workloads_itself(result: PodRemedyResult | None) -> None:
    chain = (REPAIR, REBOOT)
    s = started(chain)
    for t in range(0, 120, 7):
        a = step(s, obs(NOW + t, remedy_result=result), chain)
        assert not a.releases_workloads and a.kind in ("write_status", "run_remedy", "wait", "none"), a
        if a.kind == "write_status":
            s = written(a)


def test_the_grace_period_is_kept_and_a_ready_node_starts_nothing() -> None:
    chain = (REPAIR, FENCE)
    a = step(NEW, obs(not_ready_since=NOW - 4), chain)
    assert a.kind == "wait" and a.seconds == pytest.approx(6)
    a = step(NEW, obs(node_ready=True, not_ready_since=None), chain)
    assert a.kind != "run_remedy" and (a.kind != "write_status" or written(a).remedy is None)


def test_a_chain_without_a_pod_remedy_is_the_fence_flow_alone() -> None:
    for s in (NEW, started((REPAIR, FENCE))):
        s = replace(s, remedy=None, conditions=())
        assert step(s, obs(), (FENCE,)) == step(s, obs(), ())


def test_a_remedy_no_longer_in_the_chain_stops_with_an_error_naming_it() -> None:
    s = started((REPAIR, FENCE))
    s = written(step(s, obs(), (REBOOT, FENCE)))
    assert s.status == "Error" and reason(s) == "RemedyNotFound" and "repair" in str(s.conditions)


def test_chain_annotation_round_trip_and_errors() -> None:
    text = json.dumps([{"name": "repair", "period": 20, "pod": True}, {"name": "fence", "executor": "job"}])
    assert parse_chain(text) == (REPAIR, ChainRemedy("fence", executor="job"))
    assert parse_chain(None) == () == parse_chain("")
    for bad, where in (("{", "not JSON"), ('{"a": 1}', "a list"), ('[{"period": 1}]', r"\[0\].name"),
                       ('[{"name": "x", "period": -1}]', r"\[0\].period")):  # fmt: skip
        with pytest.raises(ChainError, match=where):
            parse_chain(bad)


def test_remedy_job_names_are_dns_labels_and_stable() -> None:
    long = remedy_job_name("nf-" + "x" * 70, "repair")
    assert len(long) <= 63 and long == remedy_job_name("nf-" + "x" * 70, "repair")
    assert long != remedy_job_name("nf-" + "x" * 70, "reboot")
    assert remedy_job_name("nf-a", "repair") == "nf-a-remedy-repair"


TEMPLATE = {
    "metadata": {"labels": {"team": "ops"}},
    "spec": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
                    ]
                }
            }
        },
        "containers": [
            {"name": "fix", "image": "repair:1", "env": [{"name": NODE_ENV, "value": "spoofed"}]},
            {"name": "log", "image": "log:1"},
        ],
        "restartPolicy": "Never",
    },
}
RUNNER_POD = {"spec": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"role": "infra"}}}


def manifest(template: dict[str, Any] = TEMPLATE, pod: dict[str, Any] | None = RUNNER_POD) -> dict[str, Any]:
    owner = {"apiVersion": "remediation.noderemedy.io/v1alpha1", "kind": "NodeFence",
             "metadata": {"name": NAME, "uid": "u-1"}}  # fmt: skip
    return remedy_job_manifest(
        name=JOB, namespace="fencing", node=NODE, remedy="repair", template=template, pod=pod,
        deadline=20.0, owner=owner,
    )  # fmt: skip


def test_the_remedy_job_is_kept_off_the_node_in_every_term_of_the_templates_affinity() -> None:
    job = manifest()
    spec = job["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keep_off = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [NODE]}
    assert len(terms) == 2 and all(keep_off in t["matchExpressions"] for t in terms)
    assert terms[0]["matchExpressions"][0]["key"] == "zone" and "matchFields" in terms[1]
    bare = manifest({"spec": {"containers": [{"name": "c", "image": "i"}]}}, None)
    bterms = bare["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert bterms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [keep_off]}
    ]
    assert TEMPLATE["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]}]  # not mutated


def test_the_remedy_job_passes_the_node_runs_once_and_belongs_to_the_nodefence() -> None:
    job = manifest()
    spec = job["spec"]["template"]["spec"]
    for c in spec["containers"]:
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env[NODE_ENV] == NODE and env[REMEDY_ENV] == "repair"  # ours win over the template's
        assert [e["name"] for e in c["env"]].count(NODE_ENV) == 1
    assert spec["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 20 and job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "ops" and labels["remediation.noderemedy.io/remedy"] == "repair"
    assert "serviceAccountName" not in spec  # the namespace's default, or the template's own


def test_the_runner_placement_only_fills_what_the_template_leaves_out() -> None:
    spec = manifest()["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}] and spec["nodeSelector"] == {"role": "infra"}
    own = {"spec": {**TEMPLATE["spec"], "tolerations": [{"key": "k", "operator": "Exists"}]}}
    assert manifest(own)["spec"]["template"]["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert "tolerations" not in manifest(pod=None)["spec"]["template"]["spec"]
