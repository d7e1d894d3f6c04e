"""The CRDs under deploy/crds/ on the lab's real kube-apiserver (v1.34.4): they install, valid
objects round-trip, and the API server itself rejects malformed ones (its own 422 Invalid).

Also checks that what the pure state machines write (NodeFenceStatus / Metal3RemediationStatus
``to_dict()``) is accepted by the schema, so the runner's status writes cannot be refused.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from noderemedy_runner.machines.conditions import set_condition
from noderemedy_runner.machines.metal3 import HostRef, Metal3RemediationStatus, RemediationStrategy
from noderemedy_runner.machines.nodefence import NodeFencePolicy, NodeFenceStatus, RunRef

pytestmark = [pytest.mark.lab, pytest.mark.kube]

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"
GROUP, VERSION, PLURAL = "remediation.noderemedy.io", "v1alpha1", "nodefences"
T0 = 1_700_000_000.0


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"crd-test-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def rejected(call: Any, *args: Any) -> dict[str, Any]:
    """Run ``call``; it must fail with the API server's 422 Invalid. Returns the Status body."""
    with pytest.raises(ApiException) as info:
        call(*args)
    assert info.value.status == 422, info.value.body
    body = json.loads(info.value.body)
    assert (body["kind"], body["reason"]) == ("Status", "Invalid"), body
    return body


def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c.get("field", ""), c.get("message", "")) for c in body.get("details", {}).get("causes", [])]


# --- NodeFence -------------------------------------------------------------------------------
def nodefence(name: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeFence",
        "metadata": {"name": name},
    }
    if spec is not None:
        body["spec"] = spec
    return body


@pytest.fixture
def fence(api: client.ApiClient) -> Iterator[tuple[client.CustomObjectsApi, str]]:
    """A valid NodeFence (cluster-scoped), deleted afterwards."""
    co = client.CustomObjectsApi(api)
    name = unique("nf")
    co.create_cluster_custom_object(GROUP, VERSION, PLURAL, nodefence(name, {"node": "worker-1"}))
    yield co, name
    co.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_valid_nodefence_round_trips_and_status_on_create_is_dropped(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    name = unique("nf")
    body = nodefence(name, {"node": "worker-1"})
    body["status"] = {"status": "Final"}
    co.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    try:
        got = co.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        assert got["spec"] == {"node": "worker-1"}
        assert "status" not in got  # the status subresource ignores status on create
    finally:
        co.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_status_written_by_the_state_machine_is_accepted(fence: tuple[client.CustomObjectsApi, str]) -> None:
    co, name = fence
    conds = set_condition((), "Processing", "True", "FenceAgentRunning", "running Isolation attempt 0", T0, 1)
    conds = set_condition(
        conds, "FenceVerified", "True", "FenceVerified", "storage_isolated read back", T0, 1
    )
    status = NodeFenceStatus(
        status="Running",
        step="PowerManagement",
        retries=1,
        restarts=0,
        jobs=("nf-r0-isolation-a0",),
        current_run=RunRef("nf-r0-power-management-a1", "PowerManagement", 1, T0 + 10),
        conditions=conds,
        observed_generation=1,
        start_time=T0,
        last_transition_time=T0,
    )
    co.patch_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, {"status": status.to_dict()})
    got = co.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    assert NodeFenceStatus.from_dict(got["status"]) == status


def _load_world() -> Any:
    """The unit tests' simulated NodeFence world (tests/unit/runner/nodefence_world.py)."""
    if "nodefence_world" in sys.modules:  # already imported by the unit tests in this session
        return sys.modules["nodefence_world"]
    path = Path(__file__).resolve().parents[1] / "unit" / "runner" / "nodefence_world.py"
    spec = importlib.util.spec_from_file_location("nodefence_world", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["nodefence_world"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("fails", "revive"),
    [((False,), True), ((True,), False), ((False, True, True, False, False, True), False)],
    ids=["clean", "always-failing", "mixed"],
)
def test_every_status_the_machine_writes_is_accepted(
    fence: tuple[client.CustomObjectsApi, str], fails: tuple[bool, ...], revive: bool
) -> None:
    """Each write_status of a simulated run, applied as the runner does (a full replacement of
    .status with the object's resourceVersion), is accepted and reads back unchanged."""
    world_mod = _load_world()
    out = world_mod.run(world_mod.World(fails=fails, revive=revive), NodeFencePolicy(grace_seconds=0))
    writes = [a.status for a in out.actions if a.kind == "write_status"]
    assert len(writes) >= 4
    co, name = fence
    for status in writes:
        obj = co.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        obj["status"] = status
        co.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, obj)
        got = co.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        assert got["status"] == status
        assert NodeFenceStatus.from_dict(got["status"]) == NodeFenceStatus.from_dict(status)


def test_printer_columns(lab_kube: Any, fence: tuple[client.CustomObjectsApi, str]) -> None:
    co, name = fence
    co.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        PLURAL,
        name,
        {"status": {"status": "Running", "step": "Isolation", "retries": 2, "restarts": 1}},
    )
    out = lab_kube.kubectl("get", "nodefences", name, check=True).stdout.split("\n")
    assert out[0].split() == ["NAME", "NODE", "STATUS", "STEP", "RETRIES", "RESTARTS", "AGE"]
    assert out[1].split()[:6] == [name, "worker-1", "Running", "Isolation", "2", "1"]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (None, "spec", "Required value"),
        ({}, "spec.node", "Required value"),
        ({"node": 5}, "spec.node", "must be of type string"),
        ({"node": "Worker_1"}, "spec.node", "should match"),
        ({"node": ""}, "spec.node", "should be at least 1 chars long"),
    ],
)
def test_malformed_nodefence_is_rejected_by_the_api_server(
    api: client.ApiClient, spec: dict[str, Any] | None, field: str, message: str
) -> None:
    co = client.CustomObjectsApi(api)
    body = rejected(co.create_cluster_custom_object, GROUP, VERSION, PLURAL, nodefence(unique("nf"), spec))
    assert any(f == field and message in m for f, m in causes(body)), body


@pytest.mark.parametrize(
    ("status", "field", "message"),
    [
        ({"status": "Fenced"}, "status.status", 'Unsupported value: "Fenced"'),
        ({"step": "Reboot"}, "status.step", 'Unsupported value: "Reboot"'),
        ({"retries": "two"}, "status.retries", "must be of type integer"),
        ({"restarts": -1}, "status.restarts", "should be greater than or equal to 0"),
        ({"currentRun": {"ident": "x"}}, "status.currentRun.step", "Required value"),
        (
            {
                "conditions": [
                    {
                        "type": "Processing",
                        "status": "Yes",
                        "reason": "R",
                        "message": "",
                        "lastTransitionTime": "2023-11-14T22:13:20Z",
                    }
                ]
            },
            "status.conditions[0].status",
            'Unsupported value: "Yes"',
        ),
        (
            {"conditions": [{"type": "Processing", "status": "True", "reason": "R", "message": ""}]},
            "status.conditions[0].lastTransitionTime",
            "Required value",
        ),
        ({"startTime": "yesterday"}, "status.startTime", "must be of type date-time"),
    ],
)
def test_malformed_status_is_rejected_by_the_api_server(
    fence: tuple[client.CustomObjectsApi, str], status: dict[str, Any], field: str, message: str
) -> None:
    co, name = fence
    body = rejected(co.patch_cluster_custom_object_status, GROUP, VERSION, PLURAL, name, {"status": status})
    assert any(f == field and message in m for f, m in causes(body)), body


def test_node_is_immutable(fence: tuple[client.CustomObjectsApi, str]) -> None:
    co, name = fence
    body = rejected(
        co.patch_cluster_custom_object, GROUP, VERSION, PLURAL, name, {"spec": {"node": "worker-2"}}
    )
    assert any(f == "spec.node" and "node is immutable" in m for f, m in causes(body)), body


# --- BareMetalHost, Machine, Metal3Remediation(Template) --------------------------------------
def bmh(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_valid_baremetalhost_round_trips(api: client.ApiClient, namespace: str) -> None:
    co = client.CustomObjectsApi(api)
    spec = {
        "online": True,
        "bmc": {"address": "ipmi://127.0.0.1:9001", "credentialsName": "host-1-bmc"},
        "bootMACAddress": "00:11:22:33:44:55",
        "rootDeviceHints": {"deviceName": "/dev/sda"},  # an upstream field we do not model: preserved
    }
    co.create_namespaced_custom_object(
        "metal3.io", "v1alpha1", namespace, "baremetalhosts", bmh("host-1", spec)
    )
    got = co.get_namespaced_custom_object("metal3.io", "v1alpha1", namespace, "baremetalhosts", "host-1")
    assert got["spec"] == spec
    assert HostRef.from_object(got) == HostRef(
        "host-1", namespace, "ipmi://127.0.0.1:9001", "host-1-bmc", True
    )


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        (
            {"bmc": {"address": "ipmi://127.0.0.1:9001", "credentialsName": "c"}},
            "spec.online",
            "Required value",
        ),
        (
            {"online": True, "bmc": {"address": "ipmi://127.0.0.1:9001"}},
            "spec.bmc.credentialsName",
            "Required value",
        ),
        ({"online": "yes"}, "spec.online", "must be of type boolean"),
        (
            {"online": True, "bmc": {"address": 9001, "credentialsName": "c"}},
            "spec.bmc.address",
            "must be of type string",
        ),
    ],
)
def test_malformed_baremetalhost_is_rejected(
    api: client.ApiClient, namespace: str, spec: dict, field: str, message: str
) -> None:
    co = client.CustomObjectsApi(api)
    body = rejected(
        co.create_namespaced_custom_object,
        "metal3.io",
        "v1alpha1",
        namespace,
        "baremetalhosts",
        bmh("bad", spec),
    )
    assert any(f == field and message in m for f, m in causes(body)), body


def m3r(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "Metal3Remediation",
        "metadata": {"name": name, "annotations": {"remediation.noderemedy.io/runner": "true"}},
        "spec": spec,
    }


def test_valid_metal3remediation_and_machine_statuses(api: client.ApiClient, namespace: str) -> None:
    co = client.CustomObjectsApi(api)
    grp, ver = "infrastructure.cluster.x-k8s.io", "v1beta1"
    spec = {"strategy": {"type": "Reboot", "retryLimit": 2, "timeout": "5m0s"}}
    co.create_namespaced_custom_object(grp, ver, namespace, "metal3remediations", m3r("machine-1", spec))
    status = Metal3RemediationStatus("Waiting", 1, T0)
    co.patch_namespaced_custom_object_status(
        grp, ver, namespace, "metal3remediations", "machine-1", {"status": status.to_dict()}
    )
    got = co.get_namespaced_custom_object(grp, ver, namespace, "metal3remediations", "machine-1")
    # stored as v1beta2 (CAPM3's storage version), whose default timeoutSeconds is applied on read;
    # the runner reads v1beta1's timeout first
    v2_default = {"timeoutSeconds": 600}
    assert got["spec"] == {"strategy": {**spec["strategy"], **v2_default}}
    assert RemediationStrategy.from_spec(got["spec"], "x").timeout_seconds == 300.0
    assert Metal3RemediationStatus.from_dict(got["status"]) == status

    template = {
        "apiVersion": f"{grp}/{ver}",
        "kind": "Metal3RemediationTemplate",
        "metadata": {"name": "reboot"},
        "spec": {"template": {"spec": spec}},
    }
    co.create_namespaced_custom_object(grp, ver, namespace, "metal3remediationtemplates", template)
    assert co.get_namespaced_custom_object(grp, ver, namespace, "metal3remediationtemplates", "reboot")[
        "spec"
    ] == {"template": {"spec": {"strategy": {**spec["strategy"], **v2_default}}}}

    machine = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "machine-1"},
        "spec": {
            "clusterName": "lab",
            "bootstrap": {"dataSecretName": "machine-1-bootstrap"},
            "infrastructureRef": {"apiVersion": f"{grp}/{ver}", "kind": "Metal3Machine", "name": "machine-1"},
        },
    }
    co.create_namespaced_custom_object("cluster.x-k8s.io", "v1beta1", namespace, "machines", machine)
    cond = {"type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "severity": "Warning",
            "lastTransitionTime": "2023-11-14T22:13:20Z"}  # fmt: skip
    co.patch_namespaced_custom_object_status(
        "cluster.x-k8s.io", "v1beta1", namespace, "machines", "machine-1",
        {"status": {"nodeRef": {"kind": "Node", "name": "worker-1"}, "conditions": [cond]}},
    )  # fmt: skip
    got = co.get_namespaced_custom_object("cluster.x-k8s.io", "v1beta1", namespace, "machines", "machine-1")
    assert got["status"]["nodeRef"]["name"] == "worker-1"
    assert got["status"]["conditions"] == [cond]


@pytest.mark.parametrize(
    ("plural", "body", "field", "message"),
    [
        (
            "metal3remediations",
            m3r("bad", {"strategy": {"retryLimit": "three"}}),
            "spec.strategy.retryLimit",
            "must be of type integer",
        ),
        ("metal3remediations", m3r("bad", {"strategy": "Reboot"}), "spec.strategy", "must be of type object"),
        (
            "metal3remediations",
            m3r("bad", {"strategy": {"type": "Reprovision"}}),
            "spec.strategy.type",
            "Unsupported value",
        ),
        (
            "metal3remediations",
            m3r("bad", {"deleteAfterRetries": 0}),
            "spec.deleteAfterRetries",
            "should be greater than or equal to 1",
        ),
        (
            "metal3remediationtemplates",
            {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                "kind": "Metal3RemediationTemplate",
                "metadata": {"name": "bad"},
                "spec": {},
            },
            "spec.template",
            "Required value",
        ),
    ],
)
def test_malformed_metal3remediation_is_rejected(
    api: client.ApiClient, namespace: str, plural: str, body: dict, field: str, message: str
) -> None:
    co = client.CustomObjectsApi(api)
    got = rejected(
        co.create_namespaced_custom_object,
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        namespace,
        plural,
        body,
    )
    assert any(f == field and message in m for f, m in causes(got)), got


def test_v1beta2_metal3remediation_reads_back_at_v1beta1_with_the_seed_fields(
    api: client.ApiClient, namespace: str
) -> None:
    """Both of CAPM3's versions are served; an object written at v1beta2 (the stored version) with
    the seed's fields reads back at v1beta1, the runner's, with nothing pruned."""
    co = client.CustomObjectsApi(api)
    grp = "infrastructure.cluster.x-k8s.io"
    spec = {
        "strategy": {"type": "escalate", "timeoutSeconds": 300},
        "deleteAfterRetries": 2,
        "powerOffTimeoutSeconds": 5,
        "powerOnTimeoutSeconds": 60,
    }
    body = {**m3r("v2", spec), "apiVersion": f"{grp}/v1beta2"}
    co.create_namespaced_custom_object(grp, "v1beta2", namespace, "metal3remediations", body)
    got = co.get_namespaced_custom_object(grp, "v1beta1", namespace, "metal3remediations", "v2")
    assert got["spec"] == {**spec, "strategy": {**spec["strategy"], "retryLimit": 1}}, (
        "v1beta2's default retryLimit"
    )
    assert RemediationStrategy.from_spec(got["spec"], "x") == RemediationStrategy(
        "escalate", 1, 300.0, 2, 5.0, 60.0
    )
    status = Metal3RemediationStatus("power-off", 1, T0)
    co.patch_namespaced_custom_object_status(
        grp, "v1beta1", namespace, "metal3remediations", "v2", {"status": status.to_dict()}
    )
    got = co.get_namespaced_custom_object(grp, "v1beta2", namespace, "metal3remediations", "v2")
    assert Metal3RemediationStatus.from_dict(got["status"]) == status


def test_malformed_metal3remediation_status_is_rejected(api: client.ApiClient, namespace: str) -> None:
    co = client.CustomObjectsApi(api)
    grp, ver = "infrastructure.cluster.x-k8s.io", "v1beta1"
    co.create_namespaced_custom_object(grp, ver, namespace, "metal3remediations", m3r("m", {}))
    body = rejected(
        co.patch_namespaced_custom_object_status, grp, ver, namespace, "metal3remediations", "m",
        {"status": {"lastRemediated": "not-a-time"}},
    )  # fmt: skip
    assert any(f == "status.lastRemediated" and "date-time" in m for f, m in causes(body)), body


def test_machine_without_cluster_name_is_rejected(api: client.ApiClient, namespace: str) -> None:
    co = client.CustomObjectsApi(api)
    machine = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "bad"},
        "spec": {"bootstrap": {}, "infrastructureRef": {"kind": "Metal3Machine", "name": "m"}},
    }
    body = rejected(
        co.create_namespaced_custom_object, "cluster.x-k8s.io", "v1beta1", namespace, "machines", machine
    )
    assert any(f == "spec.clusterName" and "Required value" in m for f, m in causes(body)), body
