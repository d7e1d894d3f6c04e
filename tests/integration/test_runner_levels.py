"""Fencing levels (Pacemaker's fencing topology) end to end against the lab.

A node whose BMC died with it: ``power_management=ipmi-off ipmi-on | pdu-off pdu-on`` with the
BMC's address answering nothing. Level 1 fails at the IPMI ``off``, level 2 powers the node off
through its rack PDU outlet (the lab's snmpd APC rPDU, outlet per node) and on again. Workloads
are released (out-of-service taint) only after the PDU outlet was set off and read back off,
by the level 2 run; each level's outcome is in ``status.fenceLevels`` and in an Event.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    FenceNamespace,
    Runner,
    events_with,
    fence_ns,
    get_nf,
    nodefence,
    oos_on,
    runner,
)
from kubernetes import client

from noderemedy_lab.config import POWER_LABEL

pytestmark = [pytest.mark.lab, pytest.mark.kube]

OOS = "node.kubernetes.io/out-of-service"


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 nothing listens on (the dead BMC's address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def outlet_sets(lab: Any, node: str) -> list[tuple[float, int]]:
    """(epoch, value) of every rPDUOutletControl SET of ``node``'s outlet (1 on, 2 off), from the
    PDU's own SET log."""
    outlet = str(lab.info["devices"]["outlets"][node])
    state = json.loads(Path(lab.info["devices"]["snmp"]["apc-rpdu"]["state_file"]).read_text())
    return [(float(at), int(v)) for at, port, v in state.get("log", []) if str(port) == outlet]


@pytest.fixture
def dead_with_its_bmc(lab_kube: Any, fence_ns: FenceNamespace) -> Iterator[str]:  # noqa: F811
    """lab-node-1 NotReady (kwok's power label off) and its fence configuration's BMC at an
    address where nothing answers; level 2 is its rack PDU outlet. Afterwards: label on, taint
    removed, the standard configuration back, Ready."""
    dev = lab_kube.info["devices"]
    rpdu = dev["snmp"]["apc-rpdu"]
    fence_ns.secret("rpdu", {"community": rpdu["community"]})
    fence_ns.template(
        "fence-method-template-rpdu",
        f"type=pdu\nmodel=apc-rpdu\naddress={rpdu['host']}:{rpdu['port']}\nsecret=rpdu\nsnmp_version=2c\n",
    )
    fence_ns.template(
        f"fence-method-template-ipmi-dead-{DEAD}",
        f"type=ipmi\naddress=127.0.0.1:{free_udp_port()}\nsecret=bmc-{DEAD}\ncipher=3\n",
    )
    outlet = dev["outlets"][DEAD]
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": f"fence-config-{DEAD}"},
            "data": {
                "config.properties": f"node_name={DEAD}\nisolation=\n"
                "power_management=ipmi-off ipmi-on | pdu-off pdu-on\nrecovery=\n",
                "fence-method-ipmi-off": f"template=fence-method-template-ipmi-dead-{DEAD}\naction=off",
                "fence-method-ipmi-on": f"template=fence-method-template-ipmi-dead-{DEAD}\naction=on",
                "fence-method-pdu-off": f"template=fence-method-template-rpdu\nplug={outlet}\naction=off",
                "fence-method-pdu-on": f"template=fence-method-template-rpdu\nplug={outlet}\naction=on",
            },
        },
    )
    out = lab_kube.kubectl("label", "node", DEAD, f"{POWER_LABEL}=off", "--overwrite")
    assert out.returncode == 0, out.stderr
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    yield DEAD
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS}-")
    lab_kube.kubectl("label", "node", DEAD, f"{POWER_LABEL}=on", "--overwrite")
    fence_ns.standard(DEAD)
    lab_kube.wait_nodes([DEAD], "True", 120)


@pytest.mark.timeout(600)
def test_a_node_whose_bmc_died_with_it_is_fenced_through_its_pdu_level(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead_with_its_bmc: str,
) -> None:
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    bmc_log = Path(lab_kube.info["devices"]["bmcs"][DEAD]["power_log"])
    bmc_before = bmc_log.read_text() if bmc_log.exists() else ""
    start = time.time()
    name = f"nf-levels-{uuid.uuid4().hex[:6]}"
    runner()
    nodefence(co, name, DEAD)
    seen: dict[str, Any] = {"taint_at": None, "taint_while_level_1": False, "relabelled": False}
    deadline = time.monotonic() + 300
    obj: dict = {}
    while time.monotonic() < deadline:
        obj = get_nf(co, name)
        st = obj.get("status") or {}
        run = st.get("currentRun") or {}
        tainted = oos_on(core, DEAD)
        if tainted and seen["taint_at"] is None:
            seen["taint_at"] = time.time()
        if tainted and run.get("level", 1) == 1 and st.get("step") == "PowerManagement" and run:
            seen["taint_while_level_1"] = True
        if st.get("status") == "Done" and not run and not seen["relabelled"] and seen["taint_at"]:
            # the PDU level cycled the outlet; the machine behind it "boots": kwok heartbeats again
            lab_kube.kubectl("label", "node", DEAD, f"{POWER_LABEL}=on", "--overwrite", check=True)
            seen["relabelled"] = True
        if st.get("status") in ("Final", "Error"):
            break
        time.sleep(0.2)
    st = obj["status"]
    assert st["status"] == "Final", st

    # level 1 failed (the BMC answers nothing), level 2 (the PDU) fenced, in that order
    levels = [(lv["step"], lv["level"], lv["result"]) for lv in st["fenceLevels"]]
    assert levels == [("PowerManagement", 1, "Failed"), ("PowerManagement", 2, "Succeeded")], st
    assert st["fenceLevels"][1]["methods"] == "pdu-off pdu-on"
    assert any("-l2" in j for j in st["jobs"]) and not any("-l2" in j for j in st["jobs"][:1])

    # the release came after the PDU outlet was set off, by the level 2 run, never during level 1
    assert seen["taint_at"] is not None and not seen["taint_while_level_1"], seen
    sets = [(at, v) for at, v in outlet_sets(lab_kube, DEAD) if at >= start]
    assert [v for _at, v in sets] == [2, 1], sets  # off, then on: one power cycle at the outlet
    assert sets[0][0] <= seen["taint_at"], (sets, seen)
    events = events_with(api, obj, "FenceLevelFailed", "FenceLevelSucceeded", "OutOfServiceTaintAdded")
    reasons = [e.reason for e in events]
    assert "FenceLevelFailed" in reasons and "FenceLevelSucceeded" in reasons, reasons
    assert reasons.index("FenceLevelFailed") < reasons.index("FenceLevelSucceeded")
    added = [e.message for e in events if e.reason == "OutOfServiceTaintAdded"]
    assert added and "power_off verified in run" in added[0] and "-power-management-a0-l2" in added[0], added
    failed = next(e.message for e in events if e.reason == "FenceLevelFailed")
    assert "level 1 (ipmi-off ipmi-on) failed" in failed, failed
    # the BMC's own log: nothing reached it
    assert (bmc_log.read_text() if bmc_log.exists() else "") == bmc_before
    assert not oos_on(core, DEAD)
