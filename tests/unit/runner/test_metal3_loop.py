"""The Metal3Remediation reconciler's escalate path against an in-memory Kubernetes layer and an
executor that plays a BMC which accepts power-off and stays on (no cluster, no network): each
failed power run becomes one counted attempt with a condition naming the BMC and its last reading,
the Machine gets OwnerRemediated=False, the finalizer goes, and there is no taint. (Both of
cluster-api's condition shapes are written by the Kubernetes layer, checked on the lab.)"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from noderemedy_runner.loops.metal3 import Metal3RemediationReconciler
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.outcomes import ModuleResult, RunOutcome

NS, NAME, NODE = "m3", "machine-a", "worker-1"
ADDRESS = "ipmi://127.0.0.1:9001"


class Kube:
    """The calls Metal3RemediationReconciler makes, over plain dicts."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.objs: dict[str, dict[str, Any]] = {
            "Metal3Remediation": {
                "metadata": {"name": NAME, "namespace": NS, "uid": "u1",
                             "annotations": {"remediation.noderemedy.io/runner": "true"}},
                "spec": spec,
            },
            "Machine": {
                "metadata": {"name": NAME, "namespace": NS, "annotations": {"metal3.io/BareMetalHost": f"{NS}/host-a"}},
                "status": {"nodeRef": {"name": NODE}},
            },
            "BareMetalHost": {
                "metadata": {"name": "host-a", "namespace": NS},
                "spec": {"online": True, "bmc": {"address": ADDRESS, "credentialsName": "host-a-bmc"}},
            },
        }  # fmt: skip
        self.node = {
            "metadata": {"name": NODE},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        self.events: list[tuple[str, str, str]] = []
        self.machine_conditions: list[Mapping[str, Any]] = []

    def get_custom(self, crd: tuple[str, ...], name: str, namespace: str) -> dict[str, Any] | None:
        obj = self.objs.get(crd[3])
        return copy.deepcopy(obj) if obj is not None and obj["metadata"]["name"] == name else None

    def get_node(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.node) if name == NODE else None

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    def replace_status(self, crd: tuple[str, ...], obj: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        self.objs[crd[3]]["status"] = copy.deepcopy(dict(status))

    def patch_finalizers(
        self, crd: tuple[str, ...], obj: Mapping[str, Any], finalizer: str, add: bool
    ) -> None:
        meta = self.objs[crd[3]]["metadata"]
        fins = [f for f in meta.get("finalizers") or [] if f != finalizer]
        meta["finalizers"] = [*fins, finalizer] if add else fins

    def set_machine_condition(self, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        self.machine_conditions.append(dict(condition))
        status = self.objs["Machine"]["status"]
        status["conditions"] = [*status.get("conditions", []), dict(condition)]


class LyingBmc:
    """An executor whose every power-off run fails verification with the chassis read back on."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def run(self, action: Action, **kw: Any) -> RunOutcome:
        self.runs.append(dict(action.extravars))
        res = ModuleResult(
            "noderemedy.core.ipmi_power", "ipmi", False, None, {"verified": False},
            msg="not verified off within power_timeout=3s after 1 attempt(s) (read back: chassis=on); left commanded off",
            error="verify", seconds=3.4,
        )  # fmt: skip
        return RunOutcome(str(kw.get("ident")), "failed", 2, failed=1, modules=(res,), seconds=5.0)


def test_a_lying_bmc_gives_two_counted_attempts_then_the_machine_is_handed_over_without_a_taint() -> None:
    kube = Kube({"strategy": {"type": "escalate"}, "deleteAfterRetries": 2, "powerOffTimeoutSeconds": 3})
    bmc = LyingBmc()
    r = Metal3RemediationReconciler(kube, bmc, clock=lambda: 1_700_000_000.0)  # type: ignore[arg-type]
    assert r.reconcile(NS, NAME, threading.Event()) is None
    status = kube.objs["Metal3Remediation"]["status"]
    assert status["phase"] == "deleting-machine" and status["retryCount"] == 2
    assert [run["state"] for run in bmc.runs] == ["off", "off"]
    assert {run["power_timeout"] for run in bmc.runs} == {3.0}
    assert all(run["credentials_name"] == "host-a-bmc" and "password" not in run for run in bmc.runs)
    (cond,) = [c for c in status["conditions"] if c["type"] == "PowerVerified"]
    assert cond["status"] == "False" and cond["reason"] == "PowerTimedOut"
    assert cond["message"].startswith(
        f"attempt 2 of 2: power off at BMC {ADDRESS} timed out (verify) after 3.4 s"
    )
    assert "last reading: on" in cond["message"]
    assert kube.machine_conditions == [
        {"type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "severity": "Warning",
         "message": "power-cycle attempts exhausted (deleteAfterRetries): the owner deletes the Machine"}
    ]  # fmt: skip
    assert not kube.node["spec"].get("taints")
    assert kube.objs["Metal3Remediation"]["metadata"]["finalizers"] == []
    reasons = [reason for _t, reason, _m in kube.events]
    assert reasons.count("PowerFailed") == 2 and reasons.count("RemediationAttemptFailed") == 1
    assert "EscalatedToMachineDeletion" in reasons and "OutOfServiceTaintAdded" not in reasons


def test_an_invalid_spec_is_an_event_naming_the_field_and_nothing_runs() -> None:
    kube = Kube({"strategy": {"type": "escalate"}, "deleteAfterRetries": 0})
    bmc = LyingBmc()
    r = Metal3RemediationReconciler(kube, bmc)  # type: ignore[arg-type]
    assert r.reconcile(NS, NAME, threading.Event()) is None
    assert bmc.runs == [] and "status" not in kube.objs["Metal3Remediation"]
    assert kube.events == [
        (
            "Warning",
            "InvalidRemediation",
            f"Metal3Remediation {NS}/{NAME} spec.deleteAfterRetries: 0 is not an integer >= 1",
        )
    ]
