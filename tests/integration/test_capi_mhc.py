"""cluster-api's own MachineHealthCheck drives noderemedy-runner's Metal3Remediation on the lab.

cluster-api's controller manager (built from ``sigs.k8s.io/cluster-api``, its real CRDs, its
conversion and admission webhooks served by the manager; :mod:`noderemedy_lab.capi`) runs once for
this module against the lab, which is both its management and its workload cluster. Machines are
the lab's nodes through the stand-in LabMachine provider. The MachineHealthChecks are written in
cluster-api's v1beta1 API (the machine health check design's terms), stored as v1beta2 through the
conversion webhook; the runner reads Machines as v1beta1 through it too.

* a real node powered off: the MHC creates the Metal3Remediation from our template (the Machine's
  name, its owner reference, the cluster label the runner is opted in by); the runner powers the
  host off and reads it back, taints the node out-of-service, powers it on, removes the taint once
  Ready; the MHC deletes the object and nothing holds it;
* short circuit: two kwok nodes failing under ``maxUnhealthy: 1``, then ``unhealthyRange``: no
  remediation, ``RemediationAllowed`` False, the runner does nothing;
* escalation: a kwok node cut off from the cluster (its power label, so its BMC still reads on)
  whose BMC accepts power-off and stays on (``Lab.bmc_mode(node, "lies")``); the MHC creates the
  remediation from a ``strategy: escalate`` template with ``deleteAfterRetries: 2``; the runner
  tries twice, never taints, and hands the Machine to its owner (``OwnerRemediated=False``);
  the same with a BMC that stops answering and ``powerOffTimeoutSeconds: 5``: the attempt fails in
  5 to 8 s, with a condition naming the BMC;
* Redfish: the first scenario again with the host's BareMetalHost at a ``redfish://`` address, the
  lab's sushy-tools system of the node, cut and fenced through it;
* deleted mid-flight: the node comes back (kwok heartbeats it again) while its BMC is off and the
  runner holds the power-on (a VolumeAttachment not yet detached); the MHC deletes the remediation;
  the runner powers the host on before its finalizer lets the object go.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from runner_harness import Runner

from ansible_collections.noderemedy.core.plugins.module_utils._redfish import RedfishDriver
from noderemedy_lab.capi import CapiCluster
from noderemedy_lab.config import POWER_LABEL
from noderemedy_lab.mhc import (
    M3_GROUP,
    M3_VERSION,
    MHC_LABEL,
    OOS,
    RUNNER_SELECTOR,
    create_mhc,
    metal3_objects,
    mhc_body,
    power_off_remediated,
    remediation,
    remediations,
    runner_events,
    tainted,
)

pytestmark = [pytest.mark.lab, pytest.mark.kube]

REAL = "lab-real-0"
PAIR = ["lab-node-0", "lab-node-1"]
MIDFLIGHT = "lab-node-2"
STRATEGY = {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}
#: The escalation scenario borrows a node of the short-circuit pair (its Machine relabelled for the
#: test's own MHC) and its own template.
ESCALATE_NODE = PAIR[0]
ESCALATE_TEMPLATE = "noderemedy-escalate"
ESCALATE_FIELDS = {"deleteAfterRetries": 2, "powerOffTimeoutSeconds": 3}
TIMEOUT_TEMPLATE = "noderemedy-timeout"
TIMEOUT_FIELDS = {"deleteAfterRetries": 1, "powerOffTimeoutSeconds": 5}


@pytest.fixture(scope="module")
def capi(lab_real: Any, api: client.ApiClient) -> Iterator[CapiCluster]:
    """cluster-api's manager on the lab, with a Machine per node these tests use, their hosts and
    the Metal3RemediationTemplate; everything removed again afterwards."""
    c = CapiCluster(lab_real)
    t0 = time.monotonic()
    c.start(progress=lambda line: print(f"[capi] {line}", flush=True))
    print(f"\nFIGURE capi: manager started, CRDs and webhooks installed in {time.monotonic() - t0:.1f} s")
    try:
        t0 = time.monotonic()
        c.add_machine(REAL, {MHC_LABEL: "real"})
        for node in PAIR:
            c.add_machine(node, {MHC_LABEL: "pair"})
        c.add_machine(MIDFLIGHT, {MHC_LABEL: "midflight"})
        print(f"FIGURE capi: 4 Machines with their nodeRef in {time.monotonic() - t0:.1f} s")
        metal3_objects(lab_real, c, [REAL, MIDFLIGHT], STRATEGY)
        metal3_objects(
            lab_real, c, [ESCALATE_NODE], {"type": "escalate"}, template=ESCALATE_TEMPLATE, **ESCALATE_FIELDS
        )
        metal3_objects(lab_real, c, [], {"type": "escalate"}, template=TIMEOUT_TEMPLATE, **TIMEOUT_FIELDS)
        yield c
    finally:
        c.stop()


@pytest.fixture
def runner(lab_real: Any, namespace: str, tmp_path: Path) -> Iterator[Runner]:
    """noderemedy-runner reconciling the Metal3Remediations of the Cluster (its label selector)."""
    r = Runner(
        lab_real, namespace, tmp_path, "--reconcile-only", "--poll-interval", "0.2",
        "--metal3-selector", json.dumps(RUNNER_SELECTOR),
    )  # fmt: skip
    yield r
    r.stop()


def mhc_status(lab: Any, ns: str, name: str) -> dict[str, Any]:
    """The MachineHealthCheck's status as v1beta1 shows it (through the conversion webhook)."""
    obj = client.CustomObjectsApi(lab.api_client()).get_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", ns, "machinehealthchecks", name
    )
    return obj.get("status") or {}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def delete_mhc(lab: Any, ns: str, name: str) -> None:
    try:
        client.CustomObjectsApi(lab.api_client()).delete_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta1", ns, "machinehealthchecks", name
        )
    except ApiException as exc:
        if exc.status != 404:
            raise


def power_rows(lab: Any, node: str, since: float) -> list[tuple[float, str]]:
    """(epoch, ``0``/``1``) of the BMC's power sets since ``since``, from its chassis-control log."""
    path = Path(lab.info["devices"]["bmcs"][node]["power_log"])
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    # a lying BMC logs ``<t> 0 ignored``: the command it took and did not carry out
    return [(float(row[0]), " ".join(row[1:])) for row in rows if float(row[0]) >= since]


def test_mhc_remediates_a_powered_off_real_node_through_the_runner(
    lab_real: Any, capi: CapiCluster, runner: Runner
) -> None:
    ns = capi.namespace
    create_mhc(lab_real, capi, mhc_body("real", "real"))
    machine = capi.machine(REAL)
    since = time.time()
    try:
        out = power_off_remediated(lab_real, capi, REAL)
    finally:
        delete_mhc(lab_real, ns, "real")
    steps, rem = out["steps"], out["remediation"]
    for name, value in steps.items():
        print(f"FIGURE capi mhc {REAL}: {name} {value}")
    # what the MHC created: named after the Machine, owned by it, labelled with its Cluster
    owners = rem["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
        ("Machine", REAL, machine["metadata"]["uid"])
    ]
    assert rem["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"] == "lab"
    # the template's strategy, with the defaults the stored version (CAPM3's v1beta2) adds
    assert {k: rem["spec"]["strategy"].get(k) for k in STRATEGY} == STRATEGY, rem["spec"]["strategy"]
    # what the runner did, in order: power off read back, taint, power on, taint removed
    events = out["events"]
    assert {"PowerOff", "OutOfServiceTaintAdded", "PowerOn", "OutOfServiceTaintRemoved"} <= set(events), (
        events
    )
    assert events.index("PowerOff") < events.index("OutOfServiceTaintAdded") < events.index("PowerOn")
    assert steps["to_power_off_verified_s"] <= steps["to_taint_s"] <= steps["to_node_ready_s"]
    assert [v for _at, v in power_rows(lab_real, REAL, since)][-1] == "1", "the host was not powered on"
    assert not tainted(lab_real, REAL) and lab_real.node_ready([REAL])[REAL] == "True"
    _record_mhc(steps)


def _record_mhc(steps: dict[str, float]) -> None:
    """Keep the steps for the bench's results (``bench/metal3_mhc.py`` writes the file)."""
    print("FIGURE capi mhc steps " + json.dumps(steps, sort_keys=True))


def unhealthy_for(lab: Any, node: str) -> float:
    """Seconds since ``node``'s Ready condition last changed, if it is not True (else 0)."""
    ready = next(
        c for c in client.CoreV1Api(lab.api_client()).read_node(node).status.conditions if c.type == "Ready"
    )
    return 0.0 if ready.status == "True" else time.time() - ready.last_transition_time.timestamp()


def test_mhc_short_circuit_creates_no_remediation_and_the_runner_does_nothing(
    lab_real: Any, capi: CapiCluster, runner: Runner
) -> None:
    """Both kwok nodes fail; each MHC is created once both have been NotReady beyond its 10 s, so
    that its first pass sees both unhealthy (nodes that fail a few seconds apart would let an MHC
    remediate the first one alone, as ``maxUnhealthy: 1`` allows)."""
    ns = capi.namespace
    since = time.time()
    for node in PAIR:
        lab_real.power_off(node)
    try:
        lab_real.wait_nodes(PAIR, {"False", "Unknown"}, 120)
        wait_for(lambda: all(unhealthy_for(lab_real, n) > 11 for n in PAIR), 30, "both nodes NotReady > 10 s")
        for short_circuit in ({"maxUnhealthy": 1}, {"unhealthyRange": "[0-1]"}):
            name = f"pair-{uuid.uuid4().hex[:4]}"
            t0 = time.monotonic()
            create_mhc(lab_real, capi, mhc_body(name, "pair", **short_circuit))
            try:
                status = wait_for(
                    lambda name=name: (
                        (s := mhc_status(lab_real, ns, name))
                        and s.get("expectedMachines") == 2
                        and s.get("currentHealthy") == 0
                        and condition(s, "RemediationAllowed").get("status") == "False"
                        and s
                    ),
                    60,
                    f"the MHC {short_circuit} to short-circuit (2 expected, 0 healthy, RemediationAllowed False)",
                )
                message = condition(status, "RemediationAllowed").get("message")
                print(
                    f"FIGURE capi mhc short circuit {list(short_circuit)[0]}: created to RemediationAllowed=False "
                    f"{time.monotonic() - t0:.1f} s: {message}"
                )
                # the pass that short-circuited is the pass that would have created them
                assert not set(PAIR) & set(remediations(lab_real, ns))
            finally:
                delete_mhc(lab_real, ns, name)
        # and the runner did nothing: no taint, no BMC command after the test's own power cuts
        assert not any(tainted(lab_real, n) for n in PAIR)
        for node in PAIR:
            assert [v for _at, v in power_rows(lab_real, node, since)] == ["0"], node
        assert not runner.logged(r"lab-node-[01]")
    finally:
        for node in PAIR:
            lab_real.power_on(node)
        lab_real.wait_nodes(PAIR, "True", 120)


def test_remediation_deleted_mid_flight_powers_the_host_on_before_the_finalizer_goes(
    lab_real: Any, capi: CapiCluster, runner: Runner
) -> None:
    ns, node = capi.namespace, MIDFLIGHT
    storage = client.StorageV1Api(lab_real.api_client())
    va = f"hold-{uuid.uuid4().hex[:6]}"
    since = time.time()
    create_mhc(lab_real, capi, mhc_body("midflight", "midflight"))
    lab_real.power_off(node)
    try:
        lab_real.wait_nodes([node], {"False", "Unknown"}, 120)
        # a volume the control plane has not detached yet: the runner keeps the host off for it
        storage.create_volume_attachment(
            {"metadata": {"name": va},
             "spec": {"attacher": "hold.test.noderemedy.io", "nodeName": node,
                      "source": {"persistentVolumeName": f"{va}-pv"}}}
        )  # fmt: skip
        wait_for(
            lambda: "PowerOff" in runner_events(lab_real, ns, node), 120, "the runner's verified power-off"
        )
        wait_for(lambda: tainted(lab_real, node), 30, "the out-of-service taint")
        assert [v for _at, v in power_rows(lab_real, node, since)][-1] == "0"
        # the node comes back by itself while its BMC still says off: kwok heartbeats it again
        lab_real.kubectl("label", "node", node, f"{POWER_LABEL}=on", "--overwrite", check=True)
        lab_real.wait_nodes([node], "True", 120)
        deleting = wait_for(
            lambda: (o := remediation(lab_real, ns, node)) and o["metadata"].get("deletionTimestamp") and o,
            60,
            "the MHC to delete the Metal3Remediation of the healthy Machine",
        )
        assert "metal3remediation.infrastructure.cluster.x-k8s.io" in deleting["metadata"]["finalizers"]
        assert [v for _at, v in power_rows(lab_real, node, since)][-1] == "0", "powered on too early"
        # the detach finishes: the runner powers the host on, then lets the object go
        storage.delete_volume_attachment(va)
        wait_for(lambda: remediation(lab_real, ns, node) is None, 120, "the Metal3Remediation gone")
        rows = power_rows(lab_real, node, since)
        assert rows[-1][1] == "1", f"the object went with the host off: {rows}"
        assert "PowerOn" in runner_events(lab_real, ns, node)
        assert not tainted(lab_real, node)
    finally:
        delete_mhc(lab_real, ns, "midflight")
        try:
            storage.delete_volume_attachment(va)
        except ApiException as exc:
            if exc.status != 404:
                raise
        lab_real.kubectl("taint", "node", node, f"{OOS}-")
        lab_real.power_on(node)
        lab_real.wait_nodes([node], "True", 120)


def _relabel_machine(lab: Any, ns: str, name: str, selects: str) -> None:
    client.CustomObjectsApi(lab.api_client()).patch_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", ns, "machines", name, {"metadata": {"labels": {MHC_LABEL: selects}}}
    )


def _bmc_lines(lab: Any, node: str) -> list[str]:
    """The BMC's chassis-control log without timestamps: ``0``/``1``, ``0 ignored`` when it lied."""
    path = Path(lab.info["devices"]["bmcs"][node]["power_log"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [" ".join(line.split()[1:]) for line in lines if line.strip()]


def _owner_remediated(machine: dict[str, Any]) -> dict[str, Any]:
    """The Machine's OwnerRemediated condition as cluster-api's v1beta1 API shows it ({} if none)."""
    return condition(machine.get("status") or {}, "OwnerRemediated")


@contextmanager
def _cut_off_behind_a_bad_bmc(lab: Any, capi: CapiCluster, mode: str, template: str) -> Iterator[float]:
    """:data:`ESCALATE_NODE` cut off from the cluster (its power label; its BMC still reads on), its
    BMC in ``mode`` (``lies`` or ``silent``), its Machine under an MHC of its own remediating through
    ``template``. Yields the monotonic time the node turned NotReady; afterwards the BMC is normal,
    the node Ready, the MHC gone, the Machine back in its pair and no remediation left."""
    ns, node = capi.namespace, ESCALATE_NODE
    co = client.CustomObjectsApi(lab.api_client())
    _relabel_machine(lab, ns, node, "escalate")
    lab.bmc_mode(node, mode)
    create_mhc(lab, capi, mhc_body("escalate", "escalate", template=template))
    try:
        lab.kubectl("label", "node", node, f"{POWER_LABEL}=off", "--overwrite", check=True)
        lab.wait_nodes([node], {"False", "Unknown"}, 120)
        yield time.monotonic()
    finally:
        lab.bmc_mode(node, "normal")
        lab.kubectl("label", "node", node, f"{POWER_LABEL}=on", "--overwrite")
        lab.wait_nodes([node], "True", 120)
        delete_mhc(lab, ns, "escalate")
        _relabel_machine(lab, ns, node, "pair")
        if remediation(lab, ns, node) is not None:
            co.patch_namespaced_custom_object(
                M3_GROUP, M3_VERSION, ns, "metal3remediations", node, {"metadata": {"finalizers": []}}
            )
            co.delete_namespaced_custom_object(M3_GROUP, M3_VERSION, ns, "metal3remediations", node)


def test_mhc_escalation_with_a_lying_bmc_hands_the_machine_over_after_two_attempts_and_never_taints(
    lab_real: Any, capi: CapiCluster, runner: Runner
) -> None:
    ns, node = capi.namespace, ESCALATE_NODE
    co = client.CustomObjectsApi(lab_real.api_client())
    machine = capi.machine(node)
    before = len(_bmc_lines(lab_real, node))
    phases: list[str] = []
    taints: list[bool] = []
    with _cut_off_behind_a_bad_bmc(lab_real, capi, "lies", ESCALATE_TEMPLATE) as t0:

        def handed_over() -> dict[str, Any] | None:
            taints.append(tainted(lab_real, node))
            obj = remediation(lab_real, ns, node)
            if obj is None:
                return None
            phase = (obj.get("status") or {}).get("phase", "")
            if phase and (not phases or phases[-1] != phase):
                phases.append(phase)
            m = co.get_namespaced_custom_object("cluster.x-k8s.io", "v1beta1", ns, "machines", node)
            done = (
                phase == "deleting-machine" and _owner_remediated(m) and not obj["metadata"].get("finalizers")
            )
            return obj if done else None

        obj = wait_for(handed_over, 180, "phase deleting-machine, OwnerRemediated=False, our finalizer gone")
        elapsed = time.monotonic() - t0
        print(
            f"\nFIGURE capi mhc escalate (lying BMC, deleteAfterRetries 2): NotReady to handed over {elapsed:.1f} s"
        )
        owners = obj["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [
            ("Machine", node, machine["metadata"]["uid"])
        ]
        m = co.get_namespaced_custom_object("cluster.x-k8s.io", "v1beta1", ns, "machines", node)
        assert _owner_remediated(m).get("status") == "False", m.get("status")
        assert obj["status"]["retryCount"] == 2 and phases[-1] == "deleting-machine", (obj["status"], phases)
        assert "power-on" not in phases, f"a power-on without a verified power-off: {phases}"
        # the two attempts are retryCount (above); on the BMC's side each took a power-off and did
        # not do it. An attempt may be logged twice: ipmi_power sends its Chassis Control again when
        # no answer came within its power timeout (3 s here), and the BMC does every copy it gets
        sent = _bmc_lines(lab_real, node)[before:]
        assert len(sent) >= 2 and set(sent) == {"0 ignored"}, f"2 power attempts, each refused: {sent}"
        assert not any(taints) and not tainted(lab_real, node), "a taint without a verified power-off"
        assert "EscalatedToMachineDeletion" in runner_events(lab_real, ns, node)


def test_mhc_power_off_timeout_against_a_silent_bmc_fails_the_attempt_after_its_timeout(
    lab_real: Any, capi: CapiCluster, runner: Runner
) -> None:
    ns, node = capi.namespace, ESCALATE_NODE
    bmc = lab_real.info["devices"]["bmcs"][node]
    before = len(_bmc_lines(lab_real, node))
    with _cut_off_behind_a_bad_bmc(lab_real, capi, "silent", TIMEOUT_TEMPLATE):

        def power_condition() -> dict[str, Any] | None:
            obj = remediation(lab_real, ns, node)
            conds = [
                c
                for c in ((obj or {}).get("status") or {}).get("conditions") or []
                if c["type"] == "PowerVerified"
            ]
            return conds[0] if conds else None

        cond = wait_for(power_condition, 180, "a PowerVerified condition on the MHC's remediation")
        took = re.search(r"after ([\d.]+) s", cond["message"])
        assert took, cond["message"]
        print(
            f"\nFIGURE capi mhc silent BMC: power-off attempt failed after {float(took.group(1)):.1f} s (powerOffTimeoutSeconds 5)"
        )
        assert cond["status"] == "False" and cond["reason"] == "PowerTimedOut", cond
        assert f"BMC ipmi://{bmc['host']}:{bmc['port']}" in cond["message"], cond["message"]
        assert "last reading: none (no answer)" in cond["message"], cond["message"]
        # not before its timeout; how long after it depends on the load (no timed assertion)
        assert float(took.group(1)) >= 5.0, cond["message"]
        assert _bmc_lines(lab_real, node)[before:] == [], "a silent BMC did nothing"
        assert not tainted(lab_real, node)


RF_NODE = PAIR[1]


def test_mhc_remediates_a_redfish_host_through_the_runner(
    lab_real: Any, capi: CapiCluster, runner: Runner, redfish_peer: dict[str, Any]
) -> None:
    ns, node, ep = capi.namespace, RF_NODE, redfish_peer
    system = ep["systems"][node]["uri"]
    rf = RedfishDriver(
        ep["host"], ep["username"], ep["password"], ipport=ep["port"], ca_path=ep["ca_file"],
        systems_uri=system, poll_interval=0.05,
    )  # fmt: skip
    core, co = client.CoreV1Api(lab_real.api_client()), client.CustomObjectsApi(lab_real.api_client())
    core.create_namespaced_secret(
        ns,
        {
            "metadata": {"name": f"{node}-bmc"},
            "stringData": {"username": ep["username"], "password": ep["password"]},
        },
    )
    co.create_namespaced_custom_object(
        "metal3.io", "v1alpha1", ns, "baremetalhosts",
        {"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "metadata": {"name": node},
         "spec": {"online": True, "bmc": {"address": f"redfish://{ep['host']}:{ep['port']}{system}",
                                          "credentialsName": f"{node}-bmc", "disableCertificateVerification": True}}},
    )  # fmt: skip
    _relabel_machine(lab_real, ns, node, "rf")
    create_mhc(lab_real, capi, mhc_body("rf", "rf"))
    try:
        out = power_off_remediated(lab_real, capi, node, power=(lambda: rf.run("off"), lambda: rf.run("on")))
    finally:
        delete_mhc(lab_real, ns, "rf")
        _relabel_machine(lab_real, ns, node, "pair")
        co.delete_namespaced_custom_object("metal3.io", "v1alpha1", ns, "baremetalhosts", node)
        core.delete_namespaced_secret(f"{node}-bmc", ns)
    steps, events = out["steps"], out["events"]
    for name, value in steps.items():
        print(f"FIGURE capi mhc redfish {node}: {name} {value}")
    assert {"PowerOff", "OutOfServiceTaintAdded", "PowerOn", "OutOfServiceTaintRemoved"} <= set(events), (
        events
    )
    assert events.index("PowerOff") < events.index("OutOfServiceTaintAdded") < events.index("PowerOn")
    assert rf.run("status").after == {system: "on"}, "the Redfish system was not powered on"
    assert not tainted(lab_real, node) and lab_real.node_ready([node])[node] == "True"
