"""The CRD files agree with the Python vocabulary (enums, condition patterns, upstream names).

Whether the API server enforces them is tests/integration/test_crds.py (real kube-apiserver)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from noderemedy_runner.machines import conditions, metal3, nodefence
from noderemedy_runner.machines.actions import STEPS
from noderemedy_runner.machines.remedies import RESULTS, RemedyStatus

CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CRDS / name).read_text())


def schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    return version["schema"]["openAPIV3Schema"]


def test_every_crd_is_v1_with_a_status_subresource() -> None:
    files = sorted(p.name for p in CRDS.glob("*.yaml"))
    assert files == [
        "cluster.x-k8s.io_machines.yaml",
        "infrastructure.cluster.x-k8s.io_metal3remediations.yaml",
        "infrastructure.cluster.x-k8s.io_metal3remediationtemplates.yaml",
        "metal3.io_baremetalhosts.yaml",
        "remediation.noderemedy.io_nodefences.yaml",
    ]
    for name in files:
        crd = load(name)
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        assert name == f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"
        for version in crd["spec"]["versions"]:
            assert version["subresources"] == {"status": {}}


def test_nodefence_enums_match_the_state_machine() -> None:
    props = schema(load("remediation.noderemedy.io_nodefences.yaml"))["properties"]
    status = props["status"]["properties"]
    assert tuple(status["status"]["enum"]) == nodefence.PHASES
    assert tuple(status["step"]["enum"]) == STEPS
    assert tuple(status["currentRun"]["properties"]["step"]["enum"]) == STEPS
    assert {*NodeFenceKeys, "cleanup"} == set(status)  # status.cleanup: machines/deletion.py
    cond = status["conditions"]["items"]["properties"]
    assert tuple(cond["status"]["enum"]) == conditions.CONDITION_STATUSES
    assert cond["reason"]["pattern"] == conditions._REASON_RE.pattern
    assert cond["type"]["pattern"] == conditions._TYPE_RE.pattern
    assert props["spec"]["required"] == ["node"]
    level = nodefence.LevelOutcome("PowerManagement", 2, 0, 0, "pdu-off", "Failed", "m", 1.0)
    full = nodefence.NodeFenceStatus(
        current_run=nodefence.RunRef("i", "Isolation", 0, 1.0),
        start_time=1.0,
        last_transition_time=1.0,
        fence_levels=(level,),
        remedy=RemedyStatus("repair", 0, 1.0, 20.0, "nf-remedy-repair", "Failed", "m"),
    )
    assert set(full.to_dict()) == set(NodeFenceKeys)
    assert set(full.to_dict()["remedy"]) == set(status["remedy"]["properties"])
    assert tuple(status["remedy"]["properties"]["result"]["enum"]) == RESULTS
    assert set(full.to_dict()["currentRun"]) == set(status["currentRun"]["properties"])
    assert set(full.to_dict()["fenceLevels"][0]) == set(status["fenceLevels"]["items"]["properties"])


#: Every key NodeFenceStatus.to_dict() can write.
NodeFenceKeys = [
    "status", "step", "retries", "restarts", "jobs", "currentRun", "conditions",
    "observedGeneration", "startTime", "lastTransitionTime", "fenceLevels", "remedy",
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "path", "expected"),
    [
        (
            "infrastructure.cluster.x-k8s.io_metal3remediations.yaml",
            ("status",),
            {"phase", "retryCount", "lastRemediated", "conditions"},
        ),
        (
            "infrastructure.cluster.x-k8s.io_metal3remediations.yaml",
            ("spec", "strategy"),
            {"type", "retryLimit", "timeout", "timeoutSeconds"},
        ),
        (
            "infrastructure.cluster.x-k8s.io_metal3remediations.yaml",
            ("spec",),
            {"strategy", "deleteAfterRetries", "powerOffTimeoutSeconds", "powerOnTimeoutSeconds"},
        ),
        (
            "metal3.io_baremetalhosts.yaml",
            ("spec", "bmc"),
            {"address", "credentialsName", "disableCertificateVerification"},
        ),
    ],
)
def test_upstream_field_names(name: str, path: tuple[str, ...], expected: set[str]) -> None:
    node = schema(load(name))
    for key in path:
        node = node["properties"][key]
    assert set(node["properties"]) == expected


def test_metal3_status_keys_are_the_schema_keys() -> None:
    cond = {"type": metal3.POWER_VERIFIED, "status": "True", "lastTransitionTime": "2023-11-14T22:13:20Z"}
    written = metal3.Metal3RemediationStatus("Waiting", 1, 1.0, (cond,)).to_dict()
    props = schema(load("infrastructure.cluster.x-k8s.io_metal3remediations.yaml"))["properties"]["status"][
        "properties"
    ]
    assert set(written) == set(props)


@pytest.mark.parametrize(
    "name",
    [
        "infrastructure.cluster.x-k8s.io_metal3remediations.yaml",
        "infrastructure.cluster.x-k8s.io_metal3remediationtemplates.yaml",
    ],
)
def test_metal3_crds_serve_capm3s_versions_with_the_strategies_and_phases_of_the_machine(name: str) -> None:
    crd = load(name)
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert set(versions) == {"v1beta1", "v1beta2"}, "the versions CAPM3 serves"
    assert versions["v1beta2"]["storage"] and versions["v1beta1"]["deprecated"]
    for v in versions.values():
        spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]
        if name.endswith("templates.yaml"):
            spec = spec["properties"]["template"]["properties"]["spec"]
        assert tuple(spec["properties"]["strategy"]["properties"]["type"]["enum"]) == metal3.STRATEGIES
        if not name.endswith("templates.yaml"):
            phases = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"]
            assert set(phases) == set(metal3.ALL_PHASES) - {""}
