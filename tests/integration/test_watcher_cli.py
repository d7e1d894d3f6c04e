"""The runner process against the lab's API server: ``--dry-run`` decides and reports but
writes nothing; the exclude label (medik8s') is respected with a refusal Event; the probes
answer; SIGTERM exits 0. The watcher (playbook side) runs in the same process here.

The unhealthy node is an extra Node object that kwok does not manage (no power label), with a
Ready=False condition written through the real status subresource."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
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

from noderemedy_runner.machines.detection import MEDIK8S_EXCLUDE_LABEL

pytestmark = [pytest.mark.lab, pytest.mark.kube]

CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: lab}
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 5s}
stormGuard: {maxUnhealthy: 2, cooldown: 0s}
"""


def dead_node(api: client.ApiClient, labels: dict[str, str] | None = None) -> str:
    """A Node nobody heartbeats, Ready=False since ten minutes ago."""
    name = f"extra-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": name, "labels": labels or {}}})
    since = datetime.fromtimestamp(time.time() - 600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    cond = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "test",
        "lastTransitionTime": since,
        "lastHeartbeatTime": since,
    }
    core.patch_node_status(name, {"status": {"conditions": [cond]}})
    return name


@pytest.fixture
def extra_nodes(api: client.ApiClient) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        client.CoreV1Api(api).delete_node(name)


def get(url: str) -> int:
    """The HTTP status of a GET of ``url`` (an error status is returned, not raised)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_dry_run_decides_and_writes_nothing(
    api: client.ApiClient,
    lab_kube: Any,
    namespace: str,
    runners: list[Runner],
    extra_nodes: list[str],
    tmp_path: Path,
) -> None:
    node = dead_node(api)
    extra_nodes.append(node)
    r = Runner(lab_kube, namespace, tmp_path, "--dry-run", config=write_config(tmp_path, CONFIG))
    runners.append(r)
    line = wait_for(
        lambda: [ln for ln in r.logged("^dry run: would create NodeFence$") if ln["node"] == node],
        30,
        "the decision",
    )
    assert line[0]["resource"] == f"NodeFence/{node}" and line[0]["configuration"] == "lab"
    # ready once the main thread has seen the detector's first list, which may come just after
    # the detector's first decision
    wait_for(lambda: get(r.metrics_url + "/readyz") == 200, 30, "/readyz 200")
    assert get(r.metrics_url + "/healthz") == 200
    # set by the detector's pass once it has handed the create to its pool, whose thread may log
    # the decision first
    wait_for(
        lambda: r.metric("noderemedy_unhealthy_nodes", {"configuration": "lab"}) == 1, 60, "unhealthy gauge"
    )
    # nothing written: no NodeFence, no Lease, no status ConfigMap, no Event
    assert node not in nodefences(api)
    assert client.CoordinationV1Api(api).list_namespaced_lease(namespace).items == []
    assert [cm.metadata.name for cm in client.CoreV1Api(api).list_namespaced_config_map(namespace).items] == [
        "kube-root-ca.crt"
    ]
    assert events(api, "Node", node) == []
    assert r.stop() == 0


def test_excluded_node_is_refused_with_an_event(
    api: client.ApiClient,
    lab_kube: Any,
    namespace: str,
    runners: list[Runner],
    extra_nodes: list[str],
    tmp_path: Path,
) -> None:
    excluded = dead_node(api, {MEDIK8S_EXCLUDE_LABEL: "true"})
    extra_nodes.append(excluded)
    r = Runner(lab_kube, namespace, tmp_path, "--detect-only", config=write_config(tmp_path, CONFIG))
    runners.append(r)
    refused = wait_for(lambda: events(api, "Node", excluded), 30, "the refusal Event")
    assert refused[0].reason == "RemediationRefused" and refused[0].type == "Warning"
    assert (
        f"Excluded: unhealthy (Ready in {{False,Unknown}} for 5s) but excluded by label {MEDIK8S_EXCLUDE_LABEL}=true"
        in refused[0].message
    )
    assert excluded not in nodefences(api)
    assert r.metric("noderemedy_fencing_refused_total", {"reason": "Excluded"}) == 1
    # removing the label makes it eligible: one NodeFence
    client.CoreV1Api(api).patch_node(excluded, {"metadata": {"labels": {MEDIK8S_EXCLUDE_LABEL: None}}})
    wait_for(lambda: excluded in nodefences(api), 30, "the NodeFence once the label is gone")
    assert r.stop() == 0


def test_node_lease_of_another_remediator_blocks_fencing(
    api: client.ApiClient,
    lab_kube: Any,
    namespace: str,
    runners: list[Runner],
    extra_nodes: list[str],
    tmp_path: Path,
) -> None:
    node = dead_node(api)
    extra_nodes.append(node)
    now = datetime.now(UTC)
    client.CoordinationV1Api(api).create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=f"noderemedy-{node}"),
            spec=client.V1LeaseSpec(
                holder_identity="self-node-remediation",
                lease_duration_seconds=3600,
                acquire_time=now,
                renew_time=now,
            ),
        ),
    )
    r = Runner(lab_kube, namespace, tmp_path, "--detect-only", config=write_config(tmp_path, CONFIG))
    runners.append(r)
    refused = wait_for(lambda: events(api, "Node", node), 30, "the refusal Event")
    assert refused[0].reason == "RemediationRefused"
    assert "LeaseHeld" in refused[0].message and "self-node-remediation" in refused[0].message
    assert node not in nodefences(api)
    lease = client.CoordinationV1Api(api).read_namespaced_lease(f"noderemedy-{node}", namespace)
    assert lease.spec.holder_identity == "self-node-remediation"  # untouched
    assert r.stop() == 0
