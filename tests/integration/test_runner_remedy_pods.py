"""The seed's ``remedyConfigs`` honoured on the lab's real nodes: a remedy with a ``podTemplate`` runs
that template as a Job (the user's image and command, the node in ``$NODEREMEDY_NODE``), never on
the node it remedies, is adopted by a runner killed and restarted while it runs, and escalates to the next remedy when the node is still not Ready after its
``period`` (NodeHealthCheck's ``escalatingRemediations``); the fence flow, last in the chain, then
fences and recovers the node. A template the API server refuses and an image that does not exist
fail their remedy at once with a condition naming it, each tried once: no retry storm.

The runner is the real ``noderemedy-runner`` process with its detector on: the NodeFence, its
remedy chain and its Configuration come from the detector, as for users.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    OOS,
    POLICY,
    FenceNamespace,
    fence_ns,
)
from kube_helpers import kjson, wait_for
from kubernetes import client
from runner_harness import Runner, events, nodefences, write_config
from test_real_node_fencing import REAL

from noderemedy_lab.images import BUSYBOX_IMAGE
from noderemedy_lab.realnode import REAL_TAINT
from noderemedy_runner.jobs import JOB_ANNOTATION
from noderemedy_runner.machines.remedies import CHAIN_ANNOTATION, remedy_job_name

pytestmark = [pytest.mark.lab, pytest.mark.kube]

#: Seconds the pod remedy is given to make the node Ready before the escalation.
PERIOD = 30
KWOK_NODE = "lab-node-2"


def pod_template(
    name: str, image: str = BUSYBOX_IMAGE, command: str = 'echo "repairing $NODEREMEDY_NODE"'
) -> str:
    """A ``remedyConfigs`` entry (YAML) running ``command`` on a real node."""
    return f"""\
- name: {name}
  podTemplate:
    spec:
      nodeSelector: {{lab.noderemedy.io/real: "true"}}
      tolerations: [{{key: {REAL_TAINT["key"]}, operator: Equal, value: "true", effect: NoSchedule}}]
      terminationGracePeriodSeconds: 1
      containers:
      - name: {name}
        image: {image}
        imagePullPolicy: Never
        command: [/bin/sh, -c, '{command}']
"""


def configuration(node: str, remedies: str, configs: str) -> str:
    return f"""\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {{name: remedy-pods}}
nodeSelector: kubernetes.io/hostname={node}
thresholdConfigs:
- nodeConditionType: Ready
  nodeConditionStatus: [False, Unknown]
  nodeConditionPeriod: 2s
{remedies}
remedyConfigs:
{configs}
stormGuard: {{maxUnhealthy: 1, cooldown: 0s}}
"""


def runner_for(lab: Any, fence_ns: FenceNamespace, tmp_path: Path, config: str) -> Runner:  # noqa: F811
    snmp_dir = lab.info["devices"]["snmp_persistent_dir"]
    return Runner(
        lab, fence_ns.name, tmp_path, "--poll-interval", "0.2", "--run-env", f"SNMP_PERSISTENT_DIR={snmp_dir}",
        *POLICY, config=write_config(tmp_path, config), identity="remedy-runner",
    )  # fmt: skip


def the_nodefence(api: client.ApiClient, node: str) -> dict[str, Any] | None:
    return next((o for o in nodefences(api).values() if o["spec"]["node"] == node), None)


def settled(api: client.ApiClient, node: str) -> dict[str, Any] | None:
    obj = the_nodefence(api, node)
    return obj if obj and (obj.get("status") or {}).get("status") in ("Final", "Error") else None


def reasons(api: client.ApiClient, name: str) -> list[tuple[str, str]]:
    # in the order written: timestamps have whole seconds, and two Events of one second (a Job
    # adopted as Complete by a runner that started late, and the escalation) keep the order of
    # their resourceVersions, which etcd gives in the order of the writes
    evs = sorted(
        events(api, "NodeFence", name),
        key=lambda e: (e.first_timestamp or e.event_time, int(e.metadata.resource_version or 0)),
    )
    return [(e.reason, e.message) for e in evs]


@pytest.fixture
def real_down(lab_real: Any) -> Iterator[str]:
    """lab-real-1 powered off (its BMC); afterwards untainted, powered on and Ready."""
    node = REAL[1]
    try:
        lab_real.power_off(node)
        lab_real.wait_nodes([node], {"False", "Unknown"}, 120)
        yield node
    finally:  # also after a failed setup: the session's later tests need the node back
        lab_real.kubectl("taint", "node", node, f"{OOS}-")
        lab_real.power_on(node)
        lab_real.fc_port(node, True)
        lab_real.wait_nodes([node], "True", 180)


@pytest.mark.timeout(600)
def test_a_pod_remedy_runs_elsewhere_then_escalates_to_the_fence_flow(
    lab_real: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    real_down: str,
    tmp_path: Path,
) -> None:
    node = real_down
    remedies = f"  remedy1: [{{name: repair, period: {PERIOD}s}}]\n  remedy2: [{{name: fence}}]"
    repair = pod_template("repair", command='sleep 4; echo "repairing $NODEREMEDY_NODE"')
    r = runner_for(lab_real, fence_ns, tmp_path, configuration(node, remedies, repair))
    try:
        # the runner killed once it has created the remedy's Job (logged after the Node's
        # annotation, which a busy API server answers seconds after the Job runs): the restarted
        # one adopts it, running or done
        created = r"^remedy repair: Job .* created$"
        wait_for(lambda: r.logged(created), 120, "the remedy's Job created")
        r.kill9()
        r.start()
        final = wait_for(lambda: settled(api, node), 420, f"the NodeFence of {node} Final")
    finally:
        r.stop()
    name = final["metadata"]["name"]
    st = final["status"]
    assert st["status"] == "Final", st
    assert '"pod": true' in final["metadata"]["annotations"][CHAIN_ANNOTATION]
    jname = remedy_job_name(name, "repair")
    assert jname in st["jobs"], st["jobs"]
    assert st["remedy"]["name"] == "fence" and st["remedy"]["index"] == 1, st["remedy"]
    seen = [reason for reason, _ in reasons(api, name)]
    order = [seen.index(x) for x in ("RemedyStarted", "RemedySucceeded", "RemedyEscalated")]
    assert order == sorted(order), seen
    escalated = next(m for reason, m in reasons(api, name) if reason == "RemedyEscalated")
    assert "repair" in escalated and f"within {PERIOD} s" in escalated and "fence" in escalated, escalated
    # the Job: the user's template, the node passed in, never on the node it remedies
    job = kjson(lab_real, "-n", fence_ns.name, "get", "job", jname)
    assert job["spec"]["backoffLimit"] == 0 and job["status"].get("succeeded") == 1, job["status"]
    assert [o["uid"] for o in job["metadata"]["ownerReferences"]] == [final["metadata"]["uid"]]
    pods = kjson(lab_real, "-n", fence_ns.name, "get", "pods", "-l", f"job-name={jname}")["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    ran_on = pods[0]["spec"]["nodeName"]
    assert ran_on in REAL and ran_on != node, ran_on
    out = lab_real.kubectl("-n", fence_ns.name, "logs", pods[0]["metadata"]["name"])
    assert out.stdout.strip() == f"repairing {node}", out.stdout + out.stderr
    runs = [line["msg"] for line in r.logged(r"^remedy repair: Job .* (created|adopted)$")]
    assert runs == [f"remedy repair: Job {jname} created", f"remedy repair: Job {jname} adopted"], runs
    notes = kjson(lab_real, "get", "node", node)["metadata"].get("annotations") or {}
    assert notes.get(JOB_ANNOTATION) == f"{fence_ns.name}/{jname}", notes
    started = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
    print(
        f"\nFIGURE pod remedy: Job {jname} created {job['metadata']['creationTimestamp']}, container started {started} on {ran_on}; events {seen}"
    )


@pytest.fixture
def kwok_down(lab_kube: Any) -> Iterator[str]:
    lab_kube.power_off(KWOK_NODE)
    lab_kube.wait_nodes([KWOK_NODE], {"False", "Unknown"}, 120)
    yield KWOK_NODE
    lab_kube.power_on(KWOK_NODE)
    lab_kube.wait_nodes([KWOK_NODE], "True", 120)


@pytest.mark.timeout(400)
def test_a_refused_template_and_a_missing_image_fail_their_remedies_once(
    lab_real: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    kwok_down: str,
    tmp_path: Path,
) -> None:
    node = kwok_down
    remedies = "  remedy1: [{name: bad-spec, period: 60s}]\n  remedy2: [{name: no-image, period: 60s}]"
    # a PodSpec value the API server refuses (the loader checks names, images, env, labels and
    # volumes, and passes the rest of the PodSpec on as written), and an image no node has
    refused = pod_template("bad-spec").replace("    spec:\n", "    spec:\n      dnsPolicy: Sometimes\n", 1)
    configs = refused + pod_template("no-image", image="noderemedy.local/does-not-exist:lab")
    r = runner_for(lab_real, fence_ns, tmp_path, configuration(node, remedies, configs))
    try:
        done = wait_for(lambda: settled(api, node), 300, f"the NodeFence of {node} settled")
    finally:
        r.stop()
    name = done["metadata"]["name"]
    st = done["status"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert st["status"] == "Error", st
    assert conds["Succeeded"]["status"] == "False" and conds["Succeeded"]["reason"] == "RemediesExhausted", (
        conds
    )
    assert "no-image" in conds["Succeeded"]["message"], conds["Succeeded"]
    assert "ErrImageNeverPull" in conds["Succeeded"]["message"], conds["Succeeded"]
    failed = [m for reason, m in reasons(api, name) if reason == "RemedyFailed"]
    assert len(failed) == 1 and "bad-spec" in failed[0] and '"Sometimes"' in failed[0], (
        failed
    )  # the API's word
    # once each: the refused Job was never created, the other created once (then deleted: it could
    # not start); and nothing is tried again
    created = [line["msg"] for line in r.logged(r"^remedy .*: Job .* (created|adopted)$")]
    assert created == [f"remedy no-image: Job {remedy_job_name(name, 'no-image')} created"], created
    assert [o["metadata"]["name"] for o in nodefences(api).values() if o["spec"]["node"] == node] == [name]
    print(
        f"\nFIGURE bad input: {st['status']} {conds['Succeeded']['reason']}: {conds['Succeeded']['message'][:200]}"
    )
