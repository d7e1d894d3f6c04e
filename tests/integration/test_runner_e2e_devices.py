"""noderemedy-runner end to end through the new fencing peers: a NodeFence fenced through the lab's
Redfish BMC (sushy-tools), a NodeFence of a cloud node with the seed's default cloud configuration
through the lab's EC2 endpoint (moto), and a Metal3Remediation of a ``redfish://`` BareMetalHost.

The dead node is lab-node-1, turned NotReady by powering it off through the peer under test (its
power hook stops the kwok heartbeat). Fixtures and helpers are e2e_helpers'.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import e2e_helpers as e2e
import pytest
from e2e_helpers import (
    M3,
    OOS,
    ROOT,
    FenceNamespace,
    Runner,
    conds,
    events_with,
    nodefence,
    private_dir,
    run_until,
    taint_present,
)
from kube_helpers import wait_for
from kubernetes import client

from ansible_collections.noderemedy.core.plugins.module_utils._aws import AwsInstanceDriver
from ansible_collections.noderemedy.core.plugins.module_utils._redfish import RedfishDriver
from noderemedy_runner.executor import Executor

pytestmark = [pytest.mark.lab, pytest.mark.kube]
DEAD = "lab-node-1"
# e2e_helpers' fixtures, used here under their own names
fence_ns, metal3_ns, runner = e2e.fence_ns, e2e.metal3_ns, e2e.runner


def rf_driver(ep: dict, node: str = DEAD) -> RedfishDriver:
    return RedfishDriver(
        ep["host"], ep["username"], ep["password"], ipport=ep["port"], ca_path=ep["ca_file"],
        systems_uri=ep["systems"][node]["uri"], poll_interval=0.05,
    )  # fmt: skip


def ec2_driver(ep: dict, node: str = DEAD) -> AwsInstanceDriver:
    c = ep["credentials"]["fencer"]
    return AwsInstanceDriver(
        ep["instances"][node],
        ep["region"],
        c["access_key"],
        c["secret_key"],
        ep["endpoint_url"],
        poll_interval=0.05,
    )


@pytest.fixture
def rf_dead(lab_kube: Any, redfish_peer: dict) -> Iterator[dict]:
    """lab-node-1 powered off through its Redfish system and NotReady; afterwards on and Ready."""
    rf_driver(redfish_peer).run("off")
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    yield redfish_peer
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS}-")
    rf_driver(redfish_peer).run("on")
    lab_kube.wait_nodes([DEAD], "True", 120)


def phases_of(seen: list) -> list[str]:
    return [k for i, k in enumerate(p[0] for p in seen) if i == 0 or seen[i - 1][0] != k]


def follow(lab: Any, seen: dict) -> Callable[[dict], None]:
    def tick(obj: dict) -> None:
        st = obj.get("status") or {}
        phase = (st.get("status"), st.get("step"))
        if phase[0] and (not seen["phases"] or seen["phases"][-1] != phase):
            seen["phases"].append(phase)
        if taint_present(lab, DEAD):
            seen["tainted"] = True

    return tick


def test_nodefence_through_redfish(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,
    runner: Callable[..., Runner],
    rf_dead: dict,
) -> None:
    ep = rf_dead
    fence_ns.put(
        "secret",
        {
            "metadata": {"name": "rf-bmc"},
            "stringData": {"username": ep["username"], "password": ep["password"]},
        },
    )
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-redfish"},
            "data": {
                "template.properties": f"type=redfish\naddress=https://{ep['host']}:{ep['port']}\nsecret=rf-bmc\nssl_insecure=true\n"
            },
        },
    )
    uri = ep["systems"][DEAD]["uri"]
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": f"fence-config-{DEAD}"},
            "data": {
                # off in isolation: the run releases the workloads while the node is still down
                "config.properties": f"node_name={DEAD}\nisolation=rf-off\npower_management=rf-on\nrecovery=\n",
                "fence-method-rf-off": f"template=fence-method-template-redfish\nplug={uri}\naction=off",
                "fence-method-rf-on": f"template=fence-method-template-redfish\nplug={uri}\naction=on",
            },
        },
    )
    try:
        co = client.CustomObjectsApi(api)
        name = f"nf-rf-{uuid.uuid4().hex[:6]}"
        r = runner()
        nodefence(co, name, DEAD)
        seen: dict[str, Any] = {"phases": [], "tainted": False}
        obj = run_until(co, name, {"Final", "Error"}, 300, follow(lab_kube, seen))
        assert obj["status"]["status"] == "Final", obj["status"]
        assert phases_of(seen["phases"])[-2:] == ["Done", "Final"], seen["phases"]
        assert not taint_present(lab_kube, DEAD)
        runs = Executor(r.data_dir / "runs", ROOT / "playbooks")
        iso = runs.recover(private_dir(r, obj), f"{name}-r0-isolation-a0")
        pm = runs.recover(private_dir(r, obj), f"{name}-r0-power-management-a0")
        assert iso is not None and iso.succeeded and pm is not None and pm.succeeded, (iso, pm)
        assert [(m.device_type, m.state, m.fence.get("verified")) for m in iso.modules] == [
            ("redfish", "off", True)
        ]
        assert [(m.device_type, m.state, m.fence.get("verified")) for m in pm.modules] == [
            ("redfish", "on", False)
        ]
        # released by the isolation run on its verified Redfish power-off
        events = events_with(api, obj, "OutOfServiceTaintAdded", "OutOfServiceTaintRemoved")
        added = [e.message for e in events if e.reason == "OutOfServiceTaintAdded"]
        assert added and f"power_off verified in run {name}-r0-isolation-a0" in added[0], added
        assert rf_driver(ep).run("status").after == {uri: "on"}
        assert lab_kube.node_ready([DEAD])[DEAD] == "True"
        assert conds(obj)["Succeeded"]["status"] == "True"
    finally:
        fence_ns.standard(DEAD)


@pytest.fixture
def ec2_dead(lab_kube: Any, ec2_peer: dict) -> Iterator[dict]:
    """lab-node-1's EC2 instance stopped (the node NotReady); afterwards running and Ready."""
    ec2_driver(ec2_peer).run("off")
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    yield ec2_peer
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS}-")
    lab_kube.kubectl("uncordon", DEAD)
    ec2_driver(ec2_peer).run("on")
    lab_kube.wait_nodes([DEAD], "True", 120)


def test_cloud_node_without_fence_config_gets_the_seed_default(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,
    runner: Callable[..., Runner],
    ec2_dead: dict,
) -> None:
    ep = ec2_dead
    c = ep["credentials"]["fencer"]
    fence_ns.put(
        "secret",
        {
            "metadata": {"name": "aws-fencing"},
            "stringData": {"access_key": c["access_key"], "secret_key": c["secret_key"]},
        },
    )
    core = client.CoreV1Api(api)
    core.delete_namespaced_config_map(f"fence-config-{DEAD}", fence_ns.name)
    try:
        co = client.CustomObjectsApi(api)
        name = f"nf-aws-{uuid.uuid4().hex[:6]}"
        r = runner("--cloud-credentials-secret", "aws-fencing", "--cloud-endpoint-url", ep["endpoint_url"])
        nodefence(co, name, DEAD)
        seen: dict[str, Any] = {"phases": [], "tainted": False, "cordoned": False}
        tick = follow(lab_kube, seen)

        def tick2(obj: dict) -> None:
            tick(obj)
            if core.read_node(DEAD).spec.unschedulable:
                seen["cordoned"] = True

        obj = run_until(co, name, {"Final", "Error"}, 300, tick2)
        assert obj["status"]["status"] == "Final", obj["status"]
        assert seen["cordoned"], "isolation=mark-unschedulable never cordoned the node"
        assert not core.read_node(DEAD).spec.unschedulable, "recovery did not make it schedulable again"
        pm = Executor(r.data_dir / "runs", ROOT / "playbooks").recover(
            private_dir(r, obj), f"{name}-r0-power-management-a0"
        )
        assert pm is not None and pm.succeeded, pm
        # restart-instance: stopped (read back) then started, through the instance of spec.providerID
        assert [(m.device_type, m.state, m.fence.get("verified")) for m in pm.modules] == [
            ("aws", "on", True)
        ]
        assert pm.modules[0].fence["plugs"] == [ep["instances"][DEAD]]
        assert ec2_driver(ep).run("status").after == {ep["instances"][DEAD]: "on"}
        assert lab_kube.node_ready([DEAD])[DEAD] == "True"
    finally:
        fence_ns.standard(DEAD)


def test_metal3_remediation_of_a_redfish_host(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner], rf_dead: dict
) -> None:
    ep = rf_dead
    co = client.CustomObjectsApi(api)
    machine = "machine-rf"
    client.CoreV1Api(api).create_namespaced_secret(
        metal3_ns,
        {
            "metadata": {"name": f"{machine}-bmc"},
            "stringData": {"username": ep["username"], "password": ep["password"]},
        },
    )
    address = f"redfish://{ep['host']}:{ep['port']}{ep['systems'][DEAD]['uri']}"
    co.create_namespaced_custom_object(
        "metal3.io", "v1alpha1", metal3_ns, "baremetalhosts",
        {"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "metadata": {"name": f"{machine}-host"},
         "spec": {"online": True, "bmc": {"address": address, "credentialsName": f"{machine}-bmc",
                                            "disableCertificateVerification": True}}},
    )  # fmt: skip
    co.create_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", metal3_ns, "machines",
        {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
         "metadata": {"name": machine, "annotations": {"metal3.io/BareMetalHost": f"{metal3_ns}/{machine}-host"}},
         "spec": {"clusterName": "lab", "bootstrap": {}, "infrastructureRef": {"kind": "Metal3Machine", "name": machine}}},
    )  # fmt: skip
    co.patch_namespaced_custom_object_status(
        "cluster.x-k8s.io",
        "v1beta1",
        metal3_ns,
        "machines",
        machine,
        {"status": {"nodeRef": {"kind": "Node", "name": DEAD}}},
    )
    co.create_namespaced_custom_object(
        *M3[:2], metal3_ns, M3[2],
        {"apiVersion": f"{M3[0]}/{M3[1]}", "kind": "Metal3Remediation",
         "metadata": {"name": machine, "annotations": {"remediation.noderemedy.io/runner": "true"}},
         "spec": {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}}},
    )  # fmt: skip
    runner()
    phases: list[str] = []
    tainted: list[bool] = []

    def done() -> dict | None:
        o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], machine)
        ph = (o.get("status") or {}).get("phase", "")
        if ph and (not phases or phases[-1] != ph):
            phases.append(ph)
        tainted.append(taint_present(lab_kube, DEAD))
        fin = o["metadata"].get("finalizers") or []
        ready = lab_kube.node_ready([DEAD])[DEAD] == "True"
        return o if ph == "Waiting" and not fin and ready and not tainted[-1] else None

    obj = wait_for(done, 300, "Metal3Remediation done (Waiting, finalizer removed, node Ready, untainted)")
    assert phases[:2] == ["Running", "Waiting"], phases
    assert events_with(api, obj, "PowerOff", "PowerOn", "OutOfServiceTaintAdded")
    assert rf_driver(ep).run("status").after == {ep["systems"][DEAD]["uri"]: "on"}


@pytest.fixture
def crashed(lab_kube: Any) -> Iterator[str]:
    """lab-node-1 down (BMC power off: kwok stops its heartbeat) and NotReady, as a node that
    panicked into its kdump kernel looks to the control plane; afterwards on and Ready."""
    lab_kube.power_off(DEAD)
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    yield DEAD
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS}-")
    lab_kube.power_on(DEAD)
    lab_kube.wait_nodes([DEAD], "True", 120)


def test_kdump_message_releases_before_the_power_step(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,
    runner: Callable[..., Runner],
    crashed: str,
) -> None:
    """isolation=kdump: fence_kdump_send from the "node" releases the workloads in the isolation
    run; power_management (IPMI off, on) still runs afterwards (the seed's kdump integration)."""
    port = lab_kube.config.port("kdump")
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-kdump"},
            "data": {
                "template.properties": f"agent_name=fence_kdump\naddress=127.0.0.1:{port}\ntimeout=60\n"
            },
        },
    )
    ipmi = f"fence-method-template-ipmi-{DEAD}"
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": f"fence-config-{DEAD}"},
            "data": {
                "config.properties": f"node_name={DEAD}\nisolation=kdump\npower_management=ipmi-off ipmi-on\nrecovery=\n",
                "fence-method-kdump": "template=fence-method-template-kdump\nplug=127.0.0.1\naction=off",
                "fence-method-ipmi-off": f"template={ipmi}\naction=off",
                "fence-method-ipmi-on": f"template={ipmi}\naction=on",
            },
        },
    )
    # the crashed node's kdump kernel: one message a second to the runner's host
    sender = subprocess.Popen(
        [
            "/usr/libexec/fence-agents/fence_kdump_send",
            "-p",
            str(port),
            "-f",
            "ipv4",
            "-i",
            "1",
            "-c",
            "120",
            "127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        co = client.CustomObjectsApi(api)
        name = f"nf-kd-{uuid.uuid4().hex[:6]}"
        r = runner()
        nodefence(co, name, DEAD)
        seen: dict[str, Any] = {"phases": [], "tainted": False}
        obj = run_until(co, name, {"Final", "Error"}, 300, follow(lab_kube, seen))
        assert obj["status"]["status"] == "Final", obj["status"]
        runs = Executor(r.data_dir / "runs", ROOT / "playbooks")
        iso = runs.recover(private_dir(r, obj), f"{name}-r0-isolation-a0")
        # the power step's two segments, one run each: ipmi-off, then ipmi-on
        pm = [runs.recover(private_dir(r, obj), f"{name}-r0-power-management-a0{s}") for s in ("", "-s1")]
        assert iso is not None and iso.succeeded and all(o is not None and o.succeeded for o in pm), (iso, pm)
        assert [(m.device_type, m.fence.get("verified"), m.fence.get("state")) for m in iso.modules] == [
            ("kdump", True, "kdump")
        ]
        assert [(m.device_type, m.state) for o in pm for m in o.modules] == [  # type: ignore[union-attr]
            ("ipmi", "off"),
            ("ipmi", "on"),
        ]
        added = [
            e for e in events_with(api, obj, "OutOfServiceTaintAdded") if e.reason == "OutOfServiceTaintAdded"
        ]
        assert added and f"verified in run {name}-r0-isolation-a0" in added[0].message, [
            e.message for e in added
        ]
        assert lab_kube.node_ready([DEAD])[DEAD] == "True" and not taint_present(lab_kube, DEAD)
    finally:
        sender.terminate()
        sender.wait(10)
        fence_ns.standard(DEAD)
