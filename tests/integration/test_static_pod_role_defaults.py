"""The role ``noderemedy.core.static_pod_fallback`` with its defaults on the lab's real kubelet node,
seen as a standard kubeadm node; and the startup monitor retrying by itself, with the Degraded signal.

The node: lab-real-0 (kubelet v1.34 + containerd + runc), a real kube-apiserver as its static pod on
the node's ``127.0.0.1:6443`` (the image and etcd of ``test_static_pod_apiserver_node.py``). The role
runs in the node's network namespace and in a private mount namespace laid out as on a kubeadm
node, so that the defaults are exercised as they are: ``/etc/kubernetes/manifests`` is the kubelet's
static pod directory (bind mount), ``/etc/kubernetes/static-pod-resources`` the revisions,
``/etc/kubernetes/pki/ca.crt`` the cluster CA, ``/var/log`` the node's own (``/var/log/pods``),
``/var/lock`` a fresh tmpfs, and ``/etc`` an overlay so that nothing is written to the machine's.
The node name is found as on a node: the kubelet whose static pod path is that directory runs
with ``--hostname-override=lab-real-0``.

* only ``static_pod_fallback_operand`` set: a healthy new revision is marked good; a revision with
  an unknown flag falls back with CrashLooping, as before;
* the README's example (``kubeconfig``, ``probe_ca_cert``): the same, with the mirror pod read;
* the monitor refuses when it cannot see start attempts (no ``/var/log/pods``, no client
  configuration), and the live manifest stays as it was;
* the startup monitor as the static pod runs it (``in_static_pod``), with a short backoff: a
  revision whose etcd is unreachable falls back (EtcdUnhealthy); while its retry is pending the
  Node shows ``KubeApiserverStaticPodDegraded=True`` and a ``StaticPodFallback`` Event; once the
  endpoint works the same monitor rolls the revision out again at ``retry-at``, marks it good, and
  the condition turns False;
* a pending retry handed to the startup-monitor static pod, which retries by itself.

The role's runs keep its defaults (they are what is tested: layout, node name, probe URL, start
attempt sources, interval 2 s, timeout 300 s for the healthy revisions, which are marked good as
soon as they are ready) except the timeout of the CrashLooping run, 25 s: the monitor waits out its
whole timeout before it falls back, and 25 s is enough for the second start (after the kubelet's
first back-off of 10 s) that CrashLooping needs. The monitors run directly take 30 s for
EtcdUnhealthy; the retry backoffs are as short as the steps between fallback and retry allow: 20 s
for the monitor that retries by itself (the test checks the Degraded condition and the Event
before it makes the endpoint work), 5 s for the retry handed to the monitor pod (the test makes it
work as soon as the fallback is written; the kubelet starting the pod takes longer than that).
The cases share the kube-apiserver's etcd and image import (module scope); each installs what it
judges, with manifests of its own.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_static_pod_apiserver_node as node_apiserver_mod
import yaml
from kube_helpers import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NODE = node_apiserver_mod.NODE
ROOT = Path(__file__).resolve().parents[2]
CONDITION = "KubeApiserverStaticPodDegraded"


@pytest.fixture(scope="module")
def node_apiserver(lab_real, tmp_path_factory):
    """The test kube-apiserver on the node's 127.0.0.1:6443 (the kubeadm port the role's default
    probe URL names), revisions 1-4 as in ``test_static_pod_apiserver_node.py`` plus revision 5: the
    good revision 1 with one more harmless flag (a new healthy revision). One for the module (image
    imported, etcd running); its static pods removed from the node at the end."""
    op = node_apiserver_mod.NodeApiserver(lab_real, tmp_path_factory.mktemp("role-defaults"), port=6443)
    good = yaml.safe_load((op.resources / "kube-apiserver-pod-1" / "kube-apiserver-pod.yaml").read_text())
    good["metadata"]["labels"]["revision"] = "5"
    good["spec"]["containers"][0]["command"].append("--v=1")
    (op.resources / "kube-apiserver-pod-5").mkdir()
    (op.resources / "kube-apiserver-pod-5" / "kube-apiserver-pod.yaml").write_text(yaml.safe_dump(good))
    op.record_revisions()
    yield op
    op.live.unlink(missing_ok=True)
    op.etcd_manifest.unlink(missing_ok=True)
    op.wait_gone(60, "the test's kube-apiserver gone from the node")


@pytest.fixture
def apiserver(node_apiserver, request):
    """The module's kube-apiserver, started on a new case (``NodeApiserver.new_case``: revisions
    1-5 only, no last-known-good link, manifests of the case's own); each case installs what it
    judges, so none depends on where the case before it left the operand. The shared etcd is
    checked to be as the module wrote it, before and after."""
    yield from node_apiserver_mod.each_case(node_apiserver, request)


def admin_kubeconfig(lab, dest: Path) -> Path:
    """A kubeconfig with the lab's admin credentials that works from the node's network namespace
    (the kubelet's server address, through the lab's relay), its certificates embedded as in
    kubeadm's ``admin.conf`` (the monitor pod mounts the kubeconfig's directory only)."""
    info = lab.info["real_nodes"][NODE]
    pki = Path(lab.info["kube"]["pki"])

    def data(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    doc = yaml.safe_load((Path(info["dir"]) / "kubelet.kubeconfig").read_text())
    for cluster in doc["clusters"]:
        ca = cluster["cluster"].pop("certificate-authority")
        cluster["cluster"]["certificate-authority-data"] = data(Path(ca))
    for user in doc["users"]:
        user["user"] = {
            "client-certificate-data": data(pki / "admin.crt"),
            "client-key-data": data(pki / "admin.key"),
        }
    dest.write_text(yaml.safe_dump(doc))
    dest.chmod(0o600)
    return dest


def run_role_on_node(lab, op, tmp: Path, role_vars: dict, timeout: float, pod_logs: bool = True) -> dict:
    """Run the role in the node's network namespace and a private mount namespace laid out as on a
    kubeadm node (see the module docstring); returns the role's ``static_pod_fallback_results``
    entry (``{"failed": True, "msg": ...}`` when the monitor task failed)."""
    info = lab.info["real_nodes"][NODE]
    pki = Path(lab.info["kube"]["pki"])
    work = tmp / f"role-{time.monotonic_ns()}"
    for d in ("upper", "work", "etc-k8s"):
        (work / d).mkdir(parents=True)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "connection": "local",
            "roles": [{"role": "noderemedy.core.static_pod_fallback", "vars": role_vars}],
            "post_tasks": [
                {
                    "name": "result",
                    "ansible.builtin.debug": {"var": "static_pod_fallback_results"},
                }
            ],
        }
    ]
    (work / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    node_var_log = Path(info["dir"]) / "var" / "log"
    mounts = [
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={work / 'upper'},workdir={work / 'work'} /etc",
        "mkdir -p /etc/kubernetes",
        "mount -t tmpfs tmpfs /etc/kubernetes",
        "mkdir /etc/kubernetes/manifests /etc/kubernetes/static-pod-resources /etc/kubernetes/pki",
        f"mount --bind {shlex.quote(str(op.manifests))} /etc/kubernetes/manifests",
        f"mount --bind {shlex.quote(str(op.resources))} /etc/kubernetes/static-pod-resources",
        f"mount --bind {shlex.quote(str(pki))} /etc/kubernetes/pki",
        "mount -t tmpfs tmpfs /run/lock",
        # the node's /var/log (with /var/log/pods), or, for the refusal, an empty one
        f"mount --bind {shlex.quote(str(node_var_log))} /var/log"
        if pod_logs
        else "mount -t tmpfs tmpfs /var/log",
    ]
    bindir = Path(sys.executable).parent
    playbook = [str(bindir / "ansible-playbook"), "-i", "localhost,", str(work / "play.yml")]
    script = " && ".join([*mounts, "exec " + shlex.join(playbook)])
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / "tests" / "output" / "collections"),
        "ANSIBLE_STDOUT_CALLBACK": "nr_json",
        "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "tests" / "callback_plugins"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_NOCOLOR": "1",
    }
    proc = subprocess.run(
        ["nsenter", f"--net=/run/netns/{info['netns']}", "--",
         "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"ansible-playbook: rc {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        ) from None
    tasks = [t for play in doc["plays"] for t in play["tasks"]]
    for t in tasks:
        res = t["hosts"].get("localhost", {})
        if res.get("failed"):
            return {"failed": True, "task": t["task"]["name"], **res}
    out = tasks[-1]["hosts"]["localhost"]["static_pod_fallback_results"]["kube-apiserver"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _live_revision(op) -> str:
    return yaml.safe_load(op.live.read_text())["metadata"]["labels"]["revision"]


def _lkg(op) -> str:
    return Path(os.readlink(op.resources / "kube-apiserver-last-known-good")).parent.name


def _good_then_bad(lab, op, tmp: Path, role_vars: dict) -> list[dict]:
    """Revision 1 marked good (bootstrap), revision 5 (new, healthy) marked good, revision 2 (an
    unknown flag) falls back to 5; returns the three results."""
    out = []
    for rev in (1, 5):
        written = op.install(rev)
        res = run_role_on_node(lab, op, tmp, role_vars, 600)
        assert (res.get("action"), res.get("ready"), res.get("revision")) == ("mark_good", True, rev), res
        assert _lkg(op) == f"kube-apiserver-pod-{rev}"
        src = res["start_attempt_sources"]
        assert (src["node_name"], src["node_name_from"]) == (NODE, "kubelet --hostname-override"), src
        assert src["pod_logs_dir"] == "/var/log/pods" and "pod_logs_dir" in src["used"], src
        print(
            f"\nFIGURE role defaults ({sorted(role_vars)}): revision {rev} written -> marked good in {time.time() - written:.1f} s"
        )
        out.append(res)
    written = op.install(2)
    res = run_role_on_node(lab, op, tmp, {**role_vars, "static_pod_fallback_timeout": 25}, 600)
    assert (res.get("action"), res.get("reason"), res.get("fallback_revision")) == (
        "fallback",
        "CrashLooping",
        5,
    ), res
    op.wait_ready(120, "last-known-good kube-apiserver revision 5 ready again")
    assert _live_revision(op) == "5"
    print(
        f"\nFIGURE role defaults ({sorted(role_vars)}): CrashLooping revision written -> revision 5 ready in {time.time() - written:.1f} s (timeout 25 s)"
    )
    out.append(res)
    return out


def test_the_role_with_only_the_operand_marks_a_healthy_revision_good_and_falls_back_a_broken_one(
    lab_real, apiserver, tmp_path
):
    results = _good_then_bad(lab_real, apiserver, tmp_path, {"static_pod_fallback_operand": "kube-apiserver"})
    # no client configuration: the kubelet's pod logs alone, no mirror pod
    assert results[1]["start_attempt_sources"]["used"] == ["pod_logs_dir"]
    assert results[1]["last_observation"]["mirror"] is None


def test_the_role_as_in_its_readme_marks_a_healthy_revision_good_with_the_mirror_pod(
    lab_real, apiserver, tmp_path
):
    kubeconfig = admin_kubeconfig(lab_real, tmp_path / "admin.conf")
    role_vars = {
        "static_pod_fallback_operand": "kube-apiserver",
        "static_pod_fallback_kubeconfig": str(kubeconfig),
        "static_pod_fallback_probe_ca_cert": "/etc/kubernetes/pki/ca.crt",
    }
    results = _good_then_bad(lab_real, apiserver, tmp_path, role_vars)
    assert results[1]["start_attempt_sources"]["used"] == ["pod_logs_dir", "mirror_pod"]
    mirror = results[1]["last_observation"]["mirror"]
    assert mirror is not None and (mirror["revision"], mirror["ready"]) == (5, True), results[1]


def test_the_role_refuses_to_monitor_what_it_cannot_see(lab_real, apiserver, tmp_path):
    """No /var/log/pods and no client configuration: the monitor fails with NoStartAttemptSource,
    naming the options, and the revision it would have judged stays live."""
    apiserver.install(1)
    before = apiserver.live.read_bytes()
    res = run_role_on_node(
        lab_real, apiserver, tmp_path, {"static_pod_fallback_operand": "kube-apiserver"}, 300, pod_logs=False
    )
    assert res.get("failed") is True and res.get("reason") == "NoStartAttemptSource", res
    for option in ("pod_logs_dir", "kubeconfig", "termination_log"):
        assert option in res["msg"], res["msg"]
    assert apiserver.live.read_bytes() == before
    assert not (apiserver.resources / "kube-apiserver-last-known-good").exists()


def _node_condition(lab) -> dict | None:
    node = json.loads(lab.kubectl("get", "node", NODE, "-o", "json").stdout)
    return next((c for c in node["status"]["conditions"] if c["type"] == CONDITION), None)


def test_the_startup_monitor_retries_by_itself_and_the_node_shows_degraded_meanwhile(
    lab_real, apiserver, tmp_path
):
    """Revision 3's etcd endpoint has nothing behind it. One monitor process, as the startup-monitor
    static pod runs it (``in_static_pod``, backoff base 20 s): EtcdUnhealthy, fallback to revision 1;
    the Node shows Degraded while the retry is pending; the endpoint is made to work; at
    ``retry-at`` the same monitor rolls revision 3 out again, finds it ready, marks it good and the
    condition turns False. Nothing else runs ``state: retry``."""
    kubeconfig = admin_kubeconfig(lab_real, tmp_path / "admin.conf")
    params = {**apiserver.params, "kubeconfig": str(kubeconfig), "retry_base": 20.0, "mirror_pod": "never"}
    apiserver.install(1)
    first = node_apiserver_mod.in_node(
        apiserver.netns, "monitor", {**params, "state": "monitor", "revision": 1, "timeout": 120}, 200
    )
    assert first["ready"] is True, first
    apiserver.install(3)
    script = (
        "import json, sys\n"
        "from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import execute\n"
        "print(json.dumps(execute(json.loads(sys.argv[1]))))\n"
    )
    monitor = {**params, "state": "monitor", "revision": 3, "timeout": 30.0, "in_static_pod": True}
    out = tmp_path / "monitor.out"
    with out.open("w") as fh:
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{apiserver.netns}", "--", sys.executable, "-c", script, json.dumps(monitor)],
            stdout=fh, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )  # fmt: skip
    relay = None
    try:
        wait_for(
            lambda: (
                "static-pods.noderemedy.io/retry-at"
                in (yaml.safe_load(apiserver.live.read_text())["metadata"].get("annotations") or {})
            ),
            120,
            "revision 3 fallen back with a retry pending",
        )
        fell_back = time.time()
        ann = yaml.safe_load(apiserver.live.read_text())["metadata"]["annotations"]
        assert ann["startup-monitor.static-pods.openshift.io/fallback-reason"] == "EtcdUnhealthy", ann
        wait_for(
            lambda: (_node_condition(lab_real) or {}).get("status") == "True",
            60,
            f"{CONDITION}=True on {NODE}",
            interval=1,
        )
        cond = _node_condition(lab_real)
        assert (
            cond["reason"] == "EtcdUnhealthy" and ann["static-pods.noderemedy.io/retry-at"] in cond["message"]
        ), cond

        def fallback_event() -> list[dict]:
            return json.loads(
                lab_real.kubectl(
                    "get", "events", "-n", "default", "-o", "json",
                    "--field-selector", f"involvedObject.kind=Node,involvedObject.name={NODE},reason=StaticPodFallback",
                ).stdout or "{}"
            ).get("items") or []  # fmt: skip

        # the monitor posts its Event after the condition's patch (NodeSignal.report): waited for
        wait_for(
            lambda: any("revision 3 fell back" in e["message"] for e in fallback_event()),
            60,
            "the StaticPodFallback Event of revision 3 on the Node",
            interval=1,
        )
        print(
            f"\nFIGURE Degraded: {CONDITION}=True on the Node {time.time() - fell_back:.1f} s after the fallback was written"
        )
        assert proc.poll() is None, out.read_text()[-3000:]  # still there: waiting for retry-at
        relay = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{apiserver.netns}", "--", "socat",
             f"TCP-LISTEN:{node_apiserver_mod.ETCD_PORT + 7},bind=127.0.0.1,fork,reuseaddr",
             f"TCP:127.0.0.1:{node_apiserver_mod.ETCD_PORT}"],
        )  # fmt: skip
        proc.wait(timeout=300)
        text = out.read_text()
        res = json.loads(text.strip().splitlines()[-1])
        assert (res["action"], res["ready"], res["retries"]) == ("mark_good", True, 1), text[-3000:]
        assert [r["action"] for r in res["rounds"]] == ["fallback", "mark_good"], res["rounds"]
        assert _lkg(apiserver) == "kube-apiserver-pod-3"
        cond = _node_condition(lab_real)
        assert (cond["status"], cond["reason"]) == ("False", "RevisionMarkedGood"), cond
        print(
            f"\nFIGURE retry by itself: fallback written -> revision 3 marked good in {time.time() - fell_back:.1f} s (backoff 20 s)"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if relay is not None:
            relay.terminate()
            relay.wait(10)


def test_a_pending_retry_is_handed_to_the_startup_monitor_pod_which_retries_by_itself(
    lab_real, apiserver, request, tmp_path
):
    """The monitor run by a playbook (``state: monitor`` with ``startup_monitor``, as the role passes
    ``static_pod_fallback_startup_monitor``) falls back from revision 3 (EtcdUnhealthy) and writes the
    startup-monitor static pod of revision 3; the kubelet runs it from the remediation pod image; once
    the endpoint works it rolls revision 3 out again at ``retry-at``, marks it good, clears the
    Degraded condition and removes its own manifest. The test only waits."""
    image = request.getfixturevalue("monitor_image")
    kubeconfig = admin_kubeconfig(lab_real, tmp_path / "admin.conf")
    params = {**apiserver.params, "kubeconfig": str(kubeconfig), "retry_base": 5.0, "mirror_pod": "never"}
    apiserver.install(1)
    first = node_apiserver_mod.in_node(
        apiserver.netns, "monitor", {**params, "state": "monitor", "revision": 1, "timeout": 120}, 200
    )
    assert first["ready"] is True, first
    apiserver.install(3)
    monitor_manifest = apiserver.manifests / "kube-apiserver-startup-monitor-pod.yaml"
    relay = None
    try:
        res = node_apiserver_mod.in_node(
            apiserver.netns,
            "monitor",
            {
                **params,
                "state": "monitor",
                "revision": 3,
                "timeout": 30.0,
                "startup_monitor": {"image": image},
            },
            200,
        )
        assert (res["action"], res["reason"]) == ("fallback", "EtcdUnhealthy"), res
        assert res["retry_handed_over"] == str(monitor_manifest) and monitor_manifest.is_file(), res
        handed = time.time()
        monitor = yaml.safe_load(monitor_manifest.read_text())
        assert monitor["metadata"]["labels"]["revision"] == "3"
        relay = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{apiserver.netns}", "--", "socat",
             f"TCP-LISTEN:{node_apiserver_mod.ETCD_PORT + 7},bind=127.0.0.1,fork,reuseaddr",
             f"TCP:127.0.0.1:{node_apiserver_mod.ETCD_PORT}"],
        )  # fmt: skip
        wait_for(
            lambda: not monitor_manifest.exists(),
            300,
            "the startup monitor done and its manifest gone",
            interval=0.5,
        )
        assert _lkg(apiserver) == "kube-apiserver-pod-3"
        assert _live_revision(apiserver) == "3"
        cond = _node_condition(lab_real)
        assert (cond["status"], cond["reason"]) == ("False", "RevisionMarkedGood"), cond
        print(
            f"\nFIGURE retry handed to the monitor pod: fallback -> revision 3 marked good by the pod in {time.time() - handed:.1f} s (backoff 5 s)"
        )
    finally:
        monitor_manifest.unlink(missing_ok=True)
        if relay is not None:
            relay.terminate()
            relay.wait(10)
