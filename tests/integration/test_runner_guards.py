"""Start guards end to end against the lab: a node under maintenance is never fenced, and when
three control-plane nodes fail at once one is fenced while the others wait with a condition that
says why (docs/concepts.md "Who waits"). The devices' own logs (the BMCs' power logs, the FC
switch's SET log) show what was touched.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    OTHER,
    SPARE,
    FenceNamespace,
    Runner,
    conds,
    dead,
    fence_ns,
    get_nf,
    nodefence,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException

from noderemedy_runner.machines.guards import MAINTENANCE_ANNOTATION

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NM = ("nodemaintenance.medik8s.io", "v1beta1", "nodemaintenances")
NF = ("remediation.noderemedy.io", "v1alpha1", "nodefences")
CP_LABEL = "node-role.kubernetes.io/control-plane"
OOS = "node.kubernetes.io/out-of-service"
CRD = Path(__file__).parent / "crds" / "nodemaintenance.medik8s.io_nodemaintenances.yaml"


def device_log(lab: Any, node: str) -> tuple[str, list]:
    """The node's BMC power log and the FC switch's SET log entries of its port."""
    power = Path(lab.info["devices"]["bmcs"][node]["power_log"])
    port = str(int(str(lab.info["devices"]["fc_ports"][node]).rsplit("/", 1)[1]))
    state = json.loads(Path(lab.info["devices"]["snmp"]["fc"]["state_file"]).read_text())
    sets = [row for row in state.get("log", []) if str(row[1]) == port]
    return (power.read_text() if power.exists() else ""), sets


def processing(obj: dict) -> tuple[str, str, str]:
    c = conds(obj).get("Processing") or {}
    return c.get("status", ""), c.get("reason", ""), c.get("message", "")


@pytest.fixture
def nodemaintenance_crd(api: client.ApiClient) -> Iterator[None]:  # noqa: F811
    """node-maintenance-operator's NodeMaintenance CRD (a minimal copy), Established."""
    ext = client.ApiextensionsV1Api(api)
    body = yaml.safe_load(CRD.read_text())
    try:
        ext.create_custom_resource_definition(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    wait_for(
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(body["metadata"]["name"]).status.conditions or []
        ),
        60,
        "NodeMaintenance CRD Established",
    )
    yield


@pytest.mark.timeout(400)
def test_a_node_under_maintenance_is_never_fenced(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
    nodemaintenance_crd: None,
) -> None:
    co = client.CustomObjectsApi(api)
    nm_name = f"nm-{uuid.uuid4().hex[:6]}"
    co.create_cluster_custom_object(
        *NM,
        {
            "apiVersion": f"{NM[0]}/{NM[1]}",
            "kind": "NodeMaintenance",
            "metadata": {"name": nm_name},
            "spec": {"nodeName": DEAD, "reason": "replacing a DIMM"},
        },
    )
    before = device_log(lab_kube, DEAD)
    name = f"nf-maint-{uuid.uuid4().hex[:6]}"
    try:
        runner()
        nodefence(co, name, DEAD)
        obj = wait_for(
            lambda: (o := get_nf(co, name)) and processing(o)[1] == "NodeUnderMaintenance" and o,
            120,
            "Processing=False NodeUnderMaintenance",
        )
        assert processing(obj) == (
            "False",
            "NodeUnderMaintenance",
            f"node {DEAD} is under maintenance (NodeMaintenance {nm_name}: replacing a DIMM): it is not fenced",
        )
        # the NodeMaintenance ends, the admin's annotation still says maintenance: held, re-read
        lab_kube.kubectl(
            "annotate", "node", DEAD, f"{MAINTENANCE_ANNOTATION}=true", "--overwrite", check=True
        )
        co.delete_cluster_custom_object(*NM, nm_name)
        obj = wait_for(
            lambda: (o := get_nf(co, name)) and "annotation" in processing(o)[2] and o,
            60,
            "held by the annotation",
        )
        st = obj["status"]
        assert processing(obj)[1] == "NodeUnderMaintenance" and st["status"] == "New"
        assert not st.get("currentRun") and not st.get("jobs"), st
        assert device_log(lab_kube, DEAD) == before, "a device of a node under maintenance was touched"
        assert not [t for t in client.CoreV1Api(api).read_node(DEAD).spec.taints or [] if t.key == OOS]
    finally:
        lab_kube.kubectl("annotate", "node", DEAD, f"{MAINTENANCE_ANNOTATION}-")
        try:
            co.delete_cluster_custom_object(*NM, nm_name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    # maintenance over: the same NodeFence goes on, fences and recovers (the hold was all that
    # stopped it)
    obj = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        240,
        "the NodeFence fenced after the maintenance",
    )
    assert obj["status"]["status"] == "Final" and obj["status"]["jobs"][0].endswith("-isolation-a0")


@pytest.fixture
def three_control_plane_nodes_down(lab_kube: Any) -> Iterator[list[str]]:
    """Every lab node labelled control-plane and powered off through its BMC; afterwards the
    labels removed, taints removed, powered on and Ready."""
    nodes = [SPARE, DEAD, OTHER]
    for node in nodes:
        lab_kube.kubectl("label", "node", node, f"{CP_LABEL}=", "--overwrite", check=True)
    for node in nodes:
        lab_kube.power_off(node)
    lab_kube.wait_nodes(nodes, {"False", "Unknown"}, 120)
    yield nodes
    for node in nodes:
        lab_kube.kubectl("label", "node", node, f"{CP_LABEL}-")
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.power_on(node)
    lab_kube.wait_nodes(nodes, "True", 120)


@pytest.mark.timeout(500)
def test_three_control_plane_nodes_failing_at_once_one_is_fenced_the_others_wait(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    three_control_plane_nodes_down: list[str],
) -> None:
    co = client.CustomObjectsApi(api)
    nodes = three_control_plane_nodes_down
    before = {n: device_log(lab_kube, n) for n in nodes}
    tag = uuid.uuid4().hex[:6]
    names = {n: f"nf-cp-{i}-{tag}" for i, n in enumerate(nodes)}
    try:
        for node in nodes:  # first come first served: (creationTimestamp, name) puts nodes[0] first
            nodefence(co, names[node], node)
        runner()
        first, rest = nodes[0], nodes[1:]
        final = wait_for(
            lambda: (
                (o := get_nf(co, names[first])) and (o.get("status") or {}).get("status") == "Final" and o
            ),
            300,
            f"{first} fenced and recovered",
        )
        assert final["status"]["jobs"], final["status"]
        for node in rest:
            obj = get_nf(co, names[node])
            status, reason, message = processing(obj)
            assert status == "False" and reason in ("ControlPlaneRemediationInProgress", "EtcdQuorumGuard"), (
                node,
                processing(obj),
            )
            assert not obj["status"].get("jobs") and not obj["status"].get("currentRun"), obj["status"]
            assert device_log(lab_kube, node) == before[node], f"{node}'s devices were touched"
            reasons = [e.reason for e in _events(api, obj)]
            assert "ControlPlaneRemediationInProgress" in reasons, reasons  # said why, while the first ran
        assert device_log(lab_kube, first) != before[first]
    finally:
        for node in nodes:
            try:
                co.delete_cluster_custom_object(*NF, names[node])
            except ApiException as exc:
                if exc.status != 404:
                    raise


def _events(api_client: client.ApiClient, obj: dict) -> list[Any]:
    return list(
        client.CoreV1Api(api_client)
        .list_namespaced_event("default", field_selector=f"involvedObject.uid={obj['metadata']['uid']}")
        .items
    )


@pytest.mark.timeout(400)
def test_medik8s_node_lease_is_respected_taken_and_released(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
) -> None:
    """medik8s' lease convention (common/pkg/lease): ``medik8s-leases/node-<name>``. A valid Lease
    of another remediator holds the NodeFence (``LeaseHeld``, no device touched); once it is gone,
    noderemedy takes the Lease itself while it fences (holder ``noderemedy-runner``, owner the
    Node) and deletes it when the NodeFence comes to rest."""
    from datetime import UTC, datetime

    core, coord, co = client.CoreV1Api(api), client.CoordinationV1Api(api), client.CustomObjectsApi(api)
    _medik8s_namespace(core)
    lease = f"node-{DEAD}"
    coord.create_namespaced_lease("medik8s-leases", _foreign_lease(lease, datetime.now(UTC), 3600))
    before = device_log(lab_kube, DEAD)
    name = f"nf-lease-{uuid.uuid4().hex[:6]}"
    try:
        runner()
        nodefence(co, name, DEAD)
        obj = wait_for(
            lambda: (o := get_nf(co, name)) and processing(o)[1] == "LeaseHeld" and o, 120, "LeaseHeld"
        )
        assert "medik8s-leases/node-" in processing(obj)[2] and "NodeHealthCheck" in processing(obj)[2]
        assert not obj["status"].get("jobs") and device_log(lab_kube, DEAD) == before
        coord.delete_namespaced_lease(lease, "medik8s-leases")
        ours = wait_for(
            lambda: (
                _lease_holder(coord, lease) == "noderemedy-runner"
                and coord.read_namespaced_lease(lease, "medik8s-leases")
            ),
            120,
            "noderemedy holds the medik8s Lease",
        )
        assert [(o.kind, o.name) for o in ours.metadata.owner_references] == [("Node", DEAD)]
        final = wait_for(
            lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") == "Final" and o,
            240,
            "Final",
        )
        assert final["status"]["jobs"]
        wait_for(lambda: _lease_holder(coord, lease) is None, 30, "the medik8s Lease released")
    finally:
        _delete_lease(coord, lease)


def _lease_holder(coord: client.CoordinationV1Api, name: str) -> str | None:
    try:
        return coord.read_namespaced_lease(name, "medik8s-leases").spec.holder_identity
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.mark.timeout(60)
def test_a_medik8s_lease_written_on_a_stale_read_is_refused(lab_kube: Any, api: client.ApiClient) -> None:  # noqa: F811
    """A step start reads the node's medik8s Lease once, before its guards' reads, and writes it
    on that read (loops/interop.claim_start). Against the lab's API server, a read that no longer
    holds when the write comes is refused by the server and answered as a lost race, leaving the
    other holder's Lease as it was: another creates the Lease after a read found none (create:
    409), or renews an expired one after the read (replace with the read's resourceVersion:
    409). On a fresh read, the expired Lease is taken over with leaseTransitions + 1."""
    import time
    from datetime import UTC, datetime, timedelta

    from noderemedy_runner.loops.interop import read_medik8s_lease, take_medik8s_lease

    core, coord = client.CoreV1Api(api), client.CoordinationV1Api(api)
    _medik8s_namespace(core)
    name = f"node-{DEAD}"
    node = api.sanitize_for_serialization(core.read_node(DEAD))

    try:
        assert read_medik8s_lease(api, DEAD) is None
        coord.create_namespaced_lease("medik8s-leases", _foreign_lease(name, datetime.now(UTC), 3600))
        assert take_medik8s_lease(api, node, time.time(), None) == "unknown (created concurrently)"
        assert _lease_holder(coord, name) == "NodeHealthCheck"

        coord.delete_namespaced_lease(name, "medik8s-leases")
        coord.create_namespaced_lease(
            "medik8s-leases", _foreign_lease(name, datetime.now(UTC) - timedelta(hours=1), 1)
        )
        stale = read_medik8s_lease(api, DEAD)
        assert stale is not None
        renewed = coord.read_namespaced_lease(name, "medik8s-leases")
        renewed.spec.renew_time = datetime.now(UTC)
        renewed.spec.lease_duration_seconds = 3600
        coord.replace_namespaced_lease(name, "medik8s-leases", renewed)
        assert take_medik8s_lease(api, node, time.time(), stale) == "unknown (changed concurrently)"
        assert coord.read_namespaced_lease(name, "medik8s-leases").spec.lease_duration_seconds == 3600

        expired = coord.read_namespaced_lease(name, "medik8s-leases")
        expired.spec.renew_time = datetime.now(UTC) - timedelta(hours=1)
        expired.spec.lease_duration_seconds = 1
        coord.replace_namespaced_lease(name, "medik8s-leases", expired)
        assert take_medik8s_lease(api, node, time.time(), read_medik8s_lease(api, DEAD)) is None
        taken = coord.read_namespaced_lease(name, "medik8s-leases")
        assert (taken.spec.holder_identity, taken.spec.lease_transitions) == ("noderemedy-runner", 1)
    finally:
        _delete_lease(coord, name)


def _medik8s_namespace(core: client.CoreV1Api) -> None:
    """The ``medik8s-leases`` namespace, created unless it is there."""
    try:
        core.create_namespace({"metadata": {"name": "medik8s-leases"}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def _foreign_lease(name: str, renewed: Any, seconds: int) -> client.V1Lease:
    """A medik8s Lease ``name`` of NodeHealthCheck, acquired and renewed at ``renewed`` (a
    datetime), valid ``seconds`` from then."""
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(holder_identity="NodeHealthCheck", lease_duration_seconds=seconds,
                                acquire_time=renewed, renew_time=renewed, lease_transitions=0),
    )  # fmt: skip


def _delete_lease(coord: client.CoordinationV1Api, name: str) -> None:
    """Delete medik8s Lease ``name`` if it is there."""
    try:
        coord.delete_namespaced_lease(name, "medik8s-leases")
    except ApiException as exc:
        if exc.status != 404:
            raise
