"""noderemedy-runner end to end against the lab, as in test_runner_e2e.py, when something is wrong: a
wrong BMC password (retries, a restart, Error, never a taint), a BMC that does not answer (each run
killed at the run deadline), a NodeFence deleted while its run is in flight (the run canceled), and
a fence configuration naming a template that does not exist (a condition naming it). Fixtures and
helpers are e2e_helpers.py's.

Nodes: lab-node-2 has the wrong password and the silent BMC, lab-node-0 the missing template. After
every test no secret value (BMC passwords, SNMP communities and keys) may appear in the runner's
data dir (artifacts), its log, any Event, or any status.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import e2e_helpers as e2e
import pytest
from e2e_helpers import (
    NF,
    OTHER,
    SPARE,
    FenceNamespace,
    conds,
    events_of,
    events_with,
    fence_config,
    get_nf,
    nodefence,
    private_dir,
    taint_present,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner, delete_nodefences

pytestmark = [pytest.mark.lab, pytest.mark.kube]
# e2e_helpers' fixtures, used here under their own names
fence_ns, runner = e2e.fence_ns, e2e.runner


# --- faults ------------------------------------------------------------------------------------------
def test_wrong_bmc_password_retries_restarts_and_ends_in_error_without_a_taint(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    node = OTHER
    bmc = lab_kube.info["devices"]["bmcs"][node]
    fence_ns.put(
        "secret",
        {
            "metadata": {"name": "bmc-wrong"},
            "stringData": {"username": bmc["username"], "password": "not-the-password"},
        },
    )
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-wrong"},
            "data": {
                "template.properties": f"type=ipmi\naddress={bmc['host']}:{bmc['port']}\nsecret=bmc-wrong\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map",
        fence_config(node, port, "", "ipmi-off ipmi-on", "", ipmi="fence-method-template-ipmi-wrong"),
    )
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-bad-{uuid.uuid4().hex[:6]}"
        runner()
        nodefence(co, name, node)
        tainted: list[bool] = []
        obj: dict | None = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            obj = get_nf(co, name)
            tainted.append(taint_present(lab_kube, node))
            c = conds(obj)
            if c.get("Succeeded", {}).get("reason") == "RestartLimitReached":
                break
            time.sleep(0.2)
        assert obj is not None
        st, c = obj["status"], conds(obj)
        assert st["status"] == "Error" and st["restarts"] == 1, st
        assert c["Succeeded"]["status"] == "False" and c["Succeeded"]["reason"] == "RestartLimitReached"
        assert c["FenceAgentActionSucceeded"]["reason"] == "FenceAgentFailed"
        assert "PowerManagement attempt 1" in c["FenceAgentActionSucceeded"]["message"]
        assert "Switch the BMC power (ipmi method)" in c["FenceAgentActionSucceeded"]["message"]
        # two attempts per flow (step_retries=1), two flows (max_restarts=1)
        assert st["jobs"] == [f"{name}-r{r}-power-management-a{a}" for r in (0, 1) for a in (0, 1)]
        assert not any(tainted), "an out-of-service taint was applied without a verified fence"
        events = events_with(api, obj, "FenceAgentFailed", "RestartLimitReached")
        assert any(e.reason == "FenceAgentFailed" and e.type == "Warning" for e in events)
    finally:
        fence_ns.standard(node)
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_bmc_that_does_not_answer_times_out_at_the_run_deadline_and_ends_in_error(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    """A BMC that never answers: every run is killed at the runner's deadline (4 s: before the
    module's own no-answer verdict, which takes longer) → FenceAgentTimedOut, retries, restart,
    final Error, no taint. (Without the deadline the module reports "no answer from the BMC".)"""
    node = OTHER
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never answers
    silent.bind(("127.0.0.1", 0))
    silent_port = silent.getsockname()[1]
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-silent"},
            "data": {
                "template.properties": f"type=ipmi\naddress=127.0.0.1:{silent_port}\nsecret=bmc-{node}\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map", fence_config(node, port, "", "ipmi-off", "", ipmi="fence-method-template-ipmi-silent")
    )
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-silent-{uuid.uuid4().hex[:6]}"
        runner("--run-deadline", "4")
        nodefence(co, name, node)
        tainted: list[bool] = []
        obj: dict | None = None
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            obj = get_nf(co, name)
            tainted.append(taint_present(lab_kube, node))
            if conds(obj).get("Succeeded", {}).get("reason") == "RestartLimitReached":
                break
            time.sleep(0.5)
        assert obj is not None
        st, c = obj["status"], conds(obj)
        assert st["status"] == "Error" and st["restarts"] == 1, st
        assert c["FenceAgentActionSucceeded"]["reason"] == "FenceAgentTimedOut", c
        assert "deadline: killed after 4 s" in c["FenceAgentActionSucceeded"]["message"]
        assert c["Processing"]["reason"] == "FenceAgentTimedOut"
        assert len(st["jobs"]) == 4
        assert not any(tainted)
        events = events_with(api, obj, "FenceAgentTimedOut")
        assert any(e.reason == "FenceAgentTimedOut" and e.type == "Warning" for e in events)
    finally:
        silent.close()
        fence_ns.standard(node)
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_deleting_a_nodefence_cancels_its_run(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    """A run in flight (a BMC that never answers) is canceled when its NodeFence is deleted."""
    node = OTHER
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-silent"},
            "data": {
                "template.properties": f"type=ipmi\naddress=127.0.0.1:{silent.getsockname()[1]}\nsecret=bmc-{node}\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map", fence_config(node, port, "", "ipmi-off", "", ipmi="fence-method-template-ipmi-silent")
    )
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-cancel-{uuid.uuid4().hex[:6]}"
        r = runner()
        nodefence(co, name, node)
        ident = f"{name}-r0-power-management-a0"
        art = private_dir(r, get_nf(co, name)) / "artifacts" / ident
        wait_for(lambda: (art / "job_events").is_dir(), 120, f"run {ident} started")
        co.delete_cluster_custom_object(*NF, name)
        status = wait_for(
            lambda: (art / "status").is_file() and (art / "status").read_text(), 60, f"run {ident} ended"
        )
        assert status == "canceled"
        # ansible-runner writes the status file before its run() returns; the runner logs after it
        wait_for(
            lambda: [ln for ln in r.lines() if ln["msg"].startswith(f"run {ident}: canceled in ")],
            30,
            f"the runner's 'run {ident}: canceled' line",
        )
    finally:
        silent.close()
        # its finalizer holds it while the cleanup tries the silent BMC: let it go, or the next
        # test's runner would take the cleanup over
        delete_nodefences(api)
        fence_ns.standard(node)
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_missing_template_gives_a_condition_naming_it(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    node = SPARE
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map",
        fence_config(node, port, "fc-off", "ipmi-off", "fc-on", ipmi="fence-method-template-missing"),
    )
    try:
        co = client.CustomObjectsApi(api)
        name = f"nf-cfg-{uuid.uuid4().hex[:6]}"
        runner()
        nodefence(co, name, node)
        obj = wait_for(
            lambda: (
                (o := get_nf(co, name))
                and conds(o).get("Processing", {}).get("reason") == "FenceConfigInvalid"
                and o
            ),
            120,
            "Processing=False FenceConfigInvalid",
        )
        msg = conds(obj)["Processing"]["message"]
        assert (
            f"ConfigMap 'fence-config-{node}'" in msg
            and "fence-method-template-missing" in msg
            and "not found" in msg
        )
        assert conds(obj)["Processing"]["status"] == "False"
        # the Event follows the status write (an Event is best effort and written after it)
        wait_for(
            lambda: any(
                e.reason == "FenceConfigInvalid" and "fence-method-template-missing" in e.message
                for e in events_of(api, obj)
            ),
            30,
            "the FenceConfigInvalid Event",
        )
        co.delete_cluster_custom_object(*NF, name)
    finally:
        fence_ns.standard(node)
