"""``noderemedy.core.vmware_vm_power`` and the vSphere driver against the lab's vCenter.

The peer is govmomi's vCenter simulator (the engine of ``vcsim``, built from the Go module proxy,
started on demand by the ``vsphere_peer`` fixture; HTTPS with its own CA, a per-run login). Every
change is confirmed by a second pyvmomi session reading the VM, and, with the control plane, by
the node's power label that the simulator's power hook sets. fence-agents' ``fence_vmware_soap``
cannot be the confirming client here: it loads the vSphere WSDL from the server, which the
simulator does not serve (docs/fencing.md).
"""

from __future__ import annotations

import json
import socket
import ssl
import time

import pytest
from fencing_support import (
    assert_failed_unfenced,
    assert_no_secrets,
    assert_quartet,
    quartet_tasks,
)
from pyVim.connect import Disconnect, SmartConnect
from pyVim.task import WaitForTask
from pyVmomi import vim

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    AuthError,
    NotFoundError,
    UnreachableError,
    VerifyError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError
from ansible_collections.noderemedy.core.plugins.module_utils._taint import validate_fence_evidence
from ansible_collections.noderemedy.core.plugins.module_utils._vmware import VmwareVmDriver

pytestmark = pytest.mark.lab
MODULE = "noderemedy.core.vmware_vm_power"
NODE = "lab-node-0"


def peer_state(ep: dict, vm_name: str, power_off: bool = False) -> str:
    """The VM's runtime.powerState, read in a session of its own; ``power_off``: first power the VM
    off in that session with PowerOffVM_Task and wait for the task (raises if the task fails)."""
    si = SmartConnect(
        host=ep["host"],
        port=ep["port"],
        user=ep["username"],
        pwd=ep["password"],
        sslContext=ssl.create_default_context(cafile=ep["ca_file"]),
    )
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        vm = next(v for v in view.view if v.name == vm_name)
        if power_off:
            WaitForTask(vm.PowerOffVM_Task())
        return str(vm.runtime.powerState)
    finally:
        Disconnect(si)


def driver(ep: dict, node: str = NODE, **kw) -> VmwareVmDriver:
    args = {"ipport": ep["port"], "ca_path": ep["ca_file"], "poll_interval": 0.05, **kw}
    return VmwareVmDriver(ep["host"], ep["username"], ep["password"], ep["vms"][node], **args)


def args(ep: dict, state: str, node: str = NODE, **extra) -> dict:
    return {
        "ipaddr": ep["host"],
        "ipport": ep["port"],
        "username": ep["username"],
        "password": ep["password"],
        "ca_path": ep["ca_file"],
        "plug": ep["vms"][node],
        "state": state,
        "poll_interval": 0.05,
        "power_timeout": 10,
        **extra,
    }


def probe(ep: dict, name: str, node: str = NODE) -> dict:
    script = (
        "import ssl,sys;from pyVim.connect import SmartConnect;from pyVmomi import vim;"
        f"si=SmartConnect(host='{ep['host']}',port={ep['port']},user='{ep['username']}',pwd=sys.stdin.read().strip(),"
        f"sslContext=ssl.create_default_context(cafile='{ep['ca_file']}'));c=si.RetrieveContent();"
        "v=c.viewManager.CreateContainerView(c.rootFolder,[vim.VirtualMachine],True);"
        f"print(next(str(x.runtime.powerState) for x in v.view if x.name=='{ep['vms'][node]}'))"
    )
    return {
        "name": name,
        "ansible.builtin.command": {
            "argv": ["{{ ansible_playbook_python }}", "-c", script],
            "stdin": ep["password"],
        },
        "changed_when": False,
    }


@pytest.fixture()
def play(run_playbook):
    return run_playbook


@pytest.fixture()
def vs(lab, vsphere_peer):
    """The vCenter endpoint with lab-node-0's VM on, before and after the test."""
    driver(vsphere_peer).run("on")
    yield vsphere_peer
    driver(vsphere_peer).run("on")


def test_off_quartet_confirmed_by_another_session(lab, vs, play) -> None:
    res = play(quartet_tasks(MODULE, args(vs, "off"), lambda n: probe(vs, n)))
    assert_quartet(res, ["poweredOn", "poweredOff", "poweredOff"])
    check1, apply1 = res.task("check1"), res.task("apply1")
    assert check1["changed"] is True and check1["fence"]["verified"] is False
    assert check1["diff"] == {"before": {"power": "on"}, "after": {"power": "off"}}
    fence = apply1["fence"]
    assert fence["verified"] is True and fence["method"] == "vmware" and fence["state"] == "off"
    assert fence["plugs"] == [vs["vms"][NODE]]
    assert res.task("apply2")["changed"] is False and res.task("apply2")["fence"]["verified"] is True
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), vs["password"])


def test_on_quartet(lab, vs, play) -> None:
    driver(vs).run("off")
    res = play(quartet_tasks(MODULE, args(vs, "on"), lambda n: probe(vs, n)))
    assert_quartet(res, ["poweredOff", "poweredOn", "poweredOn"])
    assert res.task("apply1")["fence"]["verified"] is False


def test_reboot_and_status(lab, vs, play) -> None:
    res = play(
        [{"name": "reboot", MODULE: args(vs, "reboot")}, {"name": "status", MODULE: args(vs, "status")}]
    )
    reboot, status = res.task("reboot"), res.task("status")
    assert reboot.get("failed") is not True, reboot
    assert reboot["fence"]["verified"] is True and reboot["power_state"] == "on"
    assert (
        status["changed"] is False and status["power_state"] == "on" and status["fence"]["verified"] is False
    )
    driver(vs).run("off")
    assert driver(vs).run("status").verified_off_at is not None
    assert peer_state(vs, vs["vms"][NODE]) == "poweredOff"


def test_power_follows_into_the_node_heartbeat(lab_kube, vs) -> None:
    def label() -> str | None:
        out = lab_kube.kubectl("get", "node", "lab-node-2", "-o", "json")
        return json.loads(out.stdout)["metadata"]["labels"].get("lab.noderemedy.io/power")

    driver(vs, node="lab-node-2").run("off")
    assert label() == "off"
    driver(vs, node="lab-node-2").run("on")
    assert label() == "on"


def test_wrong_password_is_an_auth_error(lab, vs, play) -> None:
    res = play([{"name": "bad", MODULE: args(vs, "off", password="not-the-password"), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "auth" and "login refused" in out["msg"]
    assert "not-the-password" not in json.dumps(out)
    assert peer_state(vs, vs["vms"][NODE]) == "poweredOn"
    with pytest.raises(AuthError):
        VmwareVmDriver(
            vs["host"], "nobody", "x", vs["vms"][NODE], ipport=vs["port"], ca_path=vs["ca_file"]
        ).run("status")


def test_a_vm_that_accepts_off_and_stays_on_fails_verification_and_releases_nothing(lab, vs, play) -> None:
    stuck = vs["stuck_vm"]
    # the peer's behaviour, seen by a plain pyvmomi session: the power-off task succeeds, the VM stays on
    assert peer_state(vs, stuck, power_off=True) == "poweredOn"
    t0 = time.monotonic()
    res = play(
        [
            {
                "name": "bad",
                MODULE: {**args(vs, "off"), "plug": stuck, "power_timeout": 2},
                "ignore_errors": True,
            }
        ]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "verify" and "not verified off within power_timeout=2s" in out["msg"], out["msg"]
    assert out["fence"]["state"] != "off"
    assert time.monotonic() - t0 < 60
    with pytest.raises(KubeError, match="fence_evidence.verified: must be true"):
        validate_fence_evidence(out["fence"], 300, time.time())
    assert peer_state(vs, stuck) == "poweredOn"
    with pytest.raises(VerifyError, match="not verified off within power_timeout=1s"):
        VmwareVmDriver(
            vs["host"], vs["username"], vs["password"], stuck, ipport=vs["port"], ca_path=vs["ca_file"],
            power_timeout=1, poll_interval=0.05,
        ).run("off")  # fmt: skip


def test_unknown_vm_untrusted_certificate_and_nothing_listening(lab, vs) -> None:
    with pytest.raises(NotFoundError, match="no VM"):
        VmwareVmDriver(
            vs["host"], vs["username"], vs["password"], "no-such-vm", ipport=vs["port"], ca_path=vs["ca_file"]
        ).run("status")
    with pytest.raises(UnreachableError, match="TLS failed"):
        VmwareVmDriver(vs["host"], vs["username"], vs["password"], vs["vms"][NODE], ipport=vs["port"]).run(
            "status"
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UnreachableError, match="cannot reach"):
        VmwareVmDriver(vs["host"], vs["username"], vs["password"], "vm", ipport=port, ssl_insecure=True).run(
            "status"
        )
