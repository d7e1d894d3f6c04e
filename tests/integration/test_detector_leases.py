"""The per-node Lease of a NodeFence is held from its creation on (DESIGN.md invariant 2), also when
the detector's Lease upkeep falls in the same pass as the create -- as it does on the first pass
after a start, when a node is already unhealthy. Against the lab's API server, with the Detector
in-process: a Configuration whose threshold matches a healthy node (``DiskPressure=False`` for 0 s,
as kwok reports it; only that node) makes the first pass create its NodeFence; no reconciler runs,
nothing is fenced."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from runner_harness import (
    GROUP,
    PLURAL,
    VERSION,
)

from noderemedy_runner.config.remedy import parse_configurations
from noderemedy_runner.loops.detector import Detector

NODE = "lab-node-2"


@pytest.fixture
def detector(api: client.ApiClient, namespace: str) -> Iterator[Detector]:
    configs = parse_configurations(
        "apiVersion: node-remedy/v1alpha\nkind: Configuration\nmetadata: {name: lease-test}\n"
        f"nodeSelector: kubernetes.io/hostname={NODE}\n"
        "thresholdConfigs:\n- {nodeConditionType: DiskPressure, nodeConditionStatus: [False], nodeConditionPeriod: 0s}\n"
        "stormGuard: {maxUnhealthy: 100%}\n",
        "test",
    )
    d = Detector(api, configs, namespace=namespace, identity="lease-test")
    yield d
    d.close()


def test_a_nodefence_created_in_the_upkeep_pass_keeps_its_lease(
    lab_kube: Any, api: client.ApiClient, namespace: str, detector: Detector
) -> None:
    node = client.CoreV1Api(api).read_node(NODE)
    assert {c.type: c.status for c in node.status.conditions}.get("DiskPressure") == "False"
    detector.sync()
    plan = detector.reconcile_once()  # the first pass: the upkeep is due in it
    assert [a.node for a in plan.create] == [NODE]
    assert detector.wait_lease_upkeep(30), "the Lease upkeep did not finish in 30 s"
    nf = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, PLURAL, NODE)
    assert nf["spec"]["node"] == NODE
    lease = detector.leases.get(NODE)
    assert lease is not None, "the per-node Lease of an in-flight NodeFence was released"
    assert detector.leases.ours(lease.holder)
    # the next upkeep renews it and keeps it while the NodeFence is not finished
    detector._last_lease_upkeep = 0.0  # make the upkeep due again
    detector.sync()
    detector.reconcile_once(time.time())
    assert detector.wait_lease_upkeep(30)
    assert detector.leases.get(NODE) is not None
