"""Static-pod fallback against real peers: a second, real kube-apiserver (the operand) on the lab's etcd,
started from the live manifest by :mod:`operand_harness` (it plays the kubelet), and the lab's own
kube-apiserver for the StorageVersion API (KEP-2339). Modules run through the real ``ansible`` CLI.

Measured figures (elapsed seconds, overshoot past the timeout) are printed, never asserted: run with
``-s`` to see them. The monitor waits out its whole timeout before it falls back, so the cases pass
the shortest that still gives their verdict (none is about the defaults): 10 s for CrashLooping (the
harness restarts the operand 1 s after it exits), 20 s for EtcdUnhealthy (the operand must be up and
answering), 5 s for NeverStartedUp.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from operand_harness import StaticPodKubelet

from noderemedy_lab.pytest_plugin import worker_port_base

pytestmark = [pytest.mark.lab, pytest.mark.kube]

FALLBACK = "noderemedy.core.static_pod_fallback"
INFO = "noderemedy.core.storage_version_info"
ANN = "startup-monitor.static-pods.openshift.io/"


def free_port() -> int:
    """A free TCP port on 127.0.0.1 in this worker's range, +580..+599 (past every lab's)."""
    for _ in range(200):
        port = worker_port_base() + random.randint(580, 599)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {worker_port_base() + 580}-{worker_port_base() + 599}")


def run_module(
    collections_path: Path, module: str, args: dict, timeout: float = 600, output: dict | None = None
) -> dict:
    """Run one module with the real ``ansible`` ad-hoc CLI on localhost; its result dict. ``output``,
    when given, receives the CLI's ``stdout`` and ``stderr`` (where warnings are printed)."""
    bindir = Path(sys.executable).parent
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
            "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
            "ANSIBLE_LOCALHOST_WARNING": "False",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "0",
        }
    )
    argv = [str(bindir / "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", module]
    argv += ["-a", json.dumps(args)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if output is not None:
        output.update(stdout=proc.stdout, stderr=proc.stderr)
    head, sep, body = proc.stdout.partition("=>")
    assert sep, f"no module result in ansible output:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(body)
    if "FAILED" in head:  # the ad-hoc output says it in the header, not in the JSON
        result["failed"] = True
    return result


def operand_pod(argv: list[str], revision: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "kube-apiserver",
            "namespace": "kube-system",
            "labels": {"app": "kube-apiserver", "revision": str(revision)},
        },
        "spec": {
            "hostNetwork": True,
            "containers": [
                {"name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.34.4", "command": argv}
            ],
        },
    }


class Operand:
    """A layout under ``tmp`` with three revisions of a second kube-apiserver on the lab's etcd.

    Revision 1 is good; revision 2 adds an invalid flag (crash-loops); revision 3 points at an etcd
    endpoint where nothing listens. Each uses its own ``--etcd-prefix`` so the lab is not disturbed.
    """

    def __init__(self, lab, tmp: Path) -> None:
        kube = lab.info["kube"]
        self.lab = lab
        self.pki = Path(kube["pki"])
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        prefix = f"/noderemedy-static-pod-{uuid.uuid4().hex[:8]}"
        base = [a for a in kube["apiserver_args"] if not a.startswith(("--secure-port=", "--etcd-prefix="))]
        base += [f"--secure-port={self.port}", f"--etcd-prefix={prefix}"]
        wrong_etcd = [a for a in base if not a.startswith("--etcd-servers=")]
        wrong_etcd.append(f"--etcd-servers=http://127.0.0.1:{free_port()}")
        self.argv = {1: base, 2: [*base, "--this-flag-does-not-exist=1"], 3: wrong_etcd}
        self.manifests = tmp / "manifests"
        self.resources = tmp / "resources"
        self.log = tmp / "log" / "termination.log"
        for d in (self.manifests, self.resources, self.log.parent):
            d.mkdir(parents=True)
        for rev, argv in self.argv.items():
            d = self.resources / f"kube-apiserver-pod-{rev}"
            (d / "configmaps").mkdir(parents=True)
            (d / "kube-apiserver-pod.yaml").write_text(yaml.safe_dump(operand_pod(argv, rev)))
        self.tmp = tmp
        self.params = {
            "operand": "kube-apiserver",
            "manifests_dir": str(self.manifests),
            "resources_dir": str(self.resources),
            "lock_file": str(tmp / "kube-apiserver-installer.lock"),
            "termination_log": str(self.log),
            "probe_url": self.url,
            "probe_ca_cert": str(self.pki / "ca.crt"),
            "probe_client_cert": str(self.pki / "admin.crt"),
            "probe_client_key": str(self.pki / "admin.key"),
            "interval": 1,
        }

    @property
    def live(self) -> Path:
        return self.manifests / "kube-apiserver-pod.yaml"

    def install(self, rev: int) -> float:
        """Install revision ``rev`` as the installer does (atomic rename); returns the time (epoch s)."""
        tmp = self.manifests / ".kube-apiserver-pod.yaml.install"
        tmp.write_bytes(
            (self.resources / f"kube-apiserver-pod-{rev}" / "kube-apiserver-pod.yaml").read_bytes()
        )
        os.replace(tmp, self.live)
        return time.time()

    def link_good(self, rev: int) -> None:
        link = self.resources / "kube-apiserver-last-known-good"
        link.symlink_to(self.resources / f"kube-apiserver-pod-{rev}" / "kube-apiserver-pod.yaml")

    def kubelet(self) -> StaticPodKubelet:
        return StaticPodKubelet(self.live, self.log, self.tmp / "operand-logs", restart_delay=1.0)

    def storage_version_auth(self) -> dict:
        """Kube auth for the operand's own API (the lab's admin credentials, the operand's URL)."""
        return {"kubeconfig": str(self.lab.kubeconfig), "host": self.url, "storage_version_check": "always"}


@pytest.fixture
def operand(lab_kube, tmp_path) -> Operand:
    return Operand(lab_kube, tmp_path)


def report(name: str, res: dict, installed_at: float, timeout: float) -> None:
    written = res.get("written_at")
    since_install = f"{written - installed_at:.2f}" if written else "n/a"
    print(
        f"\nFIGURE {name}: reason={res.get('reason')!r} timeout={timeout} s "
        f"monitor elapsed={res['elapsed_seconds']} s (over timeout: {res['elapsed_seconds'] - timeout:+.2f} s), "
        f"decision after deadline={res.get('decision_seconds')} s, install→fallback written={since_install} s, "
        f"observations={res['observations']}"
    )


def test_good_revision_turns_ready_and_becomes_last_known_good(operand, collections_path):
    installed = operand.install(1)
    with operand.kubelet() as kubelet:
        res = run_module(
            collections_path,
            FALLBACK,
            {**operand.params, **operand.storage_version_auth(), "state": "monitor", "timeout": 180},
        )
        assert kubelet.error is None
    print(
        f"\nFIGURE good revision ready after {res['elapsed_seconds']} s (installed {time.time() - installed:.1f} s ago)"
    )
    assert (res["ready"], res["action"], res["reason"], res["revision"]) == (True, "mark_good", "", 1), res
    link = operand.resources / "kube-apiserver-last-known-good"
    assert os.readlink(link) == str(operand.resources / "kube-apiserver-pod-1" / "kube-apiserver-pod.yaml")
    # KEP-2339: what this apiserver reported it can decode was recorded with the revision
    assert res["storage_version"]["recorded"] is True, res["storage_version"]
    record = json.loads((operand.resources / "kube-apiserver-pod-1" / "storage-versions.json").read_text())
    assert "apps/v1" in record["resources"]["apps.deployments"]
    assert record["resources"]["core.pods"] == ["v1"]
    assert record["apiServerID"].startswith("apiserver-")
    assert [s["revision"] for s in kubelet.starts] == [1]


def test_invalid_flag_crash_loops_and_falls_back(operand, collections_path):
    operand.link_good(1)
    installed = operand.install(2)
    timeout = 10
    with operand.kubelet() as kubelet:
        res = run_module(
            collections_path,
            FALLBACK,
            {**operand.params, **operand.storage_version_auth(), "state": "monitor", "timeout": timeout},
        )
        report("invalid flag", res, installed, timeout)
        assert (res["ready"], res["action"], res["reason"]) == (False, "fallback", "CrashLooping"), res
        assert (res["fallback_revision"], res["fallback_source"]) == (1, "last-known-good")
        assert res["retry"] == {
            "retryable": False,
            "retry_after_seconds": None,
            "previous_failures": 0,
            "backoff": {"base_seconds": 600.0, "cap_seconds": 21600.0},
        }
        # the operand's API is down: the StorageVersion check says so and the default is to proceed
        assert res["storage_version"]["available"] is False
        live = yaml.safe_load(operand.live.read_text())
        ann = live["metadata"]["annotations"]
        assert (ann[ANN + "fallback-for-revision"], ann[ANN + "fallback-reason"]) == ("2", "CrashLooping")
        assert "start-up attempts" in ann[ANN + "fallback-message"]
        assert live["metadata"]["labels"]["revision"] == "1"
        assert sorted(p.name for p in operand.manifests.iterdir()) == ["kube-apiserver-pod.yaml"]
        # the harness (kubelet) runs the fallback manifest: revision 1 turns ready again
        again = run_module(
            collections_path, FALLBACK, {**operand.params, "state": "monitor", "timeout": 120, "revision": 1}
        )
        assert kubelet.error is None
    assert (again["ready"], again["action"]) == (True, "mark_good"), again
    # storage_version_check auto without any client configuration: reported, not fatal
    assert again["storage_version"]["available"] is False, again["storage_version"]
    revs = [s["revision"] for s in kubelet.starts]
    assert revs.count(2) >= 2 and revs[-1] == 1, revs


def test_wrong_etcd_endpoint_falls_back_with_etcd_unhealthy(operand, collections_path):
    operand.link_good(1)
    installed = operand.install(3)
    timeout = 20
    with operand.kubelet() as kubelet:
        res = run_module(
            collections_path,
            FALLBACK,
            {**operand.params, "storage_version_check": "never", "state": "monitor", "timeout": timeout},
        )
        assert kubelet.error is None
    report("wrong etcd", res, installed, timeout)
    assert (res["ready"], res["action"], res["reason"]) == (False, "fallback", "EtcdUnhealthy"), res
    assert res["fallback_revision"] == 1
    assert res["retry"]["retryable"] is True and res["retry"]["retry_after_seconds"] == 600
    ann = yaml.safe_load(operand.live.read_text())["metadata"]["annotations"]
    assert ann[ANN + "fallback-reason"] == "EtcdUnhealthy"
    assert "etcd" in ann[ANN + "fallback-message"]


def test_storage_version_info_reads_the_lab_apiserver(lab_kube, collections_path):
    res = run_module(collections_path, INFO, {"kubeconfig": str(lab_kube.kubeconfig)})
    assert res["available"] is True, res
    dep = res["resources"]["apps.deployments"]
    assert (dep["group"], dep["resource"], dep["commonEncodingVersion"]) == ("apps", "deployments", "apps/v1")
    assert dep["encodingVersions"] == ["apps/v1"]
    (server_id,) = dep["servers"]
    assert "apps/v1" in dep["servers"][server_id]["decodableVersions"]
    assert res["apiservers"][server_id]["core.pods"]["encodingVersion"] == "v1"
    assert res["encodings"]["core.pods"] == ["v1"]
    only = run_module(
        collections_path, INFO, {"kubeconfig": str(lab_kube.kubeconfig), "resources": ["core.pods"]}
    )
    assert list(only["resources"]) == ["core.pods"]


def test_fallback_refuses_on_storage_version_skew(lab_kube, tmp_path, collections_path):
    """Revision 1 records what the lab's apiserver decodes; with apps/v1 removed from that record the
    fallback from revision 2 to 1 is refused with StorageVersionSkew naming apps.deployments."""
    manifests, resources = tmp_path / "manifests", tmp_path / "resources"
    manifests.mkdir()
    for rev in (1, 2):
        d = resources / f"kube-apiserver-pod-{rev}"
        d.mkdir(parents=True)
        (d / "kube-apiserver-pod.yaml").write_text(
            yaml.safe_dump(operand_pod(["kube-apiserver", f"--v={rev}"], rev))
        )
    live = manifests / "kube-apiserver-pod.yaml"
    live.write_text((resources / "kube-apiserver-pod-2" / "kube-apiserver-pod.yaml").read_text())
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(manifests),
        "resources_dir": str(resources),
        "lock_file": str(tmp_path / "lock"),
        "kubeconfig": str(lab_kube.kubeconfig),
        "storage_version_check": "always",
    }
    good = run_module(collections_path, FALLBACK, {**params, "state": "mark_good", "revision": 1})
    assert good["storage_version"]["recorded"] is True, good
    record_path = resources / "kube-apiserver-pod-1" / "storage-versions.json"
    record = json.loads(record_path.read_text())
    assert "apps/v1" in record["resources"]["apps.deployments"]
    record["resources"]["apps.deployments"] = [
        v for v in record["resources"]["apps.deployments"] if v != "apps/v1"
    ]
    record_path.write_text(json.dumps(record))
    before = live.read_bytes()

    refused = run_module(collections_path, FALLBACK, {**params, "state": "fallback", "reason": "NotReady"})
    assert refused.get("failed") is True, refused
    assert refused["reason"] == "StorageVersionSkew"
    assert refused["skewed_resources"] == ["apps.deployments"]
    assert "apps.deployments" in refused["msg"] and "force" in refused["msg"]
    assert live.read_bytes() == before

    forced = run_module(
        collections_path, FALLBACK, {**params, "state": "fallback", "reason": "NotReady", "force": True}
    )
    assert (forced["action"], forced["fallback_revision"]) == ("fallback", 1), forced
    assert forced["storage_version"]["forced"] is True
    assert yaml.safe_load(live.read_text())["metadata"]["annotations"][ANN + "fallback-for-revision"] == "2"


def test_manifest_the_kubelet_cannot_run_never_starts_up_and_falls_back(operand, collections_path):
    """A revision without containers: the kubelet (harness) never starts it → NeverStartedUp."""
    bad = operand_pod(operand.argv[1], 4)
    bad["spec"] = {"hostNetwork": True}
    d = operand.resources / "kube-apiserver-pod-4"
    d.mkdir()
    (d / "kube-apiserver-pod.yaml").write_text(yaml.safe_dump(bad))
    operand.link_good(1)
    installed = operand.install(4)
    timeout = 5
    with operand.kubelet() as kubelet:
        res = run_module(
            collections_path,
            FALLBACK,
            {**operand.params, "storage_version_check": "never", "state": "monitor", "timeout": timeout},
        )
        assert kubelet.error is None
    report("never started", res, installed, timeout)
    assert (res["ready"], res["action"], res["reason"]) == (False, "fallback", "NeverStartedUp"), res
    assert res["fallback_revision"] == 1 and res["retry"]["retryable"] is False
    assert 4 not in [s["revision"] for s in kubelet.starts]  # revision 4 never ran
