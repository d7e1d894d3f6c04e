"""``noderemedy.core.ipmi_power`` and the IPMI driver against the lab's real BMCs (OpenIPMI ipmi_sim).

Every change is confirmed by the peer itself: the BMC's power file (written by its chassis-control
hook) and ``ipmitool``. Run with ``NODEREMEDY_LAB_KUBE=0`` to start the devices only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from fencing_support import (
    assert_failed_unfenced,
    assert_no_secrets,
    assert_quartet,
    quartet_tasks,
)

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    AuthError,
    PrivilegeError,
    VerifyError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._ipmi import IpmiDriver
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError
from ansible_collections.noderemedy.core.plugins.module_utils._taint import validate_fence_evidence
from noderemedy_lab.bmc import power_sets

pytestmark = pytest.mark.lab
MODULE = "noderemedy.core.ipmi_power"


# ------------------------------------------------------------------------------------ helpers
def bmc_of(lab, node: str) -> dict:
    return lab.info["devices"]["bmcs"][node]


def power_file(bmc: dict) -> str:
    """The BMC's own record of the chassis power: '1' on, '0' off."""
    return Path(bmc["power_file"]).read_text().strip()


def ipmitool_status(bmc: dict) -> str:
    argv = ["ipmitool", "-I", "lanplus", "-H", bmc["host"], "-p", str(bmc["port"]), "-C", str(bmc["cipher"])]
    argv += ["-U", bmc["username"], "-P", bmc["password"], "chassis", "power", "status"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def args(bmc: dict, state: str, **extra) -> dict:
    return {
        "ipaddr": bmc["host"],
        "ipport": bmc["port"],
        "username": bmc["username"],
        "password": bmc["password"],
        "cipher": bmc["cipher"],
        "state": state,
        "poll_interval": 0.05,
        **extra,
    }


def probe(bmc: dict, name: str) -> dict:
    return {"name": name, "ansible.builtin.command": f"cat {bmc['power_file']}", "changed_when": False}


def ensure_on(bmc: dict) -> None:
    IpmiDriver(bmc["host"], bmc["username"], bmc["password"], ipport=bmc["port"]).run("on")
    assert power_file(bmc) == "1"


@pytest.fixture()
def bmc0(lab):
    bmc = bmc_of(lab, "lab-node-0")
    ensure_on(bmc)
    yield bmc
    ensure_on(bmc)


# ------------------------------------------------------------------------------------ quartets
def test_off_quartet_confirmed_by_the_bmc(lab, bmc0, run_playbook) -> None:
    res = run_playbook(quartet_tasks(MODULE, args(bmc0, "off"), lambda n: probe(bmc0, n)))
    assert_quartet(res, ["1", "0", "0"])
    check1, apply1 = res.task("check1"), res.task("apply1")
    assert (
        check1["changed"] is True and check1["power_state"] == "off" and check1["power_state_before"] == "on"
    )
    assert check1["fence"]["verified"] is False, "check mode never claims a fence"
    assert check1["diff"] == {"before": {"power": "on"}, "after": {"power": "off"}}
    assert res.task("probe1")["stdout"] == "1", "check mode must not touch the BMC"
    assert apply1["changed"] is True and apply1["power_state"] == "off"
    assert apply1["verify_seconds"] is not None and apply1["verify_seconds"] >= 0
    fence = apply1["fence"]
    assert fence["verified"] is True and fence["method"] == "ipmi" and fence["state"] == "off"
    assert fence["target"] == f"{bmc0['host']}:{bmc0['port']}" and fence["verified_at"] > 0
    assert res.task("probe2")["stdout"] == "0"
    assert res.task("check2")["changed"] is False
    assert res.task("apply2")["changed"] is False and res.task("apply2")["fence"]["verified"] is True
    assert res.task("probe3")["stdout"] == "0"
    assert ipmitool_status(bmc0) == "Chassis Power is off"
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), bmc0["password"])


def test_on_quartet_confirmed_by_the_bmc(lab, bmc0, run_playbook) -> None:
    IpmiDriver(bmc0["host"], bmc0["username"], bmc0["password"], ipport=bmc0["port"]).run("off")
    assert power_file(bmc0) == "0"
    res = run_playbook(quartet_tasks(MODULE, args(bmc0, "on"), lambda n: probe(bmc0, n)))
    assert_quartet(res, ["0", "1", "1"])
    assert res.task("apply1")["fence"]["verified"] is False and res.task("apply1")["fence"]["state"] == "on"
    assert ipmitool_status(bmc0) == "Chassis Power is on"


def test_reboot_is_off_verified_then_on(lab, bmc0, run_playbook) -> None:
    log = Path(bmc0["power_log"])
    before = log.read_text().splitlines() if log.exists() else []
    res = run_playbook([{"name": "reboot", MODULE: args(bmc0, "reboot")}])
    assert res.rc == 0, res.stdout[-3000:]
    out = res.task("reboot")
    assert out["changed"] is True and out["power_state_before"] == "on" and out["power_state"] == "on"
    assert out["fence"]["verified"] is True and out["fence"]["state"] == "off"
    new = [line.split()[-1] for line in log.read_text().splitlines()[len(before) :] if line.strip()]
    assert new[-2:] == ["0", "1"], f"power log should end with off then on: {new}"
    assert power_file(bmc0) == "1"


def test_cycle_is_sent_but_never_claimed_as_a_fence(lab, bmc0, run_playbook) -> None:
    log = Path(bmc0["power_log"])
    before = len(log.read_text().splitlines())
    res = run_playbook([{"name": "cycle", MODULE: args(bmc0, "reboot", method="cycle")}])
    out = res.task("cycle")
    assert out["changed"] is True and out["fence"]["verified"] is False
    assert any("not verified" in w for w in out.get("warnings", []))
    new = [line.split()[-1] for line in log.read_text().splitlines()[before:] if line.strip()]
    assert new and new[0] == "0", f"the BMC powered down for the cycle: {new}"
    # ipmi_sim powers up again on its own after the cycle; wait for it so later tests start from on
    drv = IpmiDriver(bmc0["host"], bmc0["username"], bmc0["password"], ipport=bmc0["port"])
    for _ in range(300):
        if drv.run("status").after == {"chassis": "on"}:
            break
        time.sleep(0.1)
    assert power_file(bmc0) == "1"


def test_status_of_an_off_machine_is_evidence(lab, bmc0, run_playbook) -> None:
    IpmiDriver(bmc0["host"], bmc0["username"], bmc0["password"], ipport=bmc0["port"]).run("off")
    res = run_playbook([{"name": "status", MODULE: args(bmc0, "status")}])
    out = res.task("status")
    assert out["changed"] is False and out["power_state"] == "off" and out["fence"]["verified"] is True
    assert power_file(bmc0) == "0"


def test_operator_account_can_fence(lab, bmc0) -> None:
    op = bmc0["operator"]
    drv = IpmiDriver(bmc0["host"], op["username"], op["password"], ipport=bmc0["port"], privlvl="operator")
    res = drv.run("off")
    assert res.after == {"chassis": "off"} and power_file(bmc0) == "0"


# ------------------------------------------------------------------------------------ faults
def test_wrong_password_is_an_auth_error(lab, bmc0, run_playbook) -> None:
    res = run_playbook(
        [{"name": "bad", MODULE: args(bmc0, "off", password="not-the-password"), "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "auth" and "authentication refused" in out["msg"]
    assert "not-the-password" not in json.dumps(out)
    assert power_file(bmc0) == "1"


def test_user_privilege_account_is_refused_power_control(lab, bmc0, run_playbook) -> None:
    user = bmc0["user"]
    bad = args(bmc0, "off", username=user["username"], password=user["password"], privlvl="user")
    res = run_playbook([{"name": "bad", MODULE: bad, "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "privilege" and "insufficient privilege" in out["msg"]
    assert power_file(bmc0) == "1"


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_nothing_listening_fails_as_unreachable_within_power_timeout(lab, bmc0, run_playbook) -> None:
    port = _free_udp_port()
    res = run_playbook(
        [
            {
                "name": "bad",
                MODULE: {**args(bmc0, "off", power_timeout=3), "ipport": port},
                "ignore_errors": True,
            }
        ]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "unreachable"
    assert "nothing listens at this address and port" in out["msg"]


@pytest.mark.timeout(120)
def test_a_hung_bmc_fails_as_a_timeout_only_after_power_timeout(lab, run_playbook) -> None:
    """A BMC process that stops answering (SIGSTOP: its socket stays bound, so no ICMP refusal)
    is a timeout, not "nothing listening", and the module keeps trying for power_timeout."""
    node = "lab-node-2"
    bmc = bmc_of(lab, node)
    pid = lab.supervisor.procs[f"bmc {node}"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        res = run_playbook(
            [{"name": "hung", MODULE: args(bmc, "status", power_timeout=8), "ignore_errors": True}]
        )
        elapsed = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGCONT)
    out = assert_failed_unfenced(res, "hung")
    print(f"hung BMC reported after {elapsed:.1f} s: {out['msg']}")
    assert out["error"] == "timeout", out
    assert "within power_timeout=8s" in out["msg"] and "nothing listens" not in out["msg"]
    assert elapsed >= 8  # it kept trying until power_timeout, not pyghmi's own ~5 s
    assert ipmitool_status(bmc).startswith("Chassis Power is")  # the BMC answers again


def test_a_bmc_that_accepts_off_and_stays_on_fails_verification_and_releases_nothing(
    lab, bmc0, run_playbook
) -> None:
    from noderemedy_lab.devices import set_ignore_power

    set_ignore_power(bmc0, True)
    try:
        res = run_playbook(
            [{"name": "bad", MODULE: args(bmc0, "off", power_timeout=2), "ignore_errors": True}]
        )
        out = assert_failed_unfenced(res, "bad")
        assert out["error"] == "verify" and "not verified off within power_timeout=2s" in out["msg"], out[
            "msg"
        ]
        with pytest.raises(KubeError, match="fence_evidence.verified: must be true"):
            validate_fence_evidence(out["fence"], 300, time.time())
        with pytest.raises(VerifyError, match="not verified off within power_timeout=1s"):
            IpmiDriver(
                bmc0["host"], bmc0["username"], bmc0["password"], ipport=bmc0["port"], power_timeout=1,
                poll_interval=0.05,
            ).run("off")  # fmt: skip
        # the BMC took the commands (logged, answered as done) and the chassis stayed on
        assert "power 0 ignored" in Path(bmc0["events_log"]).read_text()
        assert power_file(bmc0) == "1" and ipmitool_status(bmc0) == "Chassis Power is on"
    finally:
        set_ignore_power(bmc0, False)


def test_cipher_zero_is_refused_before_any_packet(lab, bmc0, run_playbook) -> None:
    res = run_playbook([{"name": "bad", MODULE: args(bmc0, "off", cipher=0), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "config" and out["msg"].startswith("cipher:")
    assert power_file(bmc0) == "1"


def test_cipher_17_refused_by_this_bmc_is_not_silently_downgraded(lab, bmc0) -> None:
    # ipmi_sim refuses suites 15-17 (and suites 7/8 hang); pyghmi would fall back to suite 3 on its own
    drv = IpmiDriver(bmc0["host"], bmc0["username"], bmc0["password"], ipport=bmc0["port"], cipher=17)
    with pytest.raises(Exception) as err:
        drv.run("off")
    assert getattr(err.value, "category", None) == "rejected"
    assert power_file(bmc0) == "1"


# ------------------------------------------------------------------------------------ sessions
def test_many_sessions_in_one_process_do_not_hang_or_leak(lab) -> None:
    """str credentials hang pyghmi's session cache; leaked sessions exhaust the BMC (~60)."""
    bmc = bmc_of(lab, "lab-node-1")
    op = bmc["operator"]
    for i in range(90):
        if i % 2:
            drv = IpmiDriver(
                bmc["host"], op["username"], op["password"], ipport=bmc["port"], privlvl="operator"
            )
        else:
            drv = IpmiDriver(bmc["host"], bmc["username"], bmc["password"], ipport=bmc["port"])
        assert drv.run("status").after == {"chassis": "on"}
    # a fresh client still gets a session: nothing leaked
    assert ipmitool_status(bmc) == "Chassis Power is on"


def test_library_errors_are_classified(lab, bmc0) -> None:
    with pytest.raises(AuthError):
        IpmiDriver(bmc0["host"], "nobody", "whatever", ipport=bmc0["port"]).run("status")
    user = bmc0["user"]
    with pytest.raises(PrivilegeError):
        IpmiDriver(bmc0["host"], user["username"], user["password"], ipport=bmc0["port"], privlvl="user").run(
            "off"
        )
    assert power_file(bmc0) == "1"


def test_credentials_from_the_environment(lab, bmc0, run_playbook) -> None:
    task = {k: v for k, v in args(bmc0, "status").items() if k not in ("username", "password")}
    env = {"NODEREMEDY_IPMI_USERNAME": bmc0["username"], "NODEREMEDY_IPMI_PASSWORD": bmc0["password"]}
    res = run_playbook([{"name": "status", MODULE: task, "environment": env}])
    out = res.task("status")
    assert out.get("failed") is not True, out
    assert out["power_state"] == "on"
    assert_no_secrets(out, bmc0["password"])


def test_a_bmc_slow_to_answer_carries_out_each_power_command_once(lab, bmc0) -> None:
    """A BMC that answers a Chassis Control 2 s after it got it (its hook sleeps first, as a loaded
    ipmi_sim does, or a BMC that answers once the power changed) gets each off and on once: the
    driver waits ``CHASSIS_CONTROL_ANSWER_WAIT`` seconds before pyghmi sends the request again,
    and the BMC would carry out the copy too (its own power log counts what it did)."""
    node_dir = Path(bmc0["power_file"]).parent
    hook, kept = node_dir / "power_hook", node_dir / "power_hook.kept"
    had_hook = hook.exists()
    if had_hook:
        hook.rename(kept)
    # 2 s and nothing else: the lab's own hook (a kubectl label of the kwok node, seconds on a busy
    # API server) would add its time to the answer's, past the driver's wait; the node's label
    # stays on meanwhile, where this test's off and on leave the power
    hook.write_text("#!/bin/sh\nsleep 2\n")
    hook.chmod(0o755)
    start = len(power_sets(bmc0["power_log"], with_ignored=True))
    driver = IpmiDriver(bmc0["host"], bmc0["username"], bmc0["password"], ipport=bmc0["port"])
    try:
        off = driver.run("off")
        on = driver.run("on")
    finally:
        hook.unlink()
        if had_hook:
            kept.rename(hook)
    assert off.verified_off_at is not None and on.after == {"chassis": "on"}, (off, on)
    sets = [value for _, value in power_sets(bmc0["power_log"], with_ignored=True)[start:]]
    assert sets == [0, 1], f"the BMC carried out {sets} for one off and one on"
