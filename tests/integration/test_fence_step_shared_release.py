"""A rack's power fence settled in the fence step's first play, against the lab's APC rack PDU
(Net-SNMP snmpd, PowerNet-MIB), its kwok nodes (NotReady through the real node lifecycle controller
once their outlets are off) and the lab's API server: ``playbooks/fence_step.yml`` run as the
runner's batches run it, one inventory host per NodeFence and ``noderemedy_shared_device``.

Three nodes of a rack lose power (every outlet off in one SET). One batch of four hosts on the PDU:
two release workloads, one releases nothing, and one names a node the cluster does not have. One
``pdu_outlet`` call switches and reads back the four outlets; the filter ``shared_step`` settles
every host's step from its own outlet's read-back, and one ``node_release`` call taints the two
nodes that release, each with its own outlet's evidence, and refuses the unknown node only. No
host runs the step play's evidence or release task: the play ends at once for the hosts it settled.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import FenceNamespace, fence_ns  # noqa: F401 - fixture used by name
from kube_helpers import kjson
from test_fence_step_shared import EVIDENCE_TASK, run_step, served

from noderemedy_lab.rack import Rack

pytestmark = [pytest.mark.lab, pytest.mark.kube]

PLAY1 = "Switch the plugs of the hosts that share a device in one call"
STEP = "Run one fence step of a NodeFence"
SHARED_RELEASE = "Release the workloads of the hosts whose own plug read back a power fence, in one call"
OWN_RELEASE = (
    "Release the node's workloads on this run's verified fence (taint, or the pods on fenced storage)"
)
OOS = "node.kubernetes.io/out-of-service"
NOT_READY = {"False", "Unknown"}


def pdu_method(lab: Any, plug: str, state: str) -> dict[str, Any]:
    """A ``methods`` entry as the runner passes it (``FenceMethod.to_extravars``) for the lab's APC
    rack PDU, as the rack's fence configuration templates it (``Rack.fence_configuration``)."""
    pdu = lab.info["devices"]["snmp"]["apc-rpdu"]
    return {
        "name": f"pdu-{state}", "module": "noderemedy.core.pdu_outlet", "device_type": "pdu", "model": "apc-rpdu",
        "profile": "apc_rpdu", "address": f"{pdu['host']}:{pdu['port']}", "ipaddr": pdu["host"], "ipport": pdu["port"],
        "plug": plug, "action": state, "state": state, "options": {}, "template": "fence-method-template-rack-pdu",
        "secret_name": "rack-pdu",
    }  # fmt: skip


def oos_added(lab: Any, node: str) -> float | None:
    """When ``node`` got the out-of-service taint (epoch seconds), None without it."""
    for t in kjson(lab, "get", "node", node)["spec"].get("taints") or []:
        if t["key"] == OOS:
            return datetime.fromisoformat(t["timeAdded"].replace("Z", "+00:00")).timestamp()
    return None


@pytest.fixture
def rack(lab_kube: Any, fence_ns: FenceNamespace) -> Iterator[Rack]:  # noqa: F811
    """The lab's first three nodes as a rack on the APC PDU, and the PDU's credentials Secret in
    the fence namespace; afterwards untainted, every outlet on and every node Ready."""
    nodes = list(lab_kube.info["nodes"])
    lab_kube.wait_nodes(nodes, "True", 120)
    the_rack = Rack(lab_kube, nodes[:3]).start()
    fence_ns.secret("rack-pdu", {"community": the_rack.pdu["community"]})
    try:
        yield the_rack
    finally:
        for node in nodes[:3]:
            lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        the_rack.stop()
        lab_kube.wait_nodes(nodes, "True", 120)


def test_one_call_releases_each_node_of_the_rack_on_its_own_outlet_and_refuses_only_the_unknown_node(
    lab_kube: Any,
    rack: Rack,
    fence_ns: FenceNamespace,  # noqa: F811
    tmp_path: Path,
    collections_path: Path,
) -> None:
    n0, n1, n2 = rack.nodes
    # an outlet of the PDU no node of the lab hangs on (the lab's PDU has spare outlets)
    spare = str(max(int(o) for o in lab_kube.info["devices"]["outlets"].values()) + 1)
    outlets = {n: str(o) for n, o in rack.outlets.items()}
    rack.power_loss()
    lab_kube.wait_nodes(rack.nodes, NOT_READY, 90)
    plugs = {"nf-a": outlets[n0], "nf-b": outlets[n1], "nf-c": outlets[n2],
             "nf-d": spare}  # fmt: skip
    host_vars = {
        "nf-a": {"node": n0, "release_workloads": True},
        "nf-b": {"node": n1, "release_workloads": True, "fence_max_age": 120},
        "nf-c": {"node": n2, "release_workloads": False},
        "nf-d": {"node": "no-such-node", "release_workloads": True},
    }
    try:
        res = run_step(lab_kube, fence_ns, tmp_path, plugs, "off", collections_path, method=pdu_method,
                       host_vars=host_vars)  # fmt: skip
    finally:  # the spare outlet back on (the rack's own: the fixture)
        run_step(
            lab_kube, fence_ns, tmp_path, {"nf-d": plugs["nf-d"]}, "on", collections_path, method=pdu_method
        )

    settled = served(res)
    assert sorted(settled) == ["nf-a", "nf-b", "nf-c", "nf-d"], settled
    assert settled["nf-c"]["release"] is None and settled["nf-c"]["reading"]["kind"] == "power_off"
    calls = res[PLAY1][SHARED_RELEASE]
    assert len(calls) == 1, f"one release call for the batch, got {sorted(calls)}"
    call = next(iter(calls.values()))
    assert call["released"] == [n0, n1] and call["refused"] == ["no-such-node"], call
    by_node = {r["node"]: r for r in call["nodes"]}
    assert by_node["no-such-node"]["reason"] == "not_found", by_node["no-such-node"]
    step = res[STEP]
    assert OWN_RELEASE not in step and EVIDENCE_TASK not in step, (
        f"the step play ran for no host: {sorted(step)}"
    )

    pdu = f"{rack.pdu['host']}:{rack.pdu['port']}"
    for host, node in (("nf-a", n0), ("nf-b", n1)):
        evidence = settled[host]["evidence"]
        assert evidence["verified"] is True and evidence["plugs"] == [plugs[host]], (host, evidence)
        assert evidence["target"] == pdu and by_node[node]["fence"]["plugs"] == [plugs[host]], by_node[node]
        added = oos_added(lab_kube, node)
        assert added is not None and added >= int(evidence["verified_at"]), (node, added, evidence)
    assert oos_added(lab_kube, n2) is None, "a run that releases nothing taints nothing"
    print(
        f"\nFIGURE shared PDU step: 4 hosts, 1 pdu_outlet call, 1 node_release call: released {call['released']}"
    )
