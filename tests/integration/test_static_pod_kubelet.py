"""The static-pod monitor on a real kubelet: start attempts come from the kubelet's own log files
under /var/log/pods (``<namespace>_<pod>_<uid>/<container>/<restartCount>.log``), not from a log our
tests write. The operand is a static pod of lab-real-0 (hostNetwork, the lab's busybox image) that
serves the etcd-style health endpoints (``/livez``, ``/readyz``, ``/health``) with busybox httpd on
the node's address; its revisions live under ``<tmp>/resources/etcd-pod-<rev>/`` and the live
manifest in the kubelet's staticPodPath.

* a good revision, written by our installer (``state: install``), becomes last-known-good;
* a revision whose container exits crash-loops under the real kubelet: CrashLooping, fallback to
  last-known-good, which serves again;
* a manifest the kubelet cannot read never starts: NeverStartedUp, fallback, no retry.

Each case prints the time from the bad revision being written to the last-known-good pod serving
again, with the monitor timeout used. The monitor waits out its whole timeout before it falls back,
so the cases pass the shortest that still gives their verdict (none is about the defaults): 25 s for
CrashLooping, which needs a second start after the kubelet's first back-off of 10 s; 10 s for
NeverStartedUp.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml
from kube_helpers import wait_for

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    CRASH_LOOPING,
    NEVER_STARTED_UP,
    HttpProber,
    execute,
)
from noderemedy_lab.images import BUSYBOX_IMAGE

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NODE = "lab-real-0"
PORT = 12379  # inside the node's own network namespace: nothing else of the lab listens there
SERVE = (
    "mkdir -p /tmp/www && echo ok > /tmp/www/livez && echo ok > /tmp/www/readyz && "
    'echo \'{{"health":"true"}}\' > /tmp/www/health && '
    "echo revision {rev} starting && exec /bin/busybox httpd -f -p 0.0.0.0:{port} -h /tmp/www"
)


def operand_pod(rev: int, command: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "etcd",
            "namespace": "kube-system",
            "labels": {"app": "noderemedy-static-pod-test", "revision": str(rev)},
        },
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "etcd",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", command],
                }
            ],
        },
    }


class NodeOperand:
    """Revisions 1 (serves), 2 (exits 1 at once) and 3 (not YAML) of operand ``etcd`` on ``NODE``."""

    def __init__(self, lab, tmp: Path) -> None:
        info = lab.info["real_nodes"][NODE]
        self.manifests = Path(info["dir"]) / "manifests"
        self.pod_logs = Path(info["dir"]) / "var" / "log" / "pods"
        self.resources = tmp / "resources"
        self.url = f"http://{info['ip']}:{PORT}"
        self.pods = {
            1: operand_pod(1, SERVE.format(rev=1, port=PORT)),
            2: operand_pod(2, "echo revision 2 exits; exit 1"),
        }
        # every test's manifests carry its name, so each test's static pods get UIDs of their own: the
        # kubelet (UID = the manifest's hash) does not start a static pod re-added with the UID of
        # one it has just terminated, and every test installs revision 1
        for pod in self.pods.values():
            pod["metadata"]["annotations"] = {"noderemedy.io/test": tmp.name}
        # revision 3 is what a broken installer of someone else's writes: not YAML (ours refuses it)
        d = self.resources / "etcd-pod-3"
        d.mkdir(parents=True)
        (d / "etcd-pod.yaml").write_text(
            "kind: Pod\nmetadata: {name: etcd, labels: {revision: '3'}\nspec: [not yaml\n"
        )
        self.params = {
            "operand": "etcd",
            "manifests_dir": str(self.manifests),
            "resources_dir": str(self.resources),
            "lock_file": str(tmp / "etcd-installer.lock"),
            "pod_logs_dir": str(self.pod_logs),
            "node_name": NODE,
            "probe_url": self.url,
            "probe_kind": "etcd",
            "probe_request_timeout": 1.0,
            "storage_version_check": "never",
            "interval": 1,
        }
        self.prober = HttpProber(self.url, "etcd", request_timeout=1.0)

    @property
    def live(self) -> Path:
        return self.manifests / "etcd-pod.yaml"

    def install(self, rev: int) -> float:
        """Install revision ``rev``: 1 and 2 with our installer (``state: install``, under the
        installer lock), 3 by hand as a broken installer would (dot temp file, rename); returns
        epoch seconds."""
        if rev in self.pods:
            res = execute({**self.params, "state": "install", "revision": rev, "manifest": self.pods[rev]})
            assert res["changed"] is True and str(self.live) in res["files_written"], res
            assert [p.name for p in self.manifests.iterdir() if not p.name.startswith(".")] == [
                self.live.name
            ]
            return time.time()
        tmp = self.manifests / ".etcd-pod.yaml.install"
        tmp.write_bytes((self.resources / f"etcd-pod-{rev}" / "etcd-pod.yaml").read_bytes())
        os.replace(tmp, self.live)
        return time.time()

    def serving(self) -> bool:
        return self.prober.get("/health").ok

    def monitor(self, rev: int, timeout: float) -> dict:
        return execute({**self.params, "state": "monitor", "revision": rev, "timeout": timeout})


@pytest.fixture
def operand(lab_real, tmp_path):
    op = NodeOperand(lab_real, tmp_path)
    yield op
    op.live.unlink(missing_ok=True)  # the kubelet stops the static pod
    wait_for(lambda: not op.serving(), 60, "the test's static pod gone from the node")


def _good(operand: NodeOperand) -> None:
    operand.install(1)
    res = operand.monitor(1, 60)
    assert res["ready"] is True, res
    assert res["last_observation"]["start_attempts"] == 1, res
    assert Path(os.readlink(operand.resources / "etcd-last-known-good")).parent.name == "etcd-pod-1", res


def test_good_revision_then_a_crash_looping_one_falls_back(operand):
    _good(operand)
    timeout = 25.0
    written = operand.install(2)
    res = operand.monitor(2, timeout)
    assert res["reason"] == CRASH_LOOPING, res
    assert res["action"] == "fallback" and res["retry"]["retryable"] is False, res
    assert res["last_observation"]["start_attempts"] > 1, res
    wait_for(operand.serving, 90, "last-known-good revision 1 serving again")
    back = time.time() - written
    live = yaml.safe_load(operand.live.read_text())
    assert live["metadata"]["labels"]["revision"] == "1", live
    print(
        f"\nFIGURE CrashLooping: bad revision written -> last-known-good serving in {back:.1f} s (monitor timeout {timeout:.0f} s)"
    )


def test_a_manifest_the_kubelet_cannot_read_never_starts_up(operand):
    _good(operand)
    timeout = 10.0
    written = operand.install(3)
    res = operand.monitor(3, timeout)
    assert res["reason"] == NEVER_STARTED_UP, res
    assert res["action"] == "fallback" and res["retry"]["retryable"] is False, res
    assert res["last_observation"]["start_attempts"] == 0, res
    wait_for(operand.serving, 90, "last-known-good revision 1 serving again")
    back = time.time() - written
    print(
        f"\nFIGURE NeverStartedUp: bad revision written -> last-known-good serving in {back:.1f} s (monitor timeout {timeout:.0f} s)"
    )


def test_a_monitor_killed_mid_watch_resumes_and_falls_back_once(operand):
    """The monitor process is killed (SIGKILL) while it watches a crash-looping revision; a new
    monitor of the same revision watches again and falls back once; a third finds the fallback in
    place and writes nothing (the live manifest keeps the uid the one fallback gave it)."""
    import json
    import subprocess
    import sys

    operand.install(1)  # the revision to fall back to (the highest earlier one; no need to run it)
    installed = operand.install(2)
    params = {**operand.params, "state": "monitor", "revision": 2, "timeout": 25.0}
    script = (
        "import json, sys\n"
        "from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import execute\n"
        "print(json.dumps(execute(json.loads(sys.argv[1]))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    first = subprocess.Popen([sys.executable, "-c", script, json.dumps(params)], env=env)

    def revision_2_started() -> bool:  # a log of this install's revision 2 (not an earlier test's)
        for log in operand.pod_logs.glob(f"kube-system_etcd-{NODE}_*/etcd/*.log"):
            try:
                if log.stat().st_mtime >= installed - 1 and "revision 2 exits" in log.read_text():
                    return True
            except OSError:  # removed meanwhile by the kubelet's garbage collection
                continue
        return False

    wait_for(revision_2_started, 60, "revision 2 started")
    first.kill()  # mid-watch: long before its 25 s timeout
    first.wait(10)
    assert yaml.safe_load(operand.live.read_text())["metadata"]["labels"]["revision"] == "2", (
        "fell back before the kill"
    )
    res = operand.monitor(2, 25.0)
    assert (res["reason"], res["action"]) == (CRASH_LOOPING, "fallback"), res
    written = yaml.safe_load(operand.live.read_text())
    again = operand.monitor(2, 25.0)
    assert again["action"] == "none" and "already fallen back" in again["message"], again
    assert yaml.safe_load(operand.live.read_text())["metadata"]["uid"] == written["metadata"]["uid"]
    assert written["metadata"]["labels"]["revision"] == "1", written


def test_the_monitor_reads_the_mirror_pod_through_the_api_server(operand, lab_real):
    """With a client configuration (the lab's API server, where this kubelet registers its mirror
    pods), each observation also reads the operand's mirror pod ``etcd-lab-real-0``: a good revision
    is ready only once its mirror pod carries its revision label and is Ready; a crash-looping one is
    seen there with its restart count and falls back all the same."""
    operand.params["kubeconfig"] = lab_real.info["kube"]["kubeconfig"]
    operand.install(1)
    res = operand.monitor(1, 60)
    assert res["ready"] is True, res
    mirror = res["last_observation"]["mirror"]
    assert mirror is not None and (mirror["revision"], mirror["ready"]) == (1, True), res
    operand.install(2)
    res = operand.monitor(2, 25.0)
    assert (res["reason"], res["action"]) == (CRASH_LOOPING, "fallback"), res
    mirror = res["last_observation"]["mirror"]
    assert mirror is not None and mirror["revision"] == 2 and mirror["ready"] is False, res
    assert res["last_observation"]["start_attempts"] >= mirror["restart_count"] + 1 > 1, res
    wait_for(operand.serving, 90, "last-known-good revision 1 serving again")
