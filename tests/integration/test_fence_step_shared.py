"""The fence step playbook's one call for the hosts on a shared device, against the lab's snmpd FC
switch (IF-MIB, ifOperStatus following ifAdminStatus) and the lab's API server (the switch's
credentials Secret): ``playbooks/fence_step.yml`` run as the runner's batches run it, an inventory
host per NodeFence and the extra variable ``noderemedy_shared_device``.

- Three hosts on one switch: one ``fc_port`` call disables the three ports; every host takes its
  own port's read-back, and its evidence names its own port only. Every port reads back down at
  the switch (Net-SNMP ``snmpget``).
- One host's port is one the switch does not have: the shared call fails (``not_found``), every
  host runs its method on its own, the two others are fenced by their own calls and only that
  host fails, with no evidence.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import FenceNamespace, fence_ns  # noqa: F401 - fixture used by name
from test_fencing_fc import IF_ADMIN, snmpget

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "fence_step.yml"
ROLE = "noderemedy.core.fence_step : "
SWITCH_TASK = ROLE + "Switch the FC switch port (fc method)"
EVIDENCE_TASK = ROLE + "Choose this run's evidence of a verified fence"
SERVED_TASK = "Settle the step of each host the shared call served whole"


def fc_method(lab: Any, plug: str, state: str) -> dict[str, Any]:
    """A ``methods`` entry as the runner passes it (``FenceMethod.to_extravars``) for the lab's
    snmpd FC switch, as ``FenceNamespace.fill`` templates it."""
    fc = lab.info["devices"]["snmp"]["fc"]
    return {
        "name": f"fc-{state}", "module": "noderemedy.core.fc_port", "device_type": "fc", "model": "ifmib",
        "profile": "ifmib", "address": f"{fc['host']}:{fc['port']}", "ipaddr": fc["host"], "ipport": fc["port"],
        "plug": plug, "action": "off" if state == "disabled" else "on", "state": state,
        "options": {"snmp_version": "2c"}, "template": "fence-method-template-fc", "secret_name": "fc-switch",
    }  # fmt: skip


def batch_env(lab: Any, collections: Path, **extra: str) -> dict[str, str]:
    """The environment of an ``ansible-playbook`` run as the runner's batches make it, local
    connection and the lab's kubeconfig, its results printed by the tests' ``nr_json`` callback;
    ``extra`` added."""
    bindir = Path(sys.executable).parent
    return dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_STDOUT_CALLBACK="nr_json",
        ANSIBLE_CALLBACK_PLUGINS=str(ROOT / "tests" / "callback_plugins"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_CONNECTION="local",
        ANSIBLE_NOCOLOR="1",
        K8S_AUTH_KUBECONFIG=str(lab.kubeconfig),
        PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    )


def play_batch(
    playbook: Path, inventory: Path, extravars: dict[str, Any], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``ansible-playbook`` of ``playbook`` on ``inventory``: the process and its ``nr_json``
    document; fails the test when it printed none."""
    bindir = Path(sys.executable).parent
    argv = [
        str(bindir / "ansible-playbook"),
        "-i",
        str(inventory),
        "-e",
        json.dumps(extravars),
        str(playbook),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    try:
        return proc, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stderr[-3000:]}")


def run_step(
    lab: Any,
    ns: FenceNamespace,
    tmp_path: Path,
    plugs: dict[str, str],
    state: str,
    collections: Path,
    shared_hosts: list[str] | None = None,
    method: Callable[[Any, str, str], dict[str, Any]] = fc_method,
    host_vars: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``fence_step.yml`` for one host per ``plugs`` entry (host -> port), as one batch whose hosts
    (``shared_hosts``: all of them by default) share the device of ``method(lab, plug, state)``
    (the switch's by default); ``host_vars``: host -> variables added to its own (``node`` is
    ``node-<host>`` unless given). Returns play name -> task name -> host -> result (the last
    result of a task name in that play)."""
    on_device = sorted(plugs) if shared_hosts is None else sorted(shared_hosts)
    hosts = {
        host: {
            "node": f"node-{host}",
            "namespace": ns.name,
            "methods": [method(lab, plug, state)],
            **(host_vars or {}).get(host, {}),
        }
        for host, plug in plugs.items()
    }
    inventory = tmp_path / f"inventory-{state}.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    shared = {
        "method": {k: v for k, v in method(lab, "", state).items() if k not in ("name", "plug", "template")},
        "hosts": on_device,
        "plugs": [plugs[h] for h in on_device],
    }
    env = batch_env(lab, collections, SNMP_PERSISTENT_DIR=lab.info["devices"]["snmp_persistent_dir"])
    extravars = {"noderemedy_hosts": "all", "noderemedy_shared_device": shared}
    proc, doc = play_batch(PLAYBOOK, inventory, extravars, env)
    (tmp_path / f"run-{state}.json").write_text(proc.stdout)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for play in doc["plays"]:
        tasks = out.setdefault(play["play"]["name"], {})
        for task in play["tasks"]:
            tasks.setdefault(task["task"]["name"], {}).update(task["hosts"])
    return out


def served(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """host -> its entry of the first play's ``fence_step_served`` fact (filter
    ``noderemedy.core.shared_step``: the hosts whose whole step the shared call settled)."""
    task = results["Switch the plugs of the hosts that share a device in one call"].get(SERVED_TASK, {})
    entries = [
        e for r in task.values() for e in (r.get("ansible_facts") or {}).get("fence_step_served") or []
    ]
    return {e["host"]: e for e in entries}


def evidence(results: dict[str, dict[str, dict[str, Any]]], host: str) -> dict[str, Any]:
    """``host``'s evidence: from the first play's ``fence_step_served`` when the shared call settled
    its step, else the ``fence_step_evidence`` fact of the step play's evidence task ({} if none)."""
    if host in served(results):
        return dict(served(results)[host]["evidence"])
    step = results["Run one fence step of a NodeFence"]
    res = step.get(EVIDENCE_TASK, {}).get(host)
    return dict((res or {}).get("ansible_facts", {}).get("fence_step_evidence") or {})


class Switch:
    """The lab's snmpd FC switch as the fence step sees it: :meth:`step` runs ``fence_step.yml``
    for hosts -> ports; :meth:`admin` reads ports' ifAdminStatus (1 up, 2 down) with ``snmpget``."""

    def __init__(self, lab: Any, ns: FenceNamespace, tmp_path: Path, collections: Path) -> None:
        self.lab, self.ns, self.tmp_path, self.collections = lab, ns, tmp_path, collections
        self.endpoint = lab.info["devices"]["snmp"]["fc"]

    def step(
        self, plugs: dict[str, str], state: str, shared_hosts: list[str] | None = None
    ) -> dict[str, dict[str, dict[str, Any]]]:
        return run_step(self.lab, self.ns, self.tmp_path, plugs, state, self.collections, shared_hosts)

    def admin(self, ports: list[str]) -> list[str]:
        return [snmpget(self.lab, self.endpoint, f"{IF_ADMIN}.{p}") for p in ports]


PORTS = ["5", "6", "7"]


@pytest.fixture
def switch(
    lab_kube: Any,
    fence_ns: FenceNamespace,  # noqa: F811
    tmp_path: Path,
    collections_path: Path,
) -> Iterator[Switch]:
    """:class:`Switch`; afterwards ports 5 to 7 are enabled again, by the playbook, and read up."""
    sw = Switch(lab_kube, fence_ns, tmp_path, collections_path)
    yield sw
    sw.step({f"nf-{p}": p for p in PORTS}, "enabled")
    assert sw.admin(PORTS) == ["1", "1", "1"]


def test_hosts_on_one_switch_get_one_call_and_each_its_own_ports_evidence(switch: Switch) -> None:
    plugs = dict(zip(["nf-a", "nf-b", "nf-c"], PORTS, strict=True))
    res = switch.step(plugs, "disabled")
    shared = res["Switch the plugs of the hosts that share a device in one call"][SWITCH_TASK]
    assert len(shared) == 1, f"one call for the three hosts, got {sorted(shared)}"
    call = next(iter(shared.values()))
    assert not call.get("failed") and [p["plug"] for p in call["ports"]] == PORTS, call
    step = res["Run one fence step of a NodeFence"]
    assert SWITCH_TASK not in step, f"no host called the switch again: {step.get(SWITCH_TASK)}"
    target = f"{switch.endpoint['host']}:{switch.endpoint['port']}"
    for host, plug in plugs.items():
        ev = evidence(res, host)
        assert ev.get("verified") is True and ev.get("plugs") == [plug], (host, ev)
        assert ev.get("target") == target and ev.get("state") == "disabled", (host, ev)
    # the call settled every host's step (one method each): the step play ended at once for them
    assert sorted(served(res)) == sorted(plugs), served(res)
    assert all(served(res)[h]["reading"] == {"fenced": True, "kind": "storage_isolated", "source": "fc-disabled"}
               for h in plugs), served(res)  # fmt: skip
    assert EVIDENCE_TASK not in step, f"no host ran the step play's evidence task: {step.get(EVIDENCE_TASK)}"
    assert switch.admin(PORTS) == ["2", "2", "2"]
    print(f"\nFIGURE shared FC call: 3 hosts, 1 fc_port call, evidence per host {list(plugs.values())}")


def test_a_failed_shared_call_falls_back_to_a_call_per_host_and_fails_only_the_unknown_port(
    switch: Switch,
) -> None:
    plugs = {"nf-a": "5", "nf-b": "6", "nf-x": "fc9/9"}
    res = switch.step(plugs, "disabled")
    shared = res["Switch the plugs of the hosts that share a device in one call"][SWITCH_TASK]
    call = next(iter(shared.values()))
    assert call.get("failed") and call.get("error") == "not_found", call
    own = res["Run one fence step of a NodeFence"][SWITCH_TASK]
    assert sorted(own) == ["nf-a", "nf-b", "nf-x"], f"each host called the switch itself: {sorted(own)}"
    assert not own["nf-a"].get("failed") and not own["nf-b"].get("failed"), own
    assert own["nf-x"].get("failed") and own["nf-x"].get("error") == "not_found", own["nf-x"]
    for host in ("nf-a", "nf-b"):
        ev = evidence(res, host)
        assert ev.get("verified") is True and ev.get("plugs") == [plugs[host]], (host, ev)
    assert evidence(res, "nf-x") == {}, "the failed host has no evidence"
    assert switch.admin(["5", "6"]) == ["2", "2"]


def test_a_host_the_shared_call_was_not_for_runs_its_own_call(switch: Switch) -> None:
    """The call's result is kept on every host of the play (one run_once fact); a host that is not
    one of the device's hosts never takes a read-back from it, even of a port it also names."""
    plugs = {"nf-a": "5", "nf-b": "6", "nf-c": "7"}
    res = switch.step(plugs, "disabled", shared_hosts=["nf-a", "nf-b"])
    shared = res["Switch the plugs of the hosts that share a device in one call"][SWITCH_TASK]
    call = next(iter(shared.values()))
    assert len(shared) == 1 and [p["plug"] for p in call["ports"]] == ["5", "6"], call
    own = res["Run one fence step of a NodeFence"][SWITCH_TASK]
    assert sorted(own) == ["nf-c"], f"only nf-c called the switch itself: {sorted(own)}"
    for host, plug in plugs.items():
        ev = evidence(res, host)
        assert ev.get("verified") is True and ev.get("plugs") == [plug], (host, ev)
    assert switch.admin(PORTS) == ["2", "2", "2"]
