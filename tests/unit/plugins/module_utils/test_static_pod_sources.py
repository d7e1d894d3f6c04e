"""The monitor sees the kubelet with no option set, refuses when it cannot see, and retries by itself.

* :mod:`._static_pod.kubelet` on a fake ``/proc`` (a kubelet process whose config names the
  manifests directory, another kubelet for another directory): node name from
  ``--hostname-override`` or the host name, pod logs from ``podLogsDir``, the refusal naming the
  options;
* :mod:`._static_pod.probes` helpers: the etcd verdict from the verbose ``/healthz`` (anonymous
  probes get 403 on ``/healthz/etcd``), loopback URLs;
* :mod:`._static_pod.retries`: the startup-monitor static pod falls back, waits until ``retry-at``,
  rolls the revision out again, and marks it good, on an injected clock.

No network. Sources: kubelet ``nodeutil.GetHostname`` and KubeletConfiguration v1beta1
(``staticPodPath``, ``podLogsDir``); the OpenShift enhancement's Retries.
"""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    FALLBACK_FOR_REVISION,
    Check,
    Layout,
    Observation,
    Options,
    StaticPodError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.kubelet import (
    parse_kubelet_argv,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.probes import (
    etcd_from_healthz,
    is_loopback_url,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    PREVIOUS_FAILURES,
    RETRY_AT,
)

OK = Check(True, True, 200, "ok")


def fake_proc(tmp: Path, pid: int, argv: list[str], config: dict | None = None) -> None:
    """A ``/proc/<pid>`` with ``cmdline``, ``root`` (-> /) and ``cwd``; the config file in ``tmp``."""
    d = tmp / "proc" / str(pid)
    d.mkdir(parents=True)
    if config is not None:
        cfg = tmp / f"kubelet-{pid}.yaml"
        cfg.write_text(yaml.safe_dump(config))
        argv = [*argv, f"--config={cfg}"]
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "root").symlink_to("/")
    (d / "cwd").symlink_to(tmp)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node: manifests dir, pod logs dir, a kubelet for it (pid 40) and one for another dir (pid 30)."""
    (tmp_path / "manifests").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "pods").mkdir()
    fake_proc(
        tmp_path,
        30,
        ["/usr/bin/kubelet", "--hostname-override=wrong"],
        {"staticPodPath": str(tmp_path / "other")},
    )
    fake_proc(
        tmp_path,
        40,
        ["/usr/bin/kubelet", "--hostname-override", "Node-A", "--v=2"],
        {"staticPodPath": str(tmp_path / "manifests"), "podLogsDir": str(tmp_path / "pods")},
    )
    fake_proc(tmp_path, 50, ["/bin/sh", "-c", "kubelet"])
    return tmp_path


def test_the_kubelet_flags_are_read_in_both_forms():
    argv = [
        "kubelet",
        "--config",
        "/var/lib/kubelet/config.yaml",
        "--hostname-override=n1",
        "--pod-manifest-path=/m",
    ]
    assert parse_kubelet_argv(argv) == {
        "config": "/var/lib/kubelet/config.yaml",
        "hostname-override": "n1",
        "pod-manifest-path": "/m",
    }


def test_the_kubelet_of_the_manifests_dir_gives_the_node_name_and_the_pod_logs(node):
    params = {"operand": "kube-apiserver", "manifests_dir": str(node / "manifests")}
    src = sp.resolve_sources(params, False, proc=node / "proc", hostname=lambda: "ignored")
    # the override as the kubelet uses it: lower case; the kubelet of another directory is not it
    assert (src.node_name, src.node_name_from, src.kubelet_pid) == (
        "node-a",
        "kubelet --hostname-override",
        40,
    )
    assert src.pod_logs_dir == str(node / "pods")
    assert src.names() == ["pod_logs_dir"]


def test_a_bind_mount_of_the_static_pod_path_is_the_same_directory(node):
    # the same inode reached through another name (a symlink here; a bind mount alike)
    (node / "etc-manifests").symlink_to(node / "manifests")
    params = {"operand": "kube-apiserver", "manifests_dir": str(node / "etc-manifests")}
    assert sp.find_kubelet(node / "etc-manifests", node / "proc").pid == 40
    assert sp.resolve_sources(params, False, proc=node / "proc").node_name == "node-a"


def test_without_an_override_the_node_name_is_the_host_name_in_lower_case(node):
    (node / "m2").mkdir()
    fake_proc(node, 60, ["/usr/local/bin/kubelet", f"--pod-manifest-path={node / 'm2'}"])
    params = {"operand": "etcd", "manifests_dir": str(node / "m2"), "pod_logs_dir": str(node / "pods")}
    src = sp.resolve_sources(params, False, proc=node / "proc", hostname=lambda: " CP-1\n")
    assert (src.node_name, src.node_name_from, src.kubelet_pid) == ("cp-1", "hostname", 60)


def test_given_options_win_over_what_the_node_shows(node):
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(node / "manifests"),
        "node_name": "given",
        "pod_logs_dir": str(node),
    }
    src = sp.resolve_sources(params, True, proc=node / "proc")
    assert (src.node_name, src.node_name_from, src.pod_logs_dir) == ("given", "node_name", str(node))
    assert src.names() == ["pod_logs_dir", "mirror_pod"]


def test_a_termination_log_given_is_the_source_and_the_pod_logs_are_not_looked_for(node):
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(node / "manifests"),
        "termination_log": "/x.log",
    }
    assert sp.resolve_sources(params, False, proc=node / "proc").names() == ["termination_log"]


def test_the_mirror_pod_alone_is_a_source(node):
    params = {"operand": "kube-apiserver", "manifests_dir": str(node / "nowhere")}
    src = sp.resolve_sources(params, True, proc=node / "proc", hostname=lambda: "h")
    assert src.names() == ["mirror_pod"] and src.node_name == "h"


def test_no_source_is_refused_naming_the_options(node):
    params = {"operand": "kube-apiserver", "manifests_dir": str(node / "nowhere")}
    src = sp.resolve_sources(params, False, proc=node / "proc", hostname=lambda: "h")
    assert src.names() == []
    with pytest.raises(StaticPodError) as err:
        sp.require_sources(src, "kube-apiserver")
    assert (err.value.reason, err.value.field) == ("NoStartAttemptSource", "pod_logs_dir")
    for option in ("pod_logs_dir", "node_name", "kubeconfig", "host", "mirror_pod", "termination_log"):
        assert option in str(err.value)
    assert "/var/log/pods is not a directory" in str(err.value)


def test_the_monitor_refuses_before_judging_or_writing_when_it_cannot_see(tmp_path):
    """execute(state: monitor) with no pod logs dir, no client configuration, no termination log:
    NoStartAttemptSource, and the revision that would have been rolled back stays live."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    live = manifests / "kube-apiserver-pod.yaml"
    live.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "kube-apiserver", "labels": {"revision": "2"}},
                "spec": {"containers": [{"name": "a", "image": "i"}]},
            }
        )
    )
    before = live.read_bytes(), os.stat(live).st_mtime_ns, sorted(os.listdir(tmp_path))
    params = {
        "operand": "kube-apiserver",
        "state": "monitor",
        "manifests_dir": str(manifests),
        "resources_dir": str(tmp_path / "resources"),
        "lock_file": str(tmp_path / "lock"),
        "pod_logs_dir": str(tmp_path / "no-such-dir"),
        "storage_version_check": "never",
        "timeout": 1,
    }
    with pytest.raises(StaticPodError) as err:
        sp.execute(params)
    assert err.value.reason == "NoStartAttemptSource"
    assert str(tmp_path / "no-such-dir") in str(err.value)
    assert (live.read_bytes(), os.stat(live).st_mtime_ns, sorted(os.listdir(tmp_path))) == before


def test_the_etcd_verdict_comes_from_the_verbose_healthz_when_healthz_etcd_is_forbidden():
    green = Check(True, True, 200, "[+]ping ok\n[+]log ok\n[+]etcd ok\nhealthz check passed\n")
    red = Check(False, True, 500, "[+]ping ok\n[-]etcd failed: reason withheld\nhealthz check failed\n")
    assert etcd_from_healthz(green).ok is True
    assert etcd_from_healthz(red).ok is False and etcd_from_healthz(red).answered
    assert etcd_from_healthz(Check(True, True, 200, "ok")) is None


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("https://localhost:6443", True),
        ("https://127.0.0.1:6443", True),
        ("https://127.3.2.1", True),
        ("https://[::1]:6443", True),
        ("https://10.0.0.1:6443", False),
        ("https://kubernetes:6443", False),
        ("https://localhost.example.com", False),
    ],
)
def test_loopback_urls(url, loopback):
    assert is_loopback_url(url) is loopback


def test_the_kube_apiserver_probe_ca_defaults_to_kubeadms_when_present():
    assert sp.default_probe_ca_cert("kube-apiserver", lambda p: True) == "/etc/kubernetes/pki/ca.crt"
    assert sp.default_probe_ca_cert("kube-apiserver", lambda p: False) is None
    assert sp.default_probe_ca_cert("etcd", lambda p: True) is None


# --- the startup monitor static pod retries by itself ------------------------------------------------


def _pod(rev: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-apiserver", "namespace": "kube-system", "labels": {"revision": str(rev)}},
        "spec": {"containers": [{"name": "kube-apiserver", "image": "k8s"}]},
    }


def _layout(tmp: Path) -> Layout:
    layout = Layout.from_params(
        {
            "operand": "kube-apiserver",
            "manifests_dir": str(tmp / "manifests"),
            "resources_dir": str(tmp / "resources"),
            "lock_file": str(tmp / "lock"),
            "termination_log": str(tmp / "termination.log"),
        }
    )
    layout.manifests_dir.mkdir()
    for r in (1, 2):
        layout.revision_dir(r).mkdir(parents=True)
        layout.revision_manifest(r).write_text(yaml.safe_dump(_pod(r)))
    layout.lkg_link.symlink_to(layout.revision_manifest(1))
    layout.live_manifest.write_text(yaml.safe_dump(_pod(2)))
    (layout.manifests_dir / "kube-apiserver-startup-monitor-pod.yaml").write_text(yaml.safe_dump(_pod(2)))
    return layout


class Clock:
    """Monotonic and wall clock moved only by ``sleep``."""

    def __init__(self) -> None:
        self.t = 0.0
        self.start = time.time()

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return self.start + self.t

    def sleep(self, s: float) -> None:
        self.t += max(s, 0.001)


def test_the_monitor_pod_falls_back_waits_for_retry_at_rolls_out_again_and_marks_good(tmp_path):
    layout = _layout(tmp_path)
    clock = Clock()
    etcd_red = Check(False, True, 500, "[-]etcd failed")
    rounds: list[dict] = []
    live_during_wait: list[str] = []
    retried_at: list[float] = []

    def observe(now, left):
        live = yaml.safe_load(layout.live_manifest.read_text())
        live_during_wait.append(live["metadata"]["labels"]["revision"])
        # revision 2's etcd is red in its first rollout, green after the retry
        healthy = PREVIOUS_FAILURES in (live["metadata"].get("annotations") or {})
        if healthy and not retried_at:
            retried_at.append(clock.wall())
        return Observation(now, 1, 2, OK, OK, OK if healthy else etcd_red)

    res = sp.monitor_in_static_pod(
        layout,
        Options(revision=2, timeout=10, interval=1, retry_base=30, retry_cap=100),
        None,
        clock.mono,
        clock.sleep,
        clock.wall,
        observe,
        rounds.append,
    )
    assert [r["action"] for r in rounds] == ["fallback", "mark_good"]
    assert rounds[0]["reason"] == "EtcdUnhealthy" and rounds[0]["retry_at"]
    assert res["retries"] == 1 and res["ready"] is True
    assert layout.last_known_good() == (2, "ok")
    # the rollout again came no earlier than retry-at (the fallback's time + 30 s)
    due = calendar.timegm(time.strptime(rounds[0]["retry_at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert retried_at and retried_at[0] >= due
    assert live_during_wait[0] == "2" and len(live_during_wait) > 10
    assert not (layout.manifests_dir / "kube-apiserver-startup-monitor-pod.yaml").exists()


def test_the_monitor_pod_stops_waiting_when_an_installer_writes_another_revision(tmp_path):
    layout = _layout(tmp_path)
    clock = Clock()
    base_sleep = clock.sleep

    def sleep(s: float) -> None:
        base_sleep(s)
        live = yaml.safe_load(layout.live_manifest.read_text())
        if clock.t > 20 and FALLBACK_FOR_REVISION in (live["metadata"].get("annotations") or {}):
            layout.live_manifest.write_text(yaml.safe_dump(_pod(3)))  # the installer's revision 3

    res = sp.monitor_in_static_pod(
        layout,
        Options(revision=2, timeout=10, interval=1, retry_base=600, retry_cap=21600),
        None,
        clock.mono,
        sleep,
        clock.wall,
        lambda now, left: Observation(now, 1, 2, OK, Check(False, True, 500, "[-]x failed"), OK),
    )
    assert (res["action"], res["reason"], res["retries"]) == ("fallback", "NotReady", 0)
    assert clock.t < 60  # did not wait the 600 s out
    assert yaml.safe_load(layout.live_manifest.read_text())["metadata"]["labels"]["revision"] == "3"


def test_a_fallback_that_is_not_retried_ends_the_monitor_pod(tmp_path):
    layout = _layout(tmp_path)
    clock = Clock()
    res = sp.monitor_in_static_pod(
        layout,
        Options(revision=2, timeout=5, interval=1),
        None,
        clock.mono,
        clock.sleep,
        clock.wall,
        lambda now, left: Observation(now, 3, 2, Check(False, False, 0, "", "refused"), None, None),
    )
    assert (res["action"], res["reason"], res["retries"]) == ("fallback", "CrashLooping", 0)
    ann = yaml.safe_load(layout.live_manifest.read_text())["metadata"]["annotations"]
    assert RETRY_AT not in ann


# --- the Degraded signal (pure part; the writes to a Node run against the lab's API server) ---------


def test_the_condition_type_names_the_operand():
    assert sp.condition_type("kube-apiserver") == "KubeApiserverStaticPodDegraded"
    assert sp.condition_type("etcd") == "EtcdStaticPodDegraded"


def test_degraded_while_a_retry_is_pending_and_cleared_by_a_revision_marked_good():
    ann = {
        FALLBACK_FOR_REVISION: "3",
        "startup-monitor.static-pods.openshift.io/fallback-reason": "EtcdUnhealthy",
        RETRY_AT: "2026-11-25T14:00:00Z",
    }
    fell = {
        "action": "fallback",
        "reason": "EtcdUnhealthy",
        "fallback_revision": 1,
        "message": "etcd check: refused",
    }
    state = sp.degraded_state("kube-apiserver", fell, ann)
    assert (state["status"], state["reason"], state["event_type"]) == ("True", "EtcdUnhealthy", "Warning")
    assert (
        "revision 3 fell back to revision 1" in state["message"]
        and "2026-11-25T14:00:00Z" in state["message"]
    )
    # a monitor restarted after its fallback ("already fallen back") says the same
    assert sp.degraded_state("kube-apiserver", {"action": "none"}, ann)["status"] == "True"
    good = sp.degraded_state("kube-apiserver", {"action": "mark_good", "revision": 3}, {})
    assert (good["status"], good["reason"], good["event_type"]) == ("False", "RevisionMarkedGood", "Normal")


def test_a_fallback_that_is_not_retried_is_degraded_too_and_says_so():
    ann = {
        FALLBACK_FOR_REVISION: "3",
        "startup-monitor.static-pods.openshift.io/fallback-reason": "CrashLooping",
    }
    state = sp.degraded_state("kube-apiserver", {"action": "fallback", "reason": "CrashLooping"}, ann)
    assert (state["status"], state["reason"]) == ("True", "CrashLooping")
    assert "not retried" in state["message"]
    assert sp.degraded_state("kube-apiserver", {"action": "none", "reason": "UnexpectedRevision"}, {}) is None


def test_a_retryable_fallback_is_handed_over_to_the_startup_monitor_pod_once(tmp_path):
    layout = _layout(tmp_path)
    layout.monitor_manifest.unlink()
    sp.fallback(
        layout, Options(retry_base=60, retry_cap=120), "EtcdUnhealthy", "etcd check: refused", current=2
    )
    rendered = []

    def render(namespace: str) -> dict:
        rendered.append(namespace)
        return {
            **_pod(2),
            "metadata": {"name": "kube-apiserver-startup-monitor", "labels": {"revision": "2"}},
        }

    assert sp.hand_over(layout, Options(), 2, render) == str(layout.monitor_manifest)
    assert rendered == ["kube-system"]  # the operand's namespace
    assert (
        yaml.safe_load(layout.monitor_manifest.read_text())["metadata"]["name"]
        == "kube-apiserver-startup-monitor"
    )
    assert [p.name for p in layout.manifests_dir.iterdir() if p.name.startswith(".")] == []
    # a monitor of that revision is there: nothing again
    assert sp.hand_over(layout, Options(), 2, render) is None and len(rendered) == 1


def test_nothing_is_handed_over_without_a_pending_retry(tmp_path):
    layout = _layout(tmp_path)
    layout.monitor_manifest.unlink()
    assert sp.hand_over(layout, Options(), 2, lambda ns: _pod(2)) is None  # no fallback at all
    sp.fallback(layout, Options(), "CrashLooping", "crash", current=2)
    assert sp.hand_over(layout, Options(), 2, lambda ns: _pod(2)) is None  # not retried
    assert not layout.monitor_manifest.exists()
