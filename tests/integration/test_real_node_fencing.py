"""The promise on real nodes: the runner (``python -m noderemedy_runner.loops.watcher`` on the host, as in
test_runner_e2e) fences a real node through its real BMC and the FC switch, and only then releases
its StatefulSet pod, a real container appending ``<pod uid> <seconds since boot>`` lines to storage
shared by all real nodes. Afterwards the shared file shows zero overlapping writes: every line of
the old writer precedes the new writer's first line.

* partition: lab-real-0's link goes down; kubelet and the writer keep running (and writing) until
  the isolation step disables its FC port, which cuts it off the shared storage; the taint, the
  pod's deletion and its restart on lab-real-1 come after that.
* power cut: lab-real-1 is powered off through its BMC; the writer is dead before the fence.
* every fence method failing (an IPMI-only configuration with a wrong BMC password) on a
  partitioned node: the NodeFence ends in Error, no taint, the old writer keeps writing and no
  second writer ever starts.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures shared with the host runner's end-to-end tests
    OOS,
    FenceNamespace,
    Runner,
    conds,
    events_with,
    fence_config,
    fence_ns,
    get_nf,
    nodefence,
    runner,
    taint_present,
)
from kube_helpers import apply, kjson, statefulset, wait_for
from kubernetes import client

from noderemedy_lab.bmc import power_sets
from noderemedy_lab.images import BUSYBOX_IMAGE
from noderemedy_lab.realnode import REAL_TAINT, SHARED_MOUNT
from noderemedy_lab.workload import failover_figures, prefer_node, uptime, writer_statefulset, writes

pytestmark = [pytest.mark.lab, pytest.mark.kube]

REAL = ["lab-real-0", "lab-real-1"]


def web0(lab: Any, ns: str) -> dict | None:
    out = lab.kubectl("get", "pods", "-n", ns, "-l", "app=web", "-o", "json")
    items = json.loads(out.stdout)["items"] if out.returncode == 0 else []
    return items[0] if items else None


@pytest.fixture
def app(lab_real: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    ns = f"web-{uuid.uuid4().hex[:6]}"
    lab_real.kubectl("create", "namespace", ns, check=True)
    # one file per test: a writer of an earlier test may still be running while its namespace goes
    shared = Path(lab_real.info["real_nodes"][REAL[0]]["shared_dir"]) / f"{ns}.log"
    yield ns, shared
    lab_real.kubectl("delete", "namespace", ns, "--wait=false")


def real_nodes_schedulable(lab) -> bool:
    """Whether every real node is Ready and carries no NoSchedule/NoExecute taint but the lab's own
    (which the runner tolerates): a node another test fenced or partitioned may still be coming back."""
    nodes = kjson(lab, "get", "nodes", *lab.info["real_nodes"])["items"]
    for node in nodes:
        conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
        taints = [
            t
            for t in node["spec"].get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") != REAL_TAINT["key"]
        ]
        if conds.get("Ready") != "True" or taints or node["spec"].get("unschedulable"):
            return False
    return len(nodes) == len(lab.info["real_nodes"])


def allow_both(lab: Any, ns: str, sts: str, preferred: str) -> None:
    """StatefulSet ``sts`` from now on allowed on both real nodes, preferring ``preferred`` (its
    update strategy is OnDelete: the running pod stays)."""
    patch = [{"op": "replace", "path": "/spec/template/spec/affinity", "value": prefer_node(preferred, REAL)}]
    out = lab.kubectl("-n", ns, "patch", "statefulset", sts, "--type=json", "-p", json.dumps(patch))
    assert out.returncode == 0, out.stderr


def web_on(lab: Any, tmp: Path, ns: str, node: str) -> dict[str, Any]:
    """The writer StatefulSet ``web`` with web-0 Running on ``node`` (returned), then allowed on both
    real nodes and preferring the other, so that a replacement, were there one, runs there: a real
    node the fence power-cycles may be Ready and untainted again by the time the StatefulSet
    recreates the pod. web-0 is first allowed on ``node`` only: with a mere preference the scheduler
    took the other node now and then, ``node`` being just back from an earlier test."""
    wait_for(lambda: real_nodes_schedulable(lab), 180, "the real nodes Ready and untainted")
    apply(lab, tmp, writer_statefulset(ns, node, [node], f"{ns}.log"))
    first = wait_for(
        lambda: (p := web0(lab, ns)) and p["status"].get("phase") == "Running" and p, 120, "web-0"
    )
    assert first["spec"]["nodeName"] == node
    allow_both(lab, ns, "web", next(n for n in REAL if n != node))
    return first


def scenario(
    lab: Any,
    api_client: client.ApiClient,
    make_runner: Callable[..., Runner],
    ns: str,
    shared: Path,
    node: str,
    fail: Callable[[], None],
    tmp: Path,
    on_power_off: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run web-0 on ``node``, ``fail`` the node, fence it with a NodeFence; returns the figures
    (:func:`failover_figures`, seconds from the moment ``fail`` was called, plus ``taint_s`` and
    ``failure_done_s``, when ``fail`` returned). ``on_power_off`` runs once the fence has powered
    the node off (a power-off set in the BMC's power log since ``fail``)."""
    other = next(n for n in REAL if n != node)
    first = web_on(lab, tmp, ns, node)
    old = first["metadata"]["uid"]
    wait_for(lambda: len(writes(shared).get(old, [])) >= 5, 30, "the first writer's lines")
    # the other node must be able to take the pod: an earlier test may still be bringing it back
    wait_for(lambda: real_nodes_schedulable(lab), 180, "the real nodes Ready and untainted")
    power_log = lab.info["devices"]["bmcs"][node]["power_log"]
    sets_before = len(power_sets(power_log))
    t_fail = uptime()  # when the failure is issued: the figures count from here
    fail()
    t_done = uptime()  # the BMC answers a power off once its hook has killed the node
    lab.wait_nodes([node], {"False", "Unknown"}, 120)
    co = client.CustomObjectsApi(api_client)
    name = f"nf-{uuid.uuid4().hex[:6]}"
    make_runner()
    nodefence(co, name, node)
    seen: dict[str, Any] = {"running_elsewhere": None, "taint": None}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        obj = get_nf(co, name)
        # the BMC's log of power sets, not its power file: the fence's ipmi-on segment starts as
        # soon as its ipmi-off segment ends, and a look at the file every few seconds (a kubectl
        # per round) can miss the few seconds the power is off
        if on_power_off is not None and any(v == 0 for _, v in power_sets(power_log)[sets_before:]):
            on_power_off()
            on_power_off = None
        if seen["taint"] is None and taint_present(lab, node):
            seen["taint"] = uptime()
        p = web0(lab, ns)
        if (
            seen["running_elsewhere"] is None
            and p
            and p["metadata"]["uid"] != old
            and p["spec"].get("nodeName") == other
            and p["status"].get("phase") == "Running"
        ):
            seen["running_elsewhere"] = uptime()
        if (obj.get("status") or {}).get("status") in ("Final", "Error") and seen["running_elsewhere"]:
            break
        time.sleep(0.2)
    st = get_nf(co, name).get("status") or {}
    pod_now = web0(lab, ns) or {}
    where = (pod_now.get("spec", {}).get("nodeName"), pod_now.get("status", {}).get("phase"))
    events = lab.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp").stdout[-3000:]
    assert st.get("status") == "Final", (st, where, events)
    assert seen["running_elsewhere"], f"web-0 never ran on {other}: now {where}; events:\n{events}"
    new = web0(lab, ns)["metadata"]["uid"]
    wait_for(lambda: len(writes(shared).get(new, [])) >= 3, 30, "the new writer's lines")
    w = writes(shared)
    # the writers after the old one, in the order they began: web-0 may be replaced more than once,
    # since Kubernetes' taint-eviction controller deletes a NoExecute-tainted node's pods by name
    # with no uid precondition, and on a busy API server its retry can find the replacement of the
    # same name (kubernetes/kubernetes#141568); but never two writers at once
    others = sorted((u for u in w if u != old), key=lambda u: w[u][0])
    assert new in others, sorted(w)
    order = [old, *others]
    overlaps = [(a, b) for a, b in itertools.pairwise(order) if w[a][-1] >= w[b][0]]
    assert not overlaps, [(a, w[a][-1], b, w[b][0]) for a, b in overlaps]
    fig = failover_figures(w, old, others[0], t_fail, node, seen["running_elsewhere"])
    fig["writers"] = len(w)
    fig["taint_s"] = round(seen["taint"] - t_fail, 2) if seen["taint"] else None
    fig["failure_done_s"] = round(t_done - t_fail, 2)
    return fig


@pytest.fixture
def partitioned(lab_real: Any) -> Iterator[str]:
    yield REAL[0]
    lab_real.heal(REAL[0])
    lab_real.kubectl("taint", "node", REAL[0], f"{OOS}-")
    lab_real.power_on(REAL[0])
    lab_real.fc_port(REAL[0], True)
    lab_real.wait_nodes([REAL[0]], "True", 180)


def test_partitioned_real_node_is_fenced_before_its_pod_runs_elsewhere(
    lab_real: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    app: tuple[str, Path],
    partitioned: str,
    tmp_path: Path,
) -> None:
    ns, shared = app
    # the power cycle of the fence "repairs" the link, as a reboot does a wedged NIC: the node then
    # comes back Ready and the NodeFence can finish its recovery
    fig = scenario(
        lab_real,
        api,
        runner,
        ns,
        shared,
        partitioned,
        lambda: lab_real.partition(partitioned),
        tmp_path,
        on_power_off=lambda: lab_real.heal(partitioned),
    )
    print(f"\nFIGURE partition: {fig}")
    # the old writer was alive after the partition (it kept writing until the FC fence cut it off)
    assert fig["old_writer_last_s"] > 0, fig
    assert fig["overlapping_writes"] == 0, fig


@pytest.fixture
def powered_off(lab_real: Any) -> Iterator[str]:
    yield REAL[1]
    lab_real.kubectl("taint", "node", REAL[1], f"{OOS}-")
    lab_real.power_on(REAL[1])
    lab_real.fc_port(REAL[1], True)
    lab_real.wait_nodes([REAL[1]], "True", 180)


def test_powered_off_real_node_is_fenced_before_its_pod_runs_elsewhere(
    lab_real: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    app: tuple[str, Path],
    powered_off: str,
    tmp_path: Path,
) -> None:
    ns, shared = app
    fig = scenario(
        lab_real, api, runner, ns, shared, powered_off, lambda: lab_real.power_off(powered_off), tmp_path
    )
    print(f"\nFIGURE power cut: {fig}")
    # the node is dead once the BMC has answered; no line of its container may come later
    assert fig["old_writer_last_s"] <= fig["failure_done_s"], ("a container wrote after the cut", fig)
    assert fig["overlapping_writes"] == 0, fig


def test_with_every_fence_method_failing_the_old_writer_keeps_writing_and_no_second_starts(
    lab_real: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    app: tuple[str, Path],
    partitioned: str,
    tmp_path: Path,
) -> None:
    ns, shared = app
    node = partitioned
    bmc = lab_real.info["devices"]["bmcs"][node]
    fence_ns.put(
        "secret",
        {
            "metadata": {"name": "bmc-wrong"},
            "stringData": {"username": bmc["username"], "password": "not-it"},
        },
    )
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-wrong"},
            "data": {
                "template.properties": f"type=ipmi\naddress={bmc['host']}:{bmc['port']}\nsecret=bmc-wrong\ncipher=3\n"
            },
        },
    )
    port = lab_real.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map",
        fence_config(node, port, "", "ipmi-off ipmi-on", "", ipmi="fence-method-template-ipmi-wrong"),
    )
    try:
        first = web_on(lab_real, tmp_path, ns, node)
        old = first["metadata"]["uid"]
        lab_real.partition(node)
        lab_real.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-bad-{uuid.uuid4().hex[:6]}"
        runner()
        nodefence(co, name, node)
        tainted, uids = [], set()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            obj = get_nf(co, name)
            tainted.append(taint_present(lab_real, node))
            p = web0(lab_real, ns)
            if p:
                uids.add(p["metadata"]["uid"])
            if conds(obj).get("Succeeded", {}).get("reason") == "RestartLimitReached":
                break
            time.sleep(0.2)
        assert obj["status"]["status"] == "Error", obj["status"]
        assert not any(tainted), "an out-of-service taint was applied without a verified fence"
        # the old writer is alive and still writes; no second writer ever existed
        count = len(writes(shared)[old])
        wait_for(lambda: len(writes(shared)[old]) > count, 60, "the old writer's next line")
        assert uids == {old}, uids
        assert set(writes(shared)) == {old}
        assert Path(bmc["power_file"]).read_text().strip() == "1", "the node was powered off"
    finally:
        fence_ns.standard(node)


def running_containers(lab: Any, node: str, pod: str) -> list[str]:
    """Ids of the containers (not the sandbox) of pod ``pod`` that ``node``'s containerd runs, as
    its own ``ctr`` sees them: the node's truth, which a partitioned node cannot report to the API."""
    sock = lab.info["real_nodes"][node]["containerd_socket"]
    ctr = ["ctr", "-a", sock, "-n", "k8s.io"]
    ids = subprocess.run(
        [*ctr, "containers", "ls", "-q", f'labels."io.kubernetes.pod.name"=={pod},labels."io.cri-containerd.kind"==container'],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()  # fmt: skip
    tasks = subprocess.run(
        [*ctr, "tasks", "ls"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    status = {row.split()[0]: row.split()[-1] for row in tasks.splitlines()[1:] if row.split()}
    return [i for i in ids if status.get(i) == "RUNNING"]


def test_a_storage_only_fence_releases_the_pods_on_it_and_leaves_the_others_running(
    lab_real: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    app: tuple[str, Path],
    partitioned: str,
    tmp_path: Path,
) -> None:
    """lab-real-0 partitioned, fenced by its FC port only (``fenced_storage`` names the shared
    storage): web-0, on that storage, is released and runs on lab-real-1 with no overlapping write;
    ``idle-0``, which uses no fenced storage, keeps running on the partitioned node (its container
    still runs there, as the node's containerd shows) and is never started a second time; no
    out-of-service taint. Once the partition heals, recovery unfences the storage only after the
    node's kubelet has stopped the released web-0, and the NodeFence ends Final."""
    ns, shared = app
    node, other = partitioned, REAL[1]
    port = lab_real.info["devices"]["fc_ports"][node]
    cfg = fence_config(node, port, "fc-off", "", "fc-on")
    cfg["data"]["config.properties"] += f"fenced_storage=hostpath:{SHARED_MOUNT}\n"
    fence_ns.put("config_map", cfg)
    first = web_on(lab_real, tmp_path, ns, node)
    idle_pod = {
        "affinity": prefer_node(node, [node]),  # allowed on both once it runs there
        "tolerations": [{**REAL_TAINT, "operator": "Equal"}],
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": "idle", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}
        ],
    }
    apply(lab_real, tmp_path, statefulset(ns, "idle", idle_pod, updateStrategy={"type": "OnDelete"}))

    def pods(app_name: str) -> list[dict]:
        out = lab_real.kubectl("get", "pods", "-n", ns, "-l", f"app={app_name}", "-o", "json")
        return json.loads(out.stdout)["items"] if out.returncode == 0 else []

    def running_on(app_name: str, where: str) -> dict | None:
        got = [
            p
            for p in pods(app_name)
            if p["spec"].get("nodeName") == where and p["status"].get("phase") == "Running"
        ]
        return got[0] if got else None

    idle = wait_for(lambda: running_on("idle", node), 120, "idle-0 on the node")
    old = first["metadata"]["uid"]
    wait_for(lambda: len(writes(shared).get(old, [])) >= 5, 30, "the first writer's lines")
    allow_both(lab_real, ns, "idle", other)  # either replacement, were there one, would go there
    wait_for(lambda: real_nodes_schedulable(lab_real), 180, "the real nodes Ready and untainted")
    lab_real.partition(node)
    t_fail = uptime()
    lab_real.wait_nodes([node], {"False", "Unknown"}, 120)
    co = client.CustomObjectsApi(api)
    name = f"nf-st-{uuid.uuid4().hex[:6]}"
    runner()
    nodefence(co, name, node)
    moved = wait_for(lambda: running_on("web", other), 240, "web-0 running on the other node")
    t_moved = uptime()
    # the NodeFence has nothing more to do than wait for the node: no power step
    wait_for(lambda: (get_nf(co, name).get("status") or {}).get("status") == "Done", 60, "NodeFence Done")
    # over several of the runner's looks: idle-0 is the same pod, still bound to the node, its
    # container still running there, never a second one; no taint
    for _ in range(10):
        idles = pods("idle")
        assert [p["metadata"]["uid"] for p in idles] == [idle["metadata"]["uid"]], idles
        assert idles[0]["spec"]["nodeName"] == node and not idles[0]["metadata"].get("deletionTimestamp")
        assert running_containers(lab_real, node, "idle-0"), (
            "idle-0's container stopped on the partitioned node"
        )
        assert not taint_present(lab_real, node), "out-of-service taint on a storage-only fence"
        time.sleep(1)
    obj = get_nf(co, name)
    assert conds(obj)["WorkloadsReleased"]["reason"] == "FencedStorageReleased", conds(obj)
    said = [
        e.message
        for e in events_with(api, obj, "FencedStoragePodsReleased")
        if e.reason == "FencedStoragePodsReleased"
    ]
    # (the web-0 of an earlier test whose namespace is still going may be released with it)
    assert len(said) == 1 and f"{ns}/web-0" in said[0] and f"{ns}/idle-0" not in said[0], said
    assert "no out-of-service taint" in said[0], said
    # the partition heals: the kubelet stops web-0 (deleted from the API), then recovery unfences
    lab_real.heal(node)
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        300,
        "the NodeFence recovered",
    )
    assert final["status"]["status"] == "Final", final["status"]
    assert not running_containers(lab_real, node, "web-0"), "the released web-0 still runs on the node"
    new = moved["metadata"]["uid"]
    wait_for(lambda: len(writes(shared).get(new, [])) >= 3, 30, "the new writer's lines")
    w = writes(shared)
    fig = failover_figures(w, old, new, t_fail, node, t_moved)
    print(f"\nFIGURE storage-only fence of a partitioned node: {fig}")
    assert fig["overlapping_writes"] == 0, fig
    assert [p["metadata"]["uid"] for p in pods("idle")] == [idle["metadata"]["uid"]], "idle-0 was replaced"
