"""Fence device health before anything fails (Pacemaker's monitor operation), against the lab.

The runner (``--device-check-interval``) reads every fence device of its namespace with a
read-only ``status`` call: the real ipmi_sim BMCs and the snmpd FC switch. A BMC password changed
behind the runner's back is reported (``FenceAuthFailed`` on the device's template ConfigMap and
on the Node) by the next check, while the node is still Ready and nothing was fenced; a fence
ConfigMap the parser refuses is reported at once (``FenceConfigInvalid``, naming the ConfigMap and
key), and neither touches any device's power.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    SPARE,
    FenceNamespace,
    Runner,
    fence_config,
    fence_ns,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException

pytestmark = [pytest.mark.lab, pytest.mark.kube]

INTERVAL = 15.0
TEMPLATE = f"fence-method-template-ipmi-check-{SPARE}"


def events(api_client: client.ApiClient, namespace: str, kind: str, name: str) -> list[Any]:
    """Events about ``kind/name`` in ``namespace``, oldest first."""
    items = (
        client.CoreV1Api(api_client)
        .list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
        )
        .items
    )
    return sorted(items, key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name))


@pytest.fixture
def checked_bmc(lab_kube: Any, fence_ns: FenceNamespace) -> Iterator[dict]:  # noqa: F811
    """lab-node-0's fence configuration on a template of its own, whose Secret holds the right
    credentials; afterwards the standard configuration again."""
    bmc = lab_kube.info["devices"]["bmcs"][SPARE]
    secret = {
        "metadata": {"name": "bmc-check"},
        "stringData": {"username": bmc["username"], "password": bmc["password"]},
    }
    fence_ns.put("secret", secret)
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": TEMPLATE},
            "data": {
                "template.properties": f"type=ipmi\naddress={bmc['host']}:{bmc['port']}\nsecret=bmc-check\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][SPARE]
    fence_ns.put(
        "config_map", fence_config(SPARE, port, "fc-off", "ipmi-off ipmi-on", "fc-on", ipmi=TEMPLATE)
    )
    yield secret
    fence_ns.standard(SPARE)
    for name in (TEMPLATE, "fence-config-ghost"):
        try:
            fence_ns.core.delete_namespaced_config_map(name, fence_ns.name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.mark.timeout(400)
def test_a_wrong_bmc_password_is_reported_by_the_next_check_while_the_node_is_healthy(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    checked_bmc: dict,
) -> None:
    ns = fence_ns.name
    power_log = Path(lab_kube.info["devices"]["bmcs"][SPARE]["power_log"])
    power_before = power_log.read_text() if power_log.exists() else ""
    r = runner("--device-check-interval", str(INTERVAL))

    # the first check runs at startup: every device of the namespace answers, nothing is reported.
    # Waited out to its end: the checker validates the ConfigMaps between runs, not during one (a
    # run took 59 s on a loaded host, and a ConfigMap put at its start was reported after it)
    wait_for(
        lambda: r.logged(r"^run device-check-\S+: \S+ in "),
        180,
        "the end of the first device check run",
    )

    # a ConfigMap the parser refuses is reported at once, naming ConfigMap and key
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-config-ghost"},
            "data": {"config.properties": "node_name=other\nisolation=\npower_management=\nrecovery=\n"},
        },
    )
    invalid = wait_for(
        lambda: [
            e for e in events(api, ns, "ConfigMap", "fence-config-ghost") if e.reason == "FenceConfigInvalid"
        ],
        60,
        "FenceConfigInvalid on fence-config-ghost",
    )
    assert "ConfigMap 'fence-config-ghost' key 'config.properties'" in invalid[0].message
    assert "node_name='other' does not match the ConfigMap's node 'ghost'" in invalid[0].message
    assert not [e for e in events(api, ns, "ConfigMap", TEMPLATE) if e.reason.startswith("Fence")]

    # the password changes behind the runner's back: the next periodic check reports it
    changed_at = time.monotonic()
    fence_ns.put(
        "secret",
        {**checked_bmc, "stringData": {**checked_bmc["stringData"], "password": "not-the-bmc-password"}},
    )
    auth = wait_for(
        lambda: [e for e in events(api, ns, "ConfigMap", TEMPLATE) if e.reason == "FenceAuthFailed"],
        INTERVAL + 60,
        "FenceAuthFailed on the template",
    )
    waited = time.monotonic() - changed_at
    message = auth[0].message
    assert auth[0].type == "Warning" and f"fencing node(s) {SPARE}" in message and "auth" in message, message
    # the Node's Event is written after the template's (a read of the Node in between)
    on_node = wait_for(
        lambda: [e for e in events(api, "default", "Node", SPARE) if e.reason == "FenceAuthFailed"],
        60,
        f"FenceAuthFailed on Node {SPARE}",
    )
    assert on_node[0].message == message
    # reported by the check, while the node is healthy, with no NodeFence and no power change
    assert lab_kube.node_ready([SPARE]) == {SPARE: "True"}
    nfs = client.CustomObjectsApi(api).list_cluster_custom_object(
        "remediation.noderemedy.io", "v1alpha1", "nodefences"
    )
    assert not [o for o in nfs["items"] if o["spec"]["node"] == SPARE]
    assert (power_log.read_text() if power_log.exists() else "") == power_before
    # the other devices (other nodes' BMCs, the FC switch) stayed healthy: no Warning about them
    others = [
        e
        for e in client.CoreV1Api(api).list_namespaced_event(ns).items
        if e.reason in ("FenceAuthFailed", "FenceDeviceUnreachable", "FenceDeviceError")
        and e.involved_object.name != TEMPLATE
    ]
    assert not others, [(e.involved_object.name, e.message) for e in others]

    # fixed: the next check reports the device healthy again
    fence_ns.put("secret", checked_bmc)
    wait_for(
        lambda: [e for e in events(api, ns, "ConfigMap", TEMPLATE) if e.reason == "FenceDeviceHealthy"],
        INTERVAL + 60,
        "FenceDeviceHealthy on the template",
    )
    print(f"FenceAuthFailed reported {waited:.1f} s after the password changed (interval {INTERVAL} s)")
