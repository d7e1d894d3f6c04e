"""The NodeFence reconciler's finalizer and the cleanup of a deleted NodeFence, against the
in-memory Kubernetes layer of test_kube_layer.py (no cluster): the finalizer is on before the first
device action, a deleted NodeFence switches back on what it switched off and then lets go, one
deleted before any device action simply goes."""

from __future__ import annotations

import threading

from test_kube_layer import NODE, FakeExecutor, FakeKube, no_guards, reconciler  # noqa: F401 - fixture

from noderemedy_runner.executor import RunOutcome
from noderemedy_runner.kube.errors import KubeError
from noderemedy_runner.loops.deletion import FINALIZER_FORBIDDEN
from noderemedy_runner.machines.deletion import FINALIZER, cleanup_ident
from noderemedy_runner.machines.nodefence import run_ident

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
    r.deletion.clock = r.clock
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
    r.clock = r.deletion.clock = lambda: 1767226500.0  # 5 min after the deletion: within the timeout
    assert r.reconcile("nf", threading.Event()) == 10.0
    assert kube.obj["metadata"]["finalizers"] == [FINALIZER] and ex.runs == []
    r.clock = r.deletion.clock = lambda: 1767226801.0  # past the 600 s recovery timeout
    assert r.reconcile("nf", threading.Event()) is None
    assert kube.obj["metadata"]["finalizers"] == [] and ex.runs == []
    warned = [msg for _kind, reason, msg in kube.events if reason == "CleanupTimedOut"]
    assert warned and "status unreadable" in warned[0]
