"""Back-to-back failures on real nodes, the runner deployed in the cluster as users deploy it.

deploy/ runs three runner replicas spread over nodes, with a PodDisruptionBudget (docs/operations.md
"Availability of the runner itself"), so that when a node fails and, as soon as it is back, the
leader's node fails too, a Ready follower on a third node is left to take over.
test_runner_back_to_back.py shows that with host processes standing for kwok nodes; here it is the
deployment itself: ``kubectl apply -k`` of deploy/ through the lab's overlay, at deploy/'s own
replica count, one replica per real node, each a pod of the remediation image with its
ServiceAccount; the runner's own detector creates the NodeFences (the demo's Configuration, a
short detection period), and the fence configuration is the demo's (FC port off, IPMI off then on,
FC port on; the writer's storage named as fenced storage, so the FC fence releases it at once).

1. The real node of a follower (not the leader's, not web-0's) is powered off through its BMC;
   the leader fences it and its NodeFence ends Final, the leader unchanged.
2. As soon as that NodeFence is Final, the leader's node is partitioned: its link goes down, the
   leader pod and the writer ``web-0`` keep running on it. The replica on the third node takes
   the Lease over once it expires, its detector creates the NodeFence, the FC fence cuts the node
   off the shared storage and releases web-0, which then runs on another node; the power cycle
   brings the link back (as a reboot does) and the NodeFence ends Final.

The test asserts what happens, never how fast: web-0 runs on another node, both NodeFences end
Final, the third replica took over, and the shared file shows zero overlapping writes. The times
(from each failure: takeover, NodeFence created, out-of-service taint, web-0 Running elsewhere,
Final) are printed as ``FIGURE`` lines.

The lab is this module's own, with three real nodes, at this worker's port base + ``PORT_OFFSET``
(see :mod:`noderemedy_lab.pytest_plugin` for the layout of a worker's range): the session lab's
two real nodes serve every other real-node test, and a third one there would be one more kubelet
and containerd on the machine for the rest of every worker's session; here it costs one lab start
in one worker, for this file only.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import apply, kjson, wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner_harness import nodefences
from test_real_node_fencing import real_nodes_schedulable
from test_runner_in_cluster import NS, ready, runner_pods

from noderemedy_lab.bmc import power_sets
from noderemedy_lab.config import LabConfig
from noderemedy_lab.demo import REPLICAS, fence_configuration, overlay
from noderemedy_lab.lab import Lab
from noderemedy_lab.pytest_plugin import (
    TEST_GRACE_PERIOD,
    TEST_HEARTBEAT_SECONDS,
    running_lab,
    worker_port_base,
)
from noderemedy_lab.workload import failover_figures, prefer_node, uptime, writer_statefulset, writes
from noderemedy_runner.machines.actions import OUT_OF_SERVICE_TAINT_KEY as OUT_OF_SERVICE

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
#: This module's lab: this worker's base + 382 .. +400 and +482 .. +485 (1 kwok + 3 real BMCs).
PORT_OFFSET = 382
#: Seconds of NotReady before the runner's detector creates a NodeFence (the demo's default).
PERIOD = 2
#: Seconds each failure may take to its NodeFence Final: a bound for a loaded 2-core machine, not
#: a figure (the figures are printed).
BOUND = 400
APP_NS = "web"
LOG = "web.log"


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab with one real node per replica of deploy/ (and one kwok node, which nothing here
    uses), the test lab's grace period and heartbeat; stopped after the module."""
    # a short workdir: the kubelet's unix sockets under it must fit in 108 bytes (sun_path)
    workdir = tmp_path_factory.mktemp("b2b", numbered=True)
    cfg = LabConfig(
        workdir=workdir,
        nodes=1,
        real_nodes=REPLICAS,
        port_base=worker_port_base() + PORT_OFFSET,
        node_monitor_grace_period=TEST_GRACE_PERIOD,
        node_heartbeat_seconds=TEST_HEARTBEAT_SECONDS,
    )
    with running_lab(cfg) as lab:
        yield lab


def ready_pods(lab: Any) -> list[dict]:
    return [p for p in runner_pods(lab) if ready(p)]


def holder(lab: Any) -> str:
    """The leader Lease's holder identity ("" while none), read through the lab's API client: the
    loops below read it every 0.2 s, and a kubectl process per read takes CPU the nodes need."""
    try:
        lease = client.CoordinationV1Api(lab.api_client()).read_namespaced_lease("noderemedy-runner", NS)
    except ApiException as exc:
        if exc.status == 404:  # no replica has led yet
            return ""
        raise
    return str(lease.spec.holder_identity or "")


def web0(lab: Any) -> dict | None:
    """The writer's pod (through the lab's API client, as :func:`holder`), None while there is none."""
    items = kjson(lab, "get", "pods", "-n", APP_NS, "-l", "app=web")["items"]
    return items[0] if items else None


def spread(lab: Any) -> list[dict]:
    """The :data:`REPLICAS` Ready runner pods, one per real node.

    The replicas' spread is preferred (deploy/runner/deployment.yaml: a replica is never left
    Pending), so a pod placed while another real node was briefly NotReady (a heartbeat can lapse
    on a loaded host) shares a node, and rightly. Such a pod is deleted once every real node is
    schedulable again; its replacement, placed then, goes to the free node. Three placements are
    tried; the assertion fails if none spreads."""
    for _ in range(3):
        pods = wait_for(
            lambda: len(p := ready_pods(lab)) == REPLICAS and p, 240, f"{REPLICAS} Ready runner pods"
        )
        nodes = [p["spec"]["nodeName"] for p in pods]
        assert set(nodes) <= set(lab.info["real_nodes"]), nodes
        if len(set(nodes)) == REPLICAS:
            return pods
        wait_for(lambda: real_nodes_schedulable(lab), 180, "the real nodes Ready and untainted")
        victim = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])["metadata"]["name"]
        out = lab.kubectl("-n", NS, "delete", "pod", victim, "--wait=true", "--timeout=60s")
        assert out.returncode == 0, out.stderr
    raise AssertionError(f"the replicas never spread over the real nodes: {nodes}")


@pytest.fixture(scope="module")
def deployed(lab3: Lab, remediation_image: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Lab:
    """The runner deployed from deploy/ (image imported into every real node, CRDs, the fence
    configuration in its namespace), its replicas Ready, one per real node."""
    t0 = time.monotonic()
    lab3.import_image(ROOT / remediation_image["archive"])
    crds = lab3.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "crds"))
    assert crds.returncode == 0, crds.stderr
    apply(
        lab3,
        tmp_path_factory.mktemp("fences"),
        *fence_configuration(lab3, lab3.info["devices"]["relay_host"]),
    )
    out = lab3.kubectl("apply", "--server-side", "-k", str(overlay(lab3.config.workdir, PERIOD)))
    assert out.returncode == 0, out.stderr
    spread(lab3)
    print(
        f"\nFIGURE in-cluster back-to-back: lab up in {lab3.info['started_in_s']:.0f} s "
        f"({REPLICAS} real nodes), runner deployed in {time.monotonic() - t0:.0f} s"
    )
    return lab3


def leader(lab: Any) -> dict:
    """The Ready runner pod holding the leader Lease."""

    def lead() -> dict | None:
        h = holder(lab)
        return next((p for p in ready_pods(lab) if h and h.startswith(p["metadata"]["name"])), None)

    return dict(wait_for(lead, 90, "a Ready runner pod holding the Lease"))


def nodefence_of(lab: Any, node: str) -> dict | None:
    return next((o for o in nodefences(lab.api_client()).values() if o["spec"]["node"] == node), None)


def web_on(lab: Any, tmp: Path, node: str, then_prefer: str) -> dict:
    """The writer StatefulSet with web-0 Running on ``node`` (returned), then allowed on every real
    node and preferring ``then_prefer``: web-0 is first allowed on ``node`` only (with a mere
    preference the scheduler may take another node), and its replacement must not prefer a node
    that may itself be coming back."""
    real = lab.info["real_node_names"]
    apply(
        lab,
        tmp,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NS}},
        writer_statefulset(APP_NS, node, [node], LOG),
    )
    first = wait_for(lambda: (p := web0(lab)) and p["status"].get("phase") == "Running" and p, 120, "web-0")
    assert first["spec"]["nodeName"] == node
    patch = [
        {"op": "replace", "path": "/spec/template/spec/affinity", "value": prefer_node(then_prefer, real)}
    ]
    out = lab.kubectl("-n", APP_NS, "patch", "statefulset", "web", "--type=json", "-p", json.dumps(patch))
    assert out.returncode == 0, out.stderr
    return dict(first)


def follow(
    lab: Any,
    node: str,
    fail: Callable[[], None],
    lead: str,
    web: str | None = None,
    heal: bool = False,
) -> dict[str, Any]:
    """``fail`` ``node``, then follow it until its NodeFence ends Final or Error and, when ``web``
    (the uid of the web-0 running on ``node``) is given, web-0 runs elsewhere. ``heal``: the link
    goes up again once the fence has powered the node off (a reboot brings a partitioned node's
    link back). Returns the seconds from the failure (uptime clock, the writers' own) of
    ``takeover`` (the Lease held by another pod than ``lead``), ``created``, ``taint``,
    ``elsewhere`` (web-0) and ``final``, plus ``t_fail``, ``status``, ``holder`` (the identity
    that took over and its pod's node) and ``not_ready`` (real node -> first and last second it
    was seen not Ready)."""
    power_log = lab.info["devices"]["bmcs"][node]["power_log"]
    sets_before = len(power_sets(power_log))
    t_fail = uptime()
    fail()
    fig: dict[str, Any] = {"t_fail": t_fail, "not_ready": {}}

    def mark(key: str) -> None:
        fig.setdefault(key, round(uptime() - t_fail, 2))

    def step() -> bool:
        nonlocal heal
        if heal and any(v == 0 for _, v in power_sets(power_log)[sets_before:]):
            lab.heal(node)
            heal = False
        h = holder(lab)
        if h and not h.startswith(lead) and "takeover" not in fig:
            mark("takeover")
            pods = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in runner_pods(lab)}
            fig["holder"] = (h, next((n for name, n in pods.items() if h.startswith(name)), None))
        obj = nodefence_of(lab, node)
        if obj is not None:
            mark("created")
        for n in kjson(lab, "get", "nodes", "-l", "type=real")["items"]:
            name = n["metadata"]["name"]
            conds = {c["type"]: c["status"] for c in n["status"].get("conditions", [])}
            if conds.get("Ready") != "True":
                # the other real nodes' too: a heartbeat lapse under load shows here
                at = round(uptime() - t_fail, 1)
                span = fig["not_ready"].setdefault(name, [at, at])
                span[1] = at
            if name == node and any(t["key"] == OUT_OF_SERVICE for t in n["spec"].get("taints") or []):
                mark("taint")
        p = web0(lab) if web else None
        if (
            p
            and p["metadata"]["uid"] != web
            and p["spec"].get("nodeName") not in (None, node)
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ):
            mark("elsewhere")
        status = ((obj or {}).get("status") or {}).get("status")
        if status in ("Final", "Error"):
            mark("final")
            fig["status"] = status
        return "final" in fig and (web is None or "elsewhere" in fig)

    try:
        wait_for(step, BOUND, f"the NodeFence of {node} Final or Error", interval=0.2)
    finally:
        if heal:
            lab.heal(node)
    return fig


def line(what: str, fig: dict[str, Any]) -> str:
    """A FIGURE line of :func:`follow`'s figures, in the order they happened."""
    keys = {"takeover": "takeover", "created": "NodeFence created", "taint": "out-of-service taint"}
    keys |= {"elsewhere": "web-0 Running elsewhere", "final": "NodeFence Final"}
    times = sorted((fig[k], label) for k, label in keys.items() if k in fig)
    return (
        f"FIGURE in-cluster back-to-back: {what}: "
        + ", ".join(f"{label} {t:.1f} s" for t, label in times)
        + f" after the failure; not Ready (first, last s): {fig['not_ready']}"
    )


@pytest.mark.timeout(1800)
def test_the_leaders_node_partitioned_right_after_a_followers_node_is_fenced_web0_runs_elsewhere(
    deployed: Lab, tmp_path: Path
) -> None:
    lab = deployed
    real = lab.info["real_node_names"]
    wait_for(lambda: real_nodes_schedulable(lab), 180, "the real nodes Ready and untainted")
    spread(lab)
    lead = leader(lab)
    lead_name, lead_node = lead["metadata"]["name"], lead["spec"]["nodeName"]
    follower, third = sorted(n for n in real if n != lead_node)
    first_web = web_on(lab, tmp_path, lead_node, third)
    old = first_web["metadata"]["uid"]
    shared = Path(lab.info["real_nodes"][lead_node]["shared_dir"]) / LOG
    wait_for(lambda: len(writes(shared).get(old, [])) >= 5, 60, "the first writer's lines")
    # a replica just placed by spread() may not be Ready yet, or a probe may have timed out on a
    # loaded host: the replicas' readiness is waited for, their placement asserted
    pods = wait_for(lambda: len(p := ready_pods(lab)) == REPLICAS and p, 240, f"{REPLICAS} Ready runner pods")
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert sorted(nodes.values()) == sorted(real), ("not one Ready replica per real node", nodes)
    assert holder(lab).startswith(lead_name), ("the leader changed before the first failure", holder(lab))
    print(f"\nFIGURE in-cluster back-to-back: replicas {nodes}; leader {lead_name} on {lead_node}")

    # 1. a follower's node: the leader fences it
    first = follow(lab, follower, lambda: lab.power_off(follower), lead_name)
    print(line(f"{follower} (a follower's) powered off", first))
    assert first.get("status") == "Final", (first, nodefence_of(lab, follower))
    assert "takeover" not in first, ("the leader changed during the first failure", first)
    # the third replica stands by on its own node (running: a readiness probe that timed out on a
    # loaded host does not stop it from campaigning)
    standby = [
        p
        for p in runner_pods(lab)
        if p["spec"].get("nodeName") == third
        and p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    assert standby, ("no replica running on the third node", third, runner_pods(lab))

    # 2. at once, the leader's node: the third replica takes over and fences it
    second = follow(lab, lead_node, lambda: lab.partition(lead_node), lead_name, web=old, heal=True)
    print(line(f"then {lead_node} (the leader's, web-0's) partitioned", second))
    obj = nodefence_of(lab, lead_node)
    assert second.get("status") == "Final", (second, obj)
    assert "takeover" in second, second
    assert second["holder"][1] not in (None, lead_node), (
        "the new leader is not off the leader's node",
        second,
    )
    assert "elsewhere" in second, second

    # the shared storage: never two writers at once (web-0 may be replaced more than once: see
    # test_real_node_fencing.scenario)
    now = web0(lab)
    assert now is not None
    new = now["metadata"]["uid"]
    wait_for(lambda: len(writes(shared).get(new, [])) >= 3, 60, "the new writer's lines")
    w = writes(shared)
    others = sorted((u for u in w if u != old), key=lambda u: w[u][0])
    order = [old, *others]
    overlaps = [(a, b) for a, b in itertools.pairwise(order) if w[a][-1] >= w[b][0]]
    fig = failover_figures(
        w, old, others[0], second["t_fail"], lead_node, second["t_fail"] + second["elsewhere"]
    )
    print(
        f"FIGURE in-cluster back-to-back: web-0 Running on {now['spec']['nodeName']} "
        f"{second['elsewhere']:.1f} s after the leader's node was partitioned (old writer's last line "
        f"{fig['old_writer_last_s']:.1f} s, new writer's first {fig['new_writer_first_s']:.1f} s); "
        f"{len(overlaps)} overlapping writers, {fig['overlapping_writes']} overlapping writes"
    )
    assert not overlaps, [(a, w[a][-1], b, w[b][0]) for a, b in overlaps]
    assert fig["overlapping_writes"] == 0, fig
    assert fig["old_writer_last_s"] > 0, fig  # alive after the partition, until the FC fence
    assert now["spec"]["nodeName"] != lead_node
