"""The startup monitor as a static pod of its own, on the lab's real node lab-real-0 (kubelet v1.34 +
containerd + runc).

Our installer (``state: install`` with ``startup_monitor``) writes ``etcd-startup-monitor-pod.yaml``
next to the operand's ``etcd-pod.yaml`` in the kubelet's staticPodPath. The kubelet runs it from the
remediation pod image (``./dev image``: ansible-core + the collection); the container runs the
module ad hoc (``state: monitor``, ``in_static_pod: true``) from the image's collection, which the
test run built from this checkout, so that the code under test is what runs. The operand is the busybox pod of
``test_static_pod_kubelet.py`` (serves ``/livez``, ``/readyz``, ``/health`` on the node's address).

* a good revision: the monitor pod links last-known-good and removes its own manifest;
* a crash-looping revision: the monitor pod falls back and removes its own manifest; meanwhile an
  inotify watch on the manifests directory records every name created in it: only dot-prefixed
  temporary files and the two manifests renamed into place;
* a monitor of revision 3 next to an operand manifest of revision 1 waits and writes nothing, past
  its own timeout; once the installer writes revision 3 it judges it and removes itself.

Each case prints the time from the revision being written to the outcome, with the monitor timeout:
25 s, enough for the second start (after the kubelet's first back-off of 10 s) that CrashLooping
needs; 45 s for the monitor that must not decide past its timeout (its window is that and 10 s
more) and then judges the revision written at last, which must be up and answering within it on a
busy host. None of these cases is about the default timeout. Pods of earlier cases are left to the
kubelet's garbage collection (every minute): what a case looks for in ``/var/log/pods`` is newer
than what it installed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import threading
import time
from pathlib import Path

import pytest
import yaml
from kube_helpers import wait_for
from test_static_pod_kubelet import NODE, PORT, SERVE, operand_pod

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    FALLBACK_FOR_REVISION,
    FALLBACK_REASON,
    HttpProber,
    execute,
    monitor_pod,
)

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]


class DirWatch:
    """Every name created in (``IN_CREATE``) or renamed into (``IN_MOVED_TO``) one directory, from
    Linux inotify (libc through ctypes): no poll can miss a short-lived file."""

    IN_CREATE = 0x100
    IN_MOVED_TO = 0x80

    def __init__(self, path: Path) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK)
        assert self._fd >= 0, os.strerror(ctypes.get_errno())
        wd = self._libc.inotify_add_watch(self._fd, str(path).encode(), self.IN_CREATE | self.IN_MOVED_TO)
        assert wd >= 0, os.strerror(ctypes.get_errno())
        self.created: list[str] = []
        self.moved_in: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import select

        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if not ready:
                continue
            buf = os.read(self._fd, 65536)
            i = 0
            while i < len(buf):
                _wd, mask, _cookie, size = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16 : i + 16 + size].rstrip(b"\0").decode()
                i += 16 + size
                (self.created if mask & self.IN_CREATE else self.moved_in).append(name)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        os.close(self._fd)


class MonitoredOperand:
    """Operand ``etcd`` of lab-real-0 installed with its startup monitor as a static pod."""

    def __init__(self, lab, tmp: Path, image: str, timeout: float) -> None:
        info = lab.info["real_nodes"][NODE]
        self.manifests = Path(info["dir"]) / "manifests"
        self.pod_logs = Path(info["dir"]) / "var" / "log" / "pods"
        self.resources = tmp / "resources"
        self.url = f"http://{info['ip']}:{PORT}"
        self.timeout = timeout
        self.params = {
            "operand": "etcd",
            "manifests_dir": str(self.manifests),
            "resources_dir": str(self.resources),
            "lock_file": str(tmp / "lock" / "etcd-installer.lock"),
            "pod_logs_dir": str(self.pod_logs),
            "node_name": NODE,
            "probe_url": self.url,
            "probe_kind": "etcd",
            "probe_request_timeout": 1.0,
            "storage_version_check": "never",
            "interval": 1,
            "timeout": timeout,
        }
        (tmp / "lock").mkdir()
        self.monitor_spec = {"image": image}
        self.prober = HttpProber(self.url, "etcd", request_timeout=1.0)
        self.test_id = tmp.name

    @property
    def live(self) -> Path:
        return self.manifests / "etcd-pod.yaml"

    @property
    def monitor_manifest(self) -> Path:
        return self.manifests / "etcd-startup-monitor-pod.yaml"

    def install(self, rev: int, command: str, with_monitor: bool = True) -> tuple[float, dict]:
        """Our installer: revision ``rev`` (with its startup monitor); returns (epoch s, result).

        The manifest carries the test's name: the kubelet ignores a static pod re-added with the
        UID (the manifest's hash) of one it has just terminated, and every test installs revision 1.
        """
        manifest = operand_pod(rev, command)
        manifest["metadata"]["annotations"] = {"noderemedy.io/test": self.test_id}
        params = {**self.params, "state": "install", "revision": rev, "manifest": manifest}
        if with_monitor:
            params["startup_monitor"] = self.monitor_spec
        res = execute(params)
        return time.time(), res

    def lkg(self) -> int | None:
        link = self.resources / "etcd-last-known-good"
        if not link.is_symlink():
            return None
        return int(Path(os.readlink(link)).parent.name.rsplit("-", 1)[1])

    def live_pod(self) -> dict:
        return yaml.safe_load(self.live.read_text())

    def serving(self) -> bool:
        return self.prober.get("/health").ok

    def set_timeout(self, timeout: float) -> None:
        """The monitor timeout (seconds) of the monitor pods installed from now on."""
        self.timeout = timeout
        self.params["timeout"] = timeout

    def monitor_running(self, since: float) -> bool:
        """A monitor pod has started since ``since`` (epoch s): the kubelet's log of its first start is
        that recent (pods of earlier tests leave theirs until the kubelet's garbage collection)."""
        for log in self.pod_logs.glob(f"kube-system_etcd-startup-monitor-{NODE}_*/startup-monitor/0.log"):
            try:
                if log.stat().st_mtime >= since:
                    return True
            except OSError:  # removed meanwhile by the kubelet's garbage collection
                continue
        return False


@pytest.fixture
def monitored(lab_real, monitor_image, tmp_path):
    op = MonitoredOperand(lab_real, tmp_path, monitor_image, timeout=25.0)
    yield op
    op.monitor_manifest.unlink(missing_ok=True)
    op.live.unlink(missing_ok=True)
    wait_for(lambda: not op.serving(), 60, "the test's static pod gone from the node")


def test_the_monitor_pod_marks_a_good_revision_and_removes_its_manifest(monitored):
    written, res = monitored.install(1, SERVE.format(rev=1, port=PORT))
    assert res["files_written"][-2:] == [str(monitored.monitor_manifest), str(monitored.live)], res
    wait_for(lambda: monitored.lkg() == 1, 180, "the monitor pod linking revision 1 as last-known-good")
    marked = time.time() - written
    wait_for(lambda: not monitored.monitor_manifest.exists(), 60, "the monitor pod removing its manifest")
    assert monitored.live_pod()["metadata"]["labels"]["revision"] == "1"
    assert FALLBACK_FOR_REVISION not in (monitored.live_pod()["metadata"].get("annotations") or {})
    print(
        f"\nFIGURE good revision (monitor pod): written -> last-known-good in {marked:.1f} s "
        f"(monitor timeout {monitored.timeout:.0f} s)"
    )


def test_the_monitor_pod_falls_back_from_a_crash_looping_revision_and_only_dot_temp_files_appear(monitored):
    """Revision 1 good (monitor pod), then revision 2 crash-loops: the monitor pod of revision 2
    falls back to 1 and removes its manifest. An inotify watch on the manifests directory over both
    installs and the fallback sees only dot-prefixed names created there, and only the two
    manifests renamed into place."""
    watch = DirWatch(monitored.manifests)
    try:
        monitored.install(1, SERVE.format(rev=1, port=PORT))
        wait_for(lambda: monitored.lkg() == 1, 180, "revision 1 last-known-good")
        wait_for(lambda: not monitored.monitor_manifest.exists(), 60, "the first monitor pod gone")
        written, _ = monitored.install(2, "echo revision 2 exits; exit 1")
        wait_for(
            lambda: (
                (monitored.live_pod()["metadata"].get("annotations") or {}).get(FALLBACK_FOR_REVISION) == "2"
            ),
            180,
            "the monitor pod falling back from revision 2",
        )
        fell_back = time.time() - written
        wait_for(monitored.serving, 90, "last-known-good revision 1 serving again")
        back = time.time() - written
        wait_for(lambda: not monitored.monitor_manifest.exists(), 60, "the monitor pod removing its manifest")
    finally:
        watch.close()
    live = monitored.live_pod()
    assert live["metadata"]["labels"]["revision"] == "1", live
    assert live["metadata"]["annotations"][FALLBACK_REASON] == "CrashLooping", live
    assert monitored.lkg() == 1
    ours = {"etcd-pod.yaml", "etcd-startup-monitor-pod.yaml"}
    stray = [n for n in watch.created if not n.startswith(".")]
    assert stray == [], f"non-dot files created in the manifests directory: {stray}"
    assert watch.created, "the watch saw no file created at all"
    assert set(watch.moved_in) == ours, watch.moved_in
    # installs 1 and 2 write both manifests, the fallback the operand's
    assert (
        watch.moved_in.count("etcd-pod.yaml") == 3
        and watch.moved_in.count("etcd-startup-monitor-pod.yaml") == 2
    )
    print(
        f"\nFIGURE CrashLooping (monitor pod): revision 2 written -> fallback written in {fell_back:.1f} s, "
        f"last-known-good serving in {back:.1f} s (monitor timeout {monitored.timeout:.0f} s); "
        f"{len(watch.created)} names created in the manifests directory, all dot-prefixed"
    )


def test_the_monitor_pod_waits_while_the_operand_manifest_is_of_another_revision(monitored):
    """A monitor of revision 3 starts next to the operand's revision 1 (an installer that died after
    writing the monitor, or a downgrade): it writes nothing, past its own timeout, for as long as the
    operand manifest is not revision 3. When the installer then writes revision 3, the same monitor
    judges it, links it last-known-good and removes its manifest."""
    # the window below is this timeout and 10 s more; then revision 3 is judged within it (the
    # monitor's timeout counts from the live manifest being its revision): the kubelet starts it and
    # it answers, each step seconds late on a busy host (15 s was once too short)
    monitored.set_timeout(45.0)
    monitored.install(1, SERVE.format(rev=1, port=PORT), with_monitor=False)
    wait_for(monitored.serving, 90, "revision 1 serving")
    params = {**monitored.params, "manifests_dir": str(monitored.manifests)}
    pod = monitor_pod(params, 3, monitored.monitor_spec, "kube-system")
    tmp = monitored.manifests / ".etcd-startup-monitor-pod.yaml.test"
    tmp.write_text(yaml.safe_dump(pod))
    monitor_written = time.time()
    os.replace(tmp, monitored.monitor_manifest)
    live_before = monitored.live.read_bytes()
    wait_for(
        lambda: monitored.monitor_running(monitor_written - 1), 120, "the monitor pod of revision 3 running"
    )
    started = time.monotonic()
    # a negative needs a window: the monitor's own timeout and more go by; it must not decide
    deadline = started + monitored.timeout + 10
    while time.monotonic() < deadline:
        assert monitored.lkg() is None, "the waiting monitor linked last-known-good"
        assert monitored.live.read_bytes() == live_before, "the waiting monitor wrote the live manifest"
        assert monitored.monitor_manifest.exists(), "the waiting monitor ended"
        time.sleep(1)
    assert "etcd-startup-monitor" in "".join(p.name for p in monitored.pod_logs.iterdir())
    written, res = monitored.install(3, SERVE.format(rev=3, port=PORT), with_monitor=False)
    assert res["changed"] is True, res
    wait_for(lambda: monitored.lkg() == 3, 120, "the waiting monitor linking revision 3 as last-known-good")
    marked = time.time() - written
    wait_for(lambda: not monitored.monitor_manifest.exists(), 60, "the monitor pod removing its manifest")
    assert monitored.live_pod()["metadata"]["labels"]["revision"] == "3"
    print(
        f"\nFIGURE waiting monitor pod: waited {monitored.timeout + 10:.0f} s without writing; revision 3 written -> "
        f"last-known-good in {marked:.1f} s (monitor timeout {monitored.timeout:.0f} s)"
    )
