"""The lab's rack (noderemedy_lab.rack) over the session lab's kwok nodes: both rack failures are
real at the devices.

* Power loss: one SNMP SET turns every outlet off at the PDU, the PDU reads them back off, and the
  real node lifecycle controller turns every node NotReady; the BMCs still answer, saying their
  chassis is on (the outlet, not the BMC, cut the power).
* Switch loss: every node turns NotReady while its BMC and its outlet keep saying power on; a power
  cut through one node's BMC (what a fence does) then takes that node's power label off.

Each fixture restores the rack and waits until every node is Ready again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_helpers import wait_for
from kubernetes import client

from noderemedy_lab.config import POWER_LABEL
from noderemedy_lab.rack import UNREACHABLE, Rack

pytestmark = [pytest.mark.lab, pytest.mark.kube]
NOT_READY = {"False", "Unknown"}


@pytest.fixture
def rack(lab_kube: Any) -> Iterator[Rack]:
    """Every kwok node of the session lab wired as a rack; afterwards unwired and all Ready."""
    nodes = list(lab_kube.info["nodes"])
    lab_kube.wait_nodes(nodes, "True", 120)
    the_rack = Rack(lab_kube, nodes).start()
    try:
        yield the_rack
    finally:
        the_rack.stop()
        for node in nodes:
            if the_rack.bmc_power(node) == "off":
                lab_kube.power_on(node)
        lab_kube.wait_nodes(nodes, "True", 120)


def labels(lab: Any, nodes: list[str]) -> dict[str, str]:
    api = client.CoreV1Api(lab.api_client())
    return {
        n: (api.read_node(n, _request_timeout=10).metadata.labels or {}).get(POWER_LABEL, "") for n in nodes
    }


def test_power_loss_turns_every_outlet_off_and_every_node_not_ready(lab_kube: Any, rack: Rack) -> None:
    nodes = rack.nodes
    rack.power_loss()
    assert rack.outlet_states() == dict.fromkeys(nodes, "off")
    assert labels(lab_kube, nodes) == dict.fromkeys(nodes, "off")
    lab_kube.wait_nodes(nodes, NOT_READY, 90)
    assert {n: rack.bmc_power(n) for n in nodes} == dict.fromkeys(nodes, "on")
    # the PDU's own log holds one immediateOff (2) per outlet
    logs = rack.device_logs()
    assert all(logs[n]["outlet"] and logs[n]["outlet"][-1][1] == 2 for n in nodes)

    rack.power_restore()
    assert rack.outlet_states() == dict.fromkeys(nodes, "on")
    lab_kube.wait_nodes(nodes, "True", 90)


def test_switch_loss_keeps_the_power_on_until_a_fence_cuts_it(lab_kube: Any, rack: Rack) -> None:
    nodes = rack.nodes
    rack.switch_loss()
    assert labels(lab_kube, nodes) == dict.fromkeys(nodes, UNREACHABLE)
    lab_kube.wait_nodes(nodes, NOT_READY, 90)
    assert rack.outlet_states() == dict.fromkeys(nodes, "on")
    assert {n: rack.bmc_power(n) for n in nodes} == dict.fromkeys(nodes, "on")

    # a power fence through the first node's BMC: that node is off, the others still powered
    lab_kube.power_off(nodes[0])
    assert rack.bmc_power(nodes[0]) == "off"
    wait_for(lambda: labels(lab_kube, nodes)[nodes[0]] == "off", 30, f"{nodes[0]} labelled off")
    assert all(labels(lab_kube, nodes[1:])[n] == UNREACHABLE for n in nodes[1:])

    # the switch back: the powered nodes heartbeat again, the fenced one stays down until its BMC
    # powers it on
    rack.switch_restore()
    lab_kube.wait_nodes(nodes[1:], "True", 90)
    assert labels(lab_kube, [nodes[0]]) == {nodes[0]: "off"}
    lab_kube.power_on(nodes[0])
    lab_kube.wait_nodes(nodes, "True", 90)
