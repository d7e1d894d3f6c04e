"""An admin stops a NodeFence (annotation ``remediation.noderemedy.io/stop=true``) against the lab:
it stops at the next safe point (a run in flight finishes), lists every fence it applied in its
conditions and an Event, does nothing more while the stop stands, and starts over when the admin
removes the annotation. The devices' own logs (BMC power log, FC switch SET log) show what was
touched.
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
    Runner,
    conds,
    dead,
    events_of,
    events_with,
    fence_ns,
    get_nf,
    nodefence,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from test_runner_guards import device_log, processing

from noderemedy_runner.machines.nodefence import CONFIRM_DOWN_ANNOTATION, STOP_ANNOTATION

pytestmark = [pytest.mark.lab, pytest.mark.kube]

#: Seconds the stopped NodeFence is watched for any further action (a negative is only checkable
#: over a window; the runner decides again every 0.2 s poll).
QUIET_WINDOW = 10.0


@pytest.mark.timeout(500)
def test_a_nodefence_stopped_by_an_admin_does_nothing_more(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
) -> None:
    co = client.CustomObjectsApi(api)
    name = f"nf-stop-{uuid.uuid4().hex[:6]}"
    runner()
    nodefence(co, name, DEAD)
    wait_for(lambda: (get_nf(co, name).get("status") or {}).get("jobs"), 120, "the isolation run finished")
    co.patch_cluster_custom_object(
        "remediation.noderemedy.io", "v1alpha1", "nodefences", name,
        {"metadata": {"annotations": {STOP_ANNOTATION: "true"}}},
    )  # fmt: skip
    obj = wait_for(
        lambda: (o := get_nf(co, name)) and processing(o)[1] == "StoppedByAdmin" and o, 120, "StoppedByAdmin"
    )
    st = obj["status"]
    port = lab_kube.info["devices"]["fc_ports"][DEAD]
    assert st["status"] == "Error" and not st.get("currentRun"), st
    assert conds(obj)["Succeeded"]["reason"] == "StoppedByAdmin"
    message = processing(obj)[2]
    assert f"fc-off (fence-method-template-fc plug {port})" in message, message
    # the Event follows the status write
    stopped_events = wait_for(
        lambda: [e for e in events_of(api, obj) if e.reason == "StoppedByAdmin"],
        30,
        "the StoppedByAdmin Event",
    )
    assert f"fc-off (fence-method-template-fc plug {port})" in stopped_events[0].message

    # nothing more while the stop stands: no run, no device touched
    jobs, devices = list(st.get("jobs") or []), device_log(lab_kube, DEAD)
    deadline = time.monotonic() + QUIET_WINDOW
    while time.monotonic() < deadline:
        now = get_nf(co, name)
        assert list(now["status"].get("jobs") or []) == jobs and not now["status"].get("currentRun")
        assert device_log(lab_kube, DEAD) == devices
        time.sleep(0.5)

    # the admin clears the stop: the NodeFence starts over, fences and recovers the node
    co.patch_cluster_custom_object(
        "remediation.noderemedy.io", "v1alpha1", "nodefences", name,
        {"metadata": {"annotations": {STOP_ANNOTATION: None}}},
    )  # fmt: skip
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") == "Final" and o,
        300,
        "Final after the stop was cleared",
    )
    assert events_with(api, final, "StopCleared")
    assert len(final["status"]["jobs"]) > len(jobs)


@pytest.mark.timeout(400)
def test_an_admin_confirmation_that_the_node_is_down_releases_without_a_device(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
) -> None:
    """Pacemaker's ``stonith_admin --confirm``: the admin checked the machine by hand. Its
    workloads are released (out-of-service taint, through node_taint with the admin's evidence)
    without any device being touched, and the act is recorded as such in an Event on the
    NodeFence and the Node. The flow then waits for the node and recovers it."""
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    devices = device_log(lab_kube, DEAD)
    name = f"nf-confirm-{uuid.uuid4().hex[:6]}"
    runner()
    co.create_cluster_custom_object(
        "remediation.noderemedy.io", "v1alpha1", "nodefences",
        {
            "apiVersion": "remediation.noderemedy.io/v1alpha1", "kind": "NodeFence",
            "metadata": {"name": name, "annotations": {CONFIRM_DOWN_ANNOTATION: "true"}},
            "spec": {"node": DEAD},
        },
    )  # fmt: skip
    obj = wait_for(
        lambda: (o := get_nf(co, name)) and processing(o)[1] == "FenceConfirmedByAdmin" and o,
        120,
        "FenceConfirmedByAdmin",
    )
    assert any(t.key == "node.kubernetes.io/out-of-service" for t in core.read_node(DEAD).spec.taints or [])
    assert obj["status"]["status"] == "Done" and not obj["status"].get("jobs"), obj["status"]
    assert device_log(lab_kube, DEAD) == devices, "no device is touched on an admin's confirmation"
    on_fence = [e for e in events_of(api, obj) if e.reason == "FenceConfirmedByAdmin"]
    assert on_fence and "without a fence device" in on_fence[0].message
    node_events = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={DEAD}"
    ).items
    assert any(e.reason == "FenceConfirmedByAdmin" for e in node_events)
    added = [
        e.message
        for e in events_with(api, obj, "OutOfServiceTaintAdded")
        if e.reason == "OutOfServiceTaintAdded"
    ]
    assert added and "admin_confirmed" in added[0], added
    # the machine comes back: recovery removes the taint
    lab_kube.power_on(DEAD)
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") == "Final" and o,
        240,
        "Final after the node came back",
    )
    assert not any(
        t.key == "node.kubernetes.io/out-of-service" for t in core.read_node(DEAD).spec.taints or []
    )
    assert final["status"]["status"] == "Final"
