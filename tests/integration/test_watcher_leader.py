"""Leader election against the lab (coordination.k8s.io/v1 Lease, the kubernetes client's
LeaseLock): of two runner replicas only the leader acts; after ``kill -9`` of the leader the
follower takes the Lease over (within lease duration + retry period of the last renewal) and
acts; a clean shutdown (SIGTERM) releases the Lease."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from runner_harness import (
    Runner,
    nodefences,
    wait_for,
    write_config,
)

pytestmark = [pytest.mark.lab, pytest.mark.kube]

LEASE = (
    "--leader-elect",
    "--leader-elect-lease-duration",
    "6",
    "--leader-elect-renew-deadline",
    "4",
    "--leader-elect-retry-period",
    "1",
)
CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: lab}
nodeSelector: type=kwok  # the lab's kwok nodes (real nodes may be registered too)
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 5s}
stormGuard: {maxUnhealthy: 1, cooldown: 0s}
"""


def holder(api: client.ApiClient, namespace: str) -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease("noderemedy-runner", namespace)
    except client.exceptions.ApiException:
        return None
    return lease.spec.holder_identity


def test_only_the_leader_acts_and_the_follower_takes_over_after_kill_9(
    api: client.ApiClient, namespace: str, powered_on: Any, runners: list[Runner], tmp_path: Path
) -> None:
    lab = powered_on
    cfg = write_config(tmp_path, CONFIG)
    a = Runner(lab, namespace, tmp_path, "--detect-only", *LEASE, config=cfg, identity="replica-a")
    runners.append(a)
    b = Runner(lab, namespace, tmp_path, "--detect-only", *LEASE, config=cfg, identity="replica-b")
    runners.append(b)
    first = wait_for(lambda: holder(api, namespace), 30, "a leader")
    leader, follower = (a, b) if first == a.identity else (b, a)
    wait_for(lambda: leader.metric("noderemedy_leader") == 1, 30, "the leader to act")
    wait_for(lambda: leader.logged("^acting$"), 30, "the leader's 'acting' line")
    # the follower stands by: ready, not leading, no detector running
    assert follower.metric("noderemedy_leader") == 0
    assert follower.logged("^acting$") == []
    assert follower.metric("noderemedy_selected_nodes", {"configuration": "lab"}) is None
    # the gauge is set by the detector's first pass, which may come after 'acting' (logged once
    # the detector's watches have synced)
    wait_for(
        lambda: leader.metric("noderemedy_selected_nodes", {"configuration": "lab"}) == 3,
        60,
        "the leader's first detection pass",
    )

    leader.kill9()
    killed = time.monotonic()
    wait_for(lambda: holder(api, namespace) == follower.identity, 60, "the follower to take the Lease")
    takeover = time.monotonic() - killed
    print(f"\nleader takeover after kill -9: {takeover:.2f} s (lease duration 6 s, retry period 1 s)")
    wait_for(lambda: follower.metric("noderemedy_leader") == 1, 30, "the new leader to act")

    # the new leader detects: a powered-off node gets its NodeFence from it
    node = lab.info["nodes"][0]
    lab.power_off(node)
    lab.wait_nodes([node], {"False", "Unknown"}, 90)
    fences = wait_for(lambda: nodefences(api) or None, 40, "the NodeFence")
    assert list(fences) == [node]
    assert (
        fences[node]["metadata"]["annotations"]["remediation.noderemedy.io/detected-by"] == follower.identity
    )

    # clean shutdown releases the Lease (no holder) instead of letting it run out
    assert follower.stop() == 0
    assert holder(api, namespace) is None
    lease = client.CoordinationV1Api(api).read_namespaced_lease("noderemedy-runner", namespace)
    assert lease.spec.lease_duration_seconds == 1
