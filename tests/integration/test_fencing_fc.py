"""``noderemedy.core.fc_port`` against the lab's real FC switches: Net-SNMP snmpd (IF-MIB with
ifOperStatus following ifAdminStatus, FIBRE-CHANNEL-FE-MIB) and snmpsim (IF-MIB and FC-FE-MIB
writecache, static ifOperStatus). Every change is confirmed by Net-SNMP's ``snmpget``.
Run with ``NODEREMEDY_LAB_KUBE=0`` to start the devices only.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from fencing_support import (
    assert_failed_unfenced,
    assert_no_secrets,
    assert_quartet,
    quartet_tasks,
)

from ansible_collections.noderemedy.core.plugins.module_utils._fc_switch import FcSwitchDriver
from ansible_collections.noderemedy.core.plugins.module_utils._snmp import SnmpClient

pytestmark = pytest.mark.lab
MODULE = "noderemedy.core.fc_port"


IF_ADMIN = "1.3.6.1.2.1.2.2.1.7"
IF_OPER = "1.3.6.1.2.1.2.2.1.8"
FC_ADMIN = "1.3.6.1.2.1.75.1.2.2.1.1.22"  # .<port-1>


def ep(lab, name: str) -> dict:
    return lab.info["devices"]["snmp"][name]


def snmpget(lab, endpoint: dict, oid: str) -> str:
    env = dict(os.environ, SNMP_PERSISTENT_DIR=lab.info["devices"]["snmp_persistent_dir"])
    argv = [
        "snmpget",
        "-v2c",
        "-c",
        endpoint["community"],
        "-On",
        "-Oqv",
        f"{endpoint['host']}:{endpoint['port']}",
        oid,
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def probe_task(lab, endpoint: dict, *oids: str):
    env = {"SNMP_PERSISTENT_DIR": lab.info["devices"]["snmp_persistent_dir"]}
    argv = [
        "snmpget",
        "-v2c",
        "-c",
        endpoint["community"],
        "-On",
        "-Oqv",
        f"{endpoint['host']}:{endpoint['port']}",
        *oids,
    ]

    def task(name: str) -> dict:
        return {
            "name": name,
            "ansible.builtin.command": {"argv": argv},
            "environment": env,
            "changed_when": False,
        }

    return task


def args(endpoint: dict, plug: list[str], state: str, **extra) -> dict:
    return {
        "ipaddr": endpoint["host"],
        "ipport": endpoint["port"],
        "community": endpoint["community"],
        "plug": plug,
        "state": state,
        "poll_interval": 0.05,
        **extra,
    }


def enable_all(endpoint: dict, profile: str, ports: list[str]) -> None:
    client = SnmpClient(endpoint["host"], endpoint["port"], "2c", community=endpoint["community"])
    FcSwitchDriver(client, ports, profile=profile, verify_oper_status=False).run("on")


@pytest.fixture()
def fc(lab):
    endpoint = ep(lab, "fc")
    yield endpoint
    from noderemedy_lab.devices import set_status_delay

    set_status_delay(endpoint, 0)
    enable_all(endpoint, "ifmib", [str(i) for i in range(1, 9)])


@pytest.fixture()
def fcsim(lab):
    endpoint = ep(lab, "fc-sim")
    yield endpoint
    enable_all(endpoint, "ifmib", [str(i) for i in range(1, 9)])
    enable_all(endpoint, "cisco_mds", [f"fc1/{i}" for i in range(1, 9)])


def test_ifmib_port_by_name_verified_through_oper_status(lab, fc, run_playbook) -> None:
    port = lab.info["devices"]["fc_ports"]["lab-node-0"]  # fc1/1 -> ifIndex 1
    index = port.split("/")[1]
    probe = probe_task(lab, fc, f"{IF_ADMIN}.{index}", f"{IF_OPER}.{index}")
    res = run_playbook(quartet_tasks(MODULE, args(fc, [port], "disabled"), probe))
    assert_quartet(res, ["1\n1", "2\n2", "2\n2"])
    apply1 = res.task("apply1")
    assert apply1["state_before"] == "enabled" and apply1["state"] == "disabled"
    assert apply1["ports"] == [
        {
            "plug": port,
            "index": index,
            "oper_status_checked": True,
            "state_before": "enabled",
            "state": "disabled",
        }
    ]
    fence = apply1["fence"]
    assert fence["verified"] is True and fence["method"] == "fc" and fence["state"] == "disabled"
    assert res.task("check1")["fence"]["verified"] is False
    assert res.task("check1")["diff"] == {
        "before": {"ports": {port: "enabled"}},
        "after": {"ports": {port: "disabled"}},
    }
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), fc["community"])
    res = run_playbook(quartet_tasks(MODULE, args(fc, [port], "enabled"), probe))
    assert_quartet(res, ["2\n2", "1\n1", "1\n1"])


def test_ifmib_several_ports_by_ifindex(lab, fc, run_playbook) -> None:
    probe = probe_task(lab, fc, f"{IF_ADMIN}.5", f"{IF_ADMIN}.6")
    res = run_playbook(quartet_tasks(MODULE, args(fc, ["5", "6"], "disabled"), probe))
    assert_quartet(res, ["1\n1", "2\n2", "2\n2"])


@pytest.mark.parametrize("version", ["2c", "1"])
def test_ifmib_several_ports_by_name_walked_with_getbulk_or_on_v1_getnext(
    lab, fc, run_playbook, version
) -> None:
    """Names are found by walking ifDescr: GETBULK on v2c, GETNEXT on v1 (no GETBULK there); each
    port's own index, set and read back in the one call (the fixture enables them again)."""
    probe = probe_task(lab, fc, f"{IF_ADMIN}.7", f"{IF_ADMIN}.8")
    res = run_playbook(
        quartet_tasks(MODULE, args(fc, ["fc1/8", "fc1/7"], "disabled", snmp_version=version), probe)
    )
    assert_quartet(res, ["1\n1", "2\n2", "2\n2"])
    ports = res.task("apply1")["ports"]
    assert [(p["plug"], p["index"], p["state"]) for p in ports] == [
        ("fc1/8", "8", "disabled"),
        ("fc1/7", "7", "disabled"),
    ]
    assert res.task("apply1")["fence"]["verified"] is True


def test_cisco_mds_profile_on_snmpd(lab, fc, run_playbook) -> None:
    probe = probe_task(lab, fc, f"{FC_ADMIN}.3")  # fc1/4 -> .22.3
    res = run_playbook(quartet_tasks(MODULE, args(fc, ["fc1/4"], "disabled", profile="cisco_mds"), probe))
    assert_quartet(res, ["1", "2", "2"])
    assert res.task("apply1")["ports"][0]["oper_status_checked"] is True


def test_ifmib_on_snmpsim_verified_by_admin_status(lab, fcsim, run_playbook) -> None:
    probe = probe_task(lab, fcsim, f"{IF_ADMIN}.2")
    res = run_playbook(
        quartet_tasks(MODULE, args(fcsim, ["fc1/2"], "disabled", verify_oper_status=False), probe)
    )
    assert_quartet(res, ["1", "2", "2"])
    assert res.task("apply1")["ports"][0]["oper_status_checked"] is False


def test_cisco_mds_on_snmpsim(lab, fcsim, run_playbook) -> None:
    probe = probe_task(lab, fcsim, f"{FC_ADMIN}.2")  # fc1/3
    res = run_playbook(quartet_tasks(MODULE, args(fcsim, ["fc1/3"], "disabled", profile="cisco_mds"), probe))
    assert_quartet(res, ["1", "2", "2"])
    # FC-FE-MIB oper status is not in this simulator: verified by the admin status
    assert res.task("apply1")["ports"][0]["oper_status_checked"] is False


# ------------------------------------------------------------------------------------ faults
def test_port_still_up_is_not_a_fence(lab, fcsim, run_playbook) -> None:
    """snmpsim's ifOperStatus stays up(1) after admin down: with oper verification that must fail."""
    res = run_playbook(
        [{"name": "bad", MODULE: args(fcsim, ["fc1/5"], "disabled", power_timeout=1), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "verify" and "fc1/5=on" in out["msg"]
    assert snmpget(lab, fcsim, f"{IF_OPER}.5") == "1"


def test_oper_status_lagging_longer_than_power_timeout_fails(lab, fc, run_playbook) -> None:
    from noderemedy_lab.devices import set_status_delay

    set_status_delay(fc, 8)
    res = run_playbook(
        [{"name": "slow", MODULE: args(fc, ["7"], "disabled", power_timeout=1.5), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "slow")
    assert out["error"] == "verify"
    assert snmpget(lab, fc, f"{IF_OPER}.7") == "1", "the switch still reports the port up"


def test_unknown_port_name_changes_nothing(lab, fc, run_playbook) -> None:
    res = run_playbook([{"name": "bad", MODULE: args(fc, ["2", "fc9/9"], "disabled"), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "not_found" and "fc9/9" in out["msg"]
    assert snmpget(lab, fc, f"{IF_ADMIN}.2") == "1"


def test_mangled_cisco_port_name_names_the_field(lab, fc, run_playbook) -> None:
    res = run_playbook(
        [{"name": "bad", MODULE: args(fc, ["eth0"], "disabled", profile="cisco_mds"), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "config" and out["msg"].startswith("plug:")


def test_value_the_switch_rejects_and_read_only_community(lab, fc) -> None:
    client = SnmpClient(fc["host"], fc["port"], "2c", community=fc["community"])
    try:
        with pytest.raises(Exception) as err:
            client.set(f"{IF_ADMIN}.3", 9)
        assert getattr(err.value, "category", None) == "rejected"
    finally:
        client.close()
    ro = SnmpClient(fc["host"], fc["port"], "2c", community=fc["ro_community"])
    with pytest.raises(Exception) as err:
        FcSwitchDriver(ro, ["3"]).run("off")
    assert getattr(err.value, "category", None) == "privilege"
    assert fc["ro_community"] not in str(err.value)
    assert snmpget(lab, fc, f"{IF_ADMIN}.3") == "1"


def test_wrong_v3_priv_key_is_no_answer(lab, fc, run_playbook) -> None:
    k = fc["v3"]
    bad = {
        **args(fc, ["3"], "disabled", snmp_timeout=0.3, snmp_retries=0),
        "community": None,
        "snmp_version": "3",
        "username": k["user"],
        "password": k["auth_key"],
        "snmp_priv_passwd": "wrong-priv-key",
    }
    res = run_playbook([{"name": "bad", MODULE: bad, "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "unreachable" and "privacy key" in out["msg"]
    assert "wrong-priv-key" not in json.dumps(out)
