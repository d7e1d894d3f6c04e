"""Real nodes of the lab (kubelet + containerd + runc, each in its own network namespace): a pod runs a
real container whose logs ``kubectl logs`` reads; a power cut through the node's BMC kills the
kubelet, containerd and every container at once and turns the node NotReady; power on brings it
back Ready and its pod writing again; a network partition turns the node NotReady while its container
keeps writing to the shared storage; a node whose kubelet cannot start stops the start with an error
naming it and leaves nothing behind.

Nodes used: lab-real-0 (partition), lab-real-1 (power cut). Each test restores its node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_helpers import apply, kjson, wait_for
from kube_helpers import namespace as kube_namespace

from noderemedy_lab.cgroups import NODE_CPU_SHARES
from noderemedy_lab.images import BUSYBOX_IMAGE
from noderemedy_lab.realnode import REAL_TAINT, SHARED_MOUNT, cgroup_pids

pytestmark = [pytest.mark.lab, pytest.mark.kube]

PARTITIONED = "lab-real-0"
POWERED = "lab-real-1"
NOT_READY = {"False", "Unknown"}

#: appends "<pod uid> <seconds since boot>" to <shared>/<pod uid>.log every 0.2 s, opening the file
#: for each line (as the demo's writer does)
WRITER = (
    "mkdir -p /shared/data; while true; do read up _ < /proc/uptime; "
    'echo "$POD_UID $up" >> /shared/data/$POD_UID.log && echo "tick $up"; sleep 0.2; done'
)


def real_pod(name: str, node: str, command: str) -> dict:
    """A pod pinned to real node ``node`` running ``command`` in the lab's busybox image, with the
    node's view of the shared storage at /shared (host-to-container propagation)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{**REAL_TAINT, "operator": "Equal"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", command],
                    "env": [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
                    "volumeMounts": [
                        {"name": "shared", "mountPath": "/shared", "mountPropagation": "HostToContainer"}
                    ],
                }
            ],
            "volumes": [{"name": "shared", "hostPath": {"path": SHARED_MOUNT, "type": "Directory"}}],
        },
    }


def pod(lab, ns: str, name: str) -> dict:
    return kjson(lab, "-n", ns, "get", "pod", name)


def running(lab, ns: str, name: str) -> dict | None:
    doc = pod(lab, ns, name)
    return doc if doc["status"].get("phase") == "Running" else None


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def grows(path: Path, timeout: float = 60) -> bool:
    """True once ``path`` gains a line (polled), within ``timeout`` seconds (a container of a real node
    shares the host's two cores with three labs: it can go seconds without running)."""
    before = len(lines(path))
    return bool(wait_for(lambda: len(lines(path)) > before, timeout, f"a new line in {path}"))


@pytest.fixture
def namespace(lab_real):
    with kube_namespace(lab_real, "real") as name:
        yield name


def test_real_container_runs_and_kubectl_logs_reads_it(lab_real, namespace, tmp_path):
    apply(
        lab_real,
        tmp_path,
        {**real_pod("hello", PARTITIONED, WRITER), "metadata": {"name": "hello", "namespace": namespace}},
    )
    doc = wait_for(lambda: running(lab_real, namespace, "hello"), 60, "pod hello Running")
    assert doc["spec"]["nodeName"] == PARTITIONED
    ip = lab_real.info["real_nodes"][PARTITIONED]["ip"]
    assert doc["status"]["hostIP"] == ip
    assert doc["status"]["podIP"].startswith("10.244.0."), doc["status"]
    logs = wait_for(
        lambda: (
            (out := lab_real.kubectl("-n", namespace, "logs", "hello")).returncode == 0
            and "tick" in out.stdout
            and out.stdout
        ),
        60,
        "kubectl logs hello",
    )
    assert logs.splitlines()[0].startswith("tick ")
    # the container really runs in the node's cgroup, and writes the shared storage
    node_cgroup = lab_real.info["real_nodes"][PARTITIONED]["cgroup"]
    assert cgroup_pids(node_cgroup + "/kubepods")
    # ... which weighs as a machine (the host's load does not starve it), the lab's nodes as all of them
    cpu = Path("/sys/fs/cgroup/cpu", node_cgroup.strip("/"))  # cgroup v1, as every lab cgroup
    assert int((cpu / "cpu.shares").read_text()) == NODE_CPU_SHARES
    assert int((cpu.parent / "cpu.shares").read_text()) == NODE_CPU_SHARES * len(lab_real.info["real_nodes"])
    shared = Path(lab_real.info["real_nodes"][PARTITIONED]["shared_dir"]) / f"{doc['metadata']['uid']}.log"
    assert grows(shared)


@pytest.fixture
def powered(lab_real):
    yield POWERED
    lab_real.power_on(POWERED)
    lab_real.wait_nodes([POWERED], "True", 120)


def test_power_cut_kills_everything_and_power_on_boots_the_node(lab_real, namespace, powered, tmp_path):
    info = lab_real.info["real_nodes"][POWERED]
    apply(
        lab_real,
        tmp_path,
        {**real_pod("w", POWERED, WRITER), "metadata": {"name": "w", "namespace": namespace}},
    )
    doc = wait_for(lambda: running(lab_real, namespace, "w"), 60, "pod w Running")
    shared = Path(info["shared_dir"]) / f"{doc['metadata']['uid']}.log"
    assert grows(shared)
    assert cgroup_pids(info["cgroup"] + "/kubepods"), "no container process in the node's cgroup"
    assert cgroup_pids(info["cgroup"] + "/system"), "no kubelet/containerd in the node's cgroup"

    lab_real.power_off(POWERED)
    # the BMC's hook returns once everything of the node is dead: no process left, no more writes
    assert cgroup_pids(info["cgroup"]) == set()
    count = len(lines(shared))
    lab_real.wait_nodes([POWERED], NOT_READY, 60)
    assert len(lines(shared)) == count, "a container of the powered-off node kept writing"
    assert cgroup_pids(info["cgroup"]) == set()

    lab_real.power_on(POWERED)
    lab_real.wait_nodes([POWERED], "True", 120)
    # the kubelet starts the pod's container again: the same pod writes again
    assert grows(shared, 60)
    assert wait_for(lambda: running(lab_real, namespace, "w"), 60, "pod w Running again")


@pytest.fixture
def partitioned(lab_real):
    yield PARTITIONED
    lab_real.heal(PARTITIONED)
    lab_real.wait_nodes([PARTITIONED], "True", 120)


def test_partition_leaves_the_container_running(lab_real, namespace, partitioned, tmp_path):
    info = lab_real.info["real_nodes"][PARTITIONED]
    apply(
        lab_real,
        tmp_path,
        {**real_pod("p", PARTITIONED, WRITER), "metadata": {"name": "p", "namespace": namespace}},
    )
    doc = wait_for(lambda: running(lab_real, namespace, "p"), 60, "pod p Running")
    shared = Path(info["shared_dir"]) / f"{doc['metadata']['uid']}.log"
    assert grows(shared)

    lab_real.partition(PARTITIONED)
    lab_real.wait_nodes([PARTITIONED], NOT_READY, 60)
    # cut off from the apiserver, the kubelet and its container go on: the writer still writes
    assert grows(shared)
    assert cgroup_pids(info["cgroup"] + "/kubepods")
    out = lab_real.kubectl("-n", namespace, "logs", "p", "--request-timeout=5s")
    assert out.returncode != 0, "the apiserver reached the kubelet of a partitioned node"

    lab_real.heal(PARTITIONED)
    lab_real.wait_nodes([PARTITIONED], "True", 120)
    assert grows(shared)


@pytest.fixture
def fc_disabled(lab_real):
    yield PARTITIONED
    lab_real.fc_port(PARTITIONED, True)


def test_fc_port_down_fails_every_write_to_the_shared_storage(lab_real, namespace, fc_disabled, tmp_path):
    info = lab_real.info["real_nodes"][PARTITIONED]
    apply(
        lab_real,
        tmp_path,
        {**real_pod("s", PARTITIONED, WRITER), "metadata": {"name": "s", "namespace": namespace}},
    )
    doc = wait_for(lambda: running(lab_real, namespace, "s"), 60, "pod s Running")
    shared = Path(info["shared_dir"]) / f"{doc['metadata']['uid']}.log"
    assert grows(shared)

    lab_real.fc_port(PARTITIONED, False)  # returns once the switch's hook has run
    count = len(lines(shared))
    # the writer keeps trying; each attempt now fails inside the container
    wait_for(
        lambda: (
            "Read-only file system"
            in lab_real.kubectl("-n", namespace, "logs", "s", "--tail=5").stdout
            + lab_real.kubectl("-n", namespace, "logs", "s", "--tail=5").stderr
        ),
        60,
        "a failed write in the writer's log",
    )
    assert len(lines(shared)) == count, "a write reached the shared storage through a disabled FC port"
    assert running(lab_real, namespace, "s"), "the writer should be alive, only cut off"

    lab_real.fc_port(PARTITIONED, True)
    assert grows(shared)
