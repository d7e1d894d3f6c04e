"""Detection against the lab: a powered-off node turns NotReady (the real node lifecycle
controller) and gets exactly one NodeFence after the configured period; a node flapping
between Ready and NotReady inside the period gets none until it stays down a full period; a
NodeFence whose node comes back before fencing started is cancelled, not run.

The runner is the installed ``noderemedy-runner`` with ``--detect-only`` (no playbooks: these
tests are about deciding that a NodeFence should exist).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from runner_harness import (
    Runner,
    events,
    nodefences,
    ready_condition,
    wait_for,
    write_config,
)

from noderemedy_runner.machines.conditions import parse_time

pytestmark = [pytest.mark.lab, pytest.mark.kube]

PERIOD = 8


def config(period: int = PERIOD) -> str:
    return f"""\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {{name: lab}}
nodeSelector: type=kwok  # the lab's kwok nodes (real nodes may be registered too)
thresholdConfigs:
- nodeConditionType: Ready
  nodeConditionStatus: [False, Unknown]
  nodeConditionPeriod: {period}s
stormGuard: {{maxUnhealthy: 1, cooldown: 0s}}
"""


def test_powered_off_node_gets_one_nodefence_after_the_period_then_cancel(
    api: client.ApiClient, namespace: str, powered_on: Any, runners: list[Runner], tmp_path: Path
) -> None:
    lab = powered_on
    node = lab.info["nodes"][1]
    r = Runner(lab, namespace, tmp_path, "--detect-only", config=write_config(tmp_path, config()))
    runners.append(r)
    wait_for(
        lambda: r.metric("noderemedy_selected_nodes", {"configuration": "lab"}) == 3,
        30,
        "first detection pass",
    )
    assert nodefences(api) == {}

    started = datetime.now(UTC) - timedelta(seconds=1)  # Event times have one-second precision
    lab.power_off(node)  # real ipmitool → BMC hook → kwok stops heartbeating
    lab.wait_nodes([node], {"False", "Unknown"}, 90)
    fences = wait_for(lambda: nodefences(api) or None, PERIOD + 30, "a NodeFence")
    assert list(fences) == [node]
    nf = fences[node]
    threshold = {"conditionType": "Ready", "statuses": ["False", "Unknown"], "periodSeconds": float(PERIOD)}
    assert nf["spec"] == {"node": node, "threshold": threshold}  # the NodeFence is judged by it
    ann = nf["metadata"]["annotations"]
    assert ann["remediation.noderemedy.io/threshold"] == f"Ready in {{False,Unknown}} for {PERIOD}s"
    assert ann["remediation.noderemedy.io/configuration"] == "lab"
    # created no earlier than NotReady + period (API times have one-second precision)
    ready = ready_condition(api, node)
    not_ready_since = ready.last_transition_time.timestamp()
    assert parse_time(nf["metadata"]["creationTimestamp"]) >= not_ready_since + PERIOD - 1
    assert parse_time(ann["remediation.noderemedy.io/unhealthy-since"]) >= not_ready_since - 1

    # per-node Lease held while the remediation is in flight
    lease = client.CoordinationV1Api(api).read_namespaced_lease(f"noderemedy-{node}", namespace)
    assert lease.spec.holder_identity == f"noderemedy-runner/{r.identity}"

    # Events on the Node and on the NodeFence
    # (the node is shared: Events of earlier tests on it, such as taint changes, are older)
    def fresh() -> list[Any]:
        mine = [e for e in events(api, "Node", node) if (e.first_timestamp or e.event_time) >= started]
        return sorted(mine, key=lambda e: e.first_timestamp or e.event_time)

    first = wait_for(fresh, 15, "an Event on the Node")[0]
    assert first.reason == "NodeFenceCreated", [(e.reason, e.message) for e in fresh()]
    wait_for(lambda: events(api, "NodeFence", node), 15, "an Event on the NodeFence")
    # JSON logs carry the resource and the node
    created = r.logged("^created NodeFence$")
    assert [(c["resource"], c["node"]) for c in created] == [(f"NodeFence/{node}", node)]
    assert r.metric("noderemedy_nodefences_created_total") == 1

    # still exactly one after more passes (resync, heartbeats of the other nodes)
    wait_for(
        lambda: r.metric("noderemedy_unhealthy_nodes", {"configuration": "lab"}) == 1, 10, "unhealthy gauge"
    )
    assert list(nodefences(api)) == [node]

    # the node comes back before any step started (no reconciler runs here): cancelled
    lab.power_on(node)
    lab.wait_nodes([node], "True", 60)
    nf = wait_for(
        lambda: (
            nodefences(api)[node]
            if (nodefences(api)[node].get("status") or {}).get("status") == "Final"
            else None
        ),
        30,
        "the NodeFence to be cancelled",
    )
    proc = next(c for c in nf["status"]["conditions"] if c["type"] == "Processing")
    assert (proc["status"], proc["reason"]) == ("False", "NodeHealthy")
    assert not nf["status"].get("jobs") and "currentRun" not in nf["status"]
    wait_for(
        lambda: any(e.reason == "NodeFenceCancelled" for e in events(api, "Node", node)), 15, "cancel Event"
    )
    # the Lease is given back once the remediation ended
    wait_for(lambda: _no_lease(api, namespace, node), 60, "the node Lease to be released")
    assert r.metric("noderemedy_nodefences_cancelled_total") == 1
    assert r.stop() == 0


def _no_lease(api: client.ApiClient, namespace: str, node: str) -> bool:
    names = [le.metadata.name for le in client.CoordinationV1Api(api).list_namespaced_lease(namespace).items]
    return f"noderemedy-{node}" not in names


def test_flapping_node_is_not_fenced_until_down_a_full_period(
    api: client.ApiClient, namespace: str, powered_on: Any, runners: list[Runner], tmp_path: Path
) -> None:
    """Ready → NotReady → Ready → NotReady, each NotReady spell shorter than the period: no
    NodeFence. Left down, the node gets one, counted from its *last* transition."""
    lab = powered_on
    node = lab.info["nodes"][2]
    # a spell (NotReady seen, counted, powered on, Ready seen again) must stay shorter than the
    # period; a loaded host's slow heartbeats stretch it (the figure below prints how long each took)
    period = 40
    r = Runner(lab, namespace, tmp_path, "--detect-only", config=write_config(tmp_path, config(period)))
    runners.append(r)
    wait_for(
        lambda: r.metric("noderemedy_selected_nodes", {"configuration": "lab"}) == 3,
        30,
        "first detection pass",
    )
    spells: list[float] = []
    lengths: list[float] = []
    for _ in range(2):
        lab.power_off(node)
        lab.wait_nodes([node], {"False", "Unknown"}, 90)
        seen_down = time.monotonic()
        spells.append(ready_condition(api, node).last_transition_time.timestamp())
        # the detector saw it unhealthy (counted) ...
        wait_for(
            lambda: r.metric("noderemedy_unhealthy_nodes", {"configuration": "lab"}) == 1, 10, "node counted"
        )
        lab.power_on(node)  # ... and it is back long before the period
        lab.wait_nodes([node], "True", 60)
        lengths.append(time.monotonic() - seen_down)
        assert nodefences(api) == {}
    assert r.metric("noderemedy_nodefences_created_total") == 0

    lab.power_off(node)
    lab.wait_nodes([node], {"False", "Unknown"}, 90)
    last = ready_condition(api, node).last_transition_time.timestamp()
    fences = wait_for(lambda: nodefences(api) or None, period + 30, "the NodeFence")
    assert list(fences) == [node]
    since = parse_time(fences[node]["metadata"]["annotations"]["remediation.noderemedy.io/unhealthy-since"])
    assert since >= last - 1 > spells[-1]
    assert parse_time(fences[node]["metadata"]["creationTimestamp"]) >= last + period - 1
    print(
        f"\nFIGURE flapping: NotReady seen for {[round(x, 1) for x in lengths]} s, period {period} s: no NodeFence"
    )
