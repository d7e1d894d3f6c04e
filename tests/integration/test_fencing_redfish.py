"""``noderemedy.core.redfish_power`` and the Redfish driver against the lab's Redfish BMC.

The peer is sushy-tools' emulator (started on demand by the ``redfish_peer`` fixture; HTTPS with
its own CA, HTTP basic authentication). Every change is confirmed by a client someone else wrote,
fence-agents' ``fence_redfish``, and, with the control plane, by the node's power label that the
emulator's power hook sets.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest
from fencing_support import (
    assert_failed_unfenced,
    assert_no_secrets,
    assert_quartet,
    quartet_tasks,
)

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    AuthError,
    FenceConfigError,
    NotFoundError,
    UnreachableError,
    VerifyError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._redfish import RedfishDriver

pytestmark = pytest.mark.lab
MODULE = "noderemedy.core.redfish_power"
NODE = "lab-node-0"


# ------------------------------------------------------------------------------------ helpers
def agent_argv(ep: dict, uri: str, action: str) -> list[str]:
    """fence_redfish (fence-agents) against the emulator; --ssl-insecure: it has no CA option."""
    return [
        "/usr/sbin/fence_redfish", "-a", ep["host"], "-u", str(ep["port"]), "-l", ep["username"],
        "-p", ep["password"], "--ssl-insecure", "--systems-uri", uri, "-o", action,
    ]  # fmt: skip


def agent_status(ep: dict, uri: str) -> str:
    """The peer's power as fence_redfish reads it: 'ON' or 'OFF'."""
    out = subprocess.run(agent_argv(ep, uri, "status"), capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 2), out.stderr
    return out.stdout.strip().split()[-1]


def driver(ep: dict, node: str = NODE, **kw) -> RedfishDriver:
    args = {
        "ipaddr": ep["host"],
        "username": ep["username"],
        "password": ep["password"],
        "ipport": ep["port"],
        "ca_path": ep["ca_file"],
        "systems_uri": ep["systems"][node]["uri"],
        "poll_interval": 0.05,
        **kw,
    }
    return RedfishDriver(**args)


def args(ep: dict, state: str, node: str = NODE, **extra) -> dict:
    return {
        "ipaddr": ep["host"],
        "ipport": ep["port"],
        "username": ep["username"],
        "password": ep["password"],
        "ca_path": ep["ca_file"],
        "systems_uri": ep["systems"][node]["uri"],
        "state": state,
        "poll_interval": 0.05,
        "power_timeout": 10,
        **extra,
    }


def probe(ep: dict, name: str, node: str = NODE) -> dict:
    return {
        "name": name,
        "ansible.builtin.shell": " ".join(agent_argv(ep, ep["systems"][node]["uri"], "status"))
        + " | sed 's/^Status: //'",
        "changed_when": False,
        "no_log": False,
    }


def power_label(lab, node: str) -> str | None:
    out = lab.kubectl("get", "node", node, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["metadata"]["labels"].get("lab.noderemedy.io/power")


@pytest.fixture()
def play(run_playbook):
    return run_playbook


@pytest.fixture()
def rf(lab, redfish_peer):
    """The Redfish endpoint with lab-node-0's system on, before and after the test."""
    driver(redfish_peer).run("on")
    yield redfish_peer
    driver(redfish_peer).run("on")


# ------------------------------------------------------------------------------------ quartets
def test_off_quartet_confirmed_by_fence_redfish(lab, rf, play) -> None:
    res = play(quartet_tasks(MODULE, args(rf, "off"), lambda n: probe(rf, n)))
    assert_quartet(res, ["ON", "OFF", "OFF"])
    check1, apply1 = res.task("check1"), res.task("apply1")
    assert (
        check1["changed"] is True and check1["power_state"] == "off" and check1["power_state_before"] == "on"
    )
    assert check1["fence"]["verified"] is False, "check mode never claims a fence"
    assert check1["diff"] == {"before": {"power": "on"}, "after": {"power": "off"}}
    assert apply1["changed"] is True and apply1["power_state"] == "off"
    assert apply1["systems_uri"] == rf["systems"][NODE]["uri"]
    # the emulator takes power_delay seconds to switch: the read-back waited for it
    assert apply1["verify_seconds"] >= rf["power_delay"] * 0.9
    fence = apply1["fence"]
    assert fence["verified"] is True and fence["method"] == "redfish" and fence["state"] == "off"
    assert fence["target"] == f"{rf['host']}:{rf['port']}" and fence["verified_at"] > 0
    assert res.task("apply2")["changed"] is False and res.task("apply2")["fence"]["verified"] is True
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), rf["password"])


def test_on_quartet_confirmed_by_fence_redfish(lab, rf, play) -> None:
    driver(rf).run("off")
    res = play(quartet_tasks(MODULE, args(rf, "on"), lambda n: probe(rf, n)))
    assert_quartet(res, ["OFF", "ON", "ON"])
    apply1 = res.task("apply1")
    assert apply1["fence"]["verified"] is False and apply1["fence"]["state"] == "on"
    assert apply1["verify_seconds"] >= rf["power_delay"] * 0.9


def test_reboot_is_off_verified_then_on(lab, rf, play) -> None:
    res = play([{"name": "reboot", MODULE: args(rf, "reboot")}])
    out = res.task("reboot")
    assert out.get("failed") is not True, out
    assert out["changed"] is True and out["power_state_before"] == "on" and out["power_state"] == "on"
    assert out["fence"]["verified"] is True and out["fence"]["state"] == "off"
    assert agent_status(rf, rf["systems"][NODE]["uri"]) == "ON"


def test_status_of_an_off_system_is_evidence(lab, rf, play) -> None:
    driver(rf).run("off")
    res = play([{"name": "status", MODULE: args(rf, "status")}])
    out = res.task("status")
    assert out["changed"] is False and out["power_state"] == "off" and out["fence"]["verified"] is True
    assert agent_status(rf, rf["systems"][NODE]["uri"]) == "OFF"


def test_powering_off_is_not_off(lab, rf) -> None:
    """Read during the transition, the system shows PoweringOff: reported as such, no evidence."""
    drv = driver(rf)
    drv.open()
    try:
        drv.resolve()
        drv.set_state("system", "off")
        during = drv._run("status", check_mode=False)  # the same session, right after the reset
    finally:
        drv.close()
    assert during.state_after == "powering_off" and during.verified_off_at is None
    assert drv.evidence(during)["verified"] is False
    assert driver(rf).run("off").after == {rf["systems"][NODE]["uri"]: "off"}


def test_plug_names_the_system_in_the_collection(lab, rf) -> None:
    drv = driver(rf, systems_uri=None, plug=NODE)
    res = drv.run("status")
    assert res.after == {NODE: "on"} and drv.resolved_uri == rf["systems"][NODE]["uri"]
    with pytest.raises(NotFoundError, match="no system"):
        driver(rf, systems_uri=None, plug="no-such-node").run("status")
    with pytest.raises(FenceConfigError, match="give systems_uri or plug"):
        driver(rf, systems_uri=None).run("status")


def test_power_follows_into_the_node_heartbeat(lab_kube, rf) -> None:
    """The emulator's power hook relabels the node before the new state can be read."""
    drv = driver(rf, node="lab-node-2")
    drv.run("off")
    assert power_label(lab_kube, "lab-node-2") == "off"
    drv.run("on")
    assert power_label(lab_kube, "lab-node-2") == "on"


# ------------------------------------------------------------------------------------ faults
def test_wrong_password_is_an_auth_error(lab, rf, play) -> None:
    res = play([{"name": "bad", MODULE: args(rf, "off", password="not-the-password"), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "auth" and "401" in out["msg"]
    assert "not-the-password" not in json.dumps(out)
    assert agent_status(rf, rf["systems"][NODE]["uri"]) == "ON"
    with pytest.raises(AuthError):
        driver(rf, username="nobody").run("status")


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_unreachable(lab, rf, play) -> None:
    res = play(
        [{"name": "bad", MODULE: {**args(rf, "off"), "ipport": _free_tcp_port()}, "ignore_errors": True}]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "unreachable" and "cannot reach" in out["msg"]


def test_an_untrusted_certificate_is_refused(lab, rf) -> None:
    with pytest.raises(UnreachableError, match="TLS failed.*ca_path"):
        driver(rf, ca_path=None).run("status")
    assert driver(rf, ca_path=None, ssl_insecure=True).run("status").after


def test_a_bmc_that_accepts_off_and_stays_on_fails_verification(lab, rf, play) -> None:
    stuck = rf["stuck"]["uri"]
    bad = {**args(rf, "off"), "systems_uri": stuck, "power_timeout": 2}
    t0 = time.monotonic()
    res = play([{"name": "bad", MODULE: bad, "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "verify" and "not verified off within power_timeout=2s" in out["msg"]
    assert out["fence"]["state"] is None or out["fence"]["state"] != "off"
    assert time.monotonic() - t0 < 60
    assert agent_status(rf, stuck) == "ON"
    with pytest.raises(VerifyError):
        driver(rf, systems_uri=stuck, power_timeout=1).run("off")


def test_credentials_from_the_environment(lab, rf, play) -> None:
    task = {k: v for k, v in args(rf, "status").items() if k not in ("username", "password")}
    env = {"NODEREMEDY_REDFISH_USERNAME": rf["username"], "NODEREMEDY_REDFISH_PASSWORD": rf["password"]}
    res = play([{"name": "status", MODULE: task, "environment": env}])
    out = res.task("status")
    assert out.get("failed") is not True, out
    assert out["power_state"] == "on"
    assert_no_secrets(out, rf["password"])
