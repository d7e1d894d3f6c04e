"""pytest plugin: the session-scoped ``lab`` fixture (real peers on 127.0.0.1, started once).

Environment:
    NODEREMEDY_LAB_PORT_BASE  first port of the test lab's layout (default 24000, away from a
                              user's ``noderemedy-lab up`` lab on 20000)
    NODEREMEDY_LAB_KUBE=0     start the devices only (no control plane): for fencing-only runs
    NODEREMEDY_LAB_NODES      number of nodes (default 3)
    NODEREMEDY_LAB_REAL_NODES number of real nodes (kubelet + containerd; default 2, 0 for none).
                              Their BMCs start with the lab; their network, containerd and kubelet
                              only when a test first asks for ``lab_real``.

Under pytest-xdist each worker is its own session with its own lab: worker ``gwN`` takes the port
base ``NODEREMEDY_LAB_PORT_BASE + 600 * N`` (:func:`worker_port_base`) and a workdir under its own
``tmp_path_factory`` base, so the labs of parallel workers share nothing. Within a worker's
range (``worker_port_base() + offset``): the session lab +0..+14 and +100..+(100 + nodes);
tests/integration/test_demo.py's demo lab +20..+34 and +120..+125;
tests/integration/test_lab_cli.py's labs +200..+294 and +300..+381; test_lab_devices.py's
+420..+474 and +520..+560; test_runner_in_cluster_back_to_back.py's lab +382..+400 and
+482..+485 (1 kwok + 3 real BMCs; its cluster-api ports, +422..+424, are never opened); free
ports picked by tests +580..+599. Tests that share a lab's state run in one worker (``./dev
test`` distributes by file, ``--dist loadfile``, longest file first: tests/integration/conftest.py);
the labs of two files of a worker never run at once, the session lab runs beside each.

The test lab's node monitor grace period is :data:`TEST_GRACE_PERIOD` (the demo's lab keeps the
default, 20 s): tests wait for the real node lifecycle controller, and a shorter period is a shorter
wait with the same path.

The lab is started lazily, the first time a test asks for ``lab``, and stopped at the end of the
session; teardown checks that every process it started is gone. A failure to start is an error
of the tests that need it (never a skip): the machine is expected to run every real peer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from .config import LabConfig
from .lab import Lab
from .procs import proc_start_time

#: Ports each pytest-xdist worker's lab may use, from its base (the layout of
#: :mod:`noderemedy_lab.config` takes the first 100 + nodes).
WORKER_PORT_STRIDE = 600

#: ``--node-monitor-grace-period`` of the test lab, in seconds: four of kwok's node Lease renewals fit
#: in it (kwok renews every quarter of the Lease duration, :attr:`LabConfig.node_lease_seconds`, 10 s).
TEST_GRACE_PERIOD = 10
#: kwok's node-heartbeat delay in the test lab, seconds (plus up to 2.5 s jitter): a heartbeat
#: scheduled before a test cuts a node's power plays within 4.5 s, before the grace period ends,
#: never after the node was seen NotReady (:attr:`LabConfig.node_heartbeat_seconds`).
TEST_HEARTBEAT_SECONDS = 2.0


def worker_index() -> int:
    """This pytest-xdist worker's index (``gw3`` -> 3), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def worker_port_base() -> int:
    """First port of this worker's range: ``NODEREMEDY_LAB_PORT_BASE`` (default 24000) plus
    :data:`WORKER_PORT_STRIDE` per worker index."""
    return int(os.environ.get("NODEREMEDY_LAB_PORT_BASE", "24000")) + WORKER_PORT_STRIDE * worker_index()


def lab_config(workdir) -> LabConfig:
    """The test lab's configuration from the environment (see module docstring)."""
    return LabConfig(
        workdir=workdir,
        nodes=int(os.environ.get("NODEREMEDY_LAB_NODES", "3")),
        port_base=worker_port_base(),
        kube=os.environ.get("NODEREMEDY_LAB_KUBE", "1") != "0",
        node_monitor_grace_period=TEST_GRACE_PERIOD,
        node_heartbeat_seconds=TEST_HEARTBEAT_SECONDS,
        real_nodes=int(os.environ.get("NODEREMEDY_LAB_REAL_NODES", "2"))
        if os.environ.get("NODEREMEDY_LAB_KUBE", "1") != "0"
        else 0,
    )


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Mark every test by the lab it needs, from the fixtures it uses (directly or through other
    fixtures): ``lab`` for the ``lab`` fixture, ``lab`` and ``kube`` for ``lab_kube``; so that
    ``-m "not lab"`` selects exactly the tests that need no peer of the session's lab. (Tests that
    start peers of their own carry ``pytestmark = pytest.mark.lab`` themselves.)

    Tests that use the real nodes (fixture ``lab_real``) run last, in their collected order: once
    started, the real nodes stay registered in the cluster for the rest of the session, and the
    tests written for the kwok nodes count every node of the cluster. (Under pytest-xdist,
    tests/integration/conftest.py then orders whole files by their expected time, longest first,
    so that no long file starts last: a worker may then run kwok tests after its real nodes started.)"""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & {"lab", "lab_kube", "lab_real"}:
            item.add_marker(pytest.mark.lab)
        if names & {"lab_kube", "lab_real"}:
            item.add_marker(pytest.mark.kube)
    real = [item for item in items if "lab_real" in getattr(item, "fixturenames", ())]
    if real:
        rest = [item for item in items if "lab_real" not in getattr(item, "fixturenames", ())]
        items[:] = rest + real


@contextmanager
def running_lab(config: LabConfig, defer_real_nodes: bool = False) -> Iterator[Lab]:
    """A :class:`~noderemedy_lab.lab.Lab` of ``config`` started for the block, then stopped and
    checked stopped: no process it started and no real node's namespace, link or cgroup is left
    (a leftover would be found by the next lab on the same port base)."""
    os.chmod(config.workdir.parent, 0o755)  # snmpsim drops to 'nobody' and must reach its data
    the_lab = Lab(config)
    the_lab.start(progress=lambda line: print(f"[lab] {line}", flush=True), defer_real_nodes=defer_real_nodes)
    try:
        yield the_lab
    finally:
        records = {n: p.record() for n, p in the_lab.supervisor.procs.items()} if the_lab.supervisor else {}
        the_lab.stop()
        left = [n for n, r in records.items() if proc_start_time(r["pid"]) == r["start_time"]]
        assert not left, f"lab processes still running after stop: {left}"
        if the_lab.real is not None:
            from .realnode import leftovers

            rest = leftovers(the_lab.config)
            assert not rest, f"real nodes left behind after stop: {rest}"


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A started :class:`~noderemedy_lab.lab.Lab`; stopped (and checked stopped) after the session."""
    workdir = tmp_path_factory.mktemp("lab", numbered=True)
    with running_lab(lab_config(workdir), defer_real_nodes=True) as the_lab:
        yield the_lab


@pytest.fixture(scope="session")
def lab_real(lab: Lab) -> Lab:
    """The lab with its real nodes started (``lab.info["real_nodes"]``); error if it has none."""
    if lab.kubeconfig is None or not lab.config.real_nodes:
        pytest.fail("this test needs real nodes: set NODEREMEDY_LAB_REAL_NODES >= 2 (and the control plane)")
    lab.start_real_nodes(progress=lambda line: print(f"[lab] {line}", flush=True))
    return lab


@pytest.fixture(scope="session")
def lab_kube(lab: Lab) -> Lab:
    """The lab, required to have its Kubernetes control plane (error if started with NODEREMEDY_LAB_KUBE=0)."""
    if lab.kubeconfig is None:
        pytest.fail("this test needs the lab's control plane; unset NODEREMEDY_LAB_KUBE=0")
    return lab


@pytest.fixture(scope="session")
def redfish_peer(lab: Lab) -> dict:
    """The lab's Redfish BMC (sushy-tools emulator), started the first time a test asks for it.

    Its endpoint: see :func:`noderemedy_lab.redfish.start_peer`.
    """
    return lab.ensure_peer("redfish")


@pytest.fixture(scope="session")
def ec2_peer(lab: Lab) -> dict:
    """The lab's EC2 endpoint (moto's server), started the first time a test asks for it.

    Its endpoint: see :func:`noderemedy_lab.ec2.configure`.
    """
    return lab.ensure_peer("ec2")


@pytest.fixture(scope="session")
def vsphere_peer(lab: Lab) -> dict:
    """The lab's vCenter (govmomi's simulator), started the first time a test asks for it.

    Its endpoint: see :func:`noderemedy_lab.vsphere.start_peer`.
    """
    return lab.ensure_peer("vsphere")
