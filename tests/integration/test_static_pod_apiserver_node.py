"""A real kube-apiserver as a static pod of the lab's real node lab-real-0, judged by the monitor run
on that node (in its network namespace), with start attempts from the kubelet's /var/log/pods.

The image holds our built kube-apiserver and etcd (built here with buildah, imported into the node's
containerd). A dedicated etcd runs as a second static pod on the node's 127.0.0.1; the operand's
revisions live under ``<tmp>/resources/kube-apiserver-pod-<rev>/`` and are installed into the
kubelet's staticPodPath with a dot temp file and a rename. Revision 1 is good, revision 2 has an
unknown flag (CrashLooping), revision 3 points at an etcd endpoint where nothing listens
(EtcdUnhealthy, retryable), revision 4 is not YAML (NeverStartedUp), revision 7 serves on another
port than the one it is checked on (it starts once and never answers: Unhealthy, retryable), revision 5 has an audit policy
the kube-apiserver refuses (CrashLooping), revision 6 an encryption configuration that cannot read
what revision 1 stored (a post-start hook never finishes: NotReady).

Each case prints the time from the bad revision being written to the last-known-good kube-apiserver
answering ``/readyz`` again, with the monitor timeout used. The monitor waits out its whole timeout
before it falls back, so the cases pass the shortest timeouts that still give their verdict (none of
them is about the defaults): 25 s for CrashLooping, which needs a second start after the kubelet's
first back-off of 10 s; 30 s for EtcdUnhealthy and 25 s for NotReady, which need the kube-apiserver
up and answering; 15 s for Unhealthy, which needs one start seen; 10 s for NeverStartedUp.

The cases share one etcd and one image import (module scope); each installs revision 1 and has it
marked good first, with manifests of its own (see :meth:`NodeApiserver.new_case`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kube_helpers import wait_for

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import execute
from noderemedy_lab.build import binary_paths
from noderemedy_lab.images import ensure_binary_image
from noderemedy_lab.realnode import import_image

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NODE = "lab-real-0"
IMAGE = "noderemedy.local/control-plane:lab"
ETCD_PORT = 12379
APISERVER_PORT = 16443

IN_NODE = """
import json, sys
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import HttpProber, execute
req = json.loads(sys.argv[1])
if req["op"] == "monitor":
    print(json.dumps(execute(req["params"])))
elif req["op"] == "post":
    import ssl, urllib.request
    p = req["params"]
    ctx = ssl.create_default_context(cafile=p["probe_ca_cert"])
    ctx.load_cert_chain(p["probe_client_cert"], p["probe_client_key"])
    r = urllib.request.Request(p["probe_url"] + req["path"], data=json.dumps(req["body"]).encode(),
                               headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(r, context=ctx, timeout=30) as resp:
        print(json.dumps({"status": resp.status}))
else:  # "ready": GET /readyz until it is ok (or, with "want": False, until it is not) or "within" s pass
    import time
    p = req["params"]
    prober = HttpProber(p["probe_url"], "kube-apiserver", p["probe_ca_cert"], p["probe_client_cert"],
                        p["probe_client_key"], request_timeout=2.0)
    want, deadline = req.get("want", True), time.monotonic() + req.get("within", 0)
    while (ok := prober.get("/readyz").ok) != want and time.monotonic() < deadline:
        time.sleep(0.25)
    print(json.dumps({"ok": ok}))
"""


def in_node(netns: str, op: str, params: dict, timeout: float, **extra) -> dict:
    """Run ``op`` (``monitor``: the module's monitor; ``ready``: GET /readyz, repeated every 0.25 s
    for up to ``within`` seconds until it is ``want`` (default True); ``post``: POST ``body`` to
    ``path``) in the node's network namespace, where the operand's 127.0.0.1 is."""
    out = subprocess.run(
        ["nsenter", f"--net=/run/netns/{netns}", "--", sys.executable, "-c", IN_NODE,
         json.dumps({"op": op, "params": params, **extra})],
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},  # our collection
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def pod(name: str, labels: dict, argv: list[str], pki: Path | None = None) -> dict:
    container: dict = {"name": name, "image": IMAGE, "imagePullPolicy": "Never", "command": argv}
    spec: dict = {"hostNetwork": True, "terminationGracePeriodSeconds": 1, "containers": [container]}
    if pki is not None:
        container["volumeMounts"] = [{"name": "pki", "mountPath": str(pki), "readOnly": True}]
        spec["volumes"] = [{"name": "pki", "hostPath": {"path": str(pki), "type": "Directory"}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": labels},
        "spec": spec,
    }


def _remove(path: Path) -> None:
    """Remove ``path``: a directory with its content, anything else (a symlink too) alone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


class NodeApiserver:
    """The test's etcd (started here, as a static pod) and the kube-apiserver revisions of ``NODE``
    under ``tmp``; one per module, each case starting with :meth:`new_case`."""

    def __init__(self, lab, tmp: Path, port: int = APISERVER_PORT) -> None:
        info = lab.info["real_nodes"][NODE]
        self.netns = info["netns"]
        self.manifests = Path(info["dir"]) / "manifests"
        self.resources = tmp / "resources"
        pki = Path(lab.info["kube"]["pki"])
        bins = binary_paths()
        archive = ensure_binary_image(
            IMAGE,
            {"/usr/local/bin/kube-apiserver": bins["kube-apiserver"], "/usr/local/bin/etcd": bins["etcd"]},
        )
        import_image(info["containerd_socket"], archive, "test image")
        etcd = [
            "/usr/local/bin/etcd", "--name=default", "--data-dir=/tmp/etcd",
            f"--listen-client-urls=http://127.0.0.1:{ETCD_PORT}",
            f"--advertise-client-urls=http://127.0.0.1:{ETCD_PORT}",
            f"--listen-peer-urls=http://127.0.0.1:{ETCD_PORT + 1}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PORT + 1}",
            f"--initial-cluster=default=http://127.0.0.1:{ETCD_PORT + 1}",
        ]  # fmt: skip
        self.etcd_manifest = self.manifests / "noderemedy-test-etcd.yaml"
        self.etcd_manifest.write_text(yaml.safe_dump(pod("test-etcd", {"app": "test-etcd"}, etcd)))
        drop = ("--etcd-servers=", "--secure-port=", "--etcd-prefix=")
        base = ["/usr/local/bin/kube-apiserver"]
        base += [a for a in lab.info["kube"]["apiserver_args"][1:] if not a.startswith(drop)]
        base += [f"--secure-port={port}", f"--etcd-prefix=/noderemedy-{uuid.uuid4().hex[:8]}"]
        argv = {
            1: [*base, f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}"],
            2: [*base, f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}", "--this-flag-does-not-exist=1"],
            3: [*base, f"--etcd-servers=http://127.0.0.1:{ETCD_PORT + 7}"],
            # serves, but on another port than the one it is checked on (a wrong --secure-port)
            7: [
                *[a for a in base if not a.startswith("--secure-port=")],
                f"--secure-port={port + 1}",
                f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            ],
        }
        for rev, args in argv.items():
            d = self.resources / f"kube-apiserver-pod-{rev}"
            d.mkdir(parents=True)
            labels = {"app": "kube-apiserver", "revision": str(rev)}
            (d / "kube-apiserver-pod.yaml").write_text(
                yaml.safe_dump(pod("kube-apiserver", labels, args, pki))
            )
        d = self.resources / "kube-apiserver-pod-4"  # not YAML: the kubelet never starts it
        d.mkdir()
        (d / "kube-apiserver-pod.yaml").write_text("kind: Pod\nmetadata: {name: kube-apiserver\nspec: [\n")
        self.base_args = base
        self.pki = pki
        self.params = {
            "operand": "kube-apiserver",
            "manifests_dir": str(self.manifests),
            "resources_dir": str(self.resources),
            "lock_file": str(tmp / "kube-apiserver-installer.lock"),
            "pod_logs_dir": str(Path(info["dir"]) / "var" / "log" / "pods"),
            "node_name": NODE,
            "probe_url": f"https://127.0.0.1:{port}",
            "probe_ca_cert": str(pki / "ca.crt"),
            "probe_client_cert": str(pki / "admin.crt"),
            "probe_client_key": str(pki / "admin.key"),
            "storage_version_check": "never",
            "interval": 1,
        }
        self.base_params = dict(self.params)
        self.etcd_bytes = self.etcd_manifest.read_bytes()
        self.record_revisions()

    def record_revisions(self) -> None:
        """Take the revisions under ``resources/`` now (their manifests' bytes) as those
        :meth:`new_case` restores."""
        self.revisions = {
            d.name: (d / "kube-apiserver-pod.yaml").read_bytes()
            for d in self.resources.iterdir()
            if d.is_dir()
        }

    def new_case(self, tag: str) -> None:
        """Start a case from the layout as recorded (:meth:`record_revisions`): module parameters as
        at the start; no last-known-good link; the recorded revisions only (pruned ones written
        again), each directory holding its manifest alone (what a case added -- a revision, a storage-versions record -- removed),
        every manifest annotated ``noderemedy.io/test: <tag>``. The annotation gives the case's
        static pods UIDs of their own: the kubelet derives a static pod's UID from its manifest and
        does not start again one re-added with the UID of one it has terminated, and every case
        installs revision 1 (some the same bad revision). Revision 4, not YAML, stays as it is."""
        self.params = dict(self.base_params)
        for entry in self.resources.iterdir():  # the last-known-good link, a case's own revisions
            if entry.name not in self.revisions:
                _remove(entry)
        for name, original in self.revisions.items():
            (self.resources / name).mkdir(exist_ok=True)  # pruned by a case (the role prunes)
            for entry in (self.resources / name).iterdir():  # what a case wrote into it
                if entry.name != "kube-apiserver-pod.yaml":
                    _remove(entry)
            try:
                doc = yaml.safe_load(original)
            except yaml.YAMLError:
                doc = None
            if isinstance(doc, dict):
                doc["metadata"].setdefault("annotations", {})["noderemedy.io/test"] = tag
                original = yaml.safe_dump(doc).encode()
            (self.resources / name / "kube-apiserver-pod.yaml").write_bytes(original)
        assert sorted(p.name for p in self.resources.iterdir()) == sorted(self.revisions)

    @property
    def live(self) -> Path:
        return self.manifests / "kube-apiserver-pod.yaml"

    def install(self, rev: int) -> float:
        """Install revision ``rev`` (dot temp file, rename), as the installer does; returns epoch s."""
        tmp = self.manifests / ".kube-apiserver-pod.yaml.install"
        tmp.write_bytes(
            (self.resources / f"kube-apiserver-pod-{rev}" / "kube-apiserver-pod.yaml").read_bytes()
        )
        os.replace(tmp, self.live)
        return time.time()

    def install_with_file(self, rev: int, flag: str, name: str, content: str, *args: str) -> dict:
        """Install revision ``rev`` with our installer (``state: install``): the apiserver given
        ``<flag>=<revision dir>/<name>`` (and ``args``), the file ``name`` with ``content`` written
        into the revision directory and mounted read-only at the same path; returns the module's
        result."""
        rev_dir = self.resources / f"kube-apiserver-pod-{rev}"
        manifest = pod(
            "kube-apiserver",
            {"app": "kube-apiserver"},
            [
                *self.base_args,
                f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
                f"{flag}={rev_dir}/{name}",
                *args,
            ],
            self.pki,
        )
        manifest["spec"]["volumes"].append(
            {"name": "revision", "hostPath": {"path": str(rev_dir), "type": "DirectoryOrCreate"}}
        )
        manifest["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "revision", "mountPath": str(rev_dir), "readOnly": True}
        )
        params = {**self.params, "state": "install", "revision": rev, "manifest": manifest}
        return execute({**params, "files": {name: content}})

    def ready(self, within: float = 0.0) -> bool:
        """``/readyz`` of the operand answers ok, asked every 0.25 s for up to ``within`` seconds."""
        return bool(in_node(self.netns, "ready", self.params, within + 30, within=within)["ok"])

    def wait_ready(self, timeout: float, what: str) -> None:
        """Until ``/readyz`` answers ok; AssertionError naming ``what`` after ``timeout`` seconds."""
        assert self.ready(within=timeout), f"timed out after {timeout} s waiting for {what}"

    def wait_gone(self, timeout: float, what: str) -> None:
        """Until ``/readyz`` no longer answers ok; AssertionError naming ``what`` after ``timeout`` s."""
        ok = in_node(self.netns, "ready", self.params, timeout + 30, within=timeout, want=False)["ok"]
        assert not ok, f"timed out after {timeout} s waiting for {what}"

    def monitor(self, rev: int, timeout: float) -> dict:
        params = {**self.params, "state": "monitor", "revision": rev, "timeout": timeout}
        return in_node(self.netns, "monitor", params, timeout + 60)


class ContainerLogs:
    """The kubelet's container log files ``pattern`` under ``pod_logs``, read every 0.25 s while in
    the ``with`` block and once more at its end, and kept: the kubelet deletes a removed pod's
    containers, their logs with them, as soon as one of them dies, so the logs of a revision that
    was fallen back from may be gone when the monitor returns."""

    def __init__(self, pod_logs: Path, pattern: str) -> None:
        self.pod_logs, self.pattern = pod_logs, pattern
        self.seen: dict[Path, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ContainerLogs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._read()

    def _read(self) -> None:
        for path in self.pod_logs.glob(self.pattern):
            try:
                self.seen[path] = path.read_text(errors="replace")
            except OSError:  # deleted meanwhile: what was read before stays
                continue

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self._read()

    def text(self) -> str:
        """Everything read, one file after another."""
        return "".join(self.seen.values())


@pytest.fixture(scope="module")
def node_apiserver(lab_real, tmp_path_factory):
    """One :class:`NodeApiserver` (image imported, etcd running) for the module's cases; its static
    pods removed from the node at the end."""
    op = NodeApiserver(lab_real, tmp_path_factory.mktemp("apiserver-node"))
    yield op
    op.live.unlink(missing_ok=True)
    op.etcd_manifest.unlink(missing_ok=True)
    op.wait_gone(60, "the test's kube-apiserver gone from the node")


def each_case(op: NodeApiserver, request: pytest.FixtureRequest) -> Iterator[NodeApiserver]:
    """The body of a module's ``apiserver`` fixture: ``op`` started on a new case
    (:meth:`NodeApiserver.new_case`), the etcd the cases share checked to be as the module wrote
    it, before and after, and the case's parameters reset afterwards."""
    assert op.etcd_manifest.read_bytes() == op.etcd_bytes, "the shared etcd's manifest changed"
    op.new_case(request.node.name)
    yield op
    assert op.etcd_manifest.read_bytes() == op.etcd_bytes, "the shared etcd's manifest changed"
    op.params = dict(op.base_params)


@pytest.fixture
def apiserver(node_apiserver, request):
    """The module's :class:`NodeApiserver`, started on a new case (:func:`each_case`). Each case
    begins by installing revision 1 and having it marked good (``_good``), so none depends on
    where the case before it left the operand."""
    yield from each_case(node_apiserver, request)


def _good(op: NodeApiserver) -> None:
    op.install(1)
    res = op.monitor(1, 120)
    assert res["ready"] is True, res
    assert (
        Path(os.readlink(op.resources / "kube-apiserver-last-known-good")).parent.name
        == "kube-apiserver-pod-1"
    )


@pytest.mark.parametrize(
    ("rev", "reason", "timeout"),
    [
        (2, "CrashLooping", 25.0),
        (3, "EtcdUnhealthy", 30.0),
        (4, "NeverStartedUp", 10.0),
        (7, "Unhealthy", 15.0),
    ],
    ids=["bad-flag", "wrong-etcd", "bad-manifest", "wrong-port"],
)
def test_a_bad_revision_falls_back_to_last_known_good(apiserver, rev, reason, timeout):
    _good(apiserver)
    written = apiserver.install(rev)
    res = apiserver.monitor(rev, timeout)
    assert res["reason"] == reason, res
    assert res["action"] == "fallback", res
    assert res["retry"]["retryable"] is (reason in ("EtcdUnhealthy", "Unhealthy")), res
    apiserver.wait_ready(120, "last-known-good kube-apiserver ready again")
    back = time.time() - written
    live = yaml.safe_load(apiserver.live.read_text())
    assert live["metadata"]["labels"]["revision"] == "1", live
    print(
        f"\nFIGURE {reason}: bad revision {rev} written -> last-known-good kube-apiserver /readyz ok in {back:.1f} s "
        f"(monitor timeout {timeout:.0f} s; attempts seen {res['last_observation']['start_attempts']})"
    )


def test_etcd_unhealthy_is_retried_after_its_backoff_and_succeeds_once_etcd_is_reachable(apiserver):
    """Revision 3's etcd endpoint has nothing behind it: EtcdUnhealthy, fallback to revision 1 with
    ``retry-at`` (the backoff, 15 s here) on the mirror pod's manifest. ``state: retry`` before that
    time writes nothing. The endpoint is then fixed (a relay in the node's network namespace from
    revision 3's etcd port to the etcd), ``state: retry`` rolls revision 3 out again and the monitor
    finds it ready: it becomes last-known-good."""
    params = {**apiserver.params, "retry_base": 15.0}
    apiserver.params = params
    _good(apiserver)
    apiserver.install(3)
    res = apiserver.monitor(3, 30.0)
    assert (res["reason"], res["action"]) == ("EtcdUnhealthy", "fallback"), res
    ann = yaml.safe_load(apiserver.live.read_text())["metadata"]["annotations"]
    assert (
        ann["static-pods.noderemedy.io/previous-failures"] == "1"
        and "static-pods.noderemedy.io/retry-at" in ann
    )
    early = in_node(apiserver.netns, "monitor", {**params, "state": "retry"}, 60)
    assert early["action"] == "none" and "is retried at" in early["message"], early
    assert yaml.safe_load(apiserver.live.read_text())["metadata"]["labels"]["revision"] == "1"
    relay = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{apiserver.netns}", "--", "socat",
         f"TCP-LISTEN:{ETCD_PORT + 7},bind=127.0.0.1,fork,reuseaddr", f"TCP:127.0.0.1:{ETCD_PORT}"],
    )  # fmt: skip
    try:
        fixed = time.time()
        if early["action"] == "none":
            wait_for(
                lambda: (
                    in_node(apiserver.netns, "monitor", {**params, "state": "retry"}, 60)["action"] == "retry"
                ),
                60,
                "revision 3 rolled out again after its backoff",
                interval=1,
            )
        live = yaml.safe_load(apiserver.live.read_text())
        assert live["metadata"]["labels"]["revision"] == "3", live
        assert live["metadata"]["annotations"]["static-pods.noderemedy.io/previous-failures"] == "1"
        again = apiserver.monitor(3, 90.0)
        assert again["ready"] is True, again
        lkg = Path(os.readlink(apiserver.resources / "kube-apiserver-last-known-good")).parent.name
        assert lkg == "kube-apiserver-pod-3", lkg
        print(
            f"\nFIGURE EtcdUnhealthy retried: endpoint fixed -> revision 3 ready in {time.time() - fixed:.1f} s (backoff 15 s)"
        )
    finally:
        relay.terminate()
        relay.wait(10)


def test_an_audit_policy_the_apiserver_refuses_crash_loops_and_falls_back(apiserver):
    """Revision 5, written by our installer (``state: install``) with a revisioned config file: an
    audit policy that is not one. The kube-apiserver refuses it and exits, again and again under the
    real kubelet: CrashLooping, fallback to revision 1, no retry. The kubelet's own log of the
    container says why."""
    _good(apiserver)
    installed = apiserver.install_with_file(
        5, "--audit-policy-file", "audit-policy.yaml",
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n", "--audit-log-path=-",
    )  # fmt: skip
    assert installed["changed"] is True, installed
    written = time.time()
    timeout = 25.0
    pods = Path(apiserver.params["pod_logs_dir"])
    with ContainerLogs(pods, f"kube-system_kube-apiserver-{NODE}_*/kube-apiserver/*.log") as logs:
        res = apiserver.monitor(5, timeout)
    assert (res["reason"], res["action"]) == ("CrashLooping", "fallback"), res
    assert res["retry"]["retryable"] is False, res
    said = logs.text()
    assert "audit" in said.lower() and "Loud" in said, said[-2000:]
    apiserver.wait_ready(120, "last-known-good kube-apiserver ready again")
    back = time.time() - written
    live = yaml.safe_load(apiserver.live.read_text())
    assert live["metadata"]["labels"]["revision"] == "1", live
    print(
        f"\nFIGURE CrashLooping (invalid audit policy): revision 5 written -> last-known-good /readyz ok in {back:.1f} s "
        f"(monitor timeout {timeout:.0f} s; attempts seen {res['last_observation']['start_attempts']})"
    )


ENCRYPTION_CONFIG = """\
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [customresourcedefinitions.apiextensions.k8s.io]
  providers:
  - aescbc:
      keys:
      - {name: key1, secret: c2VjcmV0IGlzIHNlY3VyZSwgb3IgaXMgaXQ/IDMyIGI=}
"""


def test_a_post_start_hook_that_never_finishes_falls_back_with_not_ready_naming_the_hook(apiserver):
    """Revision 6 encrypts CustomResourceDefinitions at rest (aescbc) without the ``identity``
    provider, so it cannot read the CRD revision 1 stored in plain text: its CRD informer never
    syncs and the kube-apiserver's ``crd-informer-synced`` post-start hook never finishes. The
    kube-apiserver keeps running with ``/healthz`` and ``/readyz`` red on that hook only: NotReady
    (retryable), the message names the hook, fallback to revision 1, which reads the CRD again."""
    _good(apiserver)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object"}}}],
        },
    }  # fmt: skip
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    assert in_node(apiserver.netns, "post", apiserver.params, 60, path=path, body=crd)["status"] == 201
    installed = apiserver.install_with_file(
        6, "--encryption-provider-config", "encryption-config.yaml", ENCRYPTION_CONFIG
    )
    assert installed["changed"] is True, installed
    written = time.time()
    timeout = 25.0
    res = apiserver.monitor(6, timeout)
    assert (res["reason"], res["action"]) == ("NotReady", "fallback"), res
    assert "unfinished post-start hooks: " in res["message"], res
    assert "poststarthook/crd-informer-synced" in res["message"].split("unfinished post-start hooks: ")[1], (
        res
    )
    assert res["retry"]["retryable"] is True, res
    assert res["last_observation"]["start_attempts"] == 1, res  # it never restarted: not CrashLooping
    live = yaml.safe_load(apiserver.live.read_text())
    assert live["metadata"]["labels"]["revision"] == "1", live
    assert (
        "poststarthook/crd-informer-synced"
        in live["metadata"]["annotations"]["startup-monitor.static-pods.openshift.io/fallback-message"]
    )
    apiserver.wait_ready(120, "last-known-good kube-apiserver ready again")
    back = time.time() - written
    print(
        f"\nFIGURE NotReady ({res['message']}): revision 6 written -> "
        f"last-known-good /readyz ok in {back:.1f} s (monitor timeout {timeout:.0f} s)"
    )
