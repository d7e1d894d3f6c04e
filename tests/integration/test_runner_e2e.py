"""noderemedy-runner end to end against the lab: the runner (``noderemedy-runner --reconcile-only``:
the NodeFences are the tests' own) drives NodeFence and Metal3Remediation objects on the real
kube-apiserver, running the real playbooks (ansible-runner) against the real ipmi_sim BMCs and the
snmpd FC switch, with kwok nodes turned NotReady by cutting their BMC power.

Nodes: lab-node-1 is the dead node of the NodeFence flows, lab-node-2 the StatefulSet's other
node and the wrong-password node, lab-node-0 the missing-template node and the Metal3 host.
After every test no secret value (BMC passwords, SNMP communities and keys) may appear in the
runner's data dir (artifacts), its log, any Event, or any status.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import statistics
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
from noderemedy_runner.executor import Executor, private_dir_name
from noderemedy_runner.kube.errors import Conflict
from noderemedy_runner.kube.resources import NODEFENCE as NF_CRD
from noderemedy_runner.kube.resources import KubeIO

pytestmark = [pytest.mark.lab, pytest.mark.kube]

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


# --- NodeFence: the whole flow ---------------------------------------------------------------------
def test_nodefence_fences_releases_and_recovers_a_dead_node(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,
    runner: Callable[..., Runner],
    dead: str,
    tmp_path: Path,
) -> None:
    app_ns = f"db-{uuid.uuid4().hex[:6]}"
    lab_kube.kubectl("create", "namespace", app_ns, check=True)
    try:
        lab_kube.power_on(DEAD)  # the pod must first run on the dead node
        lab_kube.wait_nodes([DEAD], "True", 120)
        db_statefulset(lab_kube, app_ns, tmp_path)
        first = wait_for(
            lambda: (p := db0(lab_kube, app_ns)) and p["status"].get("phase") == "Running" and p,
            120,
            "db-0 Running",
        )
        assert first["spec"]["nodeName"] == DEAD
        lab_kube.power_off(DEAD)
        lab_kube.wait_nodes([DEAD], {"False", "Unknown"}, 120)
        log_before = power_log(lab_kube, DEAD)

        co = client.CustomObjectsApi(api)
        name = f"nf-{uuid.uuid4().hex[:6]}"
        r = runner()
        created = time.monotonic()
        nodefence(co, name, DEAD)
        seen: dict[str, Any] = {"phases": [], "taint_at": None, "untaint_seen": False, "moved": None}

        def tick(obj: dict) -> None:
            st = obj.get("status") or {}
            phase = (st.get("status"), st.get("step"))
            if phase[0] and (not seen["phases"] or seen["phases"][-1] != phase):
                seen["phases"].append(phase)
            has = taint_present(lab_kube, DEAD)
            if has and seen["taint_at"] is None:
                seen["taint_at"] = time.monotonic() - created
                seen["fence_at_taint"] = dict(conds(obj).get("FenceVerified") or {})
            if seen["taint_at"] is not None and not has:
                seen["untaint_seen"] = True
            p = db0(lab_kube, app_ns)
            if p and p["metadata"]["uid"] != first["metadata"]["uid"] and p["spec"].get("nodeName") == OTHER:
                if p["status"].get("phase") == "Running":
                    seen["moved"] = p["spec"]["nodeName"]

        obj = run_until(co, name, {"Final", "Error"}, 300, tick)
        st = obj["status"]
        assert st["status"] == "Final", st
        # the phases in order (a short-lived step inside a phase may fall between two polls)
        assert [
            k for i, k in enumerate(p[0] for p in seen["phases"]) if i == 0 or seen["phases"][i - 1][0] != k
        ] == [
            "New",
            "Running",
            "Done",
            "Final",
        ], seen["phases"]
        assert st["jobs"] == [
            f"{name}-r0-isolation-a0",
            f"{name}-r0-power-management-a0",  # ipmi-off
            f"{name}-r0-power-management-a0-s1",  # ipmi-on: its own run, committed after the off
            f"{name}-r0-recovery-a0",
        ]
        c = conds(obj)
        assert c["Succeeded"]["status"] == "True" and c["Succeeded"]["reason"] == "RemediationFinished"
        assert seen["taint_at"] is not None, "the out-of-service taint was never applied"
        assert seen["untaint_seen"] and not taint_present(lab_kube, DEAD)
        assert seen["moved"] == OTHER, "db-0 never ran on the other node while the dead one was fenced"
        print(f"\nFIGURE nodefence creation -> taint seen: {seen['taint_at']:.2f} s; phases {seen['phases']}")
        # IPMI off and on, each read back, through the real BMC (the PowerManagement run's results)
        ex = Executor(r.data_dir / "runs", ROOT / "playbooks")
        pm = [ex.recover(private_dir(r, obj), f"{name}-r0-power-management-a0{s}") for s in ("", "-s1")]
        assert all(o is not None and o.succeeded for o in pm), pm
        assert [(m.device_type, m.state, m.fence.get("verified")) for o in pm for m in o.modules] == [  # type: ignore[union-attr]
            ("ipmi", "off", True),
            ("ipmi", "on", False),
        ], pm
        assert power_log(lab_kube, DEAD)[len(log_before) :].split()[-1:] == ["1"], "the BMC did not power on"
        assert lab_kube.node_ready([DEAD])[DEAD] == "True"
        events = events_with(
            api, obj, "OutOfServiceTaintAdded", "OutOfServiceTaintRemoved", "RemediationFinished"
        )
        reasons = [e.reason for e in events]
        assert reasons.count("FenceAgentSucceeded") == 4 and "OutOfServiceTaintAdded" in reasons
        # released by the power-off run itself, on the power fence that run read back: the FC
        # fence of the Isolation run is storage-only, which never licenses the taint
        added = [e.message for e in events_of(api, obj) if e.reason == "OutOfServiceTaintAdded"]
        assert added == [
            f"[remediation] out-of-service taint added to node {DEAD} (power_off verified in run {name}-r0-power-management-a0)"
        ], added
        assert "OutOfServiceTaintRefused" not in reasons
        assert "OutOfServiceTaintRemoved" in reasons and "RemediationFinished" in reasons
        # the Node shows the release and the recovery too (kubectl describe node)
        node_obj = client.CoreV1Api(api).read_node(DEAD).to_dict()
        on_node = [(e.reason, e.message) for e in events_of(api, node_obj) if "OutOfServiceTaint" in e.reason]
        assert (
            "OutOfServiceTaintAdded",
            f"[remediation] out-of-service taint added to node {DEAD} (power_off verified in run {name}-r0-power-management-a0)",
        ) in on_node and "OutOfServiceTaintRemoved" in [r for r, _ in on_node], on_node
        assert all(e.message.startswith("[remediation] ") for e in events_of(api, obj))
        # every line the reconciler and the executor wrote about it names the NodeFence and its node
        about = [ln for ln in r.lines() if ln["logger"].split(".")[-1] in ("reconcile", "executor")]
        assert about and [(ln["resource"], ln["node"]) for ln in about] == [
            (f"NodeFence/{name}", DEAD)
        ] * len(about), about
    finally:
        lab_kube.kubectl("delete", "namespace", app_ns, "--wait=false")


# --- faults ------------------------------------------------------------------------------------------
def test_wrong_bmc_password_retries_restarts_and_ends_in_error_without_a_taint(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    node = OTHER
    bmc = lab_kube.info["devices"]["bmcs"][node]
    fence_ns.put(
        "secret",
        {
            "metadata": {"name": "bmc-wrong"},
            "stringData": {"username": bmc["username"], "password": "not-the-password"},
        },
    )
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-wrong"},
            "data": {
                "template.properties": f"type=ipmi\naddress={bmc['host']}:{bmc['port']}\nsecret=bmc-wrong\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map",
        fence_config(node, port, "", "ipmi-off ipmi-on", "", ipmi="fence-method-template-ipmi-wrong"),
    )
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-bad-{uuid.uuid4().hex[:6]}"
        runner()
        nodefence(co, name, node)
        tainted: list[bool] = []
        obj: dict | None = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            obj = get_nf(co, name)
            tainted.append(taint_present(lab_kube, node))
            c = conds(obj)
            if c.get("Succeeded", {}).get("reason") == "RestartLimitReached":
                break
            time.sleep(0.2)
        assert obj is not None
        st, c = obj["status"], conds(obj)
        assert st["status"] == "Error" and st["restarts"] == 1, st
        assert c["Succeeded"]["status"] == "False" and c["Succeeded"]["reason"] == "RestartLimitReached"
        assert c["FenceAgentActionSucceeded"]["reason"] == "FenceAgentFailed"
        assert "PowerManagement attempt 1" in c["FenceAgentActionSucceeded"]["message"]
        assert "Switch the BMC power (ipmi method)" in c["FenceAgentActionSucceeded"]["message"]
        # two attempts per flow (step_retries=1), two flows (max_restarts=1)
        assert st["jobs"] == [f"{name}-r{r}-power-management-a{a}" for r in (0, 1) for a in (0, 1)]
        assert not any(tainted), "an out-of-service taint was applied without a verified fence"
        events = events_with(api, obj, "FenceAgentFailed", "RestartLimitReached")
        assert any(e.reason == "FenceAgentFailed" and e.type == "Warning" for e in events)
    finally:
        fence_ns.standard(node)
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_bmc_that_does_not_answer_times_out_at_the_run_deadline_and_ends_in_error(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    """A BMC that never answers: every run is killed at the runner's deadline (4 s: before the
    module's own no-answer verdict, which takes longer) → FenceAgentTimedOut, retries, restart,
    final Error, no taint. (Without the deadline the module reports "no answer from the BMC".)"""
    node = OTHER
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never answers
    silent.bind(("127.0.0.1", 0))
    silent_port = silent.getsockname()[1]
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-silent"},
            "data": {
                "template.properties": f"type=ipmi\naddress=127.0.0.1:{silent_port}\nsecret=bmc-{node}\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map", fence_config(node, port, "", "ipmi-off", "", ipmi="fence-method-template-ipmi-silent")
    )
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-silent-{uuid.uuid4().hex[:6]}"
        runner("--run-deadline", "4")
        nodefence(co, name, node)
        tainted: list[bool] = []
        obj: dict | None = None
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            obj = get_nf(co, name)
            tainted.append(taint_present(lab_kube, node))
            if conds(obj).get("Succeeded", {}).get("reason") == "RestartLimitReached":
                break
            time.sleep(0.5)
        assert obj is not None
        st, c = obj["status"], conds(obj)
        assert st["status"] == "Error" and st["restarts"] == 1, st
        assert c["FenceAgentActionSucceeded"]["reason"] == "FenceAgentTimedOut", c
        assert "deadline: killed after 4 s" in c["FenceAgentActionSucceeded"]["message"]
        assert c["Processing"]["reason"] == "FenceAgentTimedOut"
        assert len(st["jobs"]) == 4
        assert not any(tainted)
        events = events_with(api, obj, "FenceAgentTimedOut")
        assert any(e.reason == "FenceAgentTimedOut" and e.type == "Warning" for e in events)
    finally:
        silent.close()
        fence_ns.standard(node)
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_deleting_a_nodefence_cancels_its_run(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    """A run in flight (a BMC that never answers) is canceled when its NodeFence is deleted."""
    node = OTHER
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    fence_ns.put(
        "config_map",
        {
            "metadata": {"name": "fence-method-template-ipmi-silent"},
            "data": {
                "template.properties": f"type=ipmi\naddress=127.0.0.1:{silent.getsockname()[1]}\nsecret=bmc-{node}\ncipher=3\n"
            },
        },
    )
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map", fence_config(node, port, "", "ipmi-off", "", ipmi="fence-method-template-ipmi-silent")
    )
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        co = client.CustomObjectsApi(api)
        name = f"nf-cancel-{uuid.uuid4().hex[:6]}"
        r = runner()
        nodefence(co, name, node)
        ident = f"{name}-r0-power-management-a0"
        art = private_dir(r, get_nf(co, name)) / "artifacts" / ident
        wait_for(lambda: (art / "job_events").is_dir(), 120, f"run {ident} started")
        co.delete_cluster_custom_object(*NF, name)
        status = wait_for(
            lambda: (art / "status").is_file() and (art / "status").read_text(), 60, f"run {ident} ended"
        )
        assert status == "canceled"
        # ansible-runner writes the status file before its run() returns; the runner logs after it
        wait_for(
            lambda: [ln for ln in r.lines() if ln["msg"].startswith(f"run {ident}: canceled in ")],
            30,
            f"the runner's 'run {ident}: canceled' line",
        )
    finally:
        silent.close()
        # its finalizer holds it while the cleanup tries the silent BMC: let it go, or the next
        # test's runner would take the cleanup over
        delete_nodefences(api)
        fence_ns.standard(node)
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_missing_template_gives_a_condition_naming_it(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner]
) -> None:
    node = SPARE
    port = lab_kube.info["devices"]["fc_ports"][node]
    fence_ns.put(
        "config_map",
        fence_config(node, port, "fc-off", "ipmi-off", "fc-on", ipmi="fence-method-template-missing"),
    )
    try:
        co = client.CustomObjectsApi(api)
        name = f"nf-cfg-{uuid.uuid4().hex[:6]}"
        runner()
        nodefence(co, name, node)
        obj = wait_for(
            lambda: (
                (o := get_nf(co, name))
                and conds(o).get("Processing", {}).get("reason") == "FenceConfigInvalid"
                and o
            ),
            120,
            "Processing=False FenceConfigInvalid",
        )
        msg = conds(obj)["Processing"]["message"]
        assert (
            f"ConfigMap 'fence-config-{node}'" in msg
            and "fence-method-template-missing" in msg
            and "not found" in msg
        )
        assert conds(obj)["Processing"]["status"] == "False"
        # the Event follows the status write (an Event is best effort and written after it)
        wait_for(
            lambda: any(
                e.reason == "FenceConfigInvalid" and "fence-method-template-missing" in e.message
                for e in events_of(api, obj)
            ),
            30,
            "the FenceConfigInvalid Event",
        )
        co.delete_cluster_custom_object(*NF, name)
    finally:
        fence_ns.standard(node)


# --- kill -9 at every state transition -----------------------------------------------------------------
def test_kill9_at_every_transition_reaches_the_same_final_state(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner], dead: str
) -> None:
    co = client.CustomObjectsApi(api)
    name = f"nf-k9-{uuid.uuid4().hex[:6]}"
    r = runner()
    nodefence(co, name, DEAD)
    last: tuple[Any, ...] | None = None
    kills: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + 420
    obj: dict = {}
    tainted = False
    while time.monotonic() < deadline:
        obj = get_nf(co, name)
        st = obj.get("status") or {}
        tainted = tainted or taint_present(lab_kube, DEAD)
        if st.get("status") == "Final":
            break
        key = (
            st.get("status"),
            st.get("step"),
            (st.get("currentRun") or {}).get("ident"),
            len(st.get("jobs") or []),
        )
        if st and key != last:
            last = key
            r.kill9()
            kills.append(key)
            r.start()
        time.sleep(0.05)
    st = obj["status"]
    assert st["status"] == "Final", (st, kills)
    assert st["jobs"] == [
        f"{name}-r0-isolation-a0",
        f"{name}-r0-power-management-a0",
        f"{name}-r0-power-management-a0-s1",
        f"{name}-r0-recovery-a0",
    ]
    assert conds(obj)["Succeeded"]["status"] == "True"
    assert tainted, "the workloads were never released (out-of-service taint) across the restarts"
    assert not taint_present(lab_kube, DEAD)
    # The test kills on every status change it sees; which short-lived states (a step recorded, the
    # next run not yet started) it catches depends on timing, so it asserts only the kills it is sure
    # to make: one while each step's run is in flight (each run takes over a second, the poll 50 ms).
    mid_run = {(k[0], k[1]) for k in kills if k[2]}
    assert {("New", "Isolation"), ("Running", "PowerManagement"), ("Done", "Recovery")} <= mid_run, kills
    runs = [
        ln["msg"] for ln in r.lines() if ln["logger"].endswith("executor") and ln["msg"].startswith("run ")
    ]
    assert runs and not [x for x in runs if ": failed in" in x or ": timeout in" in x], runs
    # every fence step ran to completion exactly once; a replay (killed mid-run) is the same idempotent ident
    finished = [x.split(":")[0] for x in runs if ": successful in" in x]
    for step in ("isolation", "power-management", "power-management-a0-s1", "recovery"):
        ident = f"{name}-r0-{step}" if step.endswith("-s1") else f"{name}-r0-{step}-a0"
        assert f"run {ident}" in finished, runs
    print(f"\nFIGURE kill -9 runs: {runs}")
    print(f"\nFIGURE kill -9 at {len(kills)} transitions: {kills}; runner starts {r.starts}")


# --- Metal3Remediation -----------------------------------------------------------------------------------
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


def test_metal3_remediation_reboots_a_dead_node(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner]
) -> None:
    node = SPARE
    co = client.CustomObjectsApi(api)
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        metal3_objects(
            lab_kube,
            api,
            metal3_ns,
            "machine-a",
            node,
            node,
            {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}},
        )
        runner()
        phases: list[str] = []
        tainted = []

        def done() -> dict | None:
            o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-a")
            ph = (o.get("status") or {}).get("phase", "")
            if ph and (not phases or phases[-1] != ph):
                phases.append(ph)
            tainted.append(taint_present(lab_kube, node))
            fin = o["metadata"].get("finalizers") or []
            return (
                o
                if ph == "Waiting"
                and not fin
                and lab_kube.node_ready([node])[node] == "True"
                and not tainted[-1]
                else None
            )

        obj = wait_for(
            done, 300, "Metal3Remediation done (Waiting, finalizer removed, node Ready, untainted)"
        )
        assert phases[:2] == ["Running", "Waiting"], phases
        assert any(tainted), "the out-of-service taint was never applied"
        assert power_log(lab_kube, node).split()[-1:] == ["1"], "the BMC was not powered on again"
        assert events_with(api, obj, "PowerOff", "PowerOn", "OutOfServiceTaintAdded")
    finally:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_metal3_kill9_at_every_transition_still_ends_done(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner]
) -> None:
    """The runner is SIGKILLed at every change of phase, finalizer or taint, and restarted: the
    remediation still ends done (Waiting, finalizer removed, node Ready, taint removed)."""
    node = SPARE
    co = client.CustomObjectsApi(api)
    lab_kube.power_off(node)
    try:
        lab_kube.wait_nodes([node], {"False", "Unknown"}, 120)
        metal3_objects(
            lab_kube,
            api,
            metal3_ns,
            "machine-k",
            node,
            node,
            {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}},
        )
        r = runner()
        kills: list[tuple[Any, ...]] = []
        last: tuple[Any, ...] | None = None
        tainted = False
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-k")
            phase = (o.get("status") or {}).get("phase", "")
            fin = tuple(o["metadata"].get("finalizers") or [])
            has = taint_present(lab_kube, node)
            tainted = tainted or has
            if phase == "Waiting" and not fin and not has and lab_kube.node_ready([node])[node] == "True":
                break
            key = (phase, fin, has)
            if phase and key != last:
                last = key
                r.kill9()
                kills.append(key)
                r.start()
            time.sleep(0.05)
        o = co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-k")
        assert o["status"]["phase"] == "Waiting" and not o["metadata"].get("finalizers"), (o["status"], kills)
        assert o["status"].get("retryCount", 0) == 0
        assert tainted and not taint_present(lab_kube, node)
        assert len(kills) >= 3, kills
        print(f"\nFIGURE metal3 kill -9 at {len(kills)} transitions: {kills}")
    finally:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.power_on(node)
        lab_kube.wait_nodes([node], "True", 120)


def test_metal3_node_that_never_returns_ends_deleting_machine(
    lab_kube: Any, api: client.ApiClient, metal3_ns: str, runner: Callable[..., Runner]
) -> None:
    co = client.CustomObjectsApi(api)
    metal3_objects(
        lab_kube,
        api,
        metal3_ns,
        "machine-b",
        "lab-node-gone",
        SPARE,
        {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "3s"}},
    )
    try:
        runner()
        obj = wait_for(
            lambda: (
                (o := co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-b"))
                and (o.get("status") or {}).get("phase") == "Deleting machine"
                and o
            ),
            240,
            "phase Deleting machine",
        )
        assert obj["status"]["retryCount"] == 1
        machine = co.get_namespaced_custom_object(
            "cluster.x-k8s.io", "v1beta1", metal3_ns, "machines", "machine-b"
        )
        owner = [c for c in machine["status"]["conditions"] if c["type"] == "OwnerRemediated"]
        assert owner and owner[0]["status"] == "False" and owner[0]["reason"] == "WaitingForRemediation"
        assert events_with(api, obj, "RetryLimitReached")
    finally:
        lab_kube.power_on(SPARE)
        lab_kube.wait_nodes([SPARE], "True", 120)


# --- figure: creation → power verified off and taint applied ----------------------------------------------
def test_taint_follows_verified_power_off_five_times_and_prints_latency(
    lab_kube: Any, api: client.ApiClient, fence_ns: FenceNamespace, runner: Callable[..., Runner], dead: str
) -> None:
    """isolation=ipmi-off (power off, read back), recovery=ipmi-on; node already NotReady; grace 0.

    Five NodeFences in a row each end with FenceVerified=True and the taint; the time from creation
    to the taint is printed (a figure, never asserted: ``pytest -s -k latency``). Deleting one runs
    its Recovery (power on, taint off) before its finalizer goes, so the next starts only once it
    is gone and the node is powered off and NotReady again: each measures the same case."""
    port = lab_kube.info["devices"]["fc_ports"][DEAD]
    fence_ns.put("config_map", fence_config(DEAD, port, "ipmi-off", "", "ipmi-on fc-on"))
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    runner()
    times = []
    try:
        for i in range(5):
            if i:
                lab_kube.power_off(DEAD)
                lab_kube.mark_unreachable(DEAD)
            name = f"nf-fig{i}-{uuid.uuid4().hex[:4]}"
            start = time.monotonic()
            nodefence(co, name, DEAD)
            # the API read directly (a few ms), not through a kubectl process (~0.15 s a poll)
            wait_for(lambda: oos_on(core, DEAD), 120, "taint", interval=0.02)
            times.append(time.monotonic() - start)
            # the run released on its own verified fence; the status records it once the run ended
            wait_for(
                lambda name=name: conds(get_nf(co, name)).get("FenceVerified", {}).get("status") == "True",
                120,
                "FenceVerified=True",
            )
            co.delete_cluster_custom_object(*NF, name)
            wait_for(lambda name=name: gone(co, name), 120, f"NodeFence {name} gone (its Recovery done)")
            assert not oos_on(core, DEAD), "the Recovery of a deleted NodeFence takes its taint off"
    finally:
        fence_ns.standard(DEAD)
    assert len(times) == 5
    print(
        f"\nFIGURE creation -> power verified off + taint: median {statistics.median(times):.2f} s of {[round(t, 2) for t in times]}"
    )


def test_status_write_with_a_stale_resource_version_is_a_conflict(api: client.ApiClient) -> None:
    """KubeIO.replace_status carries the resourceVersion: the real API server answers 409 to a
    write based on a stale read, and the re-read write succeeds (status never overwritten blindly)."""
    kube = KubeIO(api)
    co = client.CustomObjectsApi(api)
    name = f"nf-rv-{uuid.uuid4().hex[:6]}"
    nodefence(co, name, "lab-node-x")
    try:
        stale = get_nf(co, name)
        kube.replace_status(
            NF_CRD, stale, {"status": "Running", "step": "Isolation", "retries": 0, "restarts": 0}
        )
        with pytest.raises(Conflict, match=f"nodefences/{name}: HTTP 409"):
            kube.replace_status(
                NF_CRD, stale, {"status": "Final", "step": "Isolation", "retries": 0, "restarts": 0}
            )
        assert get_nf(co, name)["status"]["status"] == "Running"
        kube.replace_status(
            NF_CRD, get_nf(co, name), {"status": "Done", "step": "Recovery", "retries": 0, "restarts": 0}
        )
        assert get_nf(co, name)["status"]["status"] == "Done"
    finally:
        co.delete_cluster_custom_object(*NF, name)
