"""The node remedy design's own Configuration, verbatim (``tests/unit/runner/data/design-examples/``),
run by the real ``noderemedy-runner`` on the lab.

Before, it passed ``--check-config`` and then raised AttributeError in every reconcile (its
``repair`` remedy's ``env: ["secret-key"]`` / ``configmaps: [...]``): the node was never remedied.
Now a kwok node labelled ``type=compute`` (the example's ``nodeSelector``) whose Ready turns False
(the example's ``nodeConditionStatus: false``) for its 5 s gets a NodeFence whose first remedy,
``repair``, runs: its Job is created by the API server with the shorthand expanded
(``$SECRET_KEY`` from Secret ``remedy-repair``, ConfigMap ``fence-method-config`` mounted), and the
runner logs no exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import POLICY, FenceNamespace, fence_ns  # noqa: F401 - fixtures are used by name
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner, delete_nodefences, nodefences

from noderemedy_lab import conditions

pytestmark = [pytest.mark.lab, pytest.mark.kube]

EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "unit"
    / "runner"
    / "data"
    / "design-examples"
    / "remedy-configuration.yaml"
)
NODE = "lab-node-2"
COMPUTE = ("lab-node-0", "lab-node-1", "lab-node-2")  # 1 of 3 unhealthy: within the default storm guard


@pytest.fixture
def compute_nodes(lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace) -> Iterator[None]:  # noqa: F811
    """The example's ``type=compute`` on three kwok nodes; afterwards their own ``type`` label back
    (the lab's ``type=kwok``, which later tests select on), NODE Ready again, NodeFences and the
    remedy Jobs gone."""
    core = client.CoreV1Api(api)
    before = {node: (core.read_node(node).metadata.labels or {}).get("type") for node in COMPUTE}
    for node in COMPUTE:
        lab_kube.kubectl("label", "node", node, "type=compute", "--overwrite", check=True)
    yield
    delete_nodefences(api)
    client.BatchV1Api(api).delete_collection_namespaced_job(fence_ns.name, propagation_policy="Background")
    for node, value in before.items():
        lab_kube.kubectl(
            "label", "node", node, f"type={value}" if value else "type-", "--overwrite", check=True
        )
    conditions.release(lab_kube, NODE)
    lab_kube.wait_nodes([NODE], "True", 90)


@pytest.mark.timeout(300)
def test_the_design_example_configuration_runs_its_repair_remedy(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    compute_nodes: None,
    tmp_path: Path,
) -> None:
    snmp_dir = lab_kube.info["devices"]["snmp_persistent_dir"]
    r = Runner(
        lab_kube, fence_ns.name, tmp_path, "--poll-interval", "0.2", "--run-env", f"SNMP_PERSISTENT_DIR={snmp_dir}",
        *POLICY, config=EXAMPLE, identity="design-example",
    )  # fmt: skip
    try:
        conditions.hold(lab_kube, NODE)
        conditions.set_conditions(lab_kube, NODE, {"Ready": "False"}, reason="KubeletNotReady")
        batch = client.BatchV1Api(api)
        try:
            job = wait_for(
                lambda: next(
                    (
                        j
                        for j in batch.list_namespaced_job(fence_ns.name).items
                        if j.metadata.name == f"{NODE}-remedy-repair"
                    ),
                    None,
                ),
                90,
                f"Job {NODE}-remedy-repair",
            )
        except AssertionError as exc:
            tail = [ln.get("msg") for ln in r.lines() if ln.get("level") in ("warning", "error")][-5:]
            ready = lab_kube.node_ready([NODE])
            raise AssertionError(
                f"{exc}\nNodeFences: {nodefences(api)}\nReady: {ready}\nrunner: {tail}"
            ) from None
        pod = job.spec.template.spec
        (container,) = pod.containers
        assert container.image == "IMAGE:VERSION" and container.command == ["binary", "clean node command"]
        env = {e.name: e for e in container.env}
        ref = env["SECRET_KEY"].value_from.secret_key_ref
        assert (ref.name, ref.key) == ("remedy-repair", "secret-key")
        assert env["NODEREMEDY_NODE"].value == NODE
        assert [(m.name, m.mount_path, m.read_only) for m in container.volume_mounts] == [
            ("cm-fence-method-config", "/etc/noderemedy/configmaps/fence-method-config", True)
        ]
        assert [(v.name, v.config_map.name) for v in pod.volumes] == [
            ("cm-fence-method-config", "fence-method-config")
        ]
        nf = nodefences(api)[NODE]
        assert nf["spec"]["threshold"] == {
            "conditionType": "Ready",
            "statuses": ["False"],
            "periodSeconds": 5.0,
        }
        assert (nf["status"].get("remedy") or {}).get("name") == "repair", nf["status"]
        crashes = [ln for ln in r.lines() if "AttributeError" in str(ln) or "Traceback" in str(ln)]
        assert not crashes, crashes
        assert r.alive()
    finally:
        r.stop()
