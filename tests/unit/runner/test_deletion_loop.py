"""The NodeFence reconciler's finalizer and the cleanup of a deleted NodeFence, against the
in-memory Kubernetes layer of test_kube_layer.py (no cluster): the finalizer is on before the first
device action, a deleted NodeFence switches back on what it switched off and then lets go, one
deleted before any device action simply goes."""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes import client
from test_kube_layer import NODE, FakeExecutor, FakeKube, HeldLeases, no_guards, reconciler  # noqa: F401

from noderemedy_runner.config.remedy import parse_configurations
from noderemedy_runner.kube.errors import KubeError
from noderemedy_runner.loops.deletion import FINALIZER_FORBIDDEN
from noderemedy_runner.loops.detector import Detector
from noderemedy_runner.loops.nodefence import NodeFenceReconciler
from noderemedy_runner.machines.deletion import FINALIZER, cleanup_ident
from noderemedy_runner.machines.detection import Assessment, NodeCondition, NodeInfo
from noderemedy_runner.machines.nodefence import NodeFencePolicy, run_ident
from noderemedy_runner.metrics import Metrics
from noderemedy_runner.outcomes import RunOutcome

DELETED = "2026-01-01T00:10:00Z"


def test_the_finalizer_is_on_before_the_first_device_action() -> None:
    kube = FakeKube()
    ex = FakeExecutor(RunOutcome("x", "canceled", None))
    reconciler(kube, ex).reconcile("nf", threading.Event())
    assert ex.runs == [run_ident("nf", 0, "Isolation", 0)]
    assert kube.obj["metadata"]["finalizers"] == [FINALIZER]
    reasons = [reason for _kind, reason, _msg in kube.events]
    assert "FinalizerAdded" in reasons


def test_a_nodefence_deleted_before_any_device_action_simply_goes() -> None:
    kube = FakeKube()
    kube.obj["metadata"]["deletionTimestamp"] = DELETED
    ex = FakeExecutor(RunOutcome("x", "successful", 0))
    assert reconciler(kube, ex).reconcile("nf", threading.Event()) is None
    assert ex.runs == [] and kube.writes == []


def test_a_nodefence_deleted_after_the_power_off_powers_on_then_unfences_then_lets_go() -> None:
    kube = FakeKube()
    iso, pm_off = run_ident("nf", 0, "Isolation", 0), run_ident("nf", 0, "PowerManagement", 0)
    kube.obj["metadata"].update(finalizers=[FINALIZER], deletionTimestamp=DELETED)
    kube.obj["status"] = {
        "status": "Running",
        "step": "PowerManagement",
        "jobs": [iso, pm_off],
        "observedGeneration": 1,
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [],
    }
    ex = FakeExecutor(RunOutcome("x", "successful", 0))
    r = reconciler(kube, ex)
    r.clock = lambda: 1767226500.0  # 2026-01-01T00:15:00Z: 5 min after the deletion, within its timeout
    delay = r.reconcile("nf", threading.Event())
    # powered on at once; the storage waits for the node to be Ready
    assert ex.runs == [cleanup_ident("nf", "PowerOn", 0)] and delay is not None and delay > 0
    assert kube.obj["status"]["cleanup"]["done"] == ["PowerOn"]
    assert kube.obj["status"]["jobs"] == [iso, pm_off]
    assert kube.obj["metadata"]["finalizers"] == [FINALIZER]
    kube.node["status"]["conditions"][0]["status"] = "True"
    assert r.reconcile("nf", threading.Event()) is None
    assert ex.runs == [cleanup_ident("nf", "PowerOn", 0), cleanup_ident("nf", "Unfence", 0)]
    assert kube.obj["metadata"]["finalizers"] == []
    reasons = [reason for _kind, reason, _msg in kube.events]
    for reason in (
        "CleanupPowerOn",
        "CleanupStepSucceeded",
        "CleanupWaiting",
        "CleanupUnfence",
        "CleanupFinished",
    ):
        assert reason in reasons, reasons
    assert NODE in kube.events[-1][2]


def test_fencing_goes_on_when_rbac_forbids_the_finalizer() -> None:
    """An older ClusterRole without ``patch`` on NodeFences: one Warning Event, and the fencing
    (which keeps the promise) goes on without the finalizer."""
    kube = FakeKube()

    def forbidden(*_a: object, **_k: object) -> None:
        raise KubeError("patch nodefences: HTTP 403 forbidden", "forbidden", 403)

    kube.patch_finalizers = forbidden  # type: ignore[method-assign, assignment]
    ex = FakeExecutor(RunOutcome("x", "canceled", None))
    reconciler(kube, ex).reconcile("nf", threading.Event())
    assert ex.runs == [run_ident("nf", 0, "Isolation", 0)]
    assert [reason for _kind, reason, _msg in kube.events].count(FINALIZER_FORBIDDEN) == 1


def test_an_unreadable_status_lets_go_after_the_recovery_timeout_undoing_nothing() -> None:
    kube = FakeKube()
    kube.obj["metadata"].update(finalizers=[FINALIZER], deletionTimestamp=DELETED)
    kube.obj["status"] = {"status": "Exploded"}
    ex = FakeExecutor(RunOutcome("x", "successful", 0))
    r = reconciler(kube, ex)
    r.clock = lambda: 1767226500.0  # 5 min after the deletion: within the timeout
    assert r.reconcile("nf", threading.Event()) == 10.0
    assert kube.obj["metadata"]["finalizers"] == [FINALIZER] and ex.runs == []
    r.clock = lambda: 1767226801.0  # past the 600 s recovery timeout
    assert r.reconcile("nf", threading.Event()) is None
    assert kube.obj["metadata"]["finalizers"] == [] and ex.runs == []
    warned = [msg for _kind, reason, msg in kube.events if reason == "CleanupTimedOut"]
    assert warned and "status unreadable" in warned[0]


class RecordingCustomApi:
    """Records the detector's calls on NodeFences; every call succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any) -> Any:
        self.calls.append(("patch", body))
        return {"metadata": {"name": name, "resourceVersion": "8"}}

    def delete_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, body: Any
    ) -> Any:
        self.calls.append(("delete", body.preconditions.resource_version))
        return {}

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: Any) -> Any:
        self.calls.append(("create", body["metadata"]["name"]))
        return {**body, "metadata": {**body["metadata"], "uid": "u2"}}


def test_the_detector_hands_a_finished_nodefences_node_to_the_new_one_without_its_cleanup() -> None:
    """Fencing a node again, the detector deletes its finished NodeFence: it first removes the
    finalizer (the new NodeFence takes the node over; the old one undoes nothing), then deletes
    with the resourceVersion that patch returned, then creates the new one."""
    configs = parse_configurations(
        "apiVersion: node-remedy/v1alpha\nkind: Configuration\nthresholdConfigs:\n"
        "- {nodeConditionType: Ready, nodeConditionStatus: unknown, nodeConditionPeriod: 0s}\n",
        "t",
    )
    det = Detector(client.ApiClient(), configs, namespace="ns", identity="me", metrics=Metrics())
    custom = RecordingCustomApi()
    det.custom = custom  # type: ignore[assignment]
    det.leases = HeldLeases()  # type: ignore[assignment]
    det.events.record = lambda *a, **k: None  # type: ignore[method-assign]
    now = time.time()
    node = NodeInfo(NODE, {}, {}, (NodeCondition("Ready", "Unknown", now - 60),))
    a = Assessment(node=NODE, config="t", matching=True, unhealthy=True, since=now - 60)
    old = {"metadata": {"name": NODE, "resourceVersion": "7", "finalizers": ["other.io/keep", FINALIZER]}}
    try:
        det._act(NODE, det._create, a, node, old, now).result(10)
    finally:
        det.close()
    assert custom.calls[:3] == [
        ("patch", {"metadata": {"finalizers": ["other.io/keep"], "resourceVersion": "7"}}),
        ("delete", "8"),
        ("create", NODE),
    ]


def test_a_dry_run_cleans_nothing_up() -> None:
    kube = FakeKube()
    kube.obj["metadata"].update(finalizers=[FINALIZER], deletionTimestamp=DELETED)
    kube.obj["status"] = {
        "status": "Running",
        "step": "PowerManagement",
        "jobs": [run_ident("nf", 0, "PowerManagement", 0)],
    }
    ex = FakeExecutor(RunOutcome("x", "successful", 0))
    r: Any = kube
    e: Any = ex
    dry = NodeFenceReconciler(r, e, namespace="ns", policy=NodeFencePolicy(), dry_run=True)
    assert dry.reconcile("nf", threading.Event()) is None
    assert ex.runs == [] and kube.writes == [] and kube.obj["metadata"]["finalizers"] == [FINALIZER]


def test_the_cleanup_writes_its_events_before_it_lets_go() -> None:
    """The Warning Event naming what was left exists once the finalizer goes: a NodeFence seen
    gone already has it, and a runner dying in between leaves the finalizer, not a silent end."""
    kube = FakeKube()
    kube.obj["metadata"].update(finalizers=[FINALIZER], deletionTimestamp=DELETED)
    kube.obj["status"] = {"status": "Exploded"}
    seen_at_let_go: list[list[str]] = []
    patch = kube.patch_finalizers

    def recording(*args: Any, **kw: Any) -> Any:
        seen_at_let_go.append([reason for _kind, reason, _msg in kube.events])
        return patch(*args, **kw)

    kube.patch_finalizers = recording  # type: ignore[method-assign]
    r = reconciler(kube, FakeExecutor(RunOutcome("x", "successful", 0)))
    r.clock = lambda: 1767226801.0  # past the 600 s recovery timeout
    assert r.reconcile("nf", threading.Event()) is None
    assert kube.obj["metadata"]["finalizers"] == []
    assert seen_at_let_go and "CleanupTimedOut" in seen_at_let_go[-1], seen_at_let_go
