"""``noderemedy.core.pdu_outlet`` against the lab's real PDUs: Net-SNMP snmpd playing an APC rack PDU
(status follows control, optional lag) and snmpsim playing an APC MasterSwitch and an Eaton managed
ePDU. Every change is confirmed by Net-SNMP's own ``snmpget`` against the peer.
Run with ``NODEREMEDY_LAB_KUBE=0`` to start the devices only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fencing_support import (
    assert_failed_unfenced,
    assert_no_secrets,
    assert_quartet,
    quartet_tasks,
)

from ansible_collections.noderemedy.core.plugins.module_utils._pdu import PROFILES, PduDriver
from ansible_collections.noderemedy.core.plugins.module_utils._snmp import SnmpClient

pytestmark = pytest.mark.lab
MODULE = "noderemedy.core.pdu_outlet"


RPDU_STATUS = "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4"
RPDU_CONTROL = "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4"
SPDU_CTL = "1.3.6.1.4.1.318.1.1.4.4.2.1.3"
EATON_STATE = "1.3.6.1.4.1.534.6.6.6.1.2.2.1.3"


# ------------------------------------------------------------------------------------ helpers
def ep(lab, name: str) -> dict:
    return lab.info["devices"]["snmp"][name]


def snmpget(lab, endpoint: dict, oid: str) -> str:
    """Net-SNMP's snmpget (v2c, the rw community): the peer's own answer."""
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


def probe_task(lab, endpoint: dict, oid: str):
    env = {"SNMP_PERSISTENT_DIR": lab.info["devices"]["snmp_persistent_dir"]}
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

    def task(name: str) -> dict:
        return {
            "name": name,
            "ansible.builtin.command": {"argv": argv},
            "environment": env,
            "changed_when": False,
        }

    return task


def v2c(endpoint: dict, plug: list[str], state: str, **extra) -> dict:
    return {
        "ipaddr": endpoint["host"],
        "ipport": endpoint["port"],
        "community": endpoint["community"],
        "plug": plug,
        "state": state,
        "poll_interval": 0.05,
        **extra,
    }


def v3(endpoint: dict, plug: list[str], state: str, **extra) -> dict:
    k = endpoint["v3"]
    return {
        "ipaddr": endpoint["host"],
        "ipport": endpoint["port"],
        "snmp_version": "3",
        "username": k["user"],
        "password": k["auth_key"],
        "snmp_priv_passwd": k["priv_key"],
        "snmp_auth_prot": k["auth_proto"],
        "snmp_priv_prot": k["priv_proto"],
        "plug": plug,
        "state": state,
        "poll_interval": 0.05,
        **extra,
    }


def restore_on(endpoint: dict, outlets: list[int], profile: str) -> None:
    client = SnmpClient(endpoint["host"], endpoint["port"], "2c", community=endpoint["community"])
    PduDriver(client, [str(o) for o in outlets], PROFILES[profile]).run("on")


@pytest.fixture()
def rpdu(lab):
    endpoint = ep(lab, "apc-rpdu")
    yield endpoint
    from noderemedy_lab.devices import set_status_delay

    set_status_delay(endpoint, 0)
    restore_on(endpoint, list(range(1, 9)), "apc_rpdu")


# ------------------------------------------------------------------------------------ quartets
def test_apc_rack_pdu_auto_detected_outlet_by_name(lab, rpdu, run_playbook) -> None:
    outlet = lab.info["devices"]["outlets"]["lab-node-1"]
    res = run_playbook(
        quartet_tasks(
            MODULE, v2c(rpdu, ["lab-node-1"], "off"), probe_task(lab, rpdu, f"{RPDU_STATUS}.{outlet}")
        )
    )
    assert_quartet(res, ["1", "2", "2"])
    apply1 = res.task("apply1")
    assert apply1["profile"] == "apc_rpdu"
    assert apply1["outlets"] == [
        {"plug": "lab-node-1", "outlet": outlet, "state_before": "on", "state": "off"}
    ]
    assert apply1["fence"]["verified"] is True and apply1["fence"]["method"] == "pdu"
    assert apply1["fence"]["state"] == "off" and apply1["fence"]["plugs"] == ["lab-node-1"]
    assert res.task("check1")["diff"] == {
        "before": {"outlets": {"lab-node-1": "on"}},
        "after": {"outlets": {"lab-node-1": "off"}},
    }
    assert res.task("check1")["fence"]["verified"] is False
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), rpdu["community"])
    # and back on, again as a quartet
    res = run_playbook(
        quartet_tasks(
            MODULE, v2c(rpdu, ["lab-node-1"], "on"), probe_task(lab, rpdu, f"{RPDU_STATUS}.{outlet}")
        )
    )
    assert_quartet(res, ["2", "1", "1"])


def test_apc_rack_pdu_over_snmpv3_authpriv(lab, rpdu, run_playbook) -> None:
    res = run_playbook(
        quartet_tasks(MODULE, v3(rpdu, ["5"], "off"), probe_task(lab, rpdu, f"{RPDU_STATUS}.5"))
    )
    assert_quartet(res, ["1", "2", "2"])
    k = rpdu["v3"]
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), k["auth_key"], k["priv_key"])


def test_generic_profile_on_the_rack_pdu(lab, rpdu, run_playbook) -> None:
    generic = {
        "profile": "generic",
        "status_oid": RPDU_STATUS,
        "control_oid": RPDU_CONTROL,
        "status_on": 1,
        "status_off": 2,
    }
    res = run_playbook(
        quartet_tasks(MODULE, v2c(rpdu, ["4"], "off", **generic), probe_task(lab, rpdu, f"{RPDU_STATUS}.4"))
    )
    assert_quartet(res, ["1", "2", "2"])
    assert res.task("apply1")["profile"] == "generic"


def test_apc_masterswitch_snmpv1_outlet_by_number(lab, run_playbook) -> None:
    ms = ep(lab, "apc-ms")
    try:
        res = run_playbook(
            quartet_tasks(
                MODULE, v2c(ms, ["2"], "off", snmp_version="1"), probe_task(lab, ms, f"{SPDU_CTL}.2")
            )
        )
        assert_quartet(res, ["1", "2", "2"])
        assert res.task("apply1")["profile"] == "apc_ms"
    finally:
        restore_on(ms, [2], "apc_ms")
    assert snmpget(lab, ms, f"{SPDU_CTL}.2") == "1"


def test_apc_masterswitch_outlet_by_name(lab, run_playbook) -> None:
    ms = ep(lab, "apc-ms")
    try:
        res = run_playbook([{"name": "off", MODULE: v2c(ms, ["lab-node-2"], "off")}])
        assert res.task("off")["outlets"][0]["outlet"] == 3
        assert snmpget(lab, ms, f"{SPDU_CTL}.3") == "2"
    finally:
        restore_on(ms, [3], "apc_ms")


def test_eaton_managed_epdu_auto_detected(lab, run_playbook) -> None:
    eaton = ep(lab, "eaton")
    try:
        # outlet 3 is index 2 on the device (fence_eaton_snmp: plug - 1)
        res = run_playbook(
            quartet_tasks(MODULE, v2c(eaton, ["3"], "off"), probe_task(lab, eaton, f"{EATON_STATE}.2"))
        )
        assert_quartet(res, ["1", "0", "0"])
        assert res.task("apply1")["profile"] == "eaton_managed"
    finally:
        restore_on(eaton, [3], "eaton_managed")
    assert snmpget(lab, eaton, f"{EATON_STATE}.2") == "1"


def test_redundant_supplies_reboot_all_off_verified_before_any_on(lab, rpdu, run_playbook) -> None:
    state_file = Path(rpdu["state_file"])
    before = len(json.loads(state_file.read_text())["log"])
    res = run_playbook([{"name": "reboot", MODULE: v2c(rpdu, ["lab-node-2", "6"], "reboot")}])
    out = res.task("reboot")
    assert out["changed"] is True and out["power_state"] == "on" and out["fence"]["verified"] is True
    sets = [(port, value) for _, port, value in json.loads(state_file.read_text())["log"][before:]]
    assert sorted(sets[:2]) == [("3", 2), ("6", 2)], f"both outlets off first: {sets}"
    assert sorted(sets[2:]) == [("3", 1), ("6", 1)], f"then both on: {sets}"
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.3") == "1" and snmpget(lab, rpdu, f"{RPDU_STATUS}.6") == "1"


# ------------------------------------------------------------------------------------ faults
def test_status_lagging_longer_than_power_timeout_fails_never_reports_off(lab, rpdu, run_playbook) -> None:
    from noderemedy_lab.devices import set_status_delay

    set_status_delay(rpdu, 8)
    res = run_playbook(
        [{"name": "slow", MODULE: v2c(rpdu, ["7"], "off", power_timeout=1.5), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "slow")
    assert out["error"] == "verify" and "power_timeout=1.5s" in out["msg"] and "7=on" in out["msg"]
    # what an admin must know: the outlet stays commanded off although its status still reads on
    assert "the device is left commanded off" in out["msg"], out["msg"]
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.7") == "1", "the PDU itself still reports the outlet on"


def test_status_lag_within_power_timeout_is_waited_for(lab, rpdu, run_playbook) -> None:
    from noderemedy_lab.devices import set_status_delay

    set_status_delay(rpdu, 1)
    res = run_playbook([{"name": "slow", MODULE: v2c(rpdu, ["7"], "off", power_timeout=10)}])
    out = res.task("slow")
    assert out["fence"]["verified"] is True and out["verify_seconds"] >= 0.9
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.7") == "2"


def test_wrong_community_fails_as_no_answer_naming_the_community(lab, rpdu, run_playbook) -> None:
    bad = v2c(rpdu, ["1"], "off", community="not-the-community", snmp_timeout=0.3, snmp_retries=0)
    res = run_playbook([{"name": "bad", MODULE: bad, "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "unreachable" and "wrong community" in out["msg"]
    assert "not-the-community" not in json.dumps(out)
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.1") == "1"


def test_wrong_v3_auth_key_is_an_auth_error(lab, rpdu, run_playbook) -> None:
    res = run_playbook(
        [{"name": "bad", MODULE: v3(rpdu, ["1"], "off", password="wrong-auth-key"), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "auth" and "authentication refused" in out["msg"]
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.1") == "1"


def test_read_only_community_is_a_privilege_error(lab, rpdu, run_playbook) -> None:
    res = run_playbook(
        [
            {
                "name": "ro",
                MODULE: v2c(rpdu, ["1"], "off", community=rpdu["ro_community"]),
                "ignore_errors": True,
            }
        ]
    )
    out = assert_failed_unfenced(res, "ro")
    assert out["error"] == "privilege" and "read-only" in out["msg"]
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.1") == "1"


def test_value_the_device_rejects(lab, rpdu, run_playbook) -> None:
    generic = {"profile": "generic", "status_oid": RPDU_STATUS, "control_oid": RPDU_CONTROL, "control_off": 9}
    res = run_playbook([{"name": "bad", MODULE: v2c(rpdu, ["8"], "off", **generic), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "rejected" and "wrongValue" in out["msg"]
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.8") == "1"


def test_outlet_name_that_does_not_exist_changes_nothing(lab, rpdu, run_playbook) -> None:
    state_file = Path(rpdu["state_file"])
    before = json.loads(state_file.read_text())["log"]
    res = run_playbook(
        [{"name": "bad", MODULE: v2c(rpdu, ["1", "no-such-node"], "off"), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "not_found" and "no-such-node" in out["msg"]
    assert json.loads(state_file.read_text())["log"] == before, "nothing half-applied"
    assert snmpget(lab, rpdu, f"{RPDU_STATUS}.1") == "1"


def test_outlet_number_that_does_not_exist(lab, rpdu, run_playbook) -> None:
    res = run_playbook([{"name": "bad", MODULE: v2c(rpdu, ["99"], "off"), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "not_found" and "99" in out["msg"]


def test_generic_profile_without_status_oid_names_the_field(lab, rpdu, run_playbook) -> None:
    res = run_playbook(
        [{"name": "bad", MODULE: v2c(rpdu, ["1"], "off", profile="generic"), "ignore_errors": True}]
    )
    out = res.task("bad")
    assert out.get("failed") is True and "status_oid" in out["msg"]


def test_action_group_module_defaults(lab, rpdu, run_playbook, tmp_path) -> None:
    """``group/noderemedy.core.fencing`` (meta/runtime.yml) carries the connection options."""
    plays = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "connection": "local",
            "module_defaults": {
                "group/noderemedy.core.fencing": {
                    "ipaddr": rpdu["host"],
                    "ipport": rpdu["port"],
                    "community": rpdu["community"],
                    "power_timeout": 5,
                }
            },
            "tasks": [{"name": "status", MODULE: {"plug": ["lab-node-0"], "state": "status"}}],
        }
    ]
    res = run_playbook(plays=plays)
    out = res.task("status")
    assert out.get("failed") is not True, out
    assert out["outlets"][0]["outlet"] == lab.info["devices"]["outlets"]["lab-node-0"]
    assert out["power_state"] == "on"
