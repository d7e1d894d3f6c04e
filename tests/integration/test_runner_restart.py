"""Restart safety of noderemedy-runner against the lab (DESIGN.md invariant 4).

The runner is stopped gracefully (SIGTERM, which cancels the run in flight) or killed (SIGKILL)
at several points of a NodeFence's flow, among them right after the last method of a step took
effect at the device, and restarted with the same data dir or an empty one (a new leader, a
rescheduled pod). The devices' own logs tell what reached them: the BMC's ``power.log`` (one line
per power set) and the FC switch's SET log. Whatever the interruption, the NodeFence ends Final,
no power cut follows a power-on of the same flow, each idempotent action is repeated at most once,
and the runner does not spin while it waits.

A NodeFence that names a node the cluster does not have, or whose fence configuration names
another node, touches no device.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    OTHER,
    SPARE,
    FenceNamespace,
    conds,
    dead,
    events_with,
    fence_config,
    fence_ns,
    get_nf,
    nodefence,
    oos_on,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner

from noderemedy_lab import bmc as lab_bmc
from noderemedy_lab.config import POWER_LABEL
from noderemedy_runner.machines.nodefence import CONFIRM_MISSING_NODE_ANNOTATION, NODE_NOT_FOUND

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NF = ("remediation.noderemedy.io", "v1alpha1", "nodefences")
_RUN_END = re.compile(r"^run (\S+): (successful|failed|timeout|canceled|error) in ")
_RUN_START = re.compile(r"^run (\S+): fence_step\.yml for ")


def power_sets(lab: Any, node: str, since: float = 0.0) -> list[str]:
    """The BMC's power sets (``"0"``/``"1"``) since the epoch time ``since``, from its own
    chassis-control log (``<epoch> <0|1>`` per set; a lying BMC's ``<epoch> <0|1> ignored``
    lines are sets it did not carry out, left out)."""
    return [
        str(value)
        for at, value in lab_bmc.power_sets(lab.info["devices"]["bmcs"][node]["power_log"])
        if at >= since
    ]


def fc_sets(lab: Any, node: str, since: float = 0.0) -> list[int]:
    """ifAdminStatus SETs (1 up, 2 down) the FC switch received for ``node``'s port since the
    epoch time ``since``, in order (the switch's own SET log)."""
    port = str(int(str(lab.info["devices"]["fc_ports"][node]).rsplit("/", 1)[1]))
    state = json.loads(Path(lab.info["devices"]["snmp"]["fc"]["state_file"]).read_text())
    return [int(value) for at, p, value in state.get("log", []) if str(p) == port and at >= since]


def collapse(values: list[Any]) -> list[Any]:
    """``values`` with repeats in a row folded: [0, 0, 1] -> [0, 1]."""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


def in_flight(r: Runner, ident: str) -> bool:
    """Whether runner ``r`` has started the run ``ident`` and not reported its end."""
    started = ended = False
    for line in r.lines():
        msg = str(line.get("msg", ""))
        m = _RUN_START.match(msg)
        if m and m.group(1) == ident:
            started, ended = True, False
        m = _RUN_END.match(msg)
        if m and m.group(1) == ident:
            ended = True
    return started and not ended


@pytest.fixture
def hung(lab_kube: Any) -> Iterator[str]:
    """lab-node-1 hung with its power on: kwok stops its heartbeat (the lab's power label says
    off) while its BMC still reads on, so the power-management step really cuts and restores the
    power. Afterwards: powered on, taint removed, Ready."""
    out = lab_kube.kubectl("label", "node", DEAD, f"{POWER_LABEL}=off", "--overwrite")
    assert out.returncode == 0, out.stderr
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    yield DEAD
    lab_kube.kubectl("taint", "node", DEAD, "node.kubernetes.io/out-of-service-")
    lab_kube.power_on(DEAD)
    lab_kube.kubectl("label", "node", DEAD, f"{POWER_LABEL}=on", "--overwrite")
    lab_kube.wait_nodes([DEAD], "True", 120)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_stopped_at_every_step_the_runner_resumes_without_repeating_a_power_cycle(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung: str,
    how: str,
) -> None:
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    name = f"nf-rs-{how.lower()}-{uuid.uuid4().hex[:4]}"
    iso, pm_off, pm_on, rec = (
        f"{name}-r0-isolation-a0",
        f"{name}-r0-power-management-a0",
        f"{name}-r0-power-management-a0-s1",
        f"{name}-r0-recovery-a0",
    )
    since = time.time()
    started = time.monotonic()
    current = [runner()]
    made = list(current)
    nodefence(co, name, DEAD)

    def power() -> list[str]:
        return power_sets(lab_kube, DEAD, since)

    # (the point, then restart with the same data dir or an empty one)
    points: list[tuple[str, Callable[[], bool], str]] = [
        ("the FC port read down (Isolation's last method took effect)", lambda: 2 in fc_sets(lab_kube, DEAD, since), "same"),
        ("the power-off run in flight", lambda: in_flight(current[0], pm_off), "empty"),
        ("the power back on at the BMC (PowerManagement's last method took effect)", lambda: "1" in power(), "same"),
        ("the recovery run in flight", lambda: in_flight(current[0], rec), "empty"),
    ]  # fmt: skip
    interrupted: list[str] = []
    tainted = False
    for what, reached, data_dir in points:

        def at_point(reached: Callable[[], bool] = reached) -> bool:
            nonlocal tainted
            tainted = tainted or oos_on(core, DEAD)
            return reached()

        wait_for(at_point, 240, f"{what} (NodeFence {name}: {get_nf(co, name).get('status')})")
        r = current[0]
        if how == "SIGTERM":
            r.stop()  # graceful: cancels the run in flight
        else:
            r.kill9()
        interrupted.append(f"{what} [{(get_nf(co, name).get('status') or {}).get('currentRun')}]")
        if data_dir == "same":
            r.start()
        else:
            current[0] = runner()
            made.append(current[0])

    def final() -> dict | None:
        nonlocal tainted
        tainted = tainted or oos_on(core, DEAD)
        obj = get_nf(co, name)
        return obj if (obj.get("status") or {}).get("status") in ("Final", "Error") else None

    obj = wait_for(final, 300, f"NodeFence {name} Final")
    elapsed = time.monotonic() - started
    co.delete_cluster_custom_object(*NF, name)  # later tests in this lab start without it
    st = obj["status"]
    assert st["status"] == "Final" and conds(obj)["Succeeded"]["status"] == "True", (st, interrupted)
    assert st["jobs"] == [iso, pm_off, pm_on, rec], st["jobs"]
    assert tainted and not oos_on(core, DEAD), "the workloads were released, then the taint removed"
    # what reached the devices: never a power cut after the power-on, at most one repeat of each set
    assert collapse(power()) == ["0", "1"], power()
    assert power().count("0") <= 2 and power().count("1") <= 2, power()
    fc = fc_sets(lab_kube, DEAD, since)
    assert collapse(fc) == [2, 1] and fc.count(2) <= 2 and fc.count(1) <= 2, fc
    # each run started at most twice (once, and one replay of an interrupted segment)
    lines = [ln for r in made for ln in r.lines()]
    starts = [m.group(1) for ln in lines if (m := _RUN_START.match(str(ln.get("msg", ""))))]
    assert {ident: starts.count(ident) for ident in set(starts)} == {
        ident: min(2, starts.count(ident)) for ident in set(starts)
    }, starts
    # no spinning: the defect this guards against wrote ~2,000 lines a minute
    replays = [ln for ln in lines if "already finished" in str(ln.get("msg", ""))]
    assert not [ln for ln in replays if "(canceled)" in str(ln.get("msg"))], replays
    per_minute = len(lines) / max(elapsed / 60, 1.0)
    assert per_minute < 200, f"{len(lines)} log lines in {elapsed:.0f} s"
    print(
        f"\nFIGURE restart ({how}) at {interrupted}: Final in {elapsed:.1f} s, BMC sets {power()}, "
        f"FC sets {fc}, runs started {starts}, {len(lines)} log lines ({per_minute:.0f}/min)"
    )


@pytest.mark.timeout(300)
def test_a_missing_node_or_a_config_naming_another_node_touches_no_device(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
) -> None:
    co = client.CustomObjectsApi(api)
    missing = f"lab-node-gone-{uuid.uuid4().hex[:4]}"
    port = lab_kube.info["devices"]["fc_ports"][SPARE]
    # a configuration that would power-cycle lab-node-0's BMC and take its FC port down
    body = fence_config(
        missing, port, "fc-off", "ipmi-off ipmi-on", "fc-on", ipmi=f"fence-method-template-ipmi-{SPARE}"
    )
    fence_ns.put("config_map", body)
    # the dead node's configuration, naming another node
    mismatched = fence_config(DEAD, port, "fc-off", "ipmi-off ipmi-on", "fc-on")
    mismatched["data"]["config.properties"] = mismatched["data"]["config.properties"].replace(
        f"node_name={DEAD}", f"node_name={OTHER}"
    )
    fence_ns.put("config_map", mismatched)
    nodes = list(lab_kube.info["devices"]["bmcs"])
    since = time.time()
    r = runner()
    gone, wrong = f"nf-gone-{uuid.uuid4().hex[:4]}", f"nf-wrong-{uuid.uuid4().hex[:4]}"
    try:
        nodefence(co, gone, missing)
        nodefence(co, wrong, DEAD)
        cond_gone = wait_for(
            lambda: (c := conds(get_nf(co, gone)).get("Processing")) and c["reason"] == "NodeNotFound" and c,
            60,
            "Processing=False NodeNotFound",
        )
        cond_wrong = wait_for(
            lambda: (
                (c := conds(get_nf(co, wrong)).get("Processing"))
                and c["reason"] == "FenceConfigInvalid"
                and c
            ),
            60,
            "Processing=False FenceConfigInvalid",
        )
        assert cond_gone["status"] == "False" and missing in cond_gone["message"]
        assert CONFIRM_MISSING_NODE_ANNOTATION in cond_gone["message"]
        # the refusal is said as every other is: a Warning Event beside the condition, once
        # (what `kubectl get events` lists; Events of a cluster-scoped NodeFence are in default)
        gone_obj = get_nf(co, gone)
        warned = [e for e in events_with(api, gone_obj, NODE_NOT_FOUND) if e.reason == NODE_NOT_FOUND]
        assert [e.type for e in warned] == ["Warning"], warned
        assert missing in warned[0].message and CONFIRM_MISSING_NODE_ANNOTATION in warned[0].message
        assert cond_wrong["status"] == "False"
        assert (
            f"fence-config-{DEAD}" in cond_wrong["message"]
            and f"node_name='{OTHER}'" in cond_wrong["message"]
        )
        # one look after the next recheck of both (10 s each): still nothing sent to any device
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            for obj in (get_nf(co, gone), get_nf(co, wrong)):
                assert not (obj.get("status") or {}).get("currentRun"), obj["status"]
            time.sleep(1)
        touched = {n: (power_sets(lab_kube, n, since), fc_sets(lab_kube, n, since)) for n in nodes}
        assert touched == {n: ([], []) for n in nodes}, f"a fence device was touched: {touched}"
        runs = [ln["msg"] for ln in r.lines() if str(ln.get("msg", "")).startswith("run ")]
        assert not runs, runs
        assert not get_nf(co, gone)["status"].get("jobs") and not get_nf(co, wrong)["status"].get("jobs")
    finally:
        for n in (gone, wrong):
            co.delete_cluster_custom_object(*NF, n)
        fence_ns.core.delete_namespaced_config_map(f"fence-config-{missing}", fence_ns.name)
        fence_ns.standard(DEAD)
