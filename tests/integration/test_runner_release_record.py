"""Every release is recorded, even when its runner died (against the lab).

The runner is killed (SIGKILL) while the power-off run of a hung node releases its workloads,
again at later offsets until one kill lands after the out-of-service taint was applied and before
the runner recorded it (no ``OutOfServiceTaintAdded`` Event yet). A successor with an empty data
dir (the dead run's output lost) replays the power-off segment, finds the taint there and records
the release with the evidence its replay read back: one ``OutOfServiceTaintAdded`` Event on the
NodeFence and one on the Node, exactly once. The NodeFence then ends Final.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    OOS,
    FenceNamespace,
    conds,
    events_of,
    fence_ns,
    get_nf,
    nodefence,
    oos_on,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner
from test_runner_restart import NF, hung, in_flight  # noqa: F401 - hung is a fixture

pytestmark = [pytest.mark.lab, pytest.mark.kube]

#: Seconds after the taint is seen at which the kill lands, one attempt each, in this order.
OFFSETS = (0.0, 0.0, 0.2, 0.5)


def _added(api: client.ApiClient, obj: dict) -> list[Any]:
    return [e for e in events_of(api, obj) if e.reason == "OutOfServiceTaintAdded"]


def _added_on_node(api: client.ApiClient, obj: dict) -> list[Any]:
    uid = obj["metadata"]["uid"].replace("-", "")[:12]
    node = client.CoreV1Api(api).read_node(DEAD).to_dict()
    return [
        e for e in events_of(api, node) if e.reason == "OutOfServiceTaintAdded" and uid in e.metadata.name
    ]


@pytest.mark.timeout(900)
def test_a_release_whose_runner_died_is_recorded_once_by_its_successor(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung: str,  # noqa: F811
) -> None:
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    landed: dict[str, Any] | None = None
    tried: list[str] = []
    for offset in OFFSETS:
        name = f"nf-rec-{uuid.uuid4().hex[:4]}"
        pm_off = f"{name}-r0-power-management-a0"
        r = runner()
        nodefence(co, name, DEAD)
        wait_for(lambda: oos_on(core, DEAD), 240, f"the taint of NodeFence {name}", interval=0.05)
        seen = time.monotonic()
        while time.monotonic() < seen + offset:  # the chosen offset of this attempt
            time.sleep(0.01)
        running = in_flight(r, pm_off)
        r.kill9()
        obj = get_nf(co, name)
        recorded = _added(api, obj)
        where = (
            "inside the power-off run, after node_taint added the taint"
            if running
            else "after the power-off run ended, before the runner recorded it"
        )
        tried.append(f"+{offset:.1f} s: {'recorded already' if recorded else where}")
        if oos_on(core, DEAD) and not recorded:
            landed = {"name": name, "obj": obj, "where": where, "offset": offset}
            break
        # the kill came too late: start over with a new NodeFence
        co.delete_cluster_custom_object(*NF, name)
        lab_kube.kubectl("taint", "node", DEAD, f"{OOS}-")
        lab_kube.power_on(DEAD)
    assert landed is not None, f"no kill landed between the taint and its record: {tried}"
    name = landed["name"]
    print(
        f"\nFIGURE kill -9 between the taint and its record: +{landed['offset']:.1f} s, {landed['where']} ({tried})"
    )

    successor = runner()  # an empty data dir: the dead run's output is lost
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        300,
        f"NodeFence {name} Final under the successor",
    )
    co.delete_cluster_custom_object(*NF, name)
    assert final["status"]["status"] == "Final" and conds(final)["Succeeded"]["status"] == "True", final[
        "status"
    ]
    on_fence, on_node = _added(api, final), _added_on_node(api, final)
    assert len(on_fence) == 1 and len(on_node) == 1, (
        [e.message for e in on_fence],
        [e.message for e in on_node],
    )
    message = on_fence[0].message
    assert "recorded after its runner stopped: power_off verified by ipmi-off" in message, message
    assert "read back off" in message and on_node[0].message == message, (message, on_node[0].message)
    assert successor.logged("run .*power-management-a0: fence_step.yml")
    print(f"\nFIGURE the successor recorded: {message}")
