"""The runner's Kubernetes layer without a cluster: error classification, retries, the timeout
proxy; and the reconcile and detector loops against in-memory fakes of that layer (a 409 leads to
a re-read, a canceled run does not spin, a refused release is an Event, a create lost to a
transport error is logged and counted)."""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError, ReadTimeoutError

from noderemedy_runner.config.remedy import parse_configurations
from noderemedy_runner.kube import retry
from noderemedy_runner.kube.client import REQUEST_TIMEOUT, api
from noderemedy_runner.kube.errors import Conflict, KubeError, NotFound, classify
from noderemedy_runner.kube.events import reference
from noderemedy_runner.kube.resources import NODEFENCE
from noderemedy_runner.loops.detector import Detector
from noderemedy_runner.loops.memory import ERROR_REQUEUE_SECONDS
from noderemedy_runner.loops.nodefence import AFTER_RELEASE_PRIORITY, NodeFenceReconciler
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.deletion import FINALIZER
from noderemedy_runner.machines.detection import Assessment, NodeCondition, NodeInfo
from noderemedy_runner.machines.nodefence import NodeFencePolicy
from noderemedy_runner.metrics import Metrics
from noderemedy_runner.outcomes import Release, RunOutcome, StepEvidence

NODE = "worker-1"


def api_exception(status: int, message: str = "", headers: dict[str, str] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"message": message})
    exc.headers = headers or {}
    return exc


# --- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "cls", "reason", "retryable"),
    [
        (404, NotFound, "not_found", False),
        (409, Conflict, "conflict", False),
        (403, KubeError, "forbidden", False),
        (422, KubeError, "invalid", False),
        (429, KubeError, "too_many_requests", True),
        (500, KubeError, "internal_error", True),
        (502, KubeError, "internal_error", True),
        (503, KubeError, "service_unavailable", True),
    ],
)
def test_api_answers_are_classified_by_status(status: int, cls: type, reason: str, retryable: bool) -> None:
    err = classify(api_exception(status, "nodefences.x not found"), "get NodeFence x")
    assert type(err) is cls and err.reason == reason and err.status == status
    assert err.retryable is retryable
    assert str(err) == f"get NodeFence x: HTTP {status} nodefences.x not found"


def test_retry_after_is_kept() -> None:
    err = classify(api_exception(429, "slow down", {"Retry-After": "3"}), "list Node")
    assert err.retry_after == 3.0


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (ReadTimeoutError(None, "/api", "read timed out"), "timeout"),
        (MaxRetryError(None, "/api", ReadTimeoutError(None, "/api", "read timed out")), "timeout"),
        (TimeoutError("timed out"), "timeout"),
        (MaxRetryError(None, "/api", NewConnectionError(None, "refused")), "unreachable"),  # type: ignore[arg-type]
        (ConnectionRefusedError(111, "refused"), "unreachable"),
        (ApiException(status=0, reason="Connection reset"), "unreachable"),
    ],
)
def test_transport_failures_are_classified_too(exc: BaseException, reason: str) -> None:
    err = classify(exc, "get Node n1")
    assert err.reason == reason and err.status is None and err.retryable
    assert str(err).startswith("get Node n1: ")


# --- retries ----------------------------------------------------------------------------------
def test_retry_retries_transient_errors_with_growing_jittered_delays() -> None:
    slept: list[float] = []
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise KubeError("x", "service_unavailable", 503)
        return "ok"

    assert retry.call(flaky, tries=4, delay=0.1, sleep=slept.append) == "ok"
    assert len(calls) == 3 and len(slept) == 2
    assert 0 <= slept[0] <= 0.1 and 0 <= slept[1] <= 0.2


def test_retry_honours_retry_after_and_gives_up_after_tries() -> None:
    slept: list[float] = []

    def throttled() -> None:
        raise KubeError("x", "too_many_requests", 429, retry_after=2.0)

    with pytest.raises(KubeError, match="x"):
        retry.call(throttled, tries=3, sleep=slept.append)
    assert slept == [2.0, 2.0]


def test_retry_does_not_retry_what_is_not_transient() -> None:
    calls = []

    def conflict() -> None:
        calls.append(1)
        raise Conflict("changed", "conflict", 409)

    with pytest.raises(Conflict):
        retry.call(conflict, sleep=lambda s: None)
    assert calls == [1]
    calls.clear()
    with pytest.raises(Conflict):
        retry.call(conflict, tries=3, retry_on={"conflict"}, sleep=lambda s: None)
    assert calls == [1, 1, 1]


# --- the timeout proxy ----------------------------------------------------------------------------
class FakeCoreApi:
    """Stands in for a generated API class: records the keyword arguments of each call."""

    def __init__(self, _client: Any = None) -> None:
        self.seen: list[dict[str, Any]] = []

    def read_node(self, name: str, **kw: Any) -> str:
        self.seen.append(kw)
        if name == "missing":
            raise api_exception(404, 'nodes "missing" not found')
        return name


def test_every_call_gets_a_timeout_and_one_error_type() -> None:
    core: Any = api(client.ApiClient(), FakeCoreApi)  # type: ignore[type-var]
    assert core.read_node("n1") == "n1"
    assert core.read_node("n1", _request_timeout=1) == "n1"
    assert [kw["_request_timeout"] for kw in core._target.seen] == [REQUEST_TIMEOUT, 1]
    with pytest.raises(NotFound, match='read node missing: HTTP 404 nodes "missing" not found'):
        core.read_node("missing")
    raw: Any = api(client.ApiClient(), FakeCoreApi, classify_errors=False)  # type: ignore[type-var]
    with pytest.raises(ApiException):  # for libraries that catch the client's own exception
        raw.read_node("missing")


class _Raw:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = json.dumps({"items": items}).encode()


def test_one_recent_node_list_serves_the_callers_that_allow_its_age(monkeypatch: pytest.MonkeyPatch) -> None:
    from noderemedy_runner.kube import resources

    clock = [100.0]
    monkeypatch.setattr(resources.time, "monotonic", lambda: clock[0])
    kube = resources.KubeIO(client.ApiClient())
    lists: list[int] = []

    def list_node(**kw: Any) -> _Raw:
        lists.append(1)
        return _Raw([{"metadata": {"name": f"n{len(lists)}"}}])

    monkeypatch.setattr(kube, "core", type("Core", (), {"list_node": staticmethod(list_node)})())
    assert kube.recent_nodes()[0]["metadata"]["name"] == "n1"
    clock[0] += resources.NODE_LIST_SECONDS  # as old as allowed: still served
    assert kube.recent_nodes()[0]["metadata"]["name"] == "n1"
    assert kube.recent_nodes(max_age=0.5)[0]["metadata"]["name"] == "n2"  # a caller wanting newer
    clock[0] += resources.NODE_LIST_SECONDS + 0.1
    assert kube.recent_nodes()[0]["metadata"]["name"] == "n3"
    assert len(lists) == 3


def test_event_references_of_objects_and_of_references() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}
    assert reference(node) == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u1"}
    assert reference({"kind": "Node", "name": "n1", "uid": ""}) == {"kind": "Node", "name": "n1"}


# --- the reconcile loop against an in-memory Kubernetes layer -----------------------------------------
CONFIG = {
    "config.properties": f"node_name={NODE}\nisolation=fc-off\npower_management=ipmi-off\nrecovery=fc-on",
    "fence-method-fc-off": "template=fence-method-template-fc\nplug=fc1/1\naction=off",
    "fence-method-fc-on": "template=fence-method-template-fc\nplug=fc1/1\naction=on",
    "fence-method-ipmi-off": "template=fence-method-template-bmc\naction=off",
}
TEMPLATES = {
    "fence-method-template-fc": {"template.properties": "type=fc\naddress=127.0.0.1:161\nsecret=fc"},
    "fence-method-template-bmc": {"template.properties": "type=ipmi\naddress=127.0.0.1:623\nsecret=bmc"},
}


class FakeKube:
    """The KubeIO calls the NodeFence reconciler makes, on one NodeFence and one NotReady Node.
    ``conflicts``: how many status writes answer 409 (someone else wrote meanwhile)."""

    def __init__(self, conflicts: int = 0) -> None:
        self.obj: dict[str, Any] = {
            "apiVersion": "remediation.noderemedy.io/v1alpha1",
            "kind": "NodeFence",
            "metadata": {"name": "nf", "uid": "u1", "generation": 1, "resourceVersion": "1"},
            "spec": {"node": NODE},
        }
        self.node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "uid": "n1"},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ]
            },
            "spec": {},
        }
        self.api: Any = None  # the raw client of the start guards (patched out here)
        self.conflicts = conflicts
        self.reads = 0
        self.writes: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []
        self.calls: list[str] = []  # get, node, write, patch: in order

    def get_custom(self, crd: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert crd == NODEFENCE
        self.reads += 1
        self.calls.append("get")
        return copy.deepcopy(self.obj)

    def get_configmap_data(self, namespace: str, name: str) -> dict[str, Any] | None:
        return dict(CONFIG) if name == f"fence-config-{NODE}" else TEMPLATES.get(name)

    def get_node(self, name: str) -> dict[str, Any] | None:
        self.calls.append("node")
        return copy.deepcopy(self.node) if name == NODE else None

    def replace_status(self, crd: Any, obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        if obj["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"] or self.conflicts:
            if self.conflicts:
                self.conflicts -= 1
                self.obj["metadata"]["resourceVersion"] = str(
                    int(self.obj["metadata"]["resourceVersion"]) + 1
                )
            raise Conflict("write status: HTTP 409 the object has been modified", "conflict", 409)
        self.obj["status"] = copy.deepcopy(status)
        self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        self.writes.append(copy.deepcopy(status))
        self.calls.append("write")
        return copy.deepcopy(self.obj)

    def patch_finalizers(
        self, crd: Any, obj: dict[str, Any], finalizer: str, present: bool
    ) -> dict[str, Any]:
        if obj["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("patch finalizers: HTTP 409 the object has been modified", "conflict", 409)
        kept = [f for f in self.obj["metadata"].get("finalizers") or [] if f != finalizer]
        self.obj["metadata"]["finalizers"] = kept + ([finalizer] if present else [])
        self.obj["metadata"]["resourceVersion"] = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        self.calls.append("patch")
        return copy.deepcopy(self.obj)

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str, once_key: str = "") -> None:
        self.events.append((obj.get("kind", ""), reason, message))


class FakeExecutor:
    """Returns ``outcomes`` in turn (the last one again) and counts runs."""

    def __init__(self, *outcomes: RunOutcome) -> None:
        self.outcomes = list(outcomes)
        self.runs: list[str] = []
        self.extra: list[dict[str, Any]] = []
        self.priorities: list[int] = []

    def run(self, action: act.Action, **kw: Any) -> RunOutcome:
        self.runs.append(str(kw.get("ident")))
        self.priorities.append(int(kw.get("priority") or 0))
        self.extra.append(dict(kw.get("extra_extravars") or {}))
        out = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        return RunOutcome(
            str(kw.get("ident")), out.status, out.rc, release=out.release, evidence=out.evidence
        )


@pytest.fixture(autouse=True)
def no_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """No other NodeFence, maintenance or medik8s Lease in this in-memory world: the start guards
    (which read the cluster through the raw client) hold nothing."""
    from noderemedy_runner.loops import nodefence as loop

    monkeypatch.setattr(loop, "claim_start", lambda *a, **k: {})
    monkeypatch.setattr(loop, "release_medik8s_lease", lambda *a, **k: None)


def reconciler(kube: FakeKube, executor: FakeExecutor) -> NodeFenceReconciler:
    r: Any = kube
    e: Any = executor
    return NodeFenceReconciler(r, e, namespace="ns", policy=NodeFencePolicy(grace_seconds=0, step_retries=0))


def test_a_conflicting_status_write_is_read_again_and_decided_again() -> None:
    kube = FakeKube(conflicts=1)
    ex = FakeExecutor(RunOutcome("x", "canceled", None))
    cancel = threading.Event()
    ex.run = lambda action, **kw: (cancel.set(), RunOutcome(str(kw["ident"]), "canceled", None))[1]  # type: ignore[method-assign]
    assert reconciler(kube, ex).reconcile("nf", cancel) is None
    # the first write of observedGeneration met a 409: the object was read again before the write landed
    assert kube.calls[:5] == ["get", "node", "get", "node", "write"], kube.calls
    assert kube.writes[0] == {**kube.writes[0], "observedGeneration": 1}
    assert [w["currentRun"]["ident"] for w in kube.writes if w.get("currentRun")] == ["nf-r0-isolation-a0"]


def test_a_decision_after_its_own_write_takes_that_decisions_readings() -> None:
    """A status write or the finalizer's patch changes no Node: the decision after it takes the
    write's answer and the Node as read for the decision that wrote, instead of reading both
    again. After a run, both are read again."""
    kube = FakeKube()
    cancel = threading.Event()
    ex = FakeExecutor(RunOutcome("x", "successful", 0))
    runs = 0

    def run(action: act.Action, **kw: Any) -> RunOutcome:
        nonlocal runs
        runs += 1
        kube.calls.append("run")
        if runs == 2:
            cancel.set()
            return RunOutcome(str(kw["ident"]), "canceled", None)
        return RunOutcome(str(kw["ident"]), "successful", 0)

    ex.run = run  # type: ignore[method-assign]
    reconciler(kube, ex).reconcile("nf", cancel)
    calls = kube.calls
    assert runs == 2 and "write" in calls and calls.count("patch") == 1
    for i, c in enumerate(calls[:-1]):
        if c in ("write", "patch"):  # next: another write, the patch or a run; no read
            assert calls[i + 1] in ("write", "patch", "run"), calls
        if c == "run":  # the object and the Node read again
            assert calls[i + 1 : i + 3] == ["get", "node"], calls
    assert calls[:2] == ["get", "node"] and calls.count("get") == calls.count("node") == 2, calls
    assert kube.obj["metadata"]["finalizers"] == [FINALIZER]


def test_a_canceled_run_is_not_asked_for_again_and_again() -> None:
    kube = FakeKube()
    ex = FakeExecutor(RunOutcome("x", "canceled", None))
    delay = reconciler(kube, ex).reconcile("nf", threading.Event())
    assert delay == ERROR_REQUEUE_SECONDS and ex.runs == ["nf-r0-isolation-a0"]


@pytest.mark.parametrize("tainted", [False, True])
def test_a_run_after_the_nodes_release_queues_behind_the_runs_that_lead_to_one(tainted: bool) -> None:
    """The executor hands free slots lowest priority first: a NodeFence's run on a node that
    already carries the out-of-service taint (its workloads are out) asks with
    AFTER_RELEASE_PRIORITY added, one on a node not yet released with its tries only."""
    kube = FakeKube()
    if tainted:
        kube.node["spec"] = {
            "taints": [{"key": act.OUT_OF_SERVICE_TAINT_KEY, "value": "nodeshutdown", "effect": "NoExecute"}]
        }
    ex = FakeExecutor(RunOutcome("x", "canceled", None))
    reconciler(kube, ex).reconcile("nf", threading.Event())
    assert ex.priorities == [AFTER_RELEASE_PRIORITY if tainted else 0], ex.runs


def test_a_refused_release_is_an_event_on_the_nodefence_and_the_node() -> None:
    kube = FakeKube()
    refused = Release(False, "node_ready: node worker-1 is Ready")
    ex = FakeExecutor(RunOutcome("x", "successful", 0, release=refused), RunOutcome("y", "canceled", None))
    reconciler(kube, ex).reconcile("nf", threading.Event())
    refusals = [(kind, msg) for kind, reason, msg in kube.events if reason == "OutOfServiceTaintRefused"]
    assert refusals == [
        ("NodeFence", f"node {NODE}: node_ready: node worker-1 is Ready"),
        ("Node", f"node {NODE}: node_ready: node worker-1 is Ready"),
    ]


FC_EVIDENCE = {
    "verified": True,
    "method": "fc",
    "target": "127.0.0.1:161",
    "state": "disabled",
    "verified_at": 1.0,
}


IPMI_EVIDENCE = {
    "verified": True,
    "method": "ipmi",
    "target": "127.0.0.1:623",
    "state": "off",
    "verified_at": 1.0,
}


def test_the_release_goes_with_the_evidence_the_run_itself_reported() -> None:
    """The run's own evidence task said "fenced" (a power off): the reconciler releases with exactly
    that module evidence; the taint run fails, so the reading is forgotten and both objects get an Event."""
    kube = FakeKube()
    fenced = StepEvidence(True, "power_off", "ipmi-off", IPMI_EVIDENCE)
    ex = FakeExecutor(RunOutcome("x", "successful", 0, evidence=fenced), RunOutcome("y", "failed", 2))
    rec = reconciler(kube, ex)
    assert rec.reconcile("nf", threading.Event()) == ERROR_REQUEUE_SECONDS
    assert ex.runs[0] == "nf-r0-isolation-a0" and ex.runs[1].startswith("nf-taint-add-")
    assert ex.extra[1] == {"fence_evidence": IPMI_EVIDENCE}
    failed = [kind for kind, reason, _ in kube.events if reason == "OutOfServiceTaintFailed"]
    assert failed == ["NodeFence", "Node"]
    assert rec.held("nf").reading is None and rec.held("nf").evidence is None


def test_a_storage_only_fence_never_asks_for_the_taint() -> None:
    """The Isolation run verified the FC ports down and released the pods on the fenced storage
    (node_taint's fenced_storage release): no taint run follows, the flow goes on to
    PowerManagement, and the release is an Event naming what went and what stayed."""
    kube = FakeKube()
    fenced = StepEvidence(True, "storage_isolated", "fc-off", FC_EVIDENCE)
    release = Release(False, fenced_storage=True, deleted_pods=("demo/db-0",), kept_pods=("demo/cache-0",))
    ex = FakeExecutor(
        RunOutcome("x", "successful", 0, evidence=fenced, release=release), RunOutcome("y", "canceled", None)
    )
    reconciler(kube, ex).reconcile("nf", threading.Event())
    assert ex.runs[:2] == ["nf-r0-isolation-a0", "nf-r0-power-management-a0"], ex.runs
    assert not [r for r in ex.runs if "taint" in r]
    released = [(kind, msg) for kind, reason, msg in kube.events if reason == "FencedStoragePodsReleased"]
    assert [kind for kind, _ in released] == ["NodeFence", "Node"]
    assert (
        "1 pod(s) on the fenced storage force-deleted (demo/db-0); 1 other pod(s) left running"
        in released[0][1]
    )


def test_runs_without_evidence_never_release() -> None:
    """Runs that succeed but whose evidence task reported nothing (it did not run, or found no
    fence): the steps go on, no taint run is ever asked for."""
    kube = FakeKube()
    ex = FakeExecutor(RunOutcome("x", "successful", 0))
    reconciler(kube, ex).reconcile("nf", threading.Event())
    assert ex.runs[:2] == ["nf-r0-isolation-a0", "nf-r0-power-management-a0"]
    assert not [r for r in ex.runs if "taint" in r]
    assert kube.writes[-1]["status"] == "Done"


# --- the detector against an in-memory Kubernetes layer -----------------------------------------------
class FailingCustomApi:
    """Every NodeFence create fails as a dropped connection does."""

    def __init__(self) -> None:
        self.creates = 0

    def create_cluster_custom_object(self, *args: Any, **kw: Any) -> Any:
        self.creates += 1
        raise KubeError("create cluster custom object: API server unreachable", "unreachable")


class HeldLeases:
    duration = 300

    def acquire(self, node: str) -> tuple[bool, str]:
        return True, "noderemedy-runner/me"


def test_a_nodefence_create_lost_to_a_transport_error_is_logged_counted_and_planned_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    configs = parse_configurations(
        "apiVersion: node-remedy/v1alpha\nkind: Configuration\nthresholdConfigs:\n"
        "- {nodeConditionType: Ready, nodeConditionStatus: unknown, nodeConditionPeriod: 0s}\n",
        "t",
    )
    metrics = Metrics()
    det = Detector(client.ApiClient(), configs, namespace="ns", identity="me", metrics=metrics)
    custom = FailingCustomApi()
    det.custom = custom  # type: ignore[assignment]
    det.leases = HeldLeases()  # type: ignore[assignment]
    now = time.time()
    node = NodeInfo(NODE, {}, {}, (NodeCondition("Ready", "Unknown", now - 60),))
    a = Assessment(node=NODE, config="t", matching=True, unhealthy=True, since=now - 60)
    try:
        det._act(NODE, det._create, a, node, None, now).result(10)
    finally:
        det.close()
    assert custom.creates == 1
    assert NODE not in det._busy and NODE not in det._creating  # planned again at the next pass
    logged = [r.getMessage() for r in caplog.records if "NodeFence not created" in r.getMessage()]
    assert logged and "unreachable" in logged[0], logged
    assert metrics.registry.get_sample_value("noderemedy_reconcile_errors_total", {"kind": "Detector"}) == 1.0
