"""The storm guard against the lab: ``maxUnhealthy: 40%`` on 3 nodes (40% of 3 rounds down to
1) with 2 nodes powered off → no new fencing, and a condition (status ConfigMap), an Event and a
metric say why and how many; when one node comes back the share drops to 1 of 3 and, once the
cooldown has passed, the node still down gets its NodeFence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from runner_harness import (
    Runner,
    events,
    nodefences,
    wait_for,
    write_config,
)

from noderemedy_runner.machines.conditions import parse_time

pytestmark = [pytest.mark.lab, pytest.mark.kube]

PERIOD = 15
COOLDOWN = 20
CONFIG = f"""\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {{name: lab}}
nodeSelector: type=kwok  # the lab's kwok nodes (real nodes may be registered too)
thresholdConfigs:
- nodeConditionType: Ready
  nodeConditionStatus: [False, Unknown]
  nodeConditionPeriod: {PERIOD}s
stormGuard: {{maxUnhealthy: 40%, cooldown: {COOLDOWN}s}}
"""


def storm_status(api: client.ApiClient, namespace: str) -> dict[str, Any] | None:
    try:
        cm = client.CoreV1Api(api).read_namespaced_config_map("noderemedy-status", namespace)
    except client.exceptions.ApiException:
        return None
    raw = (cm.data or {}).get("lab.json")
    return json.loads(raw) if raw else None


def condition(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if not doc:
        return None
    return next((c for c in doc["conditions"] if c["type"] == "StormGuardActive"), None)


def test_two_of_three_down_is_a_storm_then_fencing_resumes_after_cooldown(
    api: client.ApiClient, namespace: str, powered_on: Any, runners: list[Runner], tmp_path: Path
) -> None:
    lab = powered_on
    n0, n1, n2 = lab.info["nodes"]
    r = Runner(lab, namespace, tmp_path, "--detect-only", config=write_config(tmp_path, CONFIG))
    runners.append(r)
    wait_for(lambda: r.metric("noderemedy_selected_nodes", {"configuration": "lab"}) == 3, 90, "first pass")
    first = wait_for(lambda: condition(storm_status(api, namespace)), 15, "the storm condition")
    assert (first["status"], first["reason"]) == ("False", "WithinLimit")

    lab.power_off(n1)
    lab.power_off(n2)
    # what the node lifecycle controller writes after its grace period, written now: the storm
    # guard is what this test is about (tests/integration/test_watcher_detection.py has the real path)
    lab.mark_unreachable(n1)
    lab.mark_unreachable(n2)
    lab.wait_nodes([n1, n2], {"False", "Unknown"}, 90)

    # condition: why and how many
    cond = wait_for(
        lambda: (c := condition(storm_status(api, namespace))) and c["status"] == "True" and c,
        15,
        "storm condition True",
    )
    assert cond["reason"] == "TooManyUnhealthy"
    assert "2 of 3 nodes unhealthy" in cond["message"] and "maxUnhealthy=40%" in cond["message"]
    doc = storm_status(api, namespace)
    assert doc is not None and (doc["unhealthy"], doc["total"], doc["allowed"]) == (2, 3, 1)
    # metric
    assert r.metric("noderemedy_storm_active", {"configuration": "lab"}) == 1
    assert r.metric("noderemedy_unhealthy_nodes", {"configuration": "lab"}) == 2
    # Event on the status ConfigMap
    storm_events = wait_for(
        lambda: events(api, "ConfigMap", "noderemedy-status", namespace), 15, "storm Event"
    )
    assert any(e.reason == "StormGuardActive" and "2 of 3 nodes unhealthy" in e.message for e in storm_events)
    # once their period has run out, both nodes are refused (Event on each Node), none fenced
    for node in (n1, n2):
        refused = wait_for(
            lambda node=node: [e for e in events(api, "Node", node) if e.reason == "RemediationRefused"],
            PERIOD + 20,
            f"refusal Event on {node}",
        )
        assert refused[0].message.startswith("[remediation] StormGuard:") and refused[0].type == "Warning"
    assert r.metric("noderemedy_fencing_refused_total", {"reason": "StormGuard"}) == 2
    assert nodefences(api) == {}

    # the share drops to 1 of 3: cooldown, then fencing resumes for the node still down
    lab.power_on(n2)
    lab.wait_nodes([n2], "True", 60)
    cooled = wait_for(
        lambda: (c := condition(storm_status(api, namespace))) and c["reason"] == "Cooldown" and c,
        15,
        "cooldown",
    )
    assert cooled["status"] == "True"
    ended_at = parse_time(storm_status(api, namespace)["endedAt"])  # type: ignore[index]
    fences = wait_for(lambda: nodefences(api) or None, COOLDOWN + 30, "the NodeFence after the cooldown")
    assert list(fences) == [n1]
    assert parse_time(fences[n1]["metadata"]["creationTimestamp"]) >= ended_at + COOLDOWN - 1
    cleared = wait_for(
        lambda: (c := condition(storm_status(api, namespace))) and c["status"] == "False" and c,
        15,
        "guard cleared",
    )
    assert cleared["reason"] == "WithinLimit"
    assert r.metric("noderemedy_storm_active", {"configuration": "lab"}) == 0
    wait_for(
        lambda: any(
            e.reason == "StormGuardCleared" for e in events(api, "ConfigMap", "noderemedy-status", namespace)
        ),
        15,
        "StormGuardCleared Event",
    )
    assert n0 not in nodefences(api)
    assert r.stop() == 0
