"""A second failure soon after the first, the second one of the leader's own node (against the lab).

deploy/ runs three runner replicas spread over nodes (docs/operations.md "Availability of the
runner itself"), so that when a node fails and, before it is back, the leader's node fails too, a
Ready follower on a third node is left to take over. The lab has two real nodes, not three, so
here the replicas are host processes with ``--leader-elect``, each standing for the kwok node it
would run on; a node's failure is its power cut at its BMC together with ``kill -9`` of the
replica on it (no graceful stop: the node is gone).

1. The node of a follower fails. The leader's detector creates its NodeFence, which fences the
   node and brings it back (Final). That follower is not started again: its replacement would not
   be Ready yet, which is what made the second failure slow with two replicas.
2. As soon as that NodeFence is Final, the leader's node fails. The third replica takes the
   Lease over once it expires, its detector creates the NodeFence of that node, and the NodeFence
   completes: the workloads released (the out-of-service taint) and the node recovered.

Each failure's times (NodeFence created, workloads released, Final, counted from the failure)
are printed as ``FIGURE`` lines; the second's against the first's, a single failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    OOS,
    POLICY,
    FenceNamespace,
    conds,
    fence_ns,
    oos_on,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner, nodefences, write_config

pytestmark = [pytest.mark.lab, pytest.mark.kube]

#: The kwok nodes the replicas stand on: the leader's, the first failed follower's, the survivor's.
LEADER_NODE, FOLLOWER_NODE, SURVIVOR_NODE = "lab-node-0", "lab-node-1", "lab-node-2"
#: Seconds of NotReady before a NodeFence (the Configuration's period).
PERIOD = 2
#: Seconds the second failure may take to the release of its workloads (generous, for a loaded
#: 2-core machine: the node's NotReady after the lab's 10 s grace, the Lease's 6 s expiry, the
#: period, the isolation and the power-off). The figures say what it took.
RELEASE_BOUND = 120

CONFIG = f"""\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {{name: back-to-back}}
nodeSelector: type=kwok  # the lab's kwok nodes (real nodes may be registered too)
thresholdConfigs:
- nodeConditionType: Ready
  nodeConditionStatus: [False, Unknown]
  nodeConditionPeriod: {PERIOD}s
stormGuard: {{maxUnhealthy: 2, cooldown: 0s}}  # the first node may not read Ready yet
"""

LEASE = (
    "--leader-elect",
    "--leader-elect-lease-name", "nr-back-to-back",
    "--leader-elect-lease-duration", "6",
    "--leader-elect-renew-deadline", "4",
    "--leader-elect-retry-period", "1",
)  # fmt: skip


@pytest.fixture
def restored(lab_kube: Any) -> Iterator[Any]:
    """The lab; afterwards every kwok node untainted, its FC port up, powered on and Ready."""
    yield lab_kube
    nodes = [LEADER_NODE, FOLLOWER_NODE, SURVIVOR_NODE]
    for node in nodes:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.fc_port(node, True)
        lab_kube.power_on(node)
    lab_kube.wait_nodes(nodes, "True", 120)


def the_nodefence(api: client.ApiClient, node: str) -> dict[str, Any] | None:
    return next((o for o in nodefences(api).values() if o["spec"]["node"] == node), None)


def fail_and_follow(
    lab: Any, api: client.ApiClient, node: str, replica: Runner, survivors: list[Runner]
) -> dict[str, float]:
    """``node``'s power cut and its ``replica`` killed at once; then wait for the NodeFence of
    ``node`` to be created, to release the workloads and to end Final, under one of
    ``survivors``. Returns the seconds of each from the failure, and ``takeover`` (the first
    survivor acting after the failure, 0 when one already was)."""
    core = client.CoreV1Api(api)
    acting_before = {id(r): len(r.logged("^acting$")) for r in survivors}
    leading = any(r.metric("noderemedy_leader") == 1 for r in survivors)
    t0 = time.monotonic()
    replica.kill9()
    lab.power_off(node)
    fig: dict[str, float] = {}

    def acted() -> bool:
        return any(len(r.logged("^acting$")) > acting_before[id(r)] for r in survivors)

    def step() -> bool:
        if "takeover" not in fig and (leading or acted()):
            fig["takeover"] = 0.0 if leading else time.monotonic() - t0
        obj = the_nodefence(api, node)
        if obj is not None and "created" not in fig:
            fig["created"] = time.monotonic() - t0
        if obj is not None and "released" not in fig and oos_on(core, node):
            fig["released"] = time.monotonic() - t0
        if obj is not None and (obj.get("status") or {}).get("status") in ("Final", "Error"):
            fig["final"] = time.monotonic() - t0
            fig["ok"] = float(
                obj["status"]["status"] == "Final" and conds(obj)["Succeeded"]["status"] == "True"
            )
            return True
        return False

    wait_for(step, 400, f"the NodeFence of {node} Final or Error", interval=0.2)
    return fig


@pytest.mark.timeout(900)
def test_the_leaders_node_failing_right_after_another_node_is_still_fenced_by_the_third_replica(
    restored: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    tmp_path: Path,
) -> None:
    lab = restored
    config = write_config(tmp_path, CONFIG)
    snmp_dir = lab.info["devices"]["snmp_persistent_dir"]

    def replica(on: str) -> Runner:
        return Runner(
            lab, fence_ns.name, tmp_path, "--poll-interval", "0.2",
            "--run-env", f"SNMP_PERSISTENT_DIR={snmp_dir}", *POLICY, *LEASE,
            config=config, identity=f"replica-on-{on}",
        )  # fmt: skip

    leader = replica(LEADER_NODE)
    made = [leader]
    try:
        wait_for(lambda: leader.logged("^acting$"), 60, "the first replica to lead")
        follower, survivor = replica(FOLLOWER_NODE), replica(SURVIVOR_NODE)
        made += [follower, survivor]
        # 1. a follower's node fails: the leader fences it
        first = fail_and_follow(lab, api, FOLLOWER_NODE, follower, [leader, survivor])
        assert leader.metric("noderemedy_leader") == 1, "the leader changed during the first failure"
        # 2. at once, the leader's node fails: the third replica takes over and fences it
        second = fail_and_follow(lab, api, LEADER_NODE, leader, [survivor])
        for what, fig in (("a follower's node", first), ("then the leader's node", second)):
            print(
                f"\nFIGURE back-to-back (3 host replicas): {what} failed: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in fig.items() if k != "ok")
                + " after the failure"
            )
    finally:
        for r in made:
            if r.alive():
                r.stop()
    assert first["ok"] and second["ok"], (first, second)
    assert second["takeover"] > 0 and survivor.logged("^acting$"), "the third replica never took over"
    assert "released" in first and "released" in second, (first, second)
    assert second["released"] <= RELEASE_BOUND, second
    assert not oos_on(client.CoreV1Api(api), LEADER_NODE)
