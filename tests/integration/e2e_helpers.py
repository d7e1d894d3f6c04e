"""Fixtures and helpers of noderemedy-runner's end-to-end tests against the lab (test_runner_e2e.py,
test_runner_e2e_faults.py, and the other integration modules that import them by name): the
runner's namespace with the fence ConfigMaps, templates and credentials Secrets (``fence_ns``, one
per module that imports it), a host runner with the tests' policy (``runner``; afterwards no
secret value may appear in its data dir, its log, any Event or any status), a dead node
(``dead``), Metal3Remediation objects made by hand (``metal3_ns``, :func:`metal3_objects`), and
readers of NodeFences, taints, Events, BMC power logs and the FC switch.

Nodes: lab-node-1 (DEAD) is the dead node of the NodeFence flows, lab-node-2 (OTHER) the
StatefulSet's other node and the wrong-password node, lab-node-0 (SPARE) the missing-template node
and the Metal3 host.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import apply, kjson, statefulset, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from runner_harness import Runner, delete_nodefences

from noderemedy_lab.workload import prefer_node
from noderemedy_runner.executor import private_dir_name

ROOT = Path(__file__).resolve().parents[2]
NF = ("remediation.noderemedy.io", "v1alpha1", "nodefences")
M3 = ("infrastructure.cluster.x-k8s.io", "v1beta1", "metal3remediations")
OOS = "node.kubernetes.io/out-of-service"
DEAD, OTHER, SPARE = "lab-node-1", "lab-node-2", "lab-node-0"


def fence_config(
    node: str, port: str, isolation: str, power: str, recovery: str, ipmi: str | None = None
) -> dict:
    ipmi_template = ipmi or f"fence-method-template-ipmi-{node}"
    return {
        "metadata": {"name": f"fence-config-{node}"},
        "data": {
            "config.properties": f"node_name={node}\nisolation={isolation}\npower_management={power}\nrecovery={recovery}\n",
            "fence-method-fc-off": f"template=fence-method-template-fc\nplug={port}\naction=off",
            "fence-method-fc-on": f"template=fence-method-template-fc\nplug={port}\naction=on",
            "fence-method-ipmi-off": f"template={ipmi_template}\naction=off",
            "fence-method-ipmi-on": f"template={ipmi_template}\naction=on",
        },
    }


class FenceNamespace:
    """The runner's namespace: per-node fence ConfigMaps, templates and credentials Secrets.
    ``host``: the address the templates give the devices (None: each device's own, 127.0.0.1; the
    lab's ``relay_host`` for a runner in a pod on a real node)."""

    def __init__(self, lab: Any, core: client.CoreV1Api, name: str, host: str | None = None) -> None:
        self.lab, self.core, self.name, self.host = lab, core, name, host

    def secret(self, name: str, data: dict[str, str]) -> None:
        """Secret ``name`` with ``data`` (stringData)."""
        self.put("secret", {"metadata": {"name": name}, "stringData": data})

    def template(self, name: str, properties: str) -> None:
        """Fence method template ConfigMap ``name`` (``template.properties``)."""
        self.put("config_map", {"metadata": {"name": name}, "data": {"template.properties": properties}})

    def fill(self) -> None:
        """The FC switch's template and Secret, and per lab node its BMC's template and Secret and
        the :meth:`standard` fence configuration."""
        dev = self.lab.info["devices"]
        fc = dev["snmp"]["fc"]
        self.secret("fc-switch", {"community": fc["community"]})
        self.template(
            "fence-method-template-fc",
            f"type=fc\nmodel=ifmib\naddress={self.host or fc['host']}:{fc['port']}\nsecret=fc-switch\nsnmp_version=2c\n",
        )
        for node, bmc in dev["bmcs"].items():
            self.secret(f"bmc-{node}", {"username": bmc["username"], "password": bmc["password"]})
            self.template(
                f"fence-method-template-ipmi-{node}",
                f"type=ipmi\naddress={self.host or bmc['host']}:{bmc['port']}\nsecret=bmc-{node}\ncipher=3\n",
            )
            self.standard(node)

    def put(self, kind: str, body: dict) -> None:
        create = getattr(self.core, f"create_namespaced_{kind}")
        replace = getattr(self.core, f"replace_namespaced_{kind}")
        try:
            create(self.name, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(body["metadata"]["name"], self.name, body)

    def standard(self, node: str) -> None:
        """isolation=fc-off, power_management=ipmi-off ipmi-on, recovery=fc-on."""
        port = self.lab.info["devices"]["fc_ports"][node]
        self.put("config_map", fence_config(node, port, "fc-off", "ipmi-off ipmi-on", "fc-on"))


@pytest.fixture(scope="module")
def fence_ns(lab_kube: Any, api: client.ApiClient) -> Iterator[FenceNamespace]:
    core = client.CoreV1Api(api)
    name = f"nr-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    ns = FenceNamespace(lab_kube, core, name)
    ns.fill()
    yield ns
    delete_nodefences(api)  # the next module on this lab starts without them
    core.delete_namespace(name)


POLICY = [
    "--grace-seconds", "0", "--step-retries", "1", "--retry-delay", "1", "--max-restarts", "1",
    "--restart-delay", "2", "--recovery-timeout", "240", "--run-deadline", "240",
    "--device-check-interval", "0",  # device checks: test_runner_device_check.py passes its own
]  # fmt: skip


@pytest.fixture
def runner(
    lab_kube: Any, fence_ns: FenceNamespace, tmp_path: Path, api: client.ApiClient
) -> Iterator[Callable[..., Runner]]:
    made: list[Runner] = []

    def make(*args: str) -> Runner:
        snmp_dir = lab_kube.info["devices"]["snmp_persistent_dir"]
        r = Runner(
            lab_kube, fence_ns.name, tmp_path, "--reconcile-only", "--poll-interval", "0.2",
            "--run-env", f"SNMP_PERSISTENT_DIR={snmp_dir}", *POLICY, *args, identity=f"runner{len(made)}",
        )  # fmt: skip
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()
    # a NodeFence this test left (a failure before it rested) would be cleaned up by the next test's
    # runner: its power-on landing in that test's power log
    delete_nodefences(api)
    extra = [
        base64.b64decode(v).decode()
        for sec in client.CoreV1Api(api).list_namespaced_secret(fence_ns.name).items
        for k, v in (sec.data or {}).items()
        if k != "username"  # user names are not secret (STYLE.md: never mask usernames)
    ]
    for r in made:
        assert_no_secret(lab_kube, api, r, extra)


def secret_values(lab: Any) -> list[str]:
    dev = lab.info["devices"]
    values = []
    for bmc in dev["bmcs"].values():
        values += [bmc["password"], bmc["operator"]["password"], bmc["user"]["password"]]
    for snmp in dev["snmp"].values():
        for key in ("community", "ro_community"):
            if snmp.get(key):
                values.append(snmp[key])
        v3 = snmp.get("v3") or {}
        values += [v for k, v in v3.items() if k in ("auth_key", "priv_key") and v]
    return [v for v in values if len(v) >= 6]


def assert_no_secret(lab: Any, api: client.ApiClient, r: Runner, extra: list[str]) -> None:
    """No secret value (the lab's, and ``extra``: every Secret value in the runner's namespace)
    in the runner's files (symlinks not followed), log, Events or statuses."""
    values = sorted({v.encode() for v in [*secret_values(lab), *extra] if len(v) >= 6})
    assert len(values) >= 6
    hits = []
    for dirpath, _dirs, files in os.walk(r.data_dir):
        for f in files:
            path = Path(dirpath) / f
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            hits += [f"{path}" for v in values if v in data]
    log = r.log_path.read_bytes() if r.log_path.exists() else b""
    hits += ["runner log" for v in values if v in log]
    co = client.CustomObjectsApi(api)
    events = json.dumps(client.CoreV1Api(api).list_event_for_all_namespaces().to_dict(), default=str).encode()
    hits += ["events" for v in values if v in events]
    statuses = json.dumps(
        [co.list_cluster_custom_object(*NF), co.list_cluster_custom_object(*M3)], default=str
    ).encode()
    hits += ["status" for v in values if v in statuses]
    assert not hits, f"secret values found in: {sorted(set(hits))}"
    assert r.log_path.exists() and r.data_dir.exists(), "the grep needs the runner's log and data dir"


def nodefence(co: client.CustomObjectsApi, name: str, node: str) -> dict:
    body = {
        "apiVersion": f"{NF[0]}/{NF[1]}",
        "kind": "NodeFence",
        "metadata": {"name": name},
        "spec": {"node": node},
    }
    return co.create_cluster_custom_object(*NF, body)


def get_nf(co: client.CustomObjectsApi, name: str) -> dict:
    return co.get_cluster_custom_object(*NF, name)


def gone(co: client.CustomObjectsApi, name: str) -> bool:
    """Whether NodeFence ``name`` no longer exists."""
    try:
        co.get_cluster_custom_object(*NF, name)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def private_dir(r: Runner, obj: dict) -> Path:
    """The runner's private data dir of this NodeFence (name and uid)."""
    return (
        r.data_dir
        / "runs"
        / private_dir_name("NodeFence", obj["metadata"]["name"], None, obj["metadata"]["uid"])
    )


def taint_present(lab: Any, node: str) -> bool:
    return any(t.get("key") == OOS for t in kjson(lab, "get", "node", node)["spec"].get("taints") or [])


def oos_on(core: client.CoreV1Api, node: str) -> bool:
    """Whether ``node`` carries the out-of-service taint (one GET through the API client)."""
    return any(t.key == OOS for t in core.read_node(node).spec.taints or [])


def events_of(api: client.ApiClient, obj: dict) -> list[Any]:
    ns = obj["metadata"].get("namespace") or "default"
    items = (
        client.CoreV1Api(api)
        .list_namespaced_event(ns, field_selector=f"involvedObject.uid={obj['metadata']['uid']}")
        .items
    )
    return sorted(items, key=lambda e: e.first_timestamp or 0)


def events_with(api: client.ApiClient, obj: dict, *reasons: str, timeout: float = 30.0) -> list[Any]:
    """The Events of ``obj`` (as :func:`events_of`) once each of ``reasons`` has at least one.

    The runner writes an Event after the status write it reports (an Event is best effort), so a
    test that has just seen a status must wait for its Event rather than read once.
    AssertionError naming the reasons still missing after ``timeout`` seconds."""

    def all_there() -> list[Any] | None:
        events = events_of(api, obj)
        have = {e.reason for e in events}
        return events if all(r in have for r in reasons) else None

    return wait_for(all_there, timeout, f"Events {list(reasons)} of {obj['metadata']['name']}")


def conds(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


@pytest.fixture
def dead(lab_kube: Any) -> Iterator[str]:
    """lab-node-1 powered off and NotReady; afterwards taint removed, powered on, Ready."""
    lab_kube.power_off(DEAD)
    lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    yield DEAD
    lab_kube.kubectl("taint", "node", DEAD, f"{OOS}-")
    lab_kube.power_on(DEAD)
    lab_kube.wait_nodes([DEAD], "True", 120)


def db_statefulset(lab: Any, ns: str, tmp: Path) -> None:
    """StatefulSet ``db`` (one pod) preferring the dead node, allowed on the other one too."""
    pod = {
        "affinity": prefer_node(DEAD, [DEAD, OTHER]),
        "containers": [{"name": "db", "image": "registry.invalid/db:1"}],
    }
    apply(lab, tmp, statefulset(ns, "db", pod))


def db0(lab: Any, ns: str) -> dict | None:
    items = kjson(lab, "get", "pods", "-n", ns, "-l", "app=db")["items"]
    return items[0] if items else None


def power_log(lab: Any, node: str) -> str:
    path = Path(lab.info["devices"]["bmcs"][node]["power_log"])
    return path.read_text() if path.exists() else ""


def fc_state(lab: Any, node: str) -> Any:
    state = json.loads(Path(lab.info["devices"]["snmp"]["fc"]["state_file"]).read_text())
    return state


def run_until(
    co: client.CustomObjectsApi, name: str, final: set[str], timeout: float, tick: Callable[[dict], None]
) -> dict:
    """Poll the NodeFence until ``status.status`` is in ``final``; ``tick`` sees every read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        obj = get_nf(co, name)
        tick(obj)
        if (obj.get("status") or {}).get("status") in final:
            return obj
        time.sleep(0.1)
    raise AssertionError(
        f"NodeFence {name} not in {final} after {timeout} s: {get_nf(co, name).get('status')}"
    )


@pytest.fixture
def metal3_ns(lab_kube: Any, api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"m3-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def metal3_objects(
    lab: Any, api: client.ApiClient, ns: str, machine: str, node: str, bmc_node: str, spec: dict
) -> None:
    co = client.CustomObjectsApi(api)
    bmc = lab.info["devices"]["bmcs"][bmc_node]
    client.CoreV1Api(api).create_namespaced_secret(
        ns,
        {
            "metadata": {"name": f"{machine}-bmc"},
            "stringData": {"username": bmc["username"], "password": bmc["password"]},
        },
    )
    co.create_namespaced_custom_object(
        "metal3.io", "v1alpha1", ns, "baremetalhosts",
        {"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost", "metadata": {"name": f"{machine}-host"},
         "spec": {"online": True, "bmc": {"address": f"ipmi://{bmc['host']}:{bmc['port']}", "credentialsName": f"{machine}-bmc"}}},
    )  # fmt: skip
    co.create_namespaced_custom_object(
        "cluster.x-k8s.io", "v1beta1", ns, "machines",
        {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
         "metadata": {"name": machine, "annotations": {"metal3.io/BareMetalHost": f"{ns}/{machine}-host"}},
         "spec": {"clusterName": "lab", "bootstrap": {}, "infrastructureRef": {"kind": "Metal3Machine", "name": machine}}},
    )  # fmt: skip
    co.patch_namespaced_custom_object_status(
        "cluster.x-k8s.io",
        "v1beta1",
        ns,
        "machines",
        machine,
        {"status": {"nodeRef": {"kind": "Node", "name": node}}},
    )
    co.create_namespaced_custom_object(
        *M3[:2], ns, M3[2],
        {"apiVersion": f"{M3[0]}/{M3[1]}", "kind": "Metal3Remediation",
         "metadata": {"name": machine, "annotations": {"remediation.noderemedy.io/runner": "true"}}, "spec": spec},
    )  # fmt: skip
