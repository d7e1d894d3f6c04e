"""Metal3Remediation ``strategy: escalate`` end to end on the lab: noderemedy-runner against the real
kube-apiserver, the real playbook and the real ipmi_sim BMC of lab-node-0, switched into the two
misbehaviours the lab's BMCs can play (``Lab.bmc_mode``): one that accepts power-off and stays on
(``lies``), one that stops answering (``silent``).

Metal3Remediation objects are created by hand (with their Machine, BareMetalHost and BMC Secret),
like test_runner_e2e's; fixtures and helpers are e2e_helpers'. The node stays Ready
throughout: neither BMC ever switches its power.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import e2e_helpers as e2e
import pytest
from e2e_helpers import M3, SPARE, Runner, events_with, metal3_objects, taint_present
from kube_helpers import wait_for
from kubernetes import client

pytestmark = [pytest.mark.lab, pytest.mark.kube]
# e2e_helpers' fixtures, used here under their own names
fence_ns, metal3_ns, runner = e2e.fence_ns, e2e.metal3_ns, e2e.runner
MACHINES = ("cluster.x-k8s.io", "v1beta1", "machines")


@pytest.fixture
def bmc_log(lab_kube: Any) -> Iterator[Callable[[], list[str]]]:
    """The lines lab-node-0's BMC adds to its power log from now on (``<0|1>`` or ``<0|1> ignored``);
    afterwards the BMC is back to normal and the node Ready."""
    path = Path(lab_kube.info["devices"]["bmcs"][SPARE]["power_log"])
    start = len(path.read_text().splitlines())
    yield lambda: [" ".join(line.split()[1:]) for line in path.read_text().splitlines()[start:]]
    lab_kube.bmc_mode(SPARE, "normal")
    lab_kube.kubectl("taint", "node", SPARE, f"{e2e.OOS}-")
    lab_kube.power_on(SPARE)
    lab_kube.wait_nodes([SPARE], "True", 120)


def remediation(co: client.CustomObjectsApi, ns: str, name: str) -> dict:
    return co.get_namespaced_custom_object(*M3[:2], ns, M3[2], name)


def owner_remediated(machine: dict) -> tuple[dict | None, dict | None]:
    """The Machine's OwnerRemediated condition in cluster-api's v1beta1 shape and in its v1beta2 shape."""
    status = machine.get("status") or {}
    old = [c for c in status.get("conditions") or [] if c["type"] == "OwnerRemediated"]
    new = [c for c in (status.get("v1beta2") or {}).get("conditions") or [] if c["type"] == "OwnerRemediated"]
    return (old[0] if old else None), (new[0] if new else None)


@pytest.mark.timeout(300)
def test_escalate_with_a_lying_bmc_hands_the_machine_over_after_two_attempts_and_never_taints(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner], bmc_log: Callable
) -> None:
    co = client.CustomObjectsApi(api)
    lab_kube.bmc_mode(SPARE, "lies")
    spec = {"strategy": {"type": "escalate"}, "deleteAfterRetries": 2, "powerOffTimeoutSeconds": 3}
    metal3_objects(lab_kube, api, metal3_ns, "machine-lies", SPARE, SPARE, spec)
    start = time.monotonic()
    runner()
    phases: list[str] = []
    tainted: list[bool] = []

    def handed_over() -> dict | None:
        o = remediation(co, metal3_ns, "machine-lies")
        ph = (o.get("status") or {}).get("phase", "")
        if ph and (not phases or phases[-1] != ph):
            phases.append(ph)
        tainted.append(taint_present(lab_kube, SPARE))
        machine = co.get_namespaced_custom_object(*MACHINES[:2], metal3_ns, MACHINES[2], "machine-lies")
        old, new = owner_remediated(machine)
        done = ph == "deleting-machine" and old and new and not o["metadata"].get("finalizers")
        return o if done else None

    obj = wait_for(handed_over, 240, "phase deleting-machine, OwnerRemediated=False, finalizer removed")
    elapsed = time.monotonic() - start
    machine = co.get_namespaced_custom_object(*MACHINES[:2], metal3_ns, MACHINES[2], "machine-lies")
    old, new = owner_remediated(machine)
    assert old is not None and old["status"] == "False" and old["reason"] == "WaitingForRemediation"
    assert old["severity"] == "Warning"
    assert new is not None and new["status"] == "False" and new["reason"] == "WaitingForRemediation"
    assert phases == ["power-off", "deleting-machine"], phases
    assert obj["status"]["retryCount"] == 2
    assert bmc_log() == ["0 ignored", "0 ignored"], "exactly 2 power attempts reached the BMC"
    assert not any(tainted), "a taint without a verified power-off"
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "PowerVerified")
    bmc = lab_kube.info["devices"]["bmcs"][SPARE]
    assert cond["status"] == "False" and cond["reason"] == "PowerTimedOut", cond
    assert f"ipmi://{bmc['host']}:{bmc['port']}" in cond["message"] and "last reading: on" in cond["message"]
    events_with(
        api,
        obj,
        "RemediationStarted",
        "PowerFailed",
        "RemediationAttemptFailed",
        "EscalatedToMachineDeletion",
    )
    print(
        f"\nFIGURE metal3 escalate (lying BMC, 2 attempts of powerOffTimeoutSeconds 3): handed over in {elapsed:.1f} s"
    )


@pytest.mark.timeout(240)
def test_power_off_timeout_against_a_silent_bmc_fails_the_attempt_after_its_timeout(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner], bmc_log: Callable
) -> None:
    co = client.CustomObjectsApi(api)
    lab_kube.bmc_mode(SPARE, "silent")
    spec = {"strategy": {"type": "escalate"}, "deleteAfterRetries": 1, "powerOffTimeoutSeconds": 5}
    metal3_objects(lab_kube, api, metal3_ns, "machine-silent", SPARE, SPARE, spec)
    runner()
    seen: dict[str, float] = {}

    def failed() -> dict | None:
        o = remediation(co, metal3_ns, "machine-silent")
        st = o.get("status") or {}
        if st.get("phase") == "power-off":
            seen.setdefault("power-off", time.monotonic())
        conds = [c for c in st.get("conditions") or [] if c["type"] == "PowerVerified"]
        return o if conds else None

    obj = wait_for(failed, 120, "a PowerVerified condition")
    seen["failed"] = time.monotonic()
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "PowerVerified")
    bmc = lab_kube.info["devices"]["bmcs"][SPARE]
    assert cond["status"] == "False" and cond["reason"] == "PowerTimedOut", cond
    assert f"BMC ipmi://{bmc['host']}:{bmc['port']}" in cond["message"], cond["message"]
    assert (
        "last reading: none (no answer)" in cond["message"] and "powerOffTimeoutSeconds 5" in cond["message"]
    )
    took = re.search(r"after ([\d.]+) s", cond["message"])
    assert took, cond["message"]
    attempt = float(took.group(1))
    assert obj["status"]["phase"] == "deleting-machine" and not taint_present(lab_kube, SPARE)
    assert bmc_log() == [], "a silent BMC did nothing"
    print(
        f"\nFIGURE metal3 silent BMC: power-off attempt failed after {attempt:.1f} s (powerOffTimeoutSeconds 5)"
    )
    if "power-off" in seen:
        print(
            f"FIGURE metal3 silent BMC: phase power-off seen to condition written {seen['failed'] - seen['power-off']:.1f} s"
        )
    # not before its timeout; how long after it depends on the load (no timed assertion)
    assert attempt >= 5.0, cond["message"]
