"""Thresholds on node conditions other than Ready, on the lab (the node remedy design's own example:
``DiskPressure`` True for a period → ``remedy1: storage-fence``; node-problem-detector's
``KernelDeadlock`` as a custom condition type).

The runner is the real ``noderemedy-runner`` process with its detector on. A Ready kwok node whose
DiskPressure stays True for the period gets a NodeFence that records that threshold
(``spec.threshold``); its storage-fence remedy (the fence flow of ``fence-config-<node>``: the
node's FC port off, ``fenced_storage=`` naming the storage, no power management) releases the pods
on that storage while the node stays Ready and powered on, with no out-of-service taint; the
NodeFence waits in Done while DiskPressure holds, and ends Final (recovery: the FC port on again)
once it clears. Before, the same NodeFence ended Final at once with ``NodeHealthy``: the node was
Ready.

kwok rewrites DiskPressure to False on every node heartbeat; the test holds the node's conditions
(:mod:`noderemedy_lab.conditions`: the status heartbeat stops, the node Lease goes on, the node
stays Ready). KernelDeadlock is not one of kwok's conditions: it stays as written, heartbeat or not.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    OOS,
    POLICY,
    FenceNamespace,
    fence_config,
    fence_ns,
    power_log,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner, delete_nodefences, events, nodefences, write_config

from noderemedy_lab import conditions
from noderemedy_lab.procs import require_binary

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NODE = "lab-node-1"
SAN = "/mnt/lab-san"


def configuration(condition: str) -> str:
    """The design's DiskPressure threshold (its period shortened to 2 s) for ``condition``."""
    return f"""\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {{name: thresholds}}
nodeSelector: kubernetes.io/hostname={NODE}
thresholdConfigs:
- nodeConditionType: {condition}
  nodeConditionStatus: true
  nodeConditionPeriod: 2s
  remedy1:
   - name: storage-fence
   - clean-resourece: true
  recovery:
   - name: recovery
stormGuard: {{maxUnhealthy: 1, cooldown: 0s}}
"""


def fc_admin_status(lab: Any, node: str) -> str:
    """``up`` or ``down``: the node's FC port's IF-MIB ifAdminStatus, read over SNMP."""
    fc = lab.info["devices"]["snmp"]["fc"]
    index = lab.info["devices"]["fc_ports"][node].rsplit("/", 1)[1]
    out = subprocess.run(
        [
            require_binary("snmpget", "snmpget", "snmp"),
            "-v2c",
            "-c",
            fc["community"],
            "-m",
            "",
            "-Oqv",
            f"{fc['host']}:{fc['port']}",
            f".1.3.6.1.2.1.2.2.1.7.{index}",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=30,
        env={"SNMP_PERSISTENT_DIR": lab.info["devices"]["snmp_persistent_dir"], "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    return {"1": "up", "2": "down"}.get(out.stdout.strip(), out.stdout.strip())


def pod(name: str, volume: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "noderemedy.local/busybox:lab",
                    "volumeMounts": [{"name": "v", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "v", **volume}],
        },
    }


@pytest.fixture
def app(api: client.ApiClient) -> Iterator[str]:
    """A namespace with two pods on the kwok node: ``web`` on the SAN (a hostPath under
    :data:`SAN`), ``idle`` on no fenced storage (an emptyDir)."""
    core = client.CoreV1Api(api)
    ns = f"app-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_pod(ns, pod("web", {"hostPath": {"path": f"{SAN}/web", "type": ""}}))
    core.create_namespaced_pod(ns, pod("idle", {"emptyDir": {}}))
    for name in ("web", "idle"):
        wait_for(
            lambda n=name: core.read_namespaced_pod(n, ns).status.phase == "Running", 60, f"{name} Running"
        )
    yield ns
    core.delete_namespace(ns)


@pytest.fixture
def storage_fence(lab_kube: Any, fence_ns: FenceNamespace) -> Iterator[Any]:  # noqa: F811
    """Puts ``fence-config-<NODE>``: isolation=fc-off (the storage fence), no power management,
    recovery=fc-on, and with ``release`` ``fenced_storage`` naming the SAN. Afterwards the
    standard configuration, the port up, the node's conditions released and Ready."""
    port = lab_kube.info["devices"]["fc_ports"][NODE]

    def put(release: bool) -> None:
        cfg = fence_config(NODE, port, "fc-off", "", "fc-on")
        if release:
            cfg["data"]["config.properties"] += f"fenced_storage=hostpath:{SAN}\n"
        fence_ns.put("config_map", cfg)

    yield put
    delete_nodefences(fence_ns.core.api_client)
    conditions.release(lab_kube, NODE)
    fence_ns.standard(NODE)
    lab_kube.fc_port(NODE, True)
    lab_kube.wait_nodes([NODE], "True", 90)


def the_nodefence(api: client.ApiClient) -> dict[str, Any] | None:
    return next((o for o in nodefences(api).values() if o["spec"]["node"] == NODE), None)


def phase(api: client.ApiClient) -> str | None:
    obj = the_nodefence(api)
    return (obj.get("status") or {}).get("status") if obj else None


def reasons(api: client.ApiClient) -> list[str]:
    obj = the_nodefence(api)
    return [e.reason for e in events(api, "NodeFence", obj["metadata"]["name"])] if obj else []


def gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    return not [p for p in core.list_namespaced_pod(ns).items if p.metadata.name == name]


def run_threshold(
    lab: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    tmp_path: Path,
    ns: str,
    condition: str,
    release: bool,
) -> None:
    """The story for ``condition`` (module docs): set True, the NodeFence fences the storage of the
    Ready node (releasing the pods on the SAN when ``release``), waits in Done; then cleared."""
    core = client.CoreV1Api(api)
    snmp_dir = lab.info["devices"]["snmp_persistent_dir"]
    power_before = power_log(lab, NODE)
    r = Runner(
        lab, fence_ns.name, tmp_path, "--poll-interval", "0.2", "--run-env", f"SNMP_PERSISTENT_DIR={snmp_dir}",
        *POLICY, config=write_config(tmp_path, configuration(condition)), identity="thresholds",
    )  # fmt: skip
    try:
        t0 = time.monotonic()
        conditions.set_conditions(lab, NODE, {condition: "True"})
        obj = wait_for(lambda: the_nodefence(api), 60, f"a NodeFence for {NODE} ({condition}=True)")
        assert obj["spec"]["threshold"] == {
            "conditionType": condition,
            "statuses": ["True"],
            "periodSeconds": 2.0,
        }
        done = wait_for(lambda: phase(api) == "Done" and the_nodefence(api), 180, "the NodeFence in Done")
        print(
            f"FIGURE threshold {condition}=True → storage fenced, NodeFence Done (period 2 s): {time.monotonic() - t0:.1f} s"
        )
        conds = {c["type"]: c for c in done["status"]["conditions"]}
        if release:
            assert gone(core, ns, "web"), "web (on the fenced SAN) not released"
            assert conds["WorkloadsReleased"]["reason"] == "FencedStorageReleased", conds
        else:
            assert not gone(core, ns, "web") and "WorkloadsReleased" not in conds, conds
        assert fc_admin_status(lab, NODE) == "down"
        node = core.read_node(NODE)
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
        assert not any(t.key == OOS for t in node.spec.taints or []), "a storage fence never taints"
        assert core.read_namespaced_pod("idle", ns).status.phase == "Running", "idle uses no fenced storage"
        assert power_log(lab, NODE) == power_before, "the node was powered off or on"
        assert "NodeHealthy" not in reasons(api), "judged by Ready: the NodeFence ended at once"
        t1 = time.monotonic()
        conditions.set_conditions(lab, NODE, {condition: "False"})
        if release:
            # safe return: the storage is unfenced only once the node's kubelet runs none of the
            # released pods (its /runningpods/ through the API server's node proxy), which the API
            # server refuses for a kwok node (its address is 127.0.0.1: "address not allowed"):
            # recovery waits, the SAN stays fenced (the recovery after a storage release on a real
            # node: test_real_node_fencing.py)
            wait_for(lambda: r.logged(f"{NODE}/runningpods/"), 60, "the runner asking the node's kubelet")
            assert phase(api) == "Done" and fc_admin_status(lab, NODE) == "down"
            return
        try:
            final = wait_for(
                lambda: phase(api) in ("Final", "Error") and the_nodefence(api), 120, "the NodeFence ended"
            )
        except AssertionError as exc:
            tail = [ln for ln in r.lines() if ln.get("level") in ("warning", "error")][-5:]
            raise AssertionError(
                f"{exc}\nstatus: {(the_nodefence(api) or {}).get('status')}\nrunner: {tail}"
            ) from None
        print(f"FIGURE threshold {condition} cleared → NodeFence Final: {time.monotonic() - t1:.1f} s")
        conds = {c["type"]: c for c in final["status"]["conditions"]}
        assert (final["status"]["status"], conds["Succeeded"]["reason"]) == (
            "Final",
            "RemediationFinished",
        ), conds
        assert fc_admin_status(lab, NODE) == "up"
        assert power_log(lab, NODE) == power_before
    finally:
        r.stop()


@pytest.mark.timeout(420)
def test_disk_pressure_releases_the_storage_pods_of_a_ready_node(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    storage_fence: Any,
    app: str,
    tmp_path: Path,
) -> None:
    """The design's example threshold and remedy: DiskPressure True on a Ready kwok node, the
    storage-fence remedy with fenced_storage: the pods on the SAN released, no power-off, no taint."""
    storage_fence(True)
    conditions.hold(lab_kube, NODE)
    run_threshold(lab_kube, api, fence_ns, tmp_path, app, "DiskPressure", release=True)


@pytest.mark.timeout(420)
def test_disk_pressure_nodefence_ends_when_it_clears(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    storage_fence: Any,
    app: str,
    tmp_path: Path,
) -> None:
    """DiskPressure True on a Ready kwok node, the storage fence without a release: the NodeFence
    waits in Done while DiskPressure holds and ends Final (recovery: FC port on) once it clears."""
    storage_fence(False)
    conditions.hold(lab_kube, NODE)
    run_threshold(lab_kube, api, fence_ns, tmp_path, app, "DiskPressure", release=False)


@pytest.mark.timeout(420)
def test_a_custom_condition_type_runs_its_remedy(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    storage_fence: Any,
    app: str,
    tmp_path: Path,
) -> None:
    """node-problem-detector's KernelDeadlock (not one of kwok's conditions: kwok's heartbeat, left
    running, keeps it): fenced while it holds, Final once it clears."""
    storage_fence(False)
    run_threshold(lab_kube, api, fence_ns, tmp_path, app, "KernelDeadlock", release=False)
