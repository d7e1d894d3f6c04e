"""The rack's pure parts (noderemedy_lab.rack), on files laid out as the lab lays them out, no
network: the power label each node gets from its BMC, its outlet and the switch, and the fence
configuration the bench applies, parsed by the runner's own parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noderemedy_lab.procs import ComponentError
from noderemedy_lab.rack import UNREACHABLE, Rack
from noderemedy_runner.config.fence import parse_fence_config

NODES = ["lab-node-0", "lab-node-1", "lab-node-2"]


class FakeLab:
    """What Rack reads of a Lab: ``info`` and ``kubeconfig``."""

    def __init__(self, tmp: Path) -> None:
        self.kubeconfig = tmp / "kubeconfig"
        state = tmp / "pdu-state.json"
        state.write_text(json.dumps({"ports": {"1": 1, "2": 1, "3": 1}, "log": []}))
        bmcs = {}
        for i, n in enumerate(NODES):
            d = tmp / "bmc" / n
            d.mkdir(parents=True, exist_ok=True)
            (d / "power").write_text("1\n")
            (d / "power.log").write_text("")
            bmcs[n] = {"host": "127.0.0.1", "port": 30500 + i, "username": "admin", "password": f"pw{i}",
                       "cipher": 3, "power_file": str(d / "power"), "power_log": str(d / "power.log")}  # fmt: skip
        snmp = {
            "host": "127.0.0.1",
            "port": 30410,
            "community": "rw",
            "ro_community": "ro",
            "state_file": str(state),
        }
        self.info: dict[str, Any] = {
            "workdir": str(tmp),
            "nodes": NODES,
            "devices": {
                "bmcs": bmcs,
                "snmp": {"apc-rpdu": snmp, "fc": {**snmp, "port": 30411}},
                "outlets": {n: i + 1 for i, n in enumerate(NODES)},
                "fc_ports": {n: f"fc1/{i + 1}" for i, n in enumerate(NODES)},
            },
        }


def set_outlet(lab: FakeLab, outlet: int, value: int) -> None:
    path = Path(lab.info["devices"]["snmp"]["apc-rpdu"]["state_file"])
    st = json.loads(path.read_text())
    st["ports"][str(outlet)] = value
    path.write_text(json.dumps(st))


def test_a_node_runs_only_with_its_bmc_and_outlet_on_and_the_switch_up(tmp_path: Path) -> None:
    lab = FakeLab(tmp_path)
    rack = Rack(lab)
    assert rack.wanted() == dict.fromkeys(NODES, "on")
    set_outlet(lab, 2, 2)  # lab-node-1's outlet off
    Path(lab.info["devices"]["bmcs"]["lab-node-2"]["power_file"]).write_text("0\n")
    assert rack.wanted() == {"lab-node-0": "on", "lab-node-1": "off", "lab-node-2": "off"}
    rack.dir.mkdir(parents=True)
    (rack.dir / "switch-down").touch()
    assert rack.wanted() == {"lab-node-0": UNREACHABLE, "lab-node-1": "off", "lab-node-2": "off"}


def test_a_rack_refuses_nodes_that_are_not_the_labs(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match="nodes: not kwok nodes of this lab"):
        Rack(FakeLab(tmp_path), ["lab-node-0", "lab-real-0"])


@pytest.mark.parametrize("power", ["pdu", "ipmi"])
def test_the_rack_fence_configuration_parses(tmp_path: Path, power: str) -> None:
    docs = Rack(FakeLab(tmp_path)).fence_configuration("ns", power=power)
    cms = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    templates = {k: v for k, v in cms.items() if k.startswith("fence-method-template-")}
    for i, node in enumerate(NODES):
        cfg = parse_fence_config(f"fence-config-{node}", cms[f"fence-config-{node}"], templates, node)
        assert cfg.node == node
        steps = [[m.name for m in cfg.methods(s)] for s in ("Isolation", "PowerManagement", "Recovery")]
        assert steps == [["fc-off"], [f"{power}-off", f"{power}-on"], ["fc-on"]]
        assert cfg.isolation[0].plug == f"fc1/{i + 1}"
        if power == "pdu":
            assert cfg.power_management[0].plug == str(i + 1)
    secrets = [d for d in docs if d["kind"] == "Secret"]
    assert all(d["metadata"]["namespace"] == "ns" for d in docs)
    assert {"rack-pdu", "rack-switch", *(f"bmc-{n}" for n in NODES)} == {
        d["metadata"]["name"] for d in secrets
    }
    with pytest.raises(ValueError, match="power: expected"):
        Rack(FakeLab(tmp_path)).fence_configuration("ns", power="redfish")


def test_without_storage_the_rack_fence_configuration_only_powers_the_node(tmp_path: Path) -> None:
    docs = Rack(FakeLab(tmp_path)).fence_configuration("ns", power="ipmi", storage=False)
    cms = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    templates = {k: v for k, v in cms.items() if k.startswith("fence-method-template-")}
    for node in NODES:
        cfg = parse_fence_config(f"fence-config-{node}", cms[f"fence-config-{node}"], templates, node)
        steps = [[m.name for m in cfg.methods(s)] for s in ("Isolation", "PowerManagement", "Recovery")]
        assert steps == [[], ["ipmi-off", "ipmi-on"], []]


@pytest.mark.parametrize("power", ["pdu", "ipmi"])
def test_a_relay_host_replaces_every_devices_address_and_keeps_its_port(tmp_path: Path, power: str) -> None:
    """Runs in pods reach the rack's devices through relays (bench/rack_jobs.py): same ports."""
    lab = FakeLab(tmp_path)
    docs = Rack(lab).fence_configuration("ns", power=power, host="10.9.0.1")
    cms = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    templates = {k: v for k, v in cms.items() if k.startswith("fence-method-template-")}
    for node in NODES:
        cfg = parse_fence_config(f"fence-config-{node}", cms[f"fence-config-{node}"], templates, node)
        methods = [m for s in ("Isolation", "PowerManagement", "Recovery") for m in cfg.methods(s)]
        assert {m.template.ipaddr for m in methods} == {"10.9.0.1"}
        own = {"fc": lab.info["devices"]["snmp"]["fc"]["port"], "pdu": lab.info["devices"]["snmp"]["apc-rpdu"]["port"],
               "ipmi": lab.info["devices"]["bmcs"][node]["port"]}  # fmt: skip
        assert all(m.template.ipport == own[m.template.device_type] for m in methods)


def test_kwok_keeps_its_default_workers_for_small_labs_and_one_per_20_nodes_beyond() -> None:
    from noderemedy_lab.kube import kwok_workers

    assert [kwok_workers(n) for n in (1, 40, 80, 100, 1000)] == [4, 4, 4, 5, 50]
