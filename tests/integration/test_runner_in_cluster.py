"""The runner as users run it: the remediation pod image built by ``./dev image`` (debootstrap + pip +
buildah), ``kubectl apply -k`` of deploy/ through the lab's overlay (image pull policy and placement
only), two replicas on the lab's real nodes with their real ServiceAccount token and the
least-privilege RBAC. Both pass their probes; one holds the leader Lease; ``/metrics`` answers from
inside the pod; the storm guard's status ConfigMap is written (a missing permission shows up as a
403 in the runner's log, which must not appear); and when the leader pod is force-deleted, the
other replica takes the Lease over.

Then the pods fence as users' in-cluster runners do, reaching the BMCs and the FC switch through
the lab's relays on the real nodes' bridge (``devices.relay_host``), with the fence configuration
in their own namespace:

* the leader pod force-deleted while a NodeFence of a kwok node is in flight: another replica
  takes over and the NodeFence completes, each device touched once per direction;
* a partitioned real node (its writer still running) and a powered-off real node fenced before
  their StatefulSet pod runs elsewhere: zero overlapping writes on the shared storage;
* with ``--executor job``, every run of a NodeFence as a remediation pod (a Job), and the runs two
  NodeFences ask for together as one Job (a batch).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import OOS, FenceNamespace, get_nf, nodefence
from kube_helpers import kjson, wait_for
from kubernetes import client
from runner_harness import delete_nodefences
from test_real_node_fencing import (  # noqa: F401 - fixtures are used by name
    app,
    partitioned,
    powered_off,
    real_nodes_schedulable,
    scenario,
)
from test_runner_guards import device_log

from noderemedy_runner.job_batches import OUTCOMES_KEY
from noderemedy_runner.job_manifests import BATCH_LABEL, RUNS_ANNOTATION, job_name
from noderemedy_runner.jobs import JOB_ANNOTATION, TIMESTAMP_ANNOTATION

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
NS = "noderemedy-system"
OVERLAY = ROOT / "lab" / "deploy"


@pytest.fixture(scope="module")
def image(remediation_image: dict) -> Path:
    """The remediation pod image's OCI archive (built from this checkout for this test run)."""
    return Path(remediation_image["archive"])


def namespace_gone(lab) -> bool:
    return lab.kubectl("get", "namespace", NS).returncode != 0


@pytest.fixture(scope="module")
def deployed(lab_real, image):
    lab_real.import_image(image)
    # another module's deploy/ may still be terminating
    wait_for(lambda: namespace_gone(lab_real), 120, f"namespace {NS} gone")
    # the replicas' anti-affinity is preferred: both real nodes must be there to take one each
    wait_for(lambda: real_nodes_schedulable(lab_real), 180, "the real nodes Ready and untainted")
    crds = lab_real.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "crds"))
    assert crds.returncode == 0, crds.stderr
    out = lab_real.kubectl("apply", "-k", str(OVERLAY), "--server-side")
    assert out.returncode == 0, out.stderr
    yield lab_real
    lab_real.kubectl("delete", "-k", str(OVERLAY), "--ignore-not-found", "--timeout=120s")
    wait_for(lambda: namespace_gone(lab_real), 120, f"namespace {NS} gone")


def runner_pods(lab) -> list[dict]:
    return kjson(lab, "-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=noderemedy-runner")["items"]


def ready(pod: dict) -> bool:
    conds = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return pod["metadata"].get("deletionTimestamp") is None and conds.get("Ready") == "True"


def two_ready(lab) -> list[dict] | None:
    pods = [p for p in runner_pods(lab) if ready(p)]
    return pods if len(pods) == 2 else None


def holder(lab) -> str:
    lease = kjson(lab, "-n", NS, "get", "lease", "noderemedy-runner")
    return lease["spec"].get("holderIdentity") or ""


def forbidden(logs: str) -> list[str]:
    """The runner's JSON log lines that report a 403 (their timestamps left out: a time such as
    ``12:55:45.403Z`` is not a refusal)."""
    out = []
    for line in logs.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            doc = line
        if isinstance(doc, dict):
            doc.pop("time", None)
        text = json.dumps(doc)
        if re.search(r"\b403\b|[Ff]orbidden", text):
            out.append(line)
    return out


def placement(lab) -> list[tuple[str, str]]:
    """``(pod, node)`` of every runner pod, sorted."""
    return sorted((p["metadata"]["name"], p["spec"].get("nodeName") or "") for p in runner_pods(lab))


def spread_replicas(lab, timeout: float = 180) -> list[dict]:
    """The two Ready runner pods, on the two real nodes, as the runner itself keeps them.

    The replicas' anti-affinity and topology spread are preferred (deploy/runner/deployment.yaml: a
    replica is never left Pending), so a replica placed while the other real node was NotReady (a
    fenced node, or a lab node whose heartbeat lapsed on a loaded host) shares a node, and
    Kubernetes never moves it back. The leader does (``loops/respread.py``): once every replica is
    Ready and the other node is schedulable again, it evicts the newest replica of the shared node
    and the scheduler places its replacement on the free one. Nothing here moves a pod: the
    assertion fails if the runner has not spread them within ``timeout`` seconds."""
    real = set(lab.info["real_nodes"])

    def spread() -> list[dict] | None:
        pods = two_ready(lab)
        if pods and len(runner_pods(lab)) == 2 and {p["spec"]["nodeName"] for p in pods} == real:
            return pods
        return None

    return list(wait_for(spread, timeout, f"the runner spreading its two Ready replicas over {sorted(real)}"))


def test_two_replicas_run_on_real_nodes_with_their_service_account(deployed):
    pods = spread_replicas(deployed)
    assert all(p["spec"]["serviceAccountName"] == "noderemedy-runner" for p in pods)
    # the leader is one of them (its identity starts with its pod name)
    names = {p["metadata"]["name"] for p in pods}
    # (a replica the leader evicted to spread them does not hold the Lease; a leader killed by
    # an earlier failure may still be named until its Lease expires)
    lead = wait_for(
        lambda: next((h for h in [holder(deployed)] if any(h.startswith(n) for n in names)), None),
        60,
        f"a Lease holder among {sorted(names)}",
    )
    print(f"\nFIGURE in-cluster replicas: {sorted(p['spec']['nodeName'] for p in pods)}; leader {lead}")
    # the token is the pod's own: the runner wrote the status ConfigMap and hit no 403
    wait_for(
        lambda: deployed.kubectl("-n", NS, "get", "configmap", "noderemedy-status").returncode == 0,
        60,
        "the status ConfigMap",
    )
    for name in names:
        logs = deployed.kubectl("-n", NS, "logs", name).stdout
        assert not forbidden(logs), logs[-3000:]
        metrics = deployed.kubectl(
            "-n", NS, "exec", name, "--", "python3", "-c",
            "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/metrics').read().decode())",
        )  # fmt: skip
        assert metrics.returncode == 0, metrics.stderr
        assert "noderemedy_remediations_started_total" in metrics.stdout


def test_the_other_replica_takes_over_when_the_leader_is_killed(deployed):
    pods = wait_for(lambda: two_ready(deployed), 180, "two Ready runner pods")
    lead = wait_for(lambda: holder(deployed), 60, "a Lease holder")
    leader = next(p["metadata"]["name"] for p in pods if lead.startswith(p["metadata"]["name"]))
    other = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"] != leader)
    out = deployed.kubectl("-n", NS, "delete", "pod", leader, "--force", "--grace-period=0")
    assert out.returncode == 0, out.stderr
    # the other replica, or the Deployment's replacement pod if it campaigns first: never the
    # killed leader (its identity would have to renew, and it is gone)
    new = wait_for(
        lambda: (h := holder(deployed)) and not h.startswith(leader) and h, 60, "a new Lease holder"
    )
    running = {p["metadata"]["name"] for p in kjson(deployed, "-n", NS, "get", "pods")["items"]}
    assert any(new.startswith(name) for name in running - {leader}), (new, other, running)


@pytest.fixture(scope="module")
def cluster_fences(deployed: Any, api: client.ApiClient) -> Iterator[FenceNamespace]:
    """The fence configuration of every lab node in the runner's own namespace, the devices
    addressed through the relays on the real nodes' bridge."""
    ns = FenceNamespace(deployed, client.CoreV1Api(api), NS, host=deployed.info["devices"]["relay_host"])
    ns.fill()
    yield ns
    delete_nodefences(api)


def leader_pod(lab: Any) -> str:
    """The Ready runner pod holding the leader Lease (after a rollout the Lease may still name a
    pod that is gone until it expires)."""
    wait_for(lambda: two_ready(lab), 180, "two Ready runner pods")

    def lead() -> str | None:
        h = holder(lab)
        return next((n for p in two_ready(lab) or [] if h.startswith(n := p["metadata"]["name"])), None)

    return str(wait_for(lead, 90, "a Ready runner pod holding the Lease"))


@pytest.fixture
def kwok_dead(deployed: Any) -> Iterator[str]:
    """lab-node-1 (kwok) powered off and NotReady; afterwards untainted, powered on, Ready."""
    node = "lab-node-1"
    deployed.power_off(node)
    deployed.wait_nodes([node], {"False", "Unknown"}, 120)
    yield node
    deployed.kubectl("taint", "node", node, f"{OOS}-")
    deployed.fc_port(node, True)
    deployed.power_on(node)
    deployed.wait_nodes([node], "True", 120)


@pytest.mark.timeout(600)
def test_a_nodefence_completes_when_the_leader_pod_is_killed_during_it(
    deployed: Any, api: client.ApiClient, cluster_fences: FenceNamespace, kwok_dead: str
) -> None:
    node = kwok_dead
    leader = leader_pod(deployed)
    before = device_log(deployed, node)
    co = client.CustomObjectsApi(api)
    name = f"nf-lead-{uuid.uuid4().hex[:6]}"
    nodefence(co, name, node)
    # in flight: a run of the fence flow has started (the FC port goes down first)
    wait_for(
        lambda: (get_nf(co, name).get("status") or {}).get("status") in ("Running", "Done"),
        120,
        "the NodeFence in flight",
    )
    t_kill = time.monotonic()
    out = deployed.kubectl("-n", NS, "delete", "pod", leader, "--force", "--grace-period=0")
    assert out.returncode == 0, out.stderr
    new = wait_for(
        lambda: (h := holder(deployed)) and not h.startswith(leader) and h, 90, "a new Lease holder"
    )
    took_over = time.monotonic() - t_kill
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        400,
        "the NodeFence Final",
    )
    assert final["status"]["status"] == "Final", final["status"]
    power, sets = device_log(deployed, node)
    # the replay after the takeover repeats at most the segment in flight, which is idempotent:
    # the node (already off: its BMC logs changes only) was switched on, and never cut again after
    cycle = [line.split()[-1] for line in power[len(before[0]) :].splitlines() if line.strip()]
    assert cycle and cycle[-1] == "1" and "0" not in cycle[cycle.index("1") :], cycle
    fc = [str(row[2]) for row in sets[len(before[1]) :]]
    assert fc and fc[0] == "2" and fc[-1] == "1", fc
    print(f"\nFIGURE leader killed: new holder {new} after {took_over:.1f} s; power {cycle}; FC {fc}")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["partition", "power_cut"])
def test_the_runner_pods_fence_a_failed_real_node_before_its_pod_runs_elsewhere(
    deployed: Any,
    api: client.ApiClient,
    cluster_fences: FenceNamespace,
    app: tuple[str, Path],  # noqa: F811
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """partition: the node's link down, its writer alive until the FC fence cuts it off (the
    fence's power cycle brings the link back, as a reboot does); power_cut: through its BMC."""
    ns, shared = app
    node = request.getfixturevalue("partitioned" if kind == "partition" else "powered_off")
    # after the partition case, the replica that replaced the fenced node's shares the other node
    # until the runner's leader spreads them again (loops/respread.py); the power cut then fails
    # the node of one replica only, as a single failure should
    before = placement(deployed)
    t0 = time.monotonic()
    spread_replicas(deployed)
    took = time.monotonic() - t0
    if len({n for _, n in before}) < len(before):
        moved = kjson(deployed, "-n", NS, "get", "events", "--field-selector", "reason=ReplicaRespread")
        assert moved["items"], "the replicas were spread, but not by the runner's ReplicaRespread"
    # (a leader on the failed node costs the takeover: the Lease's 15 s before a standby acts)
    lead = leader_pod(deployed)
    print(
        f"\nFIGURE in-cluster {kind} replicas: {before} -> {placement(deployed)} after {took:.1f} s; leader {lead}"
    )
    fail = deployed.partition if kind == "partition" else deployed.power_off
    no_runner: Callable[[], None] = lambda: None  # noqa: E731 - the Deployment's pods are the runner
    fig = scenario(
        deployed,
        api,
        no_runner,  # type: ignore[arg-type]
        ns,
        shared,
        node,
        lambda: fail(node),
        tmp_path,
        on_power_off=(lambda: deployed.heal(node)) if kind == "partition" else None,
    )
    print(f"\nFIGURE in-cluster {kind}: {fig}")
    if kind == "partition":
        assert fig["old_writer_last_s"] > 0, fig  # alive after the partition, until the fence
    else:
        # the node is dead once the BMC has answered; no line of its container may come later
        assert fig["old_writer_last_s"] <= fig["failure_done_s"], ("a container wrote after the cut", fig)
    assert fig["overlapping_writes"] == 0, fig


#: The runner's args for the module's last tests: every run as a Job, and a batch window wide enough
#: that two NodeFences created together still ask for their first runs within it when the lab is
#: loaded: the default 0.25 s can be less than the leader pod's two status writes take apart on a
#: 2-core machine running three labs, and then each goes alone and no Job of both may ever run. No
#: idle start either: it would start the first NodeFence's first run at once, on its own.
JOB_EXECUTOR_ARGS = ("--executor=job", "--batch-window=3", "--no-idle-start")


def use_job_executor(lab: Any) -> bool:
    """Add whichever of :data:`JOB_EXECUTOR_ARGS` the runner's Deployment lacks (True: it was
    patched, and rolls out)."""
    spec = kjson(lab, "-n", NS, "get", "deployment", "noderemedy-runner")["spec"]["template"]["spec"]
    have = spec["containers"][0].get("args", [])
    patch = [
        {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": arg}
        for arg in JOB_EXECUTOR_ARGS
        if arg not in have
    ]
    if not patch:
        return False
    out = lab.kubectl(
        "-n", NS, "patch", "deployment", "noderemedy-runner", "--type=json", "-p", json.dumps(patch)
    )
    assert out.returncode == 0, out.stderr
    return True


@pytest.mark.timeout(600)
def test_with_the_job_executor_every_run_is_a_remediation_pod_and_the_nodefence_completes(
    deployed: Any, api: client.ApiClient, cluster_fences: FenceNamespace, kwok_dead: str
) -> None:
    """``--executor job`` (the last test of the module: the Deployment keeps it): every playbook run
    of a NodeFence is a Job of the runner's image, named after the run, owned by the NodeFence,
    never on the fenced node, carrying no credential; the leader pod is killed while a Job runs,
    the next leader adopts it (one Job per run, counted), the NodeFence reaches Final and the
    Node carries the seed's remediation annotations."""
    use_job_executor(deployed)
    out = deployed.kubectl("-n", NS, "rollout", "status", "deployment/noderemedy-runner", "--timeout=180s")
    assert out.returncode == 0, out.stdout + out.stderr
    leader_pod(deployed)
    node = kwok_dead
    co = client.CustomObjectsApi(api)
    name = f"nf-jobs-{uuid.uuid4().hex[:6]}"
    created = nodefence(co, name, node)
    uid = created["metadata"]["uid"]

    def owned() -> dict[str, dict]:
        items = kjson(deployed, "-n", NS, "get", "jobs")["items"]
        return {
            j["metadata"]["name"]: j
            for j in items
            if uid in [r["uid"] for r in j["metadata"].get("ownerReferences") or []]
        }

    # the leader killed while a remediation pod runs: the next leader adopts the Job
    wait_for(
        lambda: any((j.get("status") or {}).get("active") for j in owned().values()), 120, "a Job running"
    )
    in_flight = sorted(owned())
    leader = leader_pod(deployed)
    out = deployed.kubectl("-n", NS, "delete", "pod", leader, "--force", "--grace-period=0")
    assert out.returncode == 0, out.stderr
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        400,
        "the NodeFence Final",
    )
    assert final["status"]["status"] == "Final", final["status"]
    jobs = owned()
    assert final["status"]["jobs"], final["status"]
    steps = {job_name(ident) for ident in final["status"]["jobs"]}
    for jname in steps:
        job = jobs[jname]  # every finished run was a Job of that name: one per run, none twice
        assert job["spec"]["backoffLimit"] == 0
        assert (job.get("status") or {}).get("succeeded") == 1, (jname, job.get("status"))
    assert set(in_flight) <= steps, ("a Job in flight at the kill was not adopted", in_flight, sorted(steps))
    # besides the steps' runs, only the taint's own runs (time-stamped idents) may have Jobs
    assert all("-taint-" in n for n in set(jobs) - steps), sorted(jobs)
    notes = kjson(deployed, "get", "node", node)["metadata"].get("annotations") or {}
    assert notes.get(JOB_ANNOTATION, "").startswith(f"{NS}/") and notes.get(TIMESTAMP_ANNOTATION), notes
    pods = kjson(deployed, "-n", NS, "get", "pods", "-l", "app.kubernetes.io/component=remediation")["items"]
    assert pods and all(p["spec"]["nodeName"] in deployed.info["real_nodes"] for p in pods)
    assert all(p["spec"]["nodeName"] != node for p in pods)
    # references only: no credential of the lab's devices in any Job or pod spec, or pod log
    dev = deployed.info["devices"]
    secrets = [b["password"] for b in dev["bmcs"].values()] + [d["community"] for d in dev["snmp"].values()]
    specs = deployed.kubectl("-n", NS, "get", "jobs,pods", "-o", "json").stdout
    logs = "".join(deployed.kubectl("-n", NS, "logs", p["metadata"]["name"]).stdout for p in pods)
    events = deployed.kubectl("get", "events", "-A", "-o", "json").stdout
    leaked = [s for s in secrets if s in specs or s in logs or s in events]
    assert not leaked, "a credential appeared in a Job, a pod, a log or an Event"
    print(
        f"\nFIGURE job executor: {len(final['status']['jobs'])} runs as Jobs on {sorted({p['spec']['nodeName'] for p in pods})}"
    )


@pytest.fixture
def kwok_two_dead(deployed: Any) -> Iterator[list[str]]:
    """lab-node-0 and lab-node-2 (kwok) powered off and NotReady; afterwards untainted, powered on,
    Ready."""
    nodes = ["lab-node-0", "lab-node-2"]
    for node in nodes:
        deployed.power_off(node)
    deployed.wait_nodes(nodes, {"False", "Unknown"}, 120)
    yield nodes
    for node in nodes:
        deployed.kubectl("taint", "node", node, f"{OOS}-")
        deployed.fc_port(node, True)
        deployed.power_on(node)
    deployed.wait_nodes(nodes, "True", 120)


@pytest.mark.timeout(600)
def test_with_the_job_executor_nodefences_asked_at_once_share_one_job_per_batch(
    deployed: Any, api: client.ApiClient, cluster_fences: FenceNamespace, kwok_two_dead: list[str]
) -> None:
    """``--executor job`` with two NodeFences created at once: the runs they ask for together go as
    one Job (a batch: one pod start and one ``ansible-playbook`` for both), kept off both nodes,
    owned by both NodeFences and listing both runs, whose pod writes each run's outcome to a
    ConfigMap the Job owns. The leader pod is force-deleted while a batch's Job runs: the Job is
    deleted by the stopping runner (its runs go again) or adopted by the next leader, and no run
    is listed by two Jobs (a SIGKILL's adoption: test_runner_sigterm.py). Each NodeFence reaches
    Final, each node's own device switched."""
    if use_job_executor(deployed):  # run alone (-k): not yet patched
        out = deployed.kubectl(
            "-n", NS, "rollout", "status", "deployment/noderemedy-runner", "--timeout=180s"
        )
        assert out.returncode == 0, out.stdout + out.stderr
    leader_pod(deployed)
    nodes = kwok_two_dead
    before = {n: device_log(deployed, n) for n in nodes}
    co = client.CustomObjectsApi(api)
    tag = uuid.uuid4().hex[:6]
    uids = {}
    for node in nodes:
        created = nodefence(co, f"nf-batch-{node[-1]}-{tag}", node)
        uids[created["metadata"]["name"]] = created["metadata"]["uid"]

    seen: dict[str, tuple[int, dict[str, Any]]] = {}  # every Job of ours: owners of ours, status

    def active_batch() -> str | None:
        running = None
        for j in kjson(deployed, "-n", NS, "get", "jobs")["items"]:
            owners = {r["uid"] for r in j["metadata"].get("ownerReferences") or []} & set(uids.values())
            if owners:
                seen[j["metadata"]["name"]] = (len(owners), j.get("status") or {})
                if len(owners) == len(uids) and (j.get("status") or {}).get("active"):
                    running = j["metadata"]["name"]
        return running

    try:
        in_flight = wait_for(active_batch, 180, "a batch's Job running")
    except AssertionError as e:  # say what ran instead: Jobs (NodeFences of ours owning each), phases
        statuses = {n: (get_nf(co, n) or {}).get("status") or {} for n in uids}
        phases = {n: (st.get("status"), st.get("step")) for n, st in statuses.items()}
        raise AssertionError(f"{e}; Jobs {sorted(seen.items())}; NodeFence (status, step) {phases}") from None
    leader = leader_pod(deployed)
    out = deployed.kubectl("-n", NS, "delete", "pod", leader, "--force", "--grace-period=0")
    assert out.returncode == 0, out.stderr
    finals = {
        name: wait_for(
            lambda name=name: (
                (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o
            ),
            400,
            f"NodeFence {name} Final",
        )
        for name in uids
    }
    assert all(f["status"]["status"] == "Final" for f in finals.values()), [
        f["status"] for f in finals.values()
    ]
    runs = {name: set(f["status"]["jobs"]) for name, f in finals.items()}
    batches = kjson(deployed, "-n", NS, "get", "jobs", "-l", f"{BATCH_LABEL}=true")["items"]
    shared = []
    for job in batches:
        listed = set(json.loads(job["metadata"]["annotations"][RUNS_ANNOTATION]))
        if not all(listed & own for own in runs.values()):
            continue  # another test's batch, or not both of ours
        shared.append(job)
        assert {r["uid"] for r in job["metadata"]["ownerReferences"]} == set(uids.values())
        assert (job.get("status") or {}).get("succeeded") == 1, job.get("status")
        cm = kjson(deployed, "-n", NS, "get", "configmap", job["metadata"]["name"])
        assert cm["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert set(json.loads(cm["data"][OUTCOMES_KEY])) == listed
    assert shared, ("no Job ran runs of both NodeFences", runs, [j["metadata"]["name"] for j in batches])
    # the pod is force-deleted: the runner still gets its SIGTERM and deletes the Job of the runs it
    # cancels (their segments then run again in a new batch), or it is gone too fast and the next
    # leader adopts the Job (a batch's Job is never re-created under its name)
    kept = {j["metadata"]["name"] for j in batches}
    assert in_flight not in kept or in_flight in {j["metadata"]["name"] for j in shared}, (
        "the Job in flight at the kill was neither deleted nor adopted",
        in_flight,
    )
    listed = [i for j in shared for i in json.loads(j["metadata"]["annotations"][RUNS_ANNOTATION])]
    assert len(listed) == len(set(listed)), ("a run was started by two Jobs", sorted(listed))
    pods = kjson(deployed, "-n", NS, "get", "pods", "-l", f"{BATCH_LABEL}=true")["items"]
    assert pods and not {p["spec"]["nodeName"] for p in pods} & set(nodes), (
        "a batch's pod ran on a node of it"
    )
    for node in nodes:  # each node's own BMC cut it off and brought it back, and its own FC port
        power, sets = device_log(deployed, node)
        cycle = [line.split()[-1] for line in power[len(before[node][0]) :].splitlines() if line.strip()]
        fc = [str(row[2]) for row in sets[len(before[node][1]) :]]
        assert cycle and cycle[-1] == "1" and fc and fc[0] == "2" and fc[-1] == "1", (node, cycle, fc)
    print(
        f"\nFIGURE job executor batches: {len(shared)} Jobs ran runs of both NodeFences "
        f"({sorted(j['metadata']['name'] for j in shared)}); runs {sum(len(r) for r in runs.values())}; "
        f"the leader killed while {in_flight} ran"
    )
