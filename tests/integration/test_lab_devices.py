"""The lab's device peers, driven by real clients: ipmitool, pyghmi, net-snmp tools, pysnmp, fence agents.

Peers are the real ones (OpenIPMI ipmi_sim, Net-SNMP snmpd with the pass_persist backend, snmpsim)
started by :func:`noderemedy_lab.devices.start_devices`. Tests that change device state use a
private set started by the module fixture ``devices`` (own supervisor, ports from this worker's range, a power hook
that records its arguments), so they never disturb the session ``lab``; one test checks the
session ``lab`` fixture's devices read-only.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from noderemedy_lab.config import LabConfig
from noderemedy_lab.devices import set_status_delay, start_devices
from noderemedy_lab.procs import ComponentError, Supervisor
from noderemedy_lab.pytest_plugin import worker_port_base

pytestmark = pytest.mark.lab

#: this module's device peers, in this worker's port range (noderemedy_lab.pytest_plugin): ports
#: +430..+434 and +520..+522, +450..+454 and +540..+541, +470..+474 and +560
PORT_BASE = worker_port_base() + 420
NODES = ["lab-node-0", "lab-node-1", "lab-node-2"]
RPDU_CONTROL = "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4"  # rPDUOutletControlCommand.N
RPDU_STATUS = "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4"  # rPDUOutletStatusOutletState.N
IF_ADMIN = "1.3.6.1.2.1.2.2.1.7"
IF_OPER = "1.3.6.1.2.1.2.2.1.8"
FC_PHYS_ADMIN = "1.3.6.1.2.1.75.1.2.2.1.1.22"  # .<port-1>
FC_PHYS_OPER = "1.3.6.1.2.1.75.1.2.2.1.2.22"
SPDU_CTL = "1.3.6.1.4.1.318.1.1.4.4.2.1.3"  # sPDUOutletCtl.N (APC MasterSwitch)
EATON_CTL = "1.3.6.1.4.1.534.6.6.6.1.2.2.1.3"  # .<plug-1>


# ------------------------------------------------------------------------------------- helpers
def session_members(sid: int) -> list[int]:
    """PIDs (not zombies) whose session id is ``sid``: a peer and every child it forked."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            data = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = data[data.rindex(")") + 2 :].split()
        if rest[0] != "Z" and int(rest[3]) == sid:
            out.append(int(entry))
    return out


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, env=full, timeout=60)


def ipmitool(
    bmc: dict, *args: str, user: str = "admin", password: str | None = None
) -> subprocess.CompletedProcess:
    creds = {"admin": bmc["password"], "oper": bmc["operator"]["password"], "viewer": bmc["user"]["password"]}
    argv = ["ipmitool", "-I", "lanplus", "-H", bmc["host"], "-p", str(bmc["port"]), "-C", str(bmc["cipher"])]
    argv += ["-U", user, "-P", password if password is not None else creds[user], *args]
    return run(argv)


def snmp_env(devices: dict) -> dict[str, str]:
    return {"SNMP_PERSISTENT_DIR": devices["snmp_persistent_dir"]}


def v2c(ep: dict, community: str | None = None) -> list[str]:
    return ["-v2c", "-c", community or ep["community"], "-On", "-Oqv", f"{ep['host']}:{ep['port']}"]


def v3(ep: dict, auth_key: str | None = None, priv_key: str | None = None) -> list[str]:
    k = ep["v3"]
    return [
        "-v3", "-l", "authPriv", "-u", k["user"], "-a", k["auth_proto"], "-A", auth_key or k["auth_key"],
        "-x", k["priv_proto"], "-X", priv_key or k["priv_key"], "-On", "-Oqv", "-r", "0", "-t", "2",
        f"{ep['host']}:{ep['port']}",
    ]  # fmt: skip


def snmpget(devices: dict, args: list[str], *oids: str) -> list[str]:
    res = run(["snmpget", *args, *oids], snmp_env(devices))
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()


def snmpset(devices: dict, args: list[str], oid: str, value: int) -> subprocess.CompletedProcess:
    return run(["snmpset", *args, oid, "i", str(value)], snmp_env(devices))


def fence(devices: dict, agent: str, ep: dict, plug: str, action: str) -> subprocess.CompletedProcess:
    argv = [agent, "-a", ep["host"], "-u", str(ep["port"]), "-c", ep["community"], "-n", plug, "-o", action]
    return run(argv, snmp_env(devices))


def wait_for(predicate, what: str, timeout: float = 20.0):
    """Poll ``predicate`` until truthy (returns its value); fails naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def power_log_values(bmc: dict) -> list[str]:
    return [line.split()[1] for line in Path(bmc["power_log"]).read_text().splitlines()]


async def _pysnmp(ep: dict, oid: str, value: int | None, use_v3: bool) -> int:
    from pysnmp.hlapi.v3arch.asyncio import (
        CommunityData,
        ContextData,
        ObjectIdentity,
        ObjectType,
        SnmpEngine,
        UdpTransportTarget,
        UsmUserData,
        get_cmd,
        set_cmd,
        usmAesCfb128Protocol,
        usmHMACSHAAuthProtocol,
    )
    from pysnmp.proto.rfc1902 import Integer32

    engine = SnmpEngine()
    try:
        if use_v3:
            k = ep["v3"]
            auth = UsmUserData(
                k["user"], k["auth_key"], k["priv_key"], usmHMACSHAAuthProtocol, usmAesCfb128Protocol
            )
        else:
            auth = CommunityData(ep["community"], mpModel=1)
        target = await UdpTransportTarget.create((ep["host"], ep["port"]), timeout=2, retries=1)
        if value is not None:
            err, status, _, _ = await set_cmd(
                engine, auth, target, ContextData(), ObjectType(ObjectIdentity(oid), Integer32(value))
            )
            assert not err and not status, f"SET {oid}: {err or status.prettyPrint()}"
        err, status, _, vbs = await get_cmd(
            engine, auth, target, ContextData(), ObjectType(ObjectIdentity(oid))
        )
        assert not err and not status, f"GET {oid}: {err or status.prettyPrint()}"
        return int(vbs[0][1])
    finally:
        engine.close_dispatcher()


def pysnmp_set_get(ep: dict, oid: str, value: int | None = None, use_v3: bool = False) -> int:
    """SET (if ``value``) then GET ``oid`` with pysnmp 7; returns the integer read back."""
    return asyncio.run(_pysnmp(ep, oid, value, use_v3))


# ------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def hook_calls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hook") / "calls.txt"


@pytest.fixture(scope="module")
def device_lab(tmp_path_factory: pytest.TempPathFactory, hook_calls: Path):
    """``(supervisor, info)``: a private set of device peers for 3 nodes (:data:`PORT_BASE`) with a
    power hook that appends its arguments to ``hook_calls``.

    Teardown stops them and fails if any process of their sessions (pass_persist scripts included)
    is still alive.
    """
    workdir = tmp_path_factory.mktemp("devices-lab")
    hook = workdir / "record-hook.sh"
    # a node whose flag file ``slow-<node>`` exists gets one slow power set (the flag is removed):
    # 13 s, TERM ignored so that the BMC's ``timeout`` wrapper cannot shorten it
    hook.write_text(
        f'#!/bin/sh\necho "$*" >> {hook_calls}\n'
        f'if [ -e "{hook_calls.parent}/slow-$1" ]; then rm -f "{hook_calls.parent}/slow-$1"; '
        "trap '' TERM; sleep 13; fi\n"
    )
    hook.chmod(0o755)
    cfg = LabConfig(workdir=workdir, nodes=len(NODES), port_base=PORT_BASE, kube=False)
    sup = Supervisor(workdir / "logs")
    try:
        info = start_devices(sup, cfg, NODES, [str(hook)])
        yield sup, info
    finally:
        # every member of every peer's session, taken while they run (snmpd's pass_persist
        # children appear only after the first request, so the tests above have made them)
        members = {name: session_members(p.pid) for name, p in sup.procs.items()}
        sup.stop_all()
        left = {
            name: [pid for pid in pids if Path(f"/proc/{pid}").exists()] for name, pids in members.items()
        }
        left = {name: pids for name, pids in left.items() if pids}
        assert not left, f"device processes left after stop_all: {left}"


@pytest.fixture(scope="module")
def devices(device_lab) -> dict:
    """The private device set's endpoints (the return value of ``start_devices``)."""
    return device_lab[1]


def test_snmpd_pass_persist_scripts_run_in_the_peer_session(device_lab) -> None:
    """The teardown leak check covers snmpd's pass_persist children: they share snmpd's session."""
    sup, devices = device_lab
    for device, name in (("apc-rpdu", "snmpd-pdu"), ("fc", "snmpd-fc")):
        ep = devices["snmp"][device]
        snmpget(devices, v2c(ep), RPDU_STATUS + ".1" if device == "apc-rpdu" else IF_OPER + ".1")
        leader = sup.procs[name].pid
        children = [pid for pid in session_members(leader) if pid != leader]
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in children]
        assert any(b"fence_pass.py" in part for cmd in cmdlines for part in cmd), cmdlines


# ------------------------------------------------------------------------------------- IPMI
def test_power_off_on_reads_back_changes_power_file_and_calls_hook(devices: dict, hook_calls: Path) -> None:
    bmc = devices["bmcs"]["lab-node-1"]
    res = ipmitool(bmc, "chassis", "power", "off")
    assert res.returncode == 0, res.stderr
    assert ipmitool(bmc, "chassis", "power", "status").stdout.strip() == "Chassis Power is off"
    assert Path(bmc["power_file"]).read_text().strip() == "0"
    assert power_log_values(bmc)[-1] == "0"
    assert hook_calls.read_text().splitlines()[-1] == "lab-node-1 0"

    res = ipmitool(bmc, "chassis", "power", "on")
    assert res.returncode == 0, res.stderr
    assert ipmitool(bmc, "chassis", "power", "status").stdout.strip() == "Chassis Power is on"
    assert Path(bmc["power_file"]).read_text().strip() == "1"
    assert power_log_values(bmc)[-2:] == ["0", "1"]
    assert hook_calls.read_text().splitlines()[-1] == "lab-node-1 1"


def test_power_cycle_is_off_then_on_through_the_hook(devices: dict, hook_calls: Path) -> None:
    bmc = devices["bmcs"]["lab-node-2"]
    before = len(power_log_values(bmc))
    res = ipmitool(bmc, "chassis", "power", "cycle")
    assert res.returncode == 0, res.stderr
    # ipmi_sim powers off at once and on again about a second later; the hook runs after the log line
    wait_for(lambda: power_log_values(bmc)[before:] == ["0", "1"], "the power log to show 0 then 1")

    def node2_calls() -> list[str]:
        return [c for c in hook_calls.read_text().splitlines() if c.startswith("lab-node-2 ")]

    wait_for(lambda: node2_calls()[-1:] == ["lab-node-2 1"], "the hook call for power on")
    assert node2_calls()[-2:] == ["lab-node-2 0", "lab-node-2 1"]
    assert Path(bmc["power_file"]).read_text().strip() == "1"


def test_the_labs_power_helper_reads_back_when_ipmitool_gives_up_on_a_slow_hook(
    devices: dict, hook_calls: Path, tmp_path: Path
) -> None:
    """ipmi_sim answers a power set only after its hook returns; a hook slower than ipmitool's
    retransmissions (about 10 s) makes ipmitool fail although the BMC did it. ``Lab.power_off``
    then reads the state back rather than failing the test that called it."""
    from noderemedy_lab.lab import Lab

    node = "lab-node-1"
    bmc = devices["bmcs"][node]
    lab = Lab(LabConfig(workdir=tmp_path, nodes=len(NODES), port_base=PORT_BASE, kube=False))
    lab.info = {"devices": devices}
    seen: list[tuple[tuple[str, ...], int]] = []
    real_ipmitool = lab.ipmitool

    def recording(name: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        out = real_ipmitool(name, *args, timeout=timeout)
        seen.append((args, out.returncode))
        return out

    lab.ipmitool = recording  # type: ignore[method-assign]
    (hook_calls.parent / f"slow-{node}").touch()
    try:
        lab.power_off(node)
        assert seen[0] == (("chassis", "power", "off"), 1), seen  # ipmitool gave up ...
        assert seen[1] == (("chassis", "power", "status"), 0), seen  # ... the BMC said off
        assert len(seen) == 2, seen
        assert Path(bmc["power_file"]).read_text().strip() == "0"
    finally:
        (hook_calls.parent / f"slow-{node}").unlink(missing_ok=True)
        assert ipmitool(bmc, "chassis", "power", "on").returncode == 0


def test_power_reset_keeps_power_and_is_logged_as_event(devices: dict) -> None:
    bmc = devices["bmcs"]["lab-node-0"]
    before = power_log_values(bmc)
    res = ipmitool(bmc, "chassis", "power", "reset")
    assert res.returncode == 0, res.stderr
    events = Path(bmc["power_file"]).parent / "events.log"
    assert "reset 1" in events.read_text()
    assert power_log_values(bmc) == before
    assert Path(bmc["power_file"]).read_text().strip() == "1"


def test_user_privilege_account_is_refused_power_control(devices: dict) -> None:
    bmc = devices["bmcs"]["lab-node-0"]
    before = Path(bmc["power_file"]).read_text()
    for action in ("off", "on", "cycle"):
        res = ipmitool(bmc, "-L", "USER", "chassis", "power", action, user="viewer")
        assert res.returncode != 0
        assert "Insufficient privilege level" in res.stderr
    assert Path(bmc["power_file"]).read_text() == before
    # the same account may read the power state
    status = ipmitool(bmc, "-L", "USER", "chassis", "power", "status", user="viewer")
    expected = "Chassis Power is on" if before.strip() == "1" else "Chassis Power is off"
    assert status.stdout.strip() == expected, status.stderr


def test_operator_account_may_control_power(devices: dict) -> None:
    bmc = devices["bmcs"]["lab-node-0"]
    assert ipmitool(bmc, "-L", "OPERATOR", "chassis", "power", "off", user="oper").returncode == 0
    assert Path(bmc["power_file"]).read_text().strip() == "0"
    assert ipmitool(bmc, "-L", "OPERATOR", "chassis", "power", "on", user="oper").returncode == 0
    assert Path(bmc["power_file"]).read_text().strip() == "1"


def test_wrong_password_is_refused(devices: dict) -> None:
    bmc = devices["bmcs"]["lab-node-0"]
    res = ipmitool(bmc, "chassis", "power", "status", password=bmc["password"] + "x")
    assert res.returncode != 0
    assert "Unable to establish IPMI v2 / RMCP+ session" in res.stderr


def test_credentials_are_random_per_run(devices: dict) -> None:
    secrets_seen = [b[k] for b in devices["bmcs"].values() for k in ("password",)]
    secrets_seen += [b["operator"]["password"] for b in devices["bmcs"].values()]
    secrets_seen += [ep["community"] for ep in devices["snmp"].values()]
    secrets_seen += [ep["v3"]["auth_key"] for ep in devices["snmp"].values()]
    assert len(set(secrets_seen)) == len(secrets_seen)
    assert all(len(s) >= 8 for s in secrets_seen)
    assert "password" not in secrets_seen and "private" not in secrets_seen


def test_fence_ipmilan_and_pyghmi_drive_the_bmc(devices: dict) -> None:
    from pyghmi.ipmi import command

    bmc = devices["bmcs"]["lab-node-0"]
    base = ["fence_ipmilan", "-a", bmc["host"], "-u", str(bmc["port"]), "-l", bmc["username"]]
    base += ["-p", bmc["password"], "-P", f"--cipher={bmc['cipher']}", "--power-wait=0"]
    res = run([*base, "-o", "off"])
    assert res.returncode == 0, res.stderr
    assert Path(bmc["power_file"]).read_text().strip() == "0"
    assert run([*base, "-o", "status"]).stdout.strip() == "Status: OFF"

    ipmi = command.Command(
        bmc=bmc["host"], port=bmc["port"], userid=bmc["username"].encode(), password=bmc["password"].encode()
    )
    try:
        assert ipmi.get_power()["powerstate"] == "off"
        ipmi.set_power("on", wait=False)
        assert ipmi.get_power()["powerstate"] == "on"
    finally:
        ipmi.ipmi_session.logout()
    assert Path(bmc["power_file"]).read_text().strip() == "1"


# ------------------------------------------------------------------------------------- snmpd peers
def test_rpdu_status_follows_control(devices: dict) -> None:
    ep = devices["snmp"]["apc-rpdu"]
    assert devices["outlets"] == {"lab-node-0": 1, "lab-node-1": 2, "lab-node-2": 3}
    names = snmpget(
        devices,
        v2c(ep, ep["ro_community"]),
        "1.3.6.1.4.1.318.1.1.12.3.5.1.1.2.1",
        "1.3.6.1.4.1.318.1.1.12.3.5.1.1.2.4",
    )
    assert names == ['"lab-node-0"', '"outlet4"']
    res = snmpset(devices, v2c(ep), f"{RPDU_CONTROL}.2", 2)
    assert res.returncode == 0, res.stderr
    assert snmpget(devices, v2c(ep, ep["ro_community"]), f"{RPDU_STATUS}.2") == ["2"]
    assert snmpset(devices, v2c(ep), f"{RPDU_CONTROL}.2", 1).returncode == 0
    assert snmpget(devices, v2c(ep), f"{RPDU_STATUS}.2") == ["1"]
    state = json.loads(Path(ep["state_file"]).read_text())
    assert state["ports"]["2"] == 1 and [e[1:] for e in state["log"][-2:]] == [["2", 2], ["2", 1]]


def test_ro_community_cannot_set(devices: dict) -> None:
    ep = devices["snmp"]["apc-rpdu"]
    res = snmpset(devices, v2c(ep, ep["ro_community"]), f"{RPDU_CONTROL}.3", 2)
    assert res.returncode != 0
    assert snmpget(devices, v2c(ep), f"{RPDU_STATUS}.3") == ["1"]


def test_fence_apc_snmp_on_rack_pdu(devices: dict) -> None:
    ep = devices["snmp"]["apc-rpdu"]
    assert fence(devices, "fence_apc_snmp", ep, "3", "off").returncode == 0
    assert fence(devices, "fence_apc_snmp", ep, "3", "status").stdout.strip() == "Status: OFF"
    assert snmpget(devices, v2c(ep), f"{RPDU_STATUS}.3") == ["2"]
    assert fence(devices, "fence_apc_snmp", ep, "3", "on").returncode == 0
    assert snmpget(devices, v2c(ep), f"{RPDU_STATUS}.3") == ["1"]


def test_status_delay_makes_status_lag(devices: dict) -> None:
    ep = devices["snmp"]["apc-rpdu"]
    set_status_delay(ep, 300)  # far longer than the two requests below take
    try:
        assert snmpset(devices, v2c(ep), f"{RPDU_CONTROL}.5", 2).returncode == 0
        assert snmpget(devices, v2c(ep), f"{RPDU_STATUS}.5") == ["1"]  # still the old state
        assert json.loads(Path(ep["state_file"]).read_text())["ports"]["5"] == 2
    finally:
        set_status_delay(ep, 0)
    assert snmpget(devices, v2c(ep), f"{RPDU_STATUS}.5") == ["2"]
    assert snmpset(devices, v2c(ep), f"{RPDU_CONTROL}.5", 1).returncode == 0


def test_set_status_delay_rejects_bad_input(devices: dict) -> None:
    with pytest.raises(ValueError, match="snmpsim"):
        set_status_delay(devices["snmp"]["eaton"], 1)
    with pytest.raises(ValueError, match=">= 0"):
        set_status_delay(devices["snmp"]["fc"], -1)


def test_fc_oper_status_follows_admin_status(devices: dict) -> None:
    ep = devices["snmp"]["fc"]
    assert devices["fc_ports"] == {"lab-node-0": "fc1/1", "lab-node-1": "fc1/2", "lab-node-2": "fc1/3"}
    assert snmpget(devices, v2c(ep), "1.3.6.1.2.1.31.1.1.1.1.4", "1.3.6.1.2.1.31.1.1.1.18.1") == [
        '"fc1/4"',
        '"lab-node-0-hba0"',
    ]
    assert snmpset(devices, v2c(ep), f"{IF_ADMIN}.4", 2).returncode == 0
    assert snmpget(devices, v2c(ep), f"{IF_OPER}.4", f"{FC_PHYS_OPER}.3") == ["2", "2"]
    res = fence(devices, "fence_ifmib", ep, "fc1/4", "on")
    assert res.returncode == 0, res.stderr
    assert snmpget(devices, v2c(ep), f"{IF_ADMIN}.4", f"{IF_OPER}.4") == ["1", "1"]
    assert fence(devices, "fence_cisco_mds", ep, "fc1/4", "off").returncode == 0
    assert snmpget(devices, v2c(ep), f"{FC_PHYS_ADMIN}.3", f"{IF_OPER}.4") == ["2", "2"]
    assert fence(devices, "fence_cisco_mds", ep, "fc1/4", "on").returncode == 0


# ------------------------------------------------------------------------------------- SNMPv3
@pytest.mark.parametrize("device", ["apc-rpdu", "fc", "apc-ms", "eaton", "fc-sim"])
def test_v3_authpriv_works_and_wrong_keys_fail(devices: dict, device: str) -> None:
    ep = devices["snmp"][device]
    assert snmpget(devices, v3(ep), "1.3.6.1.2.1.1.2.0") == [ep["sys_object_id"]]
    bad_auth = run(
        ["snmpget", *v3(ep, auth_key=ep["v3"]["auth_key"] + "x"), "1.3.6.1.2.1.1.2.0"], snmp_env(devices)
    )
    assert bad_auth.returncode != 0 and ep["sys_object_id"] not in bad_auth.stdout
    bad_priv = run(
        ["snmpget", *v3(ep, priv_key=ep["v3"]["priv_key"] + "x"), "1.3.6.1.2.1.1.2.0"], snmp_env(devices)
    )
    assert bad_priv.returncode != 0 and ep["sys_object_id"] not in bad_priv.stdout


def test_pysnmp_v3_set_on_rack_pdu(devices: dict) -> None:
    ep = devices["snmp"]["apc-rpdu"]
    assert pysnmp_set_get(ep, f"{RPDU_CONTROL}.6", 2, use_v3=True) == 2
    assert pysnmp_set_get(ep, f"{RPDU_STATUS}.6", use_v3=True) == 2
    assert pysnmp_set_get(ep, f"{RPDU_CONTROL}.6", 1, use_v3=True) == 1


# ------------------------------------------------------------------------------------- snmpsim peers
def test_snmpsim_apc_masterswitch_remembers_sets(devices: dict) -> None:
    ep = devices["snmp"]["apc-ms"]
    assert snmpget(devices, v2c(ep), "1.3.6.1.2.1.1.2.0", f"{SPDU_CTL[:-2]}.4.1") == [
        ep["sys_object_id"],
        '"lab-node-0"',
    ]
    assert fence(devices, "fence_apc_snmp", ep, "2", "off").returncode == 0
    assert fence(devices, "fence_apc_snmp", ep, "2", "status").stdout.strip() == "Status: OFF"
    assert snmpget(devices, v2c(ep), f"{SPDU_CTL}.2") == ["2"]
    bad = snmpset(devices, v2c(ep), f"{SPDU_CTL}.2", 9)  # outside sPDUOutletCtl's 1..7
    assert bad.returncode != 0
    assert fence(devices, "fence_apc_snmp", ep, "2", "on").returncode == 0
    assert snmpget(devices, v2c(ep), f"{SPDU_CTL}.2") == ["1"]


def test_snmpsim_eaton_remembers_sets(devices: dict) -> None:
    ep = devices["snmp"]["eaton"]
    assert fence(devices, "fence_eaton_snmp", ep, "2", "off").returncode == 0
    assert fence(devices, "fence_eaton_snmp", ep, "2", "status").stdout.strip() == "Status: OFF"
    assert snmpget(devices, v2c(ep), f"{EATON_CTL}.1") == ["0"]
    assert pysnmp_set_get(ep, f"{EATON_CTL}.1", 1) == 1
    assert fence(devices, "fence_eaton_snmp", ep, "2", "status").stdout.strip() == "Status: ON"


def test_snmpsim_fc_switch_remembers_sets(devices: dict) -> None:
    ep = devices["snmp"]["fc-sim"]
    assert fence(devices, "fence_cisco_mds", ep, "fc1/3", "off").returncode == 0
    assert fence(devices, "fence_cisco_mds", ep, "fc1/3", "status").stdout.strip() == "Status: OFF"
    assert snmpget(devices, v2c(ep), f"{FC_PHYS_ADMIN}.2") == ["2"]
    assert fence(devices, "fence_ifmib", ep, "fc1/5", "off").returncode == 0
    assert snmpget(devices, v2c(ep), f"{IF_ADMIN}.5") == ["2"]
    assert pysnmp_set_get(ep, f"{IF_ADMIN}.5", 1, use_v3=True) == 1
    assert fence(devices, "fence_ifmib", ep, "fc1/5", "status").stdout.strip() == "Status: ON"


# ------------------------------------------------------------------------------------- bad input
def test_port_taken_raises_component_error_and_leaves_nothing_running(tmp_path: Path) -> None:
    cfg = LabConfig(workdir=tmp_path / "lab", nodes=2, port_base=PORT_BASE + 20, kube=False)
    sup = Supervisor(tmp_path / "logs")
    blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blocker.bind(("127.0.0.1", cfg.port("snmpsim-fc")))  # the last peer started: the others run by then
    try:
        with pytest.raises(ComponentError) as err:
            start_devices(sup, cfg, ["lab-node-0", "lab-node-1"], None)
    finally:
        blocker.close()
        members = [pid for p in sup.procs.values() for pid in session_members(p.pid)]
        started = sorted(sup.procs)
        sup.stop_all()
    assert err.value.component == "snmpsim-fc"
    assert f"127.0.0.1:{cfg.port('snmpsim-fc')} is already in use" in str(err.value)
    assert started == [
        "bmc lab-node-0",
        "bmc lab-node-1",
        "snmpd-fc",
        "snmpd-pdu",
        "snmpsim-apc",
        "snmpsim-eaton",
    ]
    assert [pid for pid in members if Path(f"/proc/{pid}").exists()] == []


@pytest.mark.parametrize(
    ("nodes", "hook", "component", "match"),
    [
        ([], None, "devices", "non-empty list"),
        (["Lab_Node"], None, "devices", "not valid node names"),
        (["a", "a"], None, "devices", "duplicates"),
        (["lab-node-0"], ["/nonexistent/hook"], "bmc", "not an executable"),
        (["lab-node-0"], [], "bmc", "non-empty list"),
    ],
)
def test_bad_arguments_raise_before_anything_starts(
    tmp_path: Path, nodes: list[str], hook: list[str] | None, component: str, match: str
) -> None:
    cfg = LabConfig(workdir=tmp_path / "lab", nodes=1, port_base=PORT_BASE + 40, kube=False)
    sup = Supervisor(tmp_path / "logs")
    with pytest.raises(ComponentError, match=match) as err:
        start_devices(sup, cfg, nodes, hook)
    assert err.value.component == component
    assert sup.procs == {}


# ------------------------------------------------------------------------------------- the session lab
def test_session_lab_fixture_exposes_working_devices(lab) -> None:
    """Read-only: the ``lab`` fixture's devices answer with the credentials it reports."""
    info = lab.info["devices"]
    assert set(info["snmp"]) == {"apc-rpdu", "fc", "apc-ms", "eaton", "fc-sim"}
    node = lab.info["nodes"][0]
    bmc = info["bmcs"][node]
    assert ipmitool(bmc, "chassis", "power", "status").stdout.strip() == "Chassis Power is on"
    for ep in info["snmp"].values():
        assert snmpget(info, v2c(ep), "1.3.6.1.2.1.1.2.0") == [ep["sys_object_id"]]
