"""noderemedy-runner end to end against the lab: the runner (``noderemedy-runner --reconcile-only``:
the NodeFences are the tests' own) drives NodeFence and Metal3Remediation objects on the real
kube-apiserver, running the real playbooks (ansible-runner) against the real ipmi_sim BMCs and the
snmpd FC switch, with kwok nodes turned NotReady by cutting their BMC power: the whole NodeFence
flow, kill -9 at every state transition, Metal3Remediation, the figure of the time to the taint,
and a status write on a stale read. The faults are in test_runner_e2e_faults.py; the fixtures and
helpers (shared with other modules) in e2e_helpers.py.

Nodes: lab-node-1 is the dead node of the NodeFence flows, lab-node-2 the StatefulSet's other
node, lab-node-0 the Metal3 host. After every test no secret value (BMC passwords, SNMP
communities and keys) may appear in the runner's data dir (artifacts), its log, any Event, or any
status.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import e2e_helpers as e2e
import pytest
from e2e_helpers import (
    DEAD,
    M3,
    NF,
    OOS,
    OTHER,
    ROOT,
    SPARE,
    FenceNamespace,
    conds,
    db0,
    db_statefulset,
    events_of,
    events_with,
    fence_config,
    get_nf,
    gone,
    metal3_objects,
    nodefence,
    oos_on,
    power_log,
    private_dir,
    run_until,
    taint_present,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner

from noderemedy_runner.executor import Executor
from noderemedy_runner.kube.errors import Conflict
from noderemedy_runner.kube.resources import NODEFENCE as NF_CRD
from noderemedy_runner.kube.resources import KubeIO

pytestmark = [pytest.mark.lab, pytest.mark.kube]
# e2e_helpers' fixtures, used here under their own names
dead, fence_ns, metal3_ns, runner = e2e.dead, e2e.fence_ns, e2e.metal3_ns, e2e.runner


# --- NodeFence: the whole flow ---------------------------------------------------------------------
def test_nodefence_fences_releases_and_recovers_a_dead_node(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,
    runner: Callable[..., Runner],
    dead: str,
    tmp_path: Path,
) -> None:
    app_ns = f"db-{uuid.uuid4().hex[:6]}"
    lab_kube.kubectl("create", "namespace", app_ns, check=True)
    try:
        lab_kube.power_on(DEAD)  # the pod must first run on the dead node
        lab_kube.wait_nodes([DEAD], "True", 120)
        db_statefulset(lab_kube, app_ns, tmp_path)
        first = wait_for(
            lambda: (p := db0(lab_kube, app_ns)) and p["status"].get("phase") == "Running" and p,
            120,
            "db-0 Running",
        )
        assert first["spec"]["nodeName"] == DEAD
        lab_kube.power_off(DEAD)
        lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
        log_before = power_log(lab_kube, DEAD)

        co = client.CustomObjectsApi(api)
        name = f"nf-{uuid.uuid4().hex[:6]}"
        r = runner()
        created = time.monotonic()
        nodefence(co, name, DEAD)
        seen: dict[str, Any] = {"phases": [], "taint_at": None, "untaint_seen": False, "moved": None}

        def tick(obj: dict) -> None:
            st = obj.get("status") or {}
            phase = (st.get("status"), st.get("step"))
            if phase[0] and (not seen["phases"] or seen["phases"][-1] != phase):
                seen["phases"].append(phase)
            has = taint_present(lab_kube, DEAD)
            if has and seen["taint_at"] is None:
                seen["taint_at"] = time.monotonic() - created
                seen["fence_at_taint"] = dict(conds(obj).get("FenceVerified") or {})
            if seen["taint_at"] is not None and not has:
                seen["untaint_seen"] = True
            p = db0(lab_kube, app_ns)
            if p and p["metadata"]["uid"] != first["metadata"]["uid"] and p["spec"].get("nodeName") == OTHER:
                if p["status"].get("phase") == "Running":
                    seen["moved"] = p["spec"]["nodeName"]

        obj = run_until(co, name, {"Final", "Error"}, 300, tick)
        st = obj["status"]
        assert st["status"] == "Final", st
        # the phases in order (a short-lived step inside a phase may fall between two polls)
        assert [
            k for i, k in enumerate(p[0] for p in seen["phases"]) if i == 0 or seen["phases"][i - 1][0] != k
        ] == [
            "New",
            "Running",
            "Done",
            "Final",
        ], seen["phases"]
        assert st["jobs"] == [
            f"{name}-r0-isolation-a0",
            f"{name}-r0-power-management-a0",  # ipmi-off
            f"{name}-r0-power-management-a0-s1",  # ipmi-on: its own run, committed after the off
            f"{name}-r0-recovery-a0",
        ]
        c = conds(obj)
        assert c["Succeeded"]["status"] == "True" and c["Succeeded"]["reason"] == "RemediationFinished"
        assert seen["taint_at"] is not None, "the out-of-service taint was never applied"
        assert seen["untaint_seen"] and not taint_present(lab_kube, DEAD)
        assert seen["moved"] == OTHER, "db-0 never ran on the other node while the dead one was fenced"
        print(f"\nFIGURE nodefence creation -> taint seen: {seen['taint_at']:.2f} s; phases {seen['phases']}")
        # IPMI off and on, each read back, through the real BMC (the PowerManagement run's results)
        ex = Executor(r.data_dir / "runs", ROOT / "playbooks")
        pm = [ex.recover(private_dir(r, obj), f"{name}-r0-power-management-a0{s}") for s in ("", "-s1")]
        assert all(o is not None and o.succeeded for o in pm), pm
        assert [(m.device_type, m.state, m.fence.get("verified")) for o in pm for m in o.modules] == [  # type: ignore[union-attr]
            ("ipmi", "off", True),
            ("ipmi", "on", False),
        ], pm
        assert power_log(lab_kube, DEAD)[len(log_before) :].split()[-1:] == ["1"], "the BMC did not power on"
        assert lab_kube.node_ready([DEAD])[DEAD] == "True"
        events = events_with(
            api, obj, "OutOfServiceTaintAdded", "OutOfServiceTaintRemoved", "RemediationFinished"
        )
        reasons = [e.reason for e in events]
        assert reasons.count("FenceAgentSucceeded") == 4 and "OutOfServiceTaintAdded" in reasons
        # released by the power-off run itself, on the power fence that run read back: the FC
        # fence of the Isolation run is storage-only, which never licenses the taint
        added = [e.message for e in events_of(api, obj) if e.reason == "OutOfServiceTaintAdded"]
        assert added == [
            f"[remediation] out-of-service taint added to node {DEAD} (power_off verified in run {name}-r0-power-management-a0)"
        ], added
        assert "OutOfServiceTaintRefused" not in reasons
        assert "OutOfServiceTaintRemoved" in reasons and "RemediationFinished" in reasons
        # the Node shows the release and the recovery too (kubectl describe node)
        node_obj = client.CoreV1Api(api).read_node(DEAD).to_dict()
        on_node = [(e.reason, e.message) for e in events_of(api, node_obj) if "OutOfServiceTaint" in e.reason]
        assert (
            "OutOfServiceTaintAdded",
            f"[remediation] out-of-service taint added to node {DEAD} (power_off verified in run {name}-r0-power-management-a0)",
        ) in on_node and "OutOfServiceTaintRemoved" in [r for r, _ in on_node], on_node
        assert all(e.message.startswith("[remediation] ") for e in events_of(api, obj))
        # every line the reconciler and the executor wrote about it names the NodeFence and its node
        about = [ln for ln in r.lines() if ln["logger"].split(".")[-1] in ("reconcile", "executor")]
        assert about and [(ln["resource"], ln["node"]) for ln in about] == [
            (f"NodeFence/{name}", DEAD)
        ] * len(about), about
    finally:
        lab_kube.kubectl("delete", "namespace", app_ns, "--wait=false")


# --- kill -9 at every state transition -----------------------------------------------------------------
def test_kill9_at_every_transition_reaches_the_same_final_state(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner], dead: str
) -> None:
    co = client.CustomObjectsApi(api)
    name = f"nf-k9-{uuid.uuid4().hex[:6]}"
    r = runner()
    nodefence(co, name, DEAD)
    last: tuple[Any, ...] | None = None
    kills: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 420
    obj: dict = {}
    tainted = False
    while time.monotonic() < deadline:
        obj = get_nf(co, name)
        st = obj.get("status") or {}
        tainted = tainted or taint_present(lab_kube, DEAD)
        if st.get("status") == "Final":
            break
        key = (
            st.get("status"),
            st.get("step"),
            (st.get("currentRun") or {}).get("ident"),
            len(st.get("jobs") or []),
        )
        if st and key != last:
            last = key
            r.kill9()
            kills.append(key)
            r.start()
        time.sleep(0.05)
    st = obj["status"]
    assert st["status"] == "Final", (st, kills)
    assert st["jobs"] == [
        f"{name}-r0-isolation-a0",
        f"{name}-r0-power-management-a0",
        f"{name}-r0-power-management-a0-s1",
        f"{name}-r0-recovery-a0",
    ]
    assert conds(obj)["Succeeded"]["status"] == "True"
    assert tainted, "the workloads were never released (out-of-service taint) across the restarts"
    assert not taint_present(lab_kube, DEAD)
    # The test kills on every status change it sees; which short-lived states (a step recorded, the
    # next run not yet started) it catches depends on timing, so it asserts only the kills it is sure
    # to make: one while each step's run is in flight (each run takes over a second, the poll 50 ms).
    mid_run = {(k[0], k[1]) for k in kills if k[2]}
    assert {("New", "Isolation"), ("Running", "PowerManagement"), ("Done", "Recovery")} <= mid_run, kills
    runs = [
        ln["msg"] for ln in r.lines() if ln["logger"].endswith("executor") and ln["msg"].startswith("run ")
    ]
    assert runs and not [x for x in runs if ": failed in" in x or ": timeout in" in x], runs
    # every fence step ran to completion exactly once; a replay (killed mid-run) is the same idempotent ident
    finished = [x.split(":")[0] for x in runs if ": successful in" in x]
    for step in ("isolation", "power-management", "power-management-a0-s1", "recovery"):
        ident = f"{name}-r0-{step}" if step.endswith("-s1") else f"{name}-r0-{step}-a0"
        assert f"run {ident}" in finished, runs
    print(f"\nFIGURE kill -9 runs: {runs}")
    print(f"\nFIGURE kill -9 at {len(kills)} transitions: {kills}; runner starts {r.starts}")


# --- Metal3Remediation -----------------------------------------------------------------------------------
def test_metal3_remediation_reboots_a_dead_node(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner]
) -> None:
    node = SPARE
    co = client.CustomObjectsApi(api)
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        metal3_objects(
            lab_kube,
            api,
            metal3_ns,
            "machine-a",
            node,
            node,
            {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}},
        )
        runner()
        phases: list[str] = []
        tainted = []

        def done() -> dict | None:
            o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-a")
            ph = (o.get("status") or {}).get("phase", "")
            if ph and (not phases or phases[-1] != ph):
                phases.append(ph)
            tainted.append(taint_present(lab_kube, node))
            fin = o["metadata"].get("finalizers") or []
            return (
                o
                if ph == "Waiting"
                and not fin
                and lab_kube.node_ready([node])[node] == "True"
                and not tainted[-1]
                else None
            )

        obj = wait_for(
            done, 300, "Metal3Remediation done (Waiting, finalizer removed, node Ready, untainted)"
        )
        assert phases[:2] == ["Running", "Waiting"], phases
        assert any(tainted), "the out-of-service taint was never applied"
        assert power_log(lab_kube, node).split()[-1:] == ["1"], "the BMC was not powered on again"
        assert events_with(api, obj, "PowerOff", "PowerOn", "OutOfServiceTaintAdded")
    finally:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_metal3_kill9_at_every_transition_still_ends_done(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner]
) -> None:
    """The runner is SIGKILLed at every change of phase, finalizer or taint, and restarted: the
    remediation still ends done (Waiting, finalizer removed, node Ready, taint removed)."""
    node = SPARE
    co = client.CustomObjectsApi(api)
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        metal3_objects(
            lab_kube,
            api,
            metal3_ns,
            "machine-k",
            node,
            node,
            {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}},
        )
        r = runner()
        kills: list[tuple[Any, ...]] = []
        last: tuple[Any, ...] | None = None
        tainted = False
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-k")
            phase = (o.get("status") or {}).get("phase", "")
            fin = tuple(o["metadata"].get("finalizers") or [])
            has = taint_present(lab_kube, node)
            tainted = tainted or has
            if phase == "Waiting" and not fin and not has and lab_kube.node_ready([node])[node] == "True":
                break
            key = (phase, fin, has)
            if phase and key != last:
                last = key
                r.kill9()
                kills.append(key)
                r.start()
            time.sleep(0.05)
        o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-k")
        assert o["status"]["phase"] == "Waiting" and not o["metadata"].get("finalizers"), (o["status"], kills)
        assert o["status"].get("retryCount", 0) == 0
        assert tainted and not taint_present(lab_kube, node)
        assert len(kills) >= 3, kills
        print(f"\nFIGURE metal3 kill -9 at {len(kills)} transitions: {kills}")
    finally:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_metal3_node_that_never_returns_ends_deleting_machine(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner]
) -> None:
    co = client.CustomObjectsApi(api)
    metal3_objects(
        lab_kube,
        api,
        metal3_ns,
        "machine-b",
        "lab-node-gone",
        SPARE,
        {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "3s"}},
    )
    try:
        runner()
        obj = wait_for(
            lambda: (
                (o := co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-b"))
                and (o.get("status") or {}).get("phase") == "Deleting machine"
                and o
            ),
            240,
            "phase Deleting machine",
        )
        assert obj["status"]["retryCount"] == 1
        machine = co.get_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta1", metal3_ns, "machines", "machine-b"
        )
        owner = [c for c in machine["status"]["conditions"] if c["type"] == "OwnerRemediated"]
        assert owner and owner[0]["status"] == "False" and owner[0]["reason"] == "WaitingForRemediation"
        assert events_with(api, obj, "RetryLimitReached")
    finally:
        lab_kube.power_on(SPARE)
        lab_kube.wait_nodes([SPARE], "True", 120)


# --- figure: creation → power verified off and taint applied ----------------------------------------------
def test_taint_follows_verified_power_off_five_times_and_prints_latency(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner], dead: str
) -> None:
    """isolation=ipmi-off (power off, read back), recovery=ipmi-on; node already NotReady; grace 0.

    Five NodeFences in a row each end with FenceVerified=True and the taint; the time from creation
    to the taint is printed (a figure, never asserted: ``pytest -s -k latency``). Deleting one runs
    its Recovery (power on, taint off) before its finalizer goes, so the next starts only once it
    is gone and the node is powered off and NotReady again: each measures the same case."""
    port = lab_kube.info["devices"]["fc_ports"][DEAD]
    fence_ns.put("config_map", fence_config(DEAD, port, "ipmi-off", "", "ipmi-on fc-on"))
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    runner()
    times = []
    try:
        for i in range(5):
            if i:
                lab_kube.power_off(DEAD)
                lab_kube.mark_unreachable(DEAD)
            name = f"nf-fig{i}-{uuid.uuid4().hex[:4]}"
            start = time.monotonic()
            nodefence(co, name, DEAD)
            # the API read directly (a few ms), not through a kubectl process (~0.15 s a poll)
            wait_for(lambda: oos_on(core, DEAD), 120, "taint", interval=0.02)
            times.append(time.monotonic() - start)
            # the run released on its own verified fence; the status records it once the run ended
            wait_for(
                lambda name=name: conds(get_nf(co, name)).get("FenceVerified", {}).get("status") == "True",
                120,
                "FenceVerified=True",
            )
            co.delete_cluster_custom_object(*NF, name)
            wait_for(lambda name=name: gone(co, name), 120, f"NodeFence {name} gone (its Recovery done)")
            assert not oos_on(core, DEAD), "the Recovery of a deleted NodeFence takes its taint off"
    finally:
        fence_ns.standard(DEAD)
    assert len(times) == 5
    print(
        f"\nFIGURE creation -> power verified off + taint: median {statistics.median(times):.2f} s of {[round(t, 2) for t in times]}"
    )


def test_status_write_with_a_stale_resource_version_is_a_conflict(api: client.ApiClient) -> None:
    """KubeIO.replace_status carries the resourceVersion: the real API server answers 409 to a
    write based on a stale read, and the re-read write succeeds (status never overwritten blindly)."""
    kube = KubeIO(api)
    co = client.CustomObjectsApi(api)
    name = f"nf-rv-{uuid.uuid4().hex[:6]}"
    nodefence(co, name, "lab-node-x")
    try:
        stale = get_nf(co, name)
        kube.replace_status(
            NF_CRD, stale, {"status": "Running", "step": "Isolation", "retries": 0, "restarts": 0}
        )
        with pytest.raises(Conflict, match=f"nodefences/{name}: HTTP 409"):
            kube.replace_status(
                NF_CRD, stale, {"status": "Final", "step": "Isolation", "retries": 0, "restarts": 0}
            )
        assert get_nf(co, name)["status"]["status"] == "Running"
        kube.replace_status(
            NF_CRD, get_nf(co, name), {"status": "Done", "step": "Recovery", "retries": 0, "restarts": 0}
        )
        assert get_nf(co, name)["status"]["status"] == "Done"
    finally:
        co.delete_cluster_custom_object(*NF, name)
