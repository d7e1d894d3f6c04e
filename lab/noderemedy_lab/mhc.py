"""MachineHealthCheck scenarios on the lab's cluster-api (:mod:`noderemedy_lab.capi`), shared by the
integration tests (``tests/integration/test_capi_mhc.py``) and the bench (``bench/metal3_mhc.py``).

The objects are what a user of cluster-api with CAPM3 has, with noderemedy-runner as the
Metal3Remediation controller: per Machine a BareMetalHost named after its node (``spec.bmc`` the
node's lab BMC, ``ipmi://``) and its credentials Secret; a ``Metal3RemediationTemplate``; a
MachineHealthCheck written in cluster-api's v1beta1 API (``unhealthyConditions``,
``maxUnhealthy``, ``unhealthyRange``, ``remediationTemplate``, the terms of the machine health
check design), which cluster-api's conversion webhook stores as v1beta2.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .capi import CLUSTER, CapiCluster

#: The Metal3 objects' group/version (CAPM3's v1beta1; the CRDs of ``deploy/crds/``).
M3_GROUP, M3_VERSION = "infrastructure.cluster.x-k8s.io", "v1beta1"
TEMPLATE = "noderemedy"
#: Label selecting a Machine into one of the scenarios' MachineHealthChecks.
MHC_LABEL = "lab.noderemedy.io/mhc"
OOS = "node.kubernetes.io/out-of-service"
#: The runner's opt-in for the MHC's Metal3Remediations: cluster-api labels every object it
#: creates from a template with the Machine's cluster name.
RUNNER_SELECTOR = {"matchLabels": {"cluster.x-k8s.io/cluster-name": CLUSTER}}


def metal3_objects(
    lab: Any,
    capi: CapiCluster,
    nodes: list[str],
    strategy: dict[str, Any],
    template: str = TEMPLATE,
    **fields: Any,
) -> None:
    """A BareMetalHost and BMC Secret per node (named after it) and the Metal3RemediationTemplate
    ``template`` with ``strategy`` (``spec.template.spec.strategy``) and the template's other
    ``fields`` (``deleteAfterRetries``, ``powerOffTimeoutSeconds``…) in ``capi.namespace``."""
    from kubernetes import client

    api = lab.api_client()
    ns = capi.namespace
    co = client.CustomObjectsApi(api)
    for node in nodes:
        bmc = lab.info["devices"]["bmcs"][node]
        client.CoreV1Api(api).create_namespaced_secret(
            ns,
            {"metadata": {"name": f"{node}-bmc"},
             "stringData": {"username": bmc["username"], "password": bmc["password"]}},
        )  # fmt: skip
        co.create_namespaced_custom_object(
            "metal3.io", "v1alpha1", ns, "baremetalhosts",
            {"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "metadata": {"name": node},
             "spec": {"online": True,
                      "bmc": {"address": f"ipmi://{bmc['host']}:{bmc['port']}", "credentialsName": f"{node}-bmc"}}},
        )  # fmt: skip
    co.create_namespaced_custom_object(
        M3_GROUP, M3_VERSION, ns, "metal3remediationtemplates",
        {"apiVersion": f"{M3_GROUP}/{M3_VERSION}", "kind": "Metal3RemediationTemplate",
         "metadata": {"name": template}, "spec": {"template": {"spec": {"strategy": strategy, **fields}}}},
    )  # fmt: skip


def mhc_body(
    name: str, selects: str, timeout_s: int = 10, template: str = TEMPLATE, **spec: Any
) -> dict[str, Any]:
    """A v1beta1 MachineHealthCheck ``name`` of the Cluster selecting the Machines labelled
    ``MHC_LABEL=selects``: unhealthy when Ready is False or Unknown for ``timeout_s`` seconds,
    remediated through the Metal3RemediationTemplate ``template``; ``spec`` adds fields
    (``maxUnhealthy``, ``unhealthyRange``)."""
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": name},
        "spec": {
            "clusterName": CLUSTER,
            "selector": {"matchLabels": {MHC_LABEL: selects}},
            "unhealthyConditions": [
                {"type": "Ready", "status": "False", "timeout": f"{timeout_s}s"},
                {"type": "Ready", "status": "Unknown", "timeout": f"{timeout_s}s"},
            ],
            "remediationTemplate": {
                "apiVersion": f"{M3_GROUP}/{M3_VERSION}",
                "kind": "Metal3RemediationTemplate",
                "name": template,
            },
            **spec,
        },
    }


def create_mhc(lab: Any, capi: CapiCluster, body: dict[str, Any]) -> None:
    """Create ``body`` (a v1beta1 MachineHealthCheck) in ``capi.namespace``."""
    from kubernetes import client

    client.CustomObjectsApi(lab.api_client()).create_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", capi.namespace, "machinehealthchecks", body
    )


def remediation(lab: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The Metal3Remediation ``namespace/name``, None if there is none."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        obj: dict[str, Any] = client.CustomObjectsApi(lab.api_client()).get_namespaced_custom_object(
            M3_GROUP, M3_VERSION, namespace, "metal3remediations", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


def remediations(lab: Any, namespace: str) -> list[str]:
    """Names of the Metal3Remediations in ``namespace``."""
    from kubernetes import client

    items = client.CustomObjectsApi(lab.api_client()).list_namespaced_custom_object(
        M3_GROUP, M3_VERSION, namespace, "metal3remediations"
    )["items"]
    return [o["metadata"]["name"] for o in items]


def runner_events(lab: Any, namespace: str, name: str) -> list[str]:
    """Reasons of noderemedy-runner's Events on Metal3Remediation ``name``, in the order written."""
    from kubernetes import client

    sel = f"involvedObject.kind=Metal3Remediation,involvedObject.name={name},source=noderemedy-runner"
    evs = client.CoreV1Api(lab.api_client()).list_namespaced_event(namespace, field_selector=sel).items
    # resourceVersion orders them (etcd's revision); their timestamps have whole seconds
    return [e.reason for e in sorted(evs, key=lambda e: int(e.metadata.resource_version))]


def tainted(lab: Any, node: str) -> bool:
    """Whether ``node`` has the out-of-service taint."""
    from kubernetes import client

    taints = client.CoreV1Api(lab.api_client()).read_node(node).spec.taints or []
    return any(t.key == OOS for t in taints)


def power_off_remediated(
    lab: Any,
    capi: CapiCluster,
    node: str,
    timeout: float = 240.0,
    power: tuple[Callable[[], None], Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """Cut ``node``'s power at its BMC and follow the MHC's remediation through to its end.

    ``power`` is the (off, on) pair that cuts and restores the power, by default the node's IPMI
    BMC (``lab.power_off`` / ``lab.power_on``); a Redfish system's reset serves as well.

    Polls every 0.25 s; returns ``{"steps": {step: seconds from NotReady}, "remediation": the
    Metal3Remediation as first seen, "events": runner Event reasons, "taint_seen": bool}`` with
    steps ``notready_to_remediation_s`` (the MHC created it), ``to_power_off_verified_s`` (the
    runner's ``PowerOff`` Event, written once the BMC read back off), ``to_taint_s``,
    ``to_node_ready_s`` and ``to_object_deleted_s`` (the MHC deleted it and nothing held it).
    AssertionError naming the missing step after ``timeout`` seconds. The node is powered on and
    untainted again on the way out if the flow did not end.
    """
    ns = capi.namespace
    power_off, power_on = power or ((lambda: lab.power_off(node)), (lambda: lab.power_on(node)))
    power_off()
    t_cut = time.monotonic()
    steps: dict[str, float] = {}
    first: dict[str, Any] | None = None
    events: list[str] = []
    try:
        lab.wait_nodes([node], {"False", "Unknown"}, 120)
        t0 = time.monotonic()
        steps["power_cut_to_notready_s"] = round(t0 - t_cut, 2)
        deadline = t0 + timeout
        while "to_object_deleted_s" not in steps:
            now = time.monotonic()
            if now > deadline:
                raise AssertionError(f"MHC remediation of {node}: after {timeout:.0f} s only {steps}")
            obj = remediation(lab, ns, node)
            since = round(now - t0, 2)
            if obj is not None and first is None:
                first = obj
                steps["notready_to_remediation_s"] = since
            if first is not None:
                if "to_power_off_verified_s" not in steps:
                    events = runner_events(lab, ns, node)
                    if "PowerOff" in events:
                        steps["to_power_off_verified_s"] = since
                if "to_taint_s" not in steps and tainted(lab, node):
                    steps["to_taint_s"] = since
                if "to_taint_s" in steps and "to_node_ready_s" not in steps:
                    if lab.node_ready([node])[node] == "True":
                        steps["to_node_ready_s"] = since
                if obj is None:
                    steps["to_object_deleted_s"] = since
            time.sleep(0.25)
        events = runner_events(lab, ns, node)
        return {"steps": steps, "remediation": first, "events": events, "taint_seen": "to_taint_s" in steps}
    finally:
        if lab.node_ready([node])[node] != "True" or tainted(lab, node):
            lab.kubectl("taint", "node", node, f"{OOS}-")
            power_on()
            lab.wait_nodes([node], "True", 120)
