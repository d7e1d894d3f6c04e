"""Deleting a NodeFence at any point of its flow leaves the node as it was before fencing.

The runner (``noderemedy-runner --reconcile-only``) fences lab-node-1 hung with its power on (kwok
stops its heartbeat, its ipmi_sim BMC still reads on): Isolation disables its FC switch port,
PowerManagement powers it off (the out-of-service taint goes on in the same run) and on again,
Recovery enables the port and removes the taint. The test deletes the NodeFence at one point of
that flow -- still New, during Isolation, during PowerManagement, right after the taint, during
Recovery -- and checks, on the devices' own logs (the BMC's power log, the FC switch's SET log)
and on the real kube-apiserver, that the NodeFence goes, the node ends Ready and untainted, its FC
port up and its BMC on, with no second power cycle. A NodeFence deleted while still New never got
the finalizer and goes at once, having touched no device.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    FenceNamespace,
    events_of,
    fence_config,
    fence_ns,
    get_nf,
    gone,
    nodefence,
    oos_on,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner
from test_runner_restart import collapse, fc_sets, hung, power_sets  # noqa: F401 - hung is a fixture

from noderemedy_lab.config import POWER_LABEL
from noderemedy_runner.machines.deletion import FINALIZER

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NF = ("remediation.noderemedy.io", "v1alpha1", "nodefences")


def current_step(co: client.CustomObjectsApi, name: str) -> str | None:
    """The step of the run the NodeFence has committed to (None: none)."""
    run = (get_nf(co, name).get("status") or {}).get("currentRun") or {}
    return run.get("step")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", ["New", "Isolation", "PowerManagement", "after the taint", "Recovery"])
def test_a_nodefence_deleted_at_any_step_leaves_the_node_ready_untainted_and_on(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung: str,  # noqa: F811
    point: str,
) -> None:
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    name = f"nf-fin-{point.split()[-1].lower()}-{uuid.uuid4().hex[:4]}"
    since = time.time()
    # still New: a grace period longer than the test keeps the flow from starting
    r = runner("--grace-seconds", "3600") if point == "New" else runner()
    created = nodefence(co, name, DEAD)
    uid = created["metadata"]["uid"]

    def power() -> list[str]:
        return power_sets(lab_kube, DEAD, since)

    def fc() -> list[int]:
        return fc_sets(lab_kube, DEAD, since)

    reached: dict[str, Callable[[], object]] = {
        "New": lambda: (get_nf(co, name).get("status") or {}).get("observedGeneration"),
        "Isolation": lambda: 2 in fc(),  # the port read down: Isolation's method took effect
        "PowerManagement": lambda: "0" in power(),  # the power cut at the BMC
        "after the taint": lambda: oos_on(core, DEAD),
        "Recovery": lambda: current_step(co, name) == "Recovery",  # committed, before or during its run
    }
    wait_for(reached[point], 240, f"NodeFence {name} at {point}: {get_nf(co, name).get('status')}")
    at = (get_nf(co, name).get("status") or {}).get("currentRun")
    finalizers = list(get_nf(co, name)["metadata"].get("finalizers") or [])
    deleted = time.monotonic()
    co.delete_cluster_custom_object(*NF, name)
    if point in ("New", "Isolation"):  # the hung node comes back by itself (its power never went)
        out = lab_kube.kubectl("label", "node", DEAD, f"{POWER_LABEL}=on", "--overwrite")
        assert out.returncode == 0, out.stderr
    wait_for(lambda: gone(co, name), 300, f"NodeFence {name} gone after its deletion at {point}")
    gone_after = time.monotonic() - deleted
    lab_kube.wait_nodes([DEAD], "True", 120)
    assert not oos_on(core, DEAD), "the out-of-service taint stayed on a Ready node"
    # the devices' own logs: the port back up, the power on, never a second power cycle
    assert collapse(fc()) in ([], [2, 1]), fc()
    assert collapse(power()) in ([], ["0", "1"]), power()
    reasons = [e.reason for e in events_of(api, {"metadata": {"uid": uid, "namespace": "default"}})]
    cleanup = [x for x in reasons if x.startswith("Cleanup") or x == "OutOfServiceTaintRemoved"]
    if point == "New":
        assert finalizers == [] and power() == [] and fc() == [], "a New NodeFence touched a device"
    else:
        assert finalizers == [FINALIZER]
        assert "CleanupFinished" in reasons and "CleanupTimedOut" not in reasons, reasons
    r.stop()
    print(
        f"\nFIGURE finalizer: NodeFence deleted at {point} (run {at and at.get('ident')}) gone in "
        f"{gone_after:.1f} s, node Ready and untainted; BMC sets {power()}, FC sets {fc()}; cleanup Events {cleanup}"
    )


@pytest.mark.timeout(300)
def test_the_cleanup_lets_go_after_the_recovery_timeout_naming_what_was_left(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung: str,  # noqa: F811
) -> None:
    """Deleted after Isolation, a node that never comes back: its port may not be enabled (the
    node is not Ready), so after the recovery timeout (20 s here) the finalizer goes anyway, with
    a Warning Event on the NodeFence and on the Node naming the port left disabled."""
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    port = lab_kube.info["devices"]["fc_ports"][DEAD]
    fence_ns.put("config_map", fence_config(DEAD, port, "fc-off", "", "fc-on"))  # storage only
    name = f"nf-fin-timeout-{uuid.uuid4().hex[:4]}"
    since = time.time()
    try:
        runner("--recovery-timeout", "20")
        uid = nodefence(co, name, DEAD)["metadata"]["uid"]
        wait_for(lambda: 2 in fc_sets(lab_kube, DEAD, since), 120, f"NodeFence {name}: the port down")
        deleted = time.monotonic()
        co.delete_cluster_custom_object(*NF, name)
        wait_for(lambda: gone(co, name), 120, f"NodeFence {name} gone after the recovery timeout")
        gone_after = time.monotonic() - deleted
        assert gone_after >= 15, f"let go after {gone_after:.1f} s, before the 20 s timeout"
        assert fc_sets(lab_kube, DEAD, since) == [2], "the port of a node that is not Ready was enabled"
        warned = [
            e for e in events_of(api, {"metadata": {"uid": uid, "namespace": "default"}})
            if e.reason == "CleanupTimedOut"
        ]  # fmt: skip
        assert warned and warned[0].type == "Warning" and "fc-off" in warned[0].message, warned
        on_node = core.list_namespaced_event(
            "default",
            field_selector=f"involvedObject.kind=Node,involvedObject.name={DEAD},reason=CleanupTimedOut",
        ).items
        assert any(name in e.message for e in on_node), [e.message for e in on_node]
        print(
            f"\nFIGURE finalizer: cleanup gave up {gone_after:.1f} s after the deletion (timeout 20 s): {warned[0].message}"
        )
    finally:
        lab_kube.fc_port(DEAD, True)
        fence_ns.standard(DEAD)
