"""The cleanup of a deleted NodeFence (machines/deletion.py): the decision table, the cleanup
status (its round trip, its place in the CRD schema) and the cleanup's run ident. The hypothesis
properties over a NodeFence deleted at any point of its flow are in test_deletion_properties.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _deletion_helpers import (
    CONFIG,
    DELETED,
    EMPTY,
    ISO,
    LEFT,
    NOW,
    PM_OFF,
    PM_ON,
    POLICY,
    REC,
    committed,
    cond,
    nf,
    ob,
)
from nodefence_world import NAME, NODE, T0

from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.deletion import (
    CLEANUP_FINISHED,
    CLEANUP_PARTS,
    CLEANUP_STEP_FAILED,
    CLEANUP_STEP_SUCCEEDED,
    CLEANUP_TIMED_OUT,
    CLEANUP_WAITING,
    FINALIZER,
    CleanupObservations,
    CleanupStatus,
    cleanup_ident,
    decide_cleanup,
    needs_finalizer,
)
from noderemedy_runner.machines.nodefence import FENCED_STORAGE_RELEASED, NodeFenceStatus, StepResult

ROOT = Path(__file__).resolve().parents[3]


FINAL_OK = nf(
    "Final",
    "Recovery",
    (ISO, PM_OFF, PM_ON, REC),
    conditions=(cond("Succeeded", "True", "RemediationFinished"),),
)
DONE = nf("Done", "PowerManagement", (ISO, PM_OFF, PM_ON))
RECOVERED = nf("Done", "Recovery", (ISO, PM_OFF, PM_ON, REC))
STORAGE_ONLY = nf(
    "Running", "Isolation", (ISO,), conditions=(cond("WorkloadsReleased", "True", FENCED_STORAGE_RELEASED),)
)

# (id, status, cleanup, observations, expected kind, expected reason, {path: value})
TABLE: list[tuple[str, NodeFenceStatus, CleanupStatus, CleanupObservations, str, str, dict[str, Any]]] = [
    ("no-finalizer", DONE, CleanupStatus(), ob(has_finalizer=False), "none", "FinalizerRemoved", {}),
    ("new/nothing-done", nf(), CleanupStatus(), ob(), "remove_finalizer", CLEANUP_FINISHED, {}),
    (
        "new/someone-elses-taint",
        nf(),
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "final/recovered",
        FINAL_OK,
        CleanupStatus(),
        ob(node_ready=True),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "final/recovered/a-later-taint-is-not-its",
        FINAL_OK,
        CleanupStatus(),
        ob(node_ready=True, taint_present=True, left_on_node=EMPTY),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "isolation/committed/not-ready",
        nf("New", current_run=committed(ISO, "Isolation")),
        CleanupStatus(),
        ob(),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "isolation/said/not-ready",
        nf("New", current_run=committed(ISO, "Isolation")),
        CleanupStatus(waiting=f"waiting for node {NODE} to be Ready"),
        ob(),
        "wait",
        CLEANUP_WAITING,
        {},
    ),
    (
        "running/ready/unfence",
        nf("Running", "Isolation", (ISO,)),
        CleanupStatus(),
        ob(node_ready=True),
        "run_step",
        "CleanupUnfence",
        {"ident": cleanup_ident(NAME, "Unfence", 0), "methods": [("undo-fc-off", "fc", "on")]},
    ),
    (
        "running/no-node",
        nf("Running", "Isolation", (ISO,)),
        CleanupStatus(),
        ob(node_exists=False),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "pm/off-committed/power-on",
        nf("Running", "PowerManagement", (ISO,), current_run=committed(PM_OFF, "PowerManagement")),
        CleanupStatus(),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {"methods": [("undo-pdu-off", "pdu", "on")]},
    ),
    (
        "pm/on-committed/power-on",
        nf("Running", "PowerManagement", (ISO, PM_OFF), current_run=committed(PM_ON, "PowerManagement", 1)),
        CleanupStatus(),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {"ident": cleanup_ident(NAME, "PowerOn", 0)},
    ),
    (
        "pm/failed/error/power-on",
        nf(
            "Error",
            "PowerManagement",
            (ISO, PM_OFF, PM_ON),
            conditions=(cond("Processing", "False", "FenceAgentFailed"),),
        ),
        CleanupStatus(),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {},
    ),
    (
        "done/not-ready/waits",
        DONE,
        CleanupStatus(),
        ob(taint_present=True),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "done/tainted/not-looked",
        DONE,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "done/tainted/left",
        DONE,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=LEFT),
        "write_status",
        CLEANUP_WAITING,
        {"message~": "1 pod(s)"},
    ),
    (
        "done/tainted/detached/unfence",
        DONE,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "run_step",
        "CleanupUnfence",
        {},
    ),
    (
        "done/unfenced/untaint",
        DONE,
        CleanupStatus(done=("Unfence",)),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "untaint_out_of_service",
        "NodeRecovered",
        {},
    ),
    (
        "done/unfenced/untainted/go",
        DONE,
        CleanupStatus(done=("Unfence",)),
        ob(node_ready=True),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "recovered/untaint",
        RECOVERED,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=EMPTY),
        "untaint_out_of_service",
        "NodeRecovered",
        {},
    ),
    (
        "recovered/left/waits",
        RECOVERED,
        CleanupStatus(),
        ob(taint_present=True, node_ready=True, left_on_node=LEFT),
        "write_status",
        CLEANUP_WAITING,
        {},
    ),
    (
        "storage-only/stale",
        STORAGE_ONLY,
        CleanupStatus(),
        ob(node_ready=True, stale_on_node=("ns/db-0",)),
        "write_status",
        CLEANUP_WAITING,
        {"message~": "kubelet"},
    ),
    (
        "storage-only/stopped/unfence",
        STORAGE_ONLY,
        CleanupStatus(),
        ob(node_ready=True, stale_on_node=()),
        "run_step",
        "CleanupUnfence",
        {},
    ),
    (
        "result/ok/power-on",
        nf("Running", "PowerManagement", (PM_OFF,)),
        CleanupStatus(),
        ob(result=StepResult(cleanup_ident(NAME, "PowerOn", 0), True)),
        "write_status",
        CLEANUP_STEP_SUCCEEDED,
        {"cleanup.done": ["PowerOn"]},
    ),
    (
        "powered-on/go",
        nf("Running", "PowerManagement", (PM_OFF,)),
        CleanupStatus(done=("PowerOn",)),
        ob(),
        "remove_finalizer",
        CLEANUP_FINISHED,
        {},
    ),
    (
        "result/ok/unfence",
        nf("Running", "Isolation", (ISO,)),
        CleanupStatus(),
        ob(node_ready=True, result=StepResult(cleanup_ident(NAME, "Unfence", 0), True)),
        "write_status",
        CLEANUP_STEP_SUCCEEDED,
        {"cleanup.done": ["Unfence"]},
    ),
    (
        "result/failed",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(),
        ob(result=StepResult(cleanup_ident(NAME, "PowerOn", 0), False, message="BMC said no")),
        "write_status",
        CLEANUP_STEP_FAILED,
        {"cleanup.attempts": 1, "message~": "BMC said no"},
    ),
    (
        "retry/delay",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(attempts=1, not_before=NOW + 3),
        ob(),
        "wait",
        "CleanupRetryDelay",
        {"seconds": 3.0},
    ),
    (
        "retry/new-ident",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(attempts=1, not_before=NOW - 1),
        ob(),
        "run_step",
        "CleanupPowerOn",
        {"ident": cleanup_ident(NAME, "PowerOn", 1)},
    ),
    (
        "timeout/power",
        nf("Running", "PowerManagement", (ISO, PM_OFF)),
        CleanupStatus(),
        ob(now=DELETED + 600),
        "remove_finalizer",
        CLEANUP_TIMED_OUT,
        {"left~": "power not switched back on: pdu-off"},
    ),
    (
        "timeout/taint",
        DONE,
        CleanupStatus(done=("Unfence",)),
        ob(now=DELETED + 601, taint_present=True),
        "remove_finalizer",
        CLEANUP_TIMED_OUT,
        {"left~": "out-of-service taint"},
    ),
    (
        "config-error",
        DONE,
        CleanupStatus(),
        ob(config_error="fence-config-worker-1: not found"),
        "write_status",
        CLEANUP_WAITING,
        {"message~": "cannot be read"},
    ),
    (
        "config-error/timeout",
        DONE,
        CleanupStatus(),
        ob(now=DELETED + 600, config_error="fence-config-worker-1: not found"),
        "remove_finalizer",
        CLEANUP_TIMED_OUT,
        {"left~": "fence-config-worker-1: not found"},
    ),
]


def _get(action: Action, path: str) -> Any:
    if path == "ident":
        return action.ident
    if path == "seconds":
        return action.seconds
    if path == "methods":
        return [(m["name"], m["device_type"], m["action"]) for m in action.extravars["methods"]]
    if path == "left~":
        return "; ".join(action.extravars["left"])
    assert action.status is not None
    if path == "message~":
        return next(c["message"] for c in action.status["conditions"] if c["type"] == "Processing")
    head, tail = path.split(".")
    return action.status[head][tail]


@pytest.mark.parametrize(
    ("status", "cleanup", "obs", "kind", "reason", "fields"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_cleanup_table(
    status: NodeFenceStatus,
    cleanup: CleanupStatus,
    obs: CleanupObservations,
    kind: str,
    reason: str,
    fields: dict[str, Any],
) -> None:
    action = decide_cleanup(NAME, status, cleanup, obs, CONFIG, POLICY)
    assert (action.kind, action.reason) == (kind, reason), action
    for path, want in fields.items():
        got = _get(action, path)
        if path.endswith("~"):
            assert want in got, (path, got)
        else:
            assert got == want, (path, got)
    if kind == "run_step":
        assert all(m["action"] == "on" for m in action.extravars["methods"])
        assert action.extravars["release_workloads"] is False
    if kind == "remove_finalizer":
        assert action.extravars["finalizer"] == FINALIZER
        assert bool(action.extravars["left"]) == (reason == CLEANUP_TIMED_OUT)
    if kind == "write_status":
        assert action.status is not None
        assert NodeFenceStatus.from_dict(action.status).jobs == status.jobs  # the flow's record kept
        CleanupStatus.from_dict(action.status["cleanup"])


def test_the_finalizer_goes_on_before_any_device_action() -> None:
    assert all(needs_finalizer(k) for k in ("run_step", "run_remedy", "taint_out_of_service"))
    assert not any(needs_finalizer(k) for k in ("write_status", "wait", "none", "verify_fence"))


def test_cleanup_status_round_trip_and_errors() -> None:
    s = CleanupStatus(done=("PowerOn",), attempts=2, not_before=float(T0), waiting="w")
    assert CleanupStatus.from_dict(s.to_dict()) == s
    assert CleanupStatus.from_dict(None) == CleanupStatus()
    with pytest.raises(ValueError, match="status.cleanup.done"):
        CleanupStatus.from_dict({"done": ["Reboot"]})
    with pytest.raises(ValueError, match="status.cleanup.attempts"):
        CleanupStatus.from_dict({"attempts": -1})


def test_the_crd_schema_holds_the_cleanup_status() -> None:
    crd = yaml.safe_load((ROOT / "deploy/crds/remediation.noderemedy.io_nodefences.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    cleanup = schema["properties"]["status"]["properties"]["cleanup"]["properties"]
    full = CleanupStatus(done=CLEANUP_PARTS, attempts=1, not_before=1.0, waiting="w").to_dict()
    assert set(full) == set(cleanup)
    assert tuple(cleanup["done"]["items"]["enum"]) == CLEANUP_PARTS


def test_a_long_name_gives_a_bounded_ident() -> None:
    assert len(cleanup_ident("n" * 253, "PowerOn", 9)) <= 253
