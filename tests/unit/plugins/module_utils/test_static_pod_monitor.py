"""Static-pod fallback (``_static_pod``): the monitor loop on an injected clock (its verdict at
the timeout, an unexpected revision, another revision the installer wrote meanwhile, the
termination log), retries that roll a fallen-back revision out again, the startup monitor as a
static pod (its manifest, written before the operand's, waiting for its revision, removing
itself), and the mirror pod.

No network. Behaviour sources: openshift/library-go ``pkg/operator/staticpod/startupmonitor`` and the
OpenShift enhancement "Fallback on failing revisions of static pods".
"""

from __future__ import annotations

import calendar
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    CRASH_LOOPING,
    ETCD_UNHEALTHY,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    NEVER_STARTED_UP,
    NOT_READY,
    UNEXPECTED_REVISION,
    UNHEALTHY,
    Check,
    Layout,
    Observation,
    Options,
    StaticPodError,
)
from ansible_collections.noderemedy.core.tests.unit.plugins.module_utils._static_pod_helpers import (
    ETCD_RED,
    OK,
    READYZ_HOOKS,
    REFUSED,
    FakeClock,
    live,
    make_layout,
    non_dot_files,
    obs,
    pod,
    scripted,
)

# --- the monitor loop with an injected clock (pure decision timing) ----------------------------------


def test_monitor_marks_a_ready_revision_good(root):
    layout = make_layout(root, live=3, lkg=2)
    clock = FakeClock()
    res = sp.run_monitor(
        layout,
        Options(timeout=60, interval=2),
        None,
        clock,
        clock.sleep,
        scripted([obs(attempts=0, running=None), obs(healthz=REFUSED), obs()]),
    )
    assert (res["ready"], res["action"], res["observations"]) == (True, "mark_good", 3)
    assert layout.last_known_good() == (3, "ok")
    assert live(layout)["metadata"]["labels"]["revision"] == "3"


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        ([obs(attempts=0, running=None)], NEVER_STARTED_UP),
        ([obs(attempts=1, healthz=REFUSED), obs(attempts=4, healthz=REFUSED)], CRASH_LOOPING),
        ([obs(healthz=Check(False, True, 500, "[-]ping failed"))], UNHEALTHY),
        ([obs(readyz=Check(False, True, 500, READYZ_HOOKS))], NOT_READY),
        ([obs(etcd=ETCD_RED)], ETCD_UNHEALTHY),
    ],
)
def test_monitor_falls_back_at_the_timeout_with_the_reason(root, script, reason):
    layout = make_layout(root, live=3, lkg=2)
    clock = FakeClock()
    res = sp.run_monitor(layout, Options(timeout=30, interval=4), None, clock, clock.sleep, scripted(script))
    assert (res["ready"], res["action"], res["reason"]) == (False, "fallback", reason)
    assert clock.t - 100.0 == 30  # decided exactly at the deadline: 4 s steps, the last one shortened
    assert res["observations"] == 9
    m = live(layout)
    assert m["metadata"]["labels"]["revision"] == "2"
    assert m["metadata"]["annotations"][FALLBACK_REASON] == reason
    assert m["metadata"]["annotations"][FALLBACK_FOR_REVISION] == "3"
    assert res["retry"]["retryable"] is (reason in sp.RETRYABLE_REASONS)
    if reason == NOT_READY:
        assert "poststarthook/rbac/bootstrap-roles" in m["metadata"]["annotations"][FALLBACK_MESSAGE]


def test_monitor_never_falls_back_for_an_unexpected_revision(root):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()
    clock = FakeClock()
    res = sp.run_monitor(
        layout, Options(timeout=10, interval=5), None, clock, clock.sleep, scripted([obs(running=2)])
    )
    assert (res["action"], res["reason"], res["changed"], res["files_written"]) == (
        "none",
        UNEXPECTED_REVISION,
        False,
        [],
    )
    assert layout.live_manifest.read_bytes() == before


def test_monitor_does_not_overwrite_a_revision_the_installer_wrote_meanwhile(root):
    layout = make_layout(root, revisions=(1, 2, 3, 4), live=3, lkg=2)
    clock = FakeClock()
    steps = iter(range(100))

    def observe(now, left):
        if next(steps) == 1:  # the installer installs revision 4 while revision 3 is being watched
            layout.live_manifest.write_text(yaml.safe_dump(pod(4)))
        return Observation(now, 0, None)

    res = sp.run_monitor(layout, Options(timeout=10, interval=5), None, clock, clock.sleep, observe)
    assert (res["action"], res["reason"], res["revision"]) == ("none", UNEXPECTED_REVISION, 3)
    assert live(layout)["metadata"]["labels"]["revision"] == "4"


def test_monitor_reads_the_termination_log(root):
    """The real observe(): start records of revision 3, nothing listening → CrashLooping."""
    layout = make_layout(root, live=3, lkg=2)
    layout.termination_log.write_text(
        "".join(json.dumps({"event": "start", "time": t, "revision": 3}) + "\n" for t in (1, 2, 3))
    )
    prober = sp.HttpProber("https://127.0.0.1:1", request_timeout=0.2)  # port 1: connection refused
    o = sp.observe(layout, 3, prober, 0.0)
    assert (o.start_attempts, o.running_revision, o.healthz.answered) == (3, 3, False)
    assert sp.assess(3, o).reason == CRASH_LOOPING


# --- retries that retry -------------------------------------------------------------------------------


def test_a_retryable_fallback_is_rolled_out_again_after_its_backoff_which_doubles(root):
    from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
        PREVIOUS_FAILURES,
        RETRY_AT,
    )

    layout = make_layout(root, live=3, lkg=2)
    opts = Options(retry_base=600, retry_cap=21600)
    t0 = time.time()
    res = sp.fallback(layout, opts, NOT_READY, "readyz red")
    ann = live(layout)["metadata"]["annotations"]
    assert ann[PREVIOUS_FAILURES] == "1" and res["retry_at"] == ann[RETRY_AT]
    due = calendar.timegm(time.strptime(ann[RETRY_AT], "%Y-%m-%dT%H:%M:%SZ"))
    assert t0 + 600 - 2 <= due <= time.time() + 600 + 1
    early = sp.retry(layout, opts, now=due - 1)
    assert (
        early["action"] == "none"
        and early["changed"] is False
        and live(layout)["metadata"]["labels"]["revision"] == "2"
    )
    again = sp.retry(layout, opts, now=due + 1)
    assert again["action"] == "retry" and again["revision"] == 3
    retried = live(layout)
    assert (
        retried["metadata"]["labels"]["revision"] == "3"
        and retried["metadata"]["annotations"][PREVIOUS_FAILURES] == "1"
    )
    assert os.readlink(layout.lkg_link) == str(layout.revision_manifest(2))  # last-known-good kept
    # it fails again: the backoff doubles
    t1 = time.time()
    second = sp.fallback(layout, opts, NOT_READY, "still red")
    ann = live(layout)["metadata"]["annotations"]
    assert ann[PREVIOUS_FAILURES] == "2" and second["retry"]["retry_after_seconds"] == 1200
    due2 = calendar.timegm(time.strptime(ann[RETRY_AT], "%Y-%m-%dT%H:%M:%SZ"))
    assert t1 + 1200 - 2 <= due2 <= time.time() + 1200 + 1


def test_crash_looping_is_never_rolled_out_again(root):
    from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import RETRY_AT

    layout = make_layout(root, live=3, lkg=2)
    sp.fallback(layout, Options(), CRASH_LOOPING, "exits")
    assert RETRY_AT not in live(layout)["metadata"]["annotations"]
    res = sp.retry(layout, Options(), now=time.time() + 10**6)
    assert res["action"] == "none" and "not retried" in res["message"]
    assert live(layout)["metadata"]["labels"]["revision"] == "2"


def test_retry_of_a_live_manifest_that_is_no_fallback_writes_nothing(root):
    layout = make_layout(root, live=3)
    before = layout.live_manifest.read_bytes()
    assert sp.retry(layout, Options())["action"] == "none"
    assert layout.live_manifest.read_bytes() == before


def test_a_monitor_restarted_after_its_fallback_watches_nothing_and_writes_nothing(root):
    layout = make_layout(root, live=3, lkg=2)
    sp.fallback(layout, Options(), CRASH_LOOPING, "exits")
    written = layout.live_manifest.read_bytes()

    def never(*_: object) -> Observation:
        raise AssertionError("observed a revision that was already fallen back from")

    clock = FakeClock()
    res = sp.run_monitor(layout, Options(revision=3, timeout=60, interval=2), None, clock, clock.sleep, never)
    assert (res["action"], res["ready"], res["observations"]) == ("none", False, 0), res
    assert "already fallen back from revision 3" in res["message"]
    assert layout.live_manifest.read_bytes() == written


# --- the startup monitor as a static pod -------------------------------------------------------------


def _install_params(root: Path, **extra) -> dict:
    return {
        "operand": "kube-apiserver",
        "manifests_dir": str(root / "manifests"),
        "resources_dir": str(root / "resources"),
        "lock_file": str(root / "lock" / "kube-apiserver-installer.lock"),
        "pod_logs_dir": "/var/log/pods",
        "node_name": "node-a",
        "probe_ca_cert": "/etc/kubernetes/pki/ca.crt",
        "timeout": 90.0,
        "storage_version_check": "never",
        **extra,
    }


def test_monitor_pod_mounts_what_it_reads_and_writes_and_runs_the_module_with_its_revision(root):
    params = _install_params(root)
    p = sp.monitor_pod(params, 7, {"image": "example/remediation:1"}, "openshift-kube-apiserver")
    assert p["metadata"]["name"] == "kube-apiserver-startup-monitor"
    assert p["metadata"]["namespace"] == "openshift-kube-apiserver"
    assert p["metadata"]["labels"]["revision"] == "7"
    spec = p["spec"]
    assert spec["hostNetwork"] is True and spec["restartPolicy"] == "OnFailure"
    mounts = sorted(m["mountPath"] for m in spec["containers"][0]["volumeMounts"])
    assert mounts == sorted(
        [
            str(root / "manifests"),
            str(root / "resources"),
            str(root / "lock"),
            "/var/log/pods",
            "/etc/kubernetes/pki",
        ]
    )
    argv = spec["containers"][0]["command"]
    assert argv[:2] == ["ansible", "localhost"] and "noderemedy.core.static_pod_fallback" in argv
    args = json.loads(argv[-1])
    assert args["state"] == "monitor" and args["revision"] == 7 and args["in_static_pod"] is True
    assert args["timeout"] == 90.0 and args["manifests_dir"] == str(root / "manifests")
    assert "manifest" not in args and "startup_monitor" not in args


@pytest.mark.parametrize(
    ("spec", "extra"),
    [
        ({}, {}),
        ({"image": ""}, {}),
        ({"image": "x", "bogus": 1}, {}),
        ({"image": "x", "command": "ansible"}, {}),
        ({"image": "x", "extra_mounts": [{"host_path": "rel", "mount_path": "/x"}]}, {}),
        ({"image": "x"}, {"api_key": "secret-token"}),
    ],
)
def test_monitor_pod_bad_input_names_the_field(root, spec, extra):
    with pytest.raises(StaticPodError) as err:
        sp.monitor_pod(_install_params(root, **extra), 2, spec, "kube-system")
    assert err.value.field in ("startup_monitor", "api_key")
    assert "secret-token" not in str(err.value)


def test_install_with_a_startup_monitor_writes_the_monitor_first_and_only_with_a_new_live_manifest(root):
    layout = make_layout(root, revisions=(1,), live=1)
    params = {**_install_params(root), "state": "install", "revision": 2, "manifest": pod(2)}
    params["startup_monitor"] = {"image": "example/remediation:1"}
    seen: list[list[str]] = []
    orig = os.replace

    def spy(src, dst, *a, **kw):
        orig(src, dst, *a, **kw)
        seen.append(non_dot_files(layout.manifests_dir))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "replace", spy)
        res = sp.execute(params)
    assert res["changed"] is True
    assert res["files_written"][-2:] == [str(layout.monitor_manifest), str(layout.live_manifest)]
    # the monitor's manifest was in place before the operand's new one
    assert ["kube-apiserver-pod.yaml", "kube-apiserver-startup-monitor-pod.yaml"] in seen
    assert live(layout)["metadata"]["labels"]["revision"] == "2"
    layout.monitor_manifest.unlink()  # the monitor finished
    again = sp.execute(params)
    assert again["changed"] is False and not layout.monitor_manifest.exists()


def test_installer_refuses_a_bad_startup_monitor_before_writing_anything(root):
    layout = make_layout(root, revisions=(1,), live=1)
    params = {**_install_params(root), "state": "install", "revision": 2, "manifest": pod(2)}
    params["startup_monitor"] = {"image": ""}
    with pytest.raises(StaticPodError) as err:
        sp.execute(params)
    assert err.value.field == "startup_monitor"
    assert not layout.revision_dir(2).exists()
    assert live(layout)["metadata"]["labels"]["revision"] == "1"


def _monitor_manifest(layout: Layout, rev: int) -> None:
    layout.monitor_manifest.write_text(
        yaml.safe_dump(
            sp.monitor_pod(_install_params(layout.manifests_dir.parent), rev, {"image": "x"}, "ns")
        )
    )


def test_monitor_in_static_pod_waits_for_its_revision_without_writing(root):
    """Live manifest of revision 2, monitor of revision 3: it waits (writing nothing) until the
    installer's operand manifest of revision 3 appears, then judges it and removes its own manifest."""
    layout = make_layout(root, live=2, lkg=2)
    _monitor_manifest(layout, 3)
    clock = FakeClock()
    waits = {"n": 0}

    def sleep(s: float) -> None:
        clock.sleep(s)
        waits["n"] += 1
        assert layout.last_known_good() == (2, "ok") and live(layout)["metadata"]["labels"]["revision"] == "2"
        if waits["n"] == 5:  # the installer gets to write the operand's manifest
            layout.live_manifest.write_text(yaml.safe_dump(pod(3)))

    res = sp.run_monitor(
        layout, Options(revision=3, timeout=60, interval=2, in_static_pod=True), None, clock, sleep,
        scripted([obs()]),
    )  # fmt: skip
    assert res["ready"] is True and res["waited_for_revision_seconds"] == 10
    assert layout.last_known_good() == (3, "ok")
    assert str(layout.monitor_manifest) in res["files_removed"] and not layout.monitor_manifest.exists()


def test_monitor_in_static_pod_falls_back_and_removes_itself_but_not_a_newer_monitor(root):
    layout = make_layout(root, live=3, lkg=2)
    _monitor_manifest(layout, 3)
    clock = FakeClock()
    opts = Options(revision=3, timeout=10, interval=5, in_static_pod=True)
    res = sp.run_monitor(layout, opts, None, clock, clock.sleep, scripted([obs(attempts=3, healthz=REFUSED)]))
    assert (res["action"], res["reason"]) == ("fallback", CRASH_LOOPING)
    assert not layout.monitor_manifest.exists()
    # restarted after the fallback (the kubelet has not stopped it yet), with a newer installer's
    # monitor in place: it finds the fallback and leaves the newer monitor alone
    _monitor_manifest(layout, 4)
    again = sp.run_monitor(layout, opts, None, clock, clock.sleep, scripted([obs()]))
    assert again["action"] == "none" and layout.monitor_manifest.exists()
    assert yaml.safe_load(layout.monitor_manifest.read_text())["metadata"]["labels"]["revision"] == "4"


# --- the mirror pod (the enhancement's steps 5-6) ------------------------------------------------------


def _mirror_json(rev="3", ready="True", restarts=0, state=None) -> dict:
    return {
        "metadata": {"name": "kube-apiserver-node-a", "uid": "u1", "labels": {"revision": rev}},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "containerStatuses": [{"restartCount": restarts, "state": state or {"running": {}}}],
        },
    }


def test_mirror_pod_of_reads_revision_readiness_and_restarts():
    m = sp.mirror_pod_of(_mirror_json(restarts=2))
    assert m == sp.MirrorPod(3, True, 2, True, "u1")
    waiting = sp.mirror_pod_of(_mirror_json(rev="x", ready="False", state={"waiting": {}}))
    assert (waiting.revision, waiting.ready, waiting.started) == (None, False, False)
    assert sp.mirror_pod_of({"kind": "Status"}) is None


def test_a_mirror_pod_not_ready_or_of_another_revision_keeps_the_revision_not_ready():
    assert sp.assess(3, Observation(0, 1, 3, OK, OK, OK, sp.MirrorPod(3, True, 0, True))).ready
    stale = sp.assess(3, Observation(0, 1, 3, OK, OK, OK, sp.MirrorPod(2, True, 0, True)))
    assert (stale.reason, "still of revision 2" in stale.message) == (NOT_READY, True)
    unready = sp.assess(3, Observation(0, 1, 3, OK, OK, OK, sp.MirrorPod(3, False, 4, True)))
    assert unready.reason == NOT_READY and "restarts: 4" in unready.message


class _Reader:
    def __init__(self, mirror):
        self.mirror = mirror
        self.asked = []

    def read(self, namespace, name):
        self.asked.append((namespace, name))
        return self.mirror


def test_observe_counts_the_mirror_pods_restarts_as_start_attempts(root):
    layout = make_layout(root, live=3)
    layout = Layout.from_params(
        {
            "operand": "kube-apiserver",
            "manifests_dir": str(layout.manifests_dir),
            "resources_dir": str(layout.resources_dir),
            "lock_file": str(layout.lock_file),
            "termination_log": str(layout.termination_log),
            "node_name": "node-a",
        }
    )
    reader = _Reader(sp.MirrorPod(3, False, 4, True))
    o = sp.observe(layout, 3, None, 0.0, None, reader)
    assert (o.start_attempts, o.running_revision, o.mirror) == (5, 3, reader.mirror)
    assert reader.asked == [(pod(3)["metadata"].get("namespace") or "default", "kube-apiserver-node-a")]
    other = sp.observe(layout, 3, None, 0.0, None, _Reader(sp.MirrorPod(2, True, 9, True)))
    assert other.start_attempts == 0  # a mirror pod of another revision counts nothing


def test_mirror_pod_reader_without_a_configuration_reads_nothing_once():
    calls = []

    def factory():
        from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError

        calls.append(1)
        raise KubeError("kubeconfig: no usable configuration", reason="invalid")

    reader = sp.MirrorPodReader(factory)
    assert reader.read("kube-system", "x") is None and reader.read("kube-system", "x") is None
    assert calls == [1] and "kubeconfig" in reader.last_error
