"""Static-pod fallback (``_static_pod``): pure decisions exhaustively, filesystem layout edges under a
temporary root, the installer lock against a real second process, and a crash between write and rename.

No network. Behaviour sources: openshift/library-go ``pkg/operator/staticpod/startupmonitor`` and the
OpenShift enhancement "Fallback on failing revisions of static pods".
"""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    CRASH_LOOPING,
    ETCD_UNHEALTHY,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    NEVER_STARTED_UP,
    NOT_READY,
    STORAGE_VERSION_SKEW,
    UNEXPECTED_REVISION,
    UNHEALTHY,
    Check,
    InstallerLock,
    Layout,
    Observation,
    Options,
    StaticPodError,
)

OK = Check(True, True, 200, "ok")
REFUSED = Check(False, False, 0, "", "ConnectionRefusedError: [Errno 111] Connection refused")
READYZ_HOOKS = (
    "[+]ping ok\n[+]etcd ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"
    "[-]poststarthook/scheduling/bootstrap-system-priority-classes failed: reason withheld\n"
    "readyz check failed\n"
)
ETCD_RED = Check(False, True, 500, "[-]etcd failed: reason withheld\nhealthz check failed\n")


# --- pure: reasons --------------------------------------------------------------------------------


def obs(attempts=1, running=3, healthz=OK, readyz=OK, etcd=OK, t=0.0) -> Observation:
    return Observation(t, attempts, running, healthz, readyz, etcd)


def test_ready_when_every_check_is_green():
    assert sp.assess(3, obs()) == sp.Readiness(True)


def test_never_started_up_without_a_start_attempt():
    r = sp.assess(3, obs(attempts=0, running=None, healthz=None, readyz=None, etcd=None))
    assert (r.ready, r.reason) == (False, NEVER_STARTED_UP)
    assert "revision 3" in r.message


def test_crash_looping_when_several_attempts_and_nothing_listens():
    r = sp.assess(3, obs(attempts=3, healthz=REFUSED, readyz=None, etcd=None))
    assert r.reason == CRASH_LOOPING
    assert "3 start-up attempts" in r.message and "Connection refused" in r.message


def test_unhealthy_when_healthz_red_after_one_attempt():
    r = sp.assess(3, obs(healthz=Check(False, True, 500, "[-]log ok\n[-]ping failed")))
    assert r.reason == UNHEALTHY
    assert "ping" in r.message


def test_unhealthy_when_the_single_attempt_does_not_listen():
    assert sp.assess(3, obs(attempts=1, healthz=REFUSED, readyz=None, etcd=None)).reason == UNHEALTHY


def test_not_ready_lists_the_unfinished_post_start_hooks():
    r = sp.assess(3, obs(readyz=Check(False, True, 500, READYZ_HOOKS)))
    assert r.reason == NOT_READY
    assert "unfinished post-start hooks: poststarthook/rbac/bootstrap-roles, " in r.message
    assert "poststarthook/scheduling/bootstrap-system-priority-classes" in r.message


def test_not_ready_when_healthz_is_red_only_on_post_start_hooks():
    """A kube-apiserver adds its post-start hooks to /healthz too: a hook that never finishes is
    NotReady (naming it), not Unhealthy."""
    hook = Check(False, True, 500, "[+]ping ok\n[-]poststarthook/crd-informer-synced failed: not finished\n")
    r = sp.assess(3, obs(healthz=hook, readyz=hook))
    assert r.reason == NOT_READY
    assert "unfinished post-start hooks: poststarthook/crd-informer-synced" in r.message
    mixed = Check(
        False, True, 500, "[-]ping failed\n[-]poststarthook/crd-informer-synced failed: not finished\n"
    )
    assert sp.assess(3, obs(healthz=mixed, readyz=hook)).reason == UNHEALTHY


def test_etcd_unhealthy_when_the_etcd_check_is_red():
    r = sp.assess(3, obs(etcd=ETCD_RED, readyz=Check(False, True, 500, "[-]etcd failed")))
    assert r.reason == ETCD_UNHEALTHY
    assert "etcd" in r.message


def test_unexpected_revision_when_the_running_pod_is_another_revision():
    r = sp.assess(3, obs(running=2))
    assert r.reason == UNEXPECTED_REVISION
    assert "revision 2" in r.message and "revision 3" in r.message


def test_final_readiness_etcd_unhealthy_survives_restarts():
    """The etcd check never passed whenever the operand answered: EtcdUnhealthy, not CrashLooping."""
    history = [
        obs(attempts=1, etcd=ETCD_RED, t=0),
        obs(attempts=2, healthz=REFUSED, readyz=None, etcd=None, t=5),
        obs(attempts=2, etcd=ETCD_RED, t=10),
        obs(attempts=3, healthz=REFUSED, readyz=None, etcd=None, t=15),
    ]
    r = sp.final_readiness(3, history)
    assert r.reason == ETCD_UNHEALTHY
    assert "never passed in 2 answers" in r.message


def test_final_readiness_crash_looping_beats_a_last_unhealthy():
    history = [obs(attempts=1, healthz=REFUSED, etcd=None, readyz=None), obs(attempts=2, healthz=REFUSED)]
    history[-1] = obs(attempts=2, healthz=Check(False, True, 500, "[-]ping failed"))
    assert sp.final_readiness(3, history).reason == CRASH_LOOPING


def test_final_readiness_keeps_not_ready_for_a_single_attempt():
    history = [obs(readyz=Check(False, True, 500, READYZ_HOOKS))] * 3
    assert sp.final_readiness(3, history).reason == NOT_READY


def test_final_readiness_etcd_passed_once_is_not_etcd_unhealthy():
    history = [obs(etcd=OK, readyz=Check(False, True, 500, READYZ_HOOKS)), obs(etcd=ETCD_RED)]
    assert sp.final_readiness(3, history).reason == ETCD_UNHEALTHY  # the last observation decides
    history = [obs(etcd=OK, readyz=Check(False, True, 500, READYZ_HOOKS))] * 2
    assert sp.final_readiness(3, history).reason == NOT_READY


def test_final_readiness_needs_observations():
    with pytest.raises(ValueError, match="observations"):
        sp.final_readiness(3, [])


def test_parse_start_log_counts_the_expected_revision_and_skips_torn_lines():
    text = "\n".join(
        [
            json.dumps({"event": "start", "time": 1, "revision": 2}),
            json.dumps({"event": "exit", "time": 2, "revision": 2, "exitCode": 0}),
            json.dumps({"event": "start", "time": 3, "revision": 3}),
            "klog noise line",
            json.dumps({"event": "start", "time": 4}),  # no revision: the expected one
            '{"event": "start", "time": 5, "rev',  # torn last line
        ]
    )
    assert sp.parse_start_log(text, 3) == (2, 3)
    assert sp.parse_start_log(text, 2) == (2, 2)  # the revision-less record counts for the asked one
    assert sp.parse_start_log("", 3) == (0, None)


def test_failed_checks_reads_verbose_bodies():
    assert sp.failed_checks(READYZ_HOOKS) == [
        "poststarthook/rbac/bootstrap-roles",
        "poststarthook/scheduling/bootstrap-system-priority-classes",
    ]


# --- pure: retry policy, choice, pruning --------------------------------------------------------------


@pytest.mark.parametrize("reason", [NOT_READY, ETCD_UNHEALTHY, UNHEALTHY])
def test_retryable_reasons_back_off_exponentially_with_a_cap(reason):
    afters = [sp.retry_policy(reason, n)["retry_after_seconds"] for n in range(7)]
    assert afters == [600, 1200, 2400, 4800, 9600, 19200, 21600]  # capped at 6 h
    assert sp.retry_policy(reason, 2, base=60, cap=200)["retry_after_seconds"] == 200
    assert sp.retry_policy(reason)["retryable"] is True


@pytest.mark.parametrize(
    "reason", [CRASH_LOOPING, NEVER_STARTED_UP, UNEXPECTED_REVISION, STORAGE_VERSION_SKEW]
)
def test_crash_looping_and_never_started_up_are_not_retried(reason):
    assert sp.retry_policy(reason, 3) == {
        "retryable": False,
        "retry_after_seconds": None,
        "previous_failures": 3,
        "backoff": {"base_seconds": 600, "cap_seconds": 21600},
    }


def test_retry_policy_rejects_bad_input():
    with pytest.raises(ValueError, match="retry_previous_failures"):
        sp.retry_policy(NOT_READY, -1)
    with pytest.raises(ValueError, match="retry_base"):
        sp.retry_policy(NOT_READY, 0, base=100, cap=10)


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=200), st.floats(min_value=1, max_value=1e4), st.floats(1, 1e6))
def test_retry_backoff_is_monotonic_and_capped(n, base, extra):
    cap = base + extra
    a = sp.retry_policy(NOT_READY, n, base, cap)["retry_after_seconds"]
    b = sp.retry_policy(NOT_READY, n + 1, base, cap)["retry_after_seconds"]
    assert base <= a <= b <= cap


def test_choose_fallback_prefers_last_known_good():
    assert sp.choose_fallback(5, [2, 3, 4, 5], 3) == (3, "last-known-good")


def test_choose_fallback_without_link_takes_the_highest_earlier_revision():
    assert sp.choose_fallback(5, [2, 3, 4, 5, 6], None) == (4, "previous-revision")


def test_choose_fallback_ignores_a_link_to_the_current_or_a_missing_revision():
    assert sp.choose_fallback(5, [3, 5], 5) == (3, "previous-revision")
    assert sp.choose_fallback(5, [3, 5], 4) == (3, "previous-revision")


def test_choose_fallback_has_nothing_in_bootstrap():
    assert sp.choose_fallback(1, [1], None) == (None, "none")
    assert sp.choose_fallback(1, [1, 2], None) == (None, "none")


def test_revisions_to_prune_keeps_limit_current_and_last_known_good():
    assert sp.revisions_to_prune(range(1, 11), 3, current=4, last_known_good=2) == [1, 3, 5, 6, 7]
    assert sp.revisions_to_prune([1, 2], 5, None, None) == []
    with pytest.raises(ValueError, match="revision_limit"):
        sp.revisions_to_prune([1], 0, None, None)


@settings(deadline=None)
@given(
    st.sets(st.integers(0, 50), max_size=20),
    st.integers(1, 8),
    st.none() | st.integers(0, 50),
    st.none() | st.integers(0, 50),
)
def test_pruning_never_removes_the_protected_revisions(revs, limit, current, lkg):
    doomed = sp.revisions_to_prune(revs, limit, current, lkg)
    assert current not in doomed and lkg not in doomed
    assert set(doomed) <= set(revs)
    assert len(set(revs) - set(doomed)) >= min(limit, len(revs))


def test_annotate_fallback_sets_the_three_annotations_and_a_new_uid():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "annotations": {"a": "b"}, "uid": "old"},
    }
    out = sp.annotate_fallback(pod, 7, CRASH_LOOPING, "two\nlines", "new-uid")
    assert out["metadata"]["annotations"] == {
        "a": "b",
        FALLBACK_FOR_REVISION: "7",
        FALLBACK_REASON: CRASH_LOOPING,
        FALLBACK_MESSAGE: "two\nlines",
    }
    assert out["metadata"]["uid"] == "new-uid"
    assert pod["metadata"]["uid"] == "old"  # input untouched
    with pytest.raises(StaticPodError, match="not a Pod"):
        sp.annotate_fallback({"kind": "ConfigMap", "metadata": {}}, 1, NOT_READY, "", "u")


# --- layout under a temporary root ----------------------------------------------------------------


def pod(rev: int, name: str = "kube-apiserver", flag: str = "") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"revision": str(rev)}},
        "spec": {
            "containers": [
                {"name": name, "image": "k8s", "command": ["kube-apiserver", f"--rev={rev}{flag}"]}
            ]
        },
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


def make_layout(root: Path, revisions=(1, 2, 3), live: int | None = 3, lkg: int | None = None) -> Layout:
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(root / "manifests"),
        "resources_dir": str(root / "resources"),
        "lock_file": str(root / "lock" / "kube-apiserver-installer.lock"),
        "termination_log": str(root / "log" / "termination.log"),
    }
    layout = Layout.from_params(params)
    for d in (
        layout.manifests_dir,
        layout.resources_dir,
        layout.lock_file.parent,
        layout.termination_log.parent,
    ):
        d.mkdir(parents=True, exist_ok=True)
    for r in revisions:
        layout.revision_dir(r).mkdir()
        (layout.revision_dir(r) / "configmaps").mkdir()
        layout.revision_manifest(r).write_text(yaml.safe_dump(pod(r)))
    if live is not None:
        layout.live_manifest.write_text(yaml.safe_dump(pod(live)))
    if lkg is not None:
        layout.lkg_link.symlink_to(layout.revision_manifest(lkg))
    return layout


def live(layout: Layout) -> dict:
    return yaml.safe_load(layout.live_manifest.read_text())


def non_dot_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if not p.name.startswith("."))


def test_layout_default_paths_follow_the_operand():
    layout = Layout.from_params({"operand": "etcd"})
    assert layout.live_manifest == Path("/etc/kubernetes/manifests/etcd-pod.yaml")
    assert layout.revision_manifest(4) == Path(
        "/etc/kubernetes/static-pod-resources/etcd-pod-4/etcd-pod.yaml"
    )
    assert layout.lkg_link == Path("/etc/kubernetes/static-pod-resources/etcd-last-known-good")
    assert layout.lock_file == Path("/var/lock/etcd-installer.lock")
    # the JSON-lines start log is read only when given: the kubelet does not write it
    assert layout.termination_log is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"operand": "Kube_APIServer"}, "operand"),
        ({"operand": "etcd", "manifests_dir": "rel/dir"}, "manifests_dir"),
    ],
)
def test_layout_bad_input_names_the_field(params, field):
    with pytest.raises(StaticPodError) as err:
        Layout.from_params(params)
    assert err.value.field == field and field in str(err.value)


def test_revisions_skip_misnamed_entries(root):
    layout = make_layout(root, revisions=(1, 10, 2))
    (layout.resources_dir / "kube-apiserver-pod-x").mkdir()
    (layout.resources_dir / "kube-apiserver-pod-7").write_text("a file, not a directory")
    (layout.resources_dir / "etcd-pod-4").mkdir()
    layout.revision_dir(11).mkdir()  # no manifest
    assert layout.revisions() == [1, 2, 10, 11]
    assert layout.revisions_with_manifest() == [1, 2, 10]


def test_fallback_to_the_last_known_good_revision(root):
    layout = make_layout(root, revisions=(1, 2, 3), live=3, lkg=1)
    res = sp.fallback(layout, Options(), CRASH_LOOPING, "3 start-up attempts")
    assert (res["action"], res["fallback_revision"], res["fallback_source"]) == (
        "fallback",
        1,
        "last-known-good",
    )
    assert res["changed"] is True and res["files_written"] == [str(layout.live_manifest)]
    m = live(layout)
    assert m["metadata"]["labels"]["revision"] == "1"
    assert m["metadata"]["annotations"][FALLBACK_FOR_REVISION] == "3"
    assert m["metadata"]["annotations"][FALLBACK_REASON] == CRASH_LOOPING
    assert m["metadata"]["annotations"][FALLBACK_MESSAGE] == "3 start-up attempts"
    assert m["spec"] == pod(1)["spec"]
    assert res["retry"]["retryable"] is False
    assert non_dot_files(layout.manifests_dir) == ["kube-apiserver-pod.yaml"]
    assert not [p for p in layout.manifests_dir.iterdir() if p.name.startswith(".")]


def test_fallback_is_idempotent(root):
    layout = make_layout(root, revisions=(1, 2, 3), live=3, lkg=2)
    sp.fallback(layout, Options(), NOT_READY, "x")
    before = layout.live_manifest.read_bytes()
    again = sp.fallback(layout, Options(revision=3), NOT_READY, "x")
    assert (again["action"], again["changed"]) == ("none", False)
    assert layout.live_manifest.read_bytes() == before
    # without an explicit revision the live fallback manifest says which revision it replaced
    assert sp.fallback(layout, Options(), NOT_READY, "x")["action"] == "none"


def test_fallback_without_link_uses_the_highest_earlier_revision(root):
    layout = make_layout(root, revisions=(1, 2, 3, 4), live=3, lkg=None)
    res = sp.fallback(layout, Options(), NEVER_STARTED_UP, "")
    assert (res["fallback_revision"], res["fallback_source"], res["last_known_good_state"]) == (
        2,
        "previous-revision",
        "missing",
    )
    assert live(layout)["metadata"]["labels"]["revision"] == "2"


def test_fallback_with_a_dangling_link_uses_the_previous_revision(root):
    layout = make_layout(root, revisions=(1, 2, 3), live=3, lkg=None)
    layout.lkg_link.symlink_to(layout.resources_dir / "kube-apiserver-pod-9" / "kube-apiserver-pod.yaml")
    assert layout.last_known_good() == (9, "dangling")
    res = sp.fallback(layout, Options(), UNHEALTHY, "")
    assert (res["fallback_revision"], res["fallback_source"], res["last_known_good_state"]) == (
        2,
        "previous-revision",
        "dangling",
    )


def test_fallback_with_no_earlier_revision_writes_nothing(root):
    layout = make_layout(root, revisions=(1,), live=1)
    before = layout.live_manifest.read_bytes()
    res = sp.fallback(layout, Options(), NEVER_STARTED_UP, "")
    assert (res["action"], res["changed"], res["fallback_revision"], res["files_written"]) == (
        "none",
        False,
        None,
        [],
    )
    assert "bootstrap" in res["message"]
    assert layout.live_manifest.read_bytes() == before


def test_fallback_in_check_mode_predicts_and_writes_nothing(root):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()
    res = sp.fallback(layout, Options(check_mode=True), NOT_READY, "")
    assert (res["action"], res["changed"], res["fallback_revision"]) == ("fallback", True, 2)
    assert layout.live_manifest.read_bytes() == before


def test_link_to_a_revision_directory_is_understood(root):
    layout = make_layout(root, live=3)
    layout.lkg_link.symlink_to("kube-apiserver-pod-1")  # relative, to the directory
    assert layout.last_known_good() == (1, "ok")
    assert sp.fallback(layout, Options(), NOT_READY, "")["fallback_revision"] == 1


def test_a_regular_file_in_place_of_the_link_is_invalid(root):
    layout = make_layout(root, live=3)
    layout.lkg_link.write_text("not a link")
    assert layout.last_known_good() == (None, "invalid")


def test_live_manifest_without_revision_label_needs_the_revision_parameter(root):
    layout = make_layout(root, live=None)
    layout.live_manifest.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})
    )
    with pytest.raises(StaticPodError) as err:
        sp.fallback(layout, Options(), NOT_READY, "")
    assert err.value.field == "revision" and "label 'revision'" in str(err.value)
    assert sp.fallback(layout, Options(revision=3), NOT_READY, "")["fallback_revision"] == 2


def test_mark_good_points_the_link_at_the_revision_manifest(root):
    layout = make_layout(root, live=3, lkg=1)
    res = sp.mark_good(layout, Options())
    assert (res["changed"], res["last_known_good_revision"], res["previous_last_known_good_revision"]) == (
        True,
        3,
        1,
    )
    assert os.readlink(layout.lkg_link) == str(layout.revision_manifest(3))
    assert sp.mark_good(layout, Options())["changed"] is False
    assert not [p for p in layout.resources_dir.iterdir() if p.name.startswith(".")]


def test_mark_good_of_a_revision_without_manifest_fails_naming_revision(root):
    layout = make_layout(root, live=3)
    with pytest.raises(StaticPodError) as err:
        sp.mark_good(layout, Options(revision=8))
    assert err.value.field == "revision"
    assert not layout.lkg_link.is_symlink()


def test_status_reports_the_layout_and_the_fallback_annotations(root):
    layout = make_layout(root, revisions=(1, 2, 3), live=3, lkg=2)
    sp.fallback(layout, Options(), NOT_READY, "hooks")
    res = sp.status(layout, Options())
    assert res["revisions"] == [1, 2, 3] and res["revision"] == 2
    assert (res["last_known_good_revision"], res["last_known_good_state"]) == (2, "ok")
    assert res["fallback"] == {"for_revision": "3", "reason": NOT_READY, "message": "hooks"}


# --- pruning --------------------------------------------------------------------------------------


def test_prune_keeps_limit_live_and_last_known_good(root):
    layout = make_layout(root, revisions=range(1, 9), live=7, lkg=2)
    res = sp.prune(layout, Options(revision_limit=2))
    assert res["pruned_revisions"] == [1, 3, 4, 5, 6]
    assert layout.revisions() == [2, 7, 8]
    assert res["changed"] is True and len(res["files_removed"]) == 5
    assert sp.prune(layout, Options(revision_limit=2))["changed"] is False


def test_prune_keeps_the_revision_a_fallback_replaced(root):
    layout = make_layout(root, revisions=range(1, 8), live=6, lkg=3)
    sp.fallback(layout, Options(), CRASH_LOOPING, "")  # live is now revision 3, fallback for 6
    res = sp.prune(layout, Options(revision_limit=1))
    assert layout.revisions() == [3, 6, 7]
    assert res["pruned_revisions"] == [1, 2, 4, 5]


def test_prune_in_check_mode_removes_nothing(root):
    layout = make_layout(root, revisions=range(1, 6), live=5)
    res = sp.prune(layout, Options(revision_limit=1, check_mode=True))
    assert res["pruned_revisions"] == [1, 2, 3, 4] and res["changed"] is True
    assert layout.revisions() == [1, 2, 3, 4, 5]


# --- installer lock held by a real second process -------------------------------------------------

HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def lock_holder():
    procs = []

    def hold(path: Path) -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p

    yield hold
    for p in procs:
        if p.poll() is None:
            p.stdin.close()
        p.wait(timeout=10)


def test_nothing_is_written_while_another_process_holds_the_installer_lock(root, lock_holder):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()
    holder = lock_holder(layout.lock_file)
    opts = Options(extra={"lock_timeout": 0.3})
    for op in (lambda: sp.fallback(layout, opts, NOT_READY, ""), lambda: sp.mark_good(layout, opts)):
        with pytest.raises(StaticPodError) as err:
            op()
        assert err.value.reason == "LockBusy" and "held by another process" in str(err.value)
    assert layout.live_manifest.read_bytes() == before
    assert os.readlink(layout.lkg_link) == str(layout.revision_manifest(2))
    holder.stdin.close()
    holder.wait(timeout=10)
    assert sp.fallback(layout, opts, NOT_READY, "")["action"] == "fallback"


def test_lock_is_released_after_each_operation(root):
    layout = make_layout(root, live=3)
    sp.status(layout, Options())
    sp.mark_good(layout, Options())
    with InstallerLock(layout.lock_file, timeout=0.1) as lock:
        assert lock.waited < 0.1


# --- crash between the temp write and the rename --------------------------------------------------


def test_failure_before_rename_leaves_no_partial_file(root):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()

    def boom() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(StaticPodError, match="No space left"):
        sp.fallback(layout, Options(extra={"before_rename": boom}), NOT_READY, "")
    assert layout.live_manifest.read_bytes() == before
    assert list(layout.manifests_dir.iterdir()) == [layout.live_manifest]


CRASHER = r"""
import os, sys
sys.path[:0] = sys.argv[1].split(os.pathsep)
from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
layout = sp.Layout.from_params({"operand": "kube-apiserver", "manifests_dir": sys.argv[2],
    "resources_dir": sys.argv[3], "lock_file": sys.argv[4]})
def die():
    os._exit(17)   # the process dies between the write of the temp file and the rename
sp.fallback(layout, sp.Options(extra={"before_rename": die}), "CrashLooping", "crash test")
"""


def test_a_process_killed_between_write_and_rename_leaves_only_a_dot_file(root):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CRASHER,
            os.pathsep.join(sys.path),  # the child imports the collection exactly as this test does
            str(layout.manifests_dir),
            str(layout.resources_dir),
            str(layout.lock_file),
        ]
    )
    assert p.wait(timeout=60) == 17
    names = sorted(x.name for x in layout.manifests_dir.iterdir())
    temps = [n for n in names if n.startswith(".")]
    assert non_dot_files(layout.manifests_dir) == ["kube-apiserver-pod.yaml"]
    assert layout.live_manifest.read_bytes() == before  # kubelet still sees the old, complete manifest
    assert len(temps) == 1 and temps[0].startswith(".kube-apiserver-pod.yaml.") and temps[0].endswith(".tmp")
    # the next writer (holding the lock) removes the stale temp file and completes the fallback
    res = sp.fallback(layout, Options(), CRASH_LOOPING, "again")
    assert res["files_removed"] == [str(layout.manifests_dir / temps[0])]
    assert sorted(x.name for x in layout.manifests_dir.iterdir()) == ["kube-apiserver-pod.yaml"]
    assert live(layout)["metadata"]["annotations"][FALLBACK_MESSAGE] == "again"


# --- the monitor loop with an injected clock (pure decision timing) ----------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s > 0
        self.t += s


def scripted(observations):
    it = iter(observations)
    last = {}

    def observe(now, left):
        try:
            last["o"] = next(it)
        except StopIteration:
            pass
        o = last["o"]
        return Observation(now, o.start_attempts, o.running_revision, o.healthz, o.readyz, o.etcd)

    return observe


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


# --- StorageVersion gate (data in, decision out) --------------------------------------------------


class Encodings:
    """Supplies fixed StorageVersion data to the gate (no API involved: the gate's decision is pure)."""

    def __init__(self, current, decodable=None, unavailable=False):
        self.current, self._decodable, self.unavailable = current, decodable, unavailable

    def encodings(self):
        from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
            StorageVersionUnavailable,
        )

        if self.unavailable:
            raise StorageVersionUnavailable("not served (HTTP 404)")
        return self.current

    def decodable(self):
        return self._decodable


def write_record(layout: Layout, rev: int, resources: dict) -> None:
    (layout.revision_dir(rev) / sp.STORAGE_VERSIONS_FILE).write_text(
        json.dumps({"kind": "StorageVersionRecord", "revision": rev, "resources": resources})
    )


def test_fallback_refuses_on_storage_version_skew_and_names_the_resources(root):
    layout = make_layout(root, live=3, lkg=2)
    write_record(
        layout, 2, {"apps.deployments": ["apps/v1"], "batch.jobs": ["batch/v1"], "core.pods": ["v1"]}
    )
    before = layout.live_manifest.read_bytes()
    current = {
        "apps.deployments": ["apps/v2"],
        "batch.jobs": ["batch/v1"],
        "core.pods": ["v1"],
        "x.new": ["x/v1"],
    }
    with pytest.raises(StaticPodError) as err:
        sp.fallback(layout, Options(storage_versions=Encodings(current)), NOT_READY, "")
    assert err.value.reason == STORAGE_VERSION_SKEW
    assert "apps.deployments" in str(err.value) and "batch.jobs" not in str(err.value)
    assert err.value.result["skewed_resources"] == ["apps.deployments"]
    assert err.value.result["storage_version"]["unknown_to_revision"] == ["x.new"]
    assert layout.live_manifest.read_bytes() == before
    forced = sp.fallback(layout, Options(storage_versions=Encodings(current), force=True), NOT_READY, "")
    assert forced["action"] == "fallback" and forced["storage_version"]["forced"] is True


def test_fallback_passes_the_gate_when_everything_is_decodable(root):
    layout = make_layout(root, live=3, lkg=2)
    write_record(layout, 2, {"apps.deployments": ["apps/v1", "apps/v1beta1"]})
    res = sp.fallback(
        layout, Options(storage_versions=Encodings({"apps.deployments": ["apps/v1"]})), NOT_READY, ""
    )
    assert res["action"] == "fallback" and res["storage_version"]["skew"] == []


@pytest.mark.parametrize(("choice", "refused"), [("proceed", False), ("refuse", True)])
def test_unserved_storage_version_api_is_reported_and_the_operator_chooses(root, choice, refused):
    layout = make_layout(root, live=3, lkg=2)
    opts = Options(storage_versions=Encodings({}, unavailable=True), storage_version_unavailable=choice)
    if refused:
        with pytest.raises(StaticPodError) as err:
            sp.fallback(layout, opts, NOT_READY, "")
        assert err.value.reason == "StorageVersionUnavailable"
        assert live(layout)["metadata"]["labels"]["revision"] == "3"
    else:
        res = sp.fallback(layout, opts, NOT_READY, "")
        assert res["action"] == "fallback"
        assert (
            res["storage_version"]["available"] is False and "not served" in res["storage_version"]["message"]
        )


def test_mark_good_records_the_decodable_versions(root):
    layout = make_layout(root, live=3)
    dec = {"apiServerID": "apiserver-abc", "resources": {"apps.deployments": ["apps/v1"]}}
    res = sp.mark_good(layout, Options(storage_versions=Encodings({}, dec)))
    path = layout.revision_dir(3) / sp.STORAGE_VERSIONS_FILE
    assert str(path) in res["files_written"]
    doc = json.loads(path.read_text())
    assert (doc["revision"], doc["apiServerID"], doc["resources"]) == (3, "apiserver-abc", dec["resources"])
    assert sp.mark_good(layout, Options(storage_versions=Encodings({}, dec)))["changed"] is False


def test_execute_validates_input_and_names_the_field(root):
    layout = make_layout(root, live=3)
    base = {
        "operand": "kube-apiserver",
        "manifests_dir": str(layout.manifests_dir),
        "resources_dir": str(layout.resources_dir),
        "lock_file": str(layout.lock_file),
        "storage_version_check": "never",
    }
    for bad, field in (
        ({"state": "explode"}, "state"),
        ({"state": "monitor", "timeout": -1}, "timeout"),
        ({"state": "fallback", "reason": "Bored"}, "reason"),
        ({"state": "fallback", "retry_base": 10, "retry_cap": 1}, "retry_base"),
        ({"state": "monitor", "probe_url": "ftp://x"}, "probe_url"),
    ):
        with pytest.raises(StaticPodError) as err:
            sp.execute({**base, **bad})
        assert err.value.field == field, bad
    assert live(layout)["metadata"]["labels"]["revision"] == "3"


# --- the etcd check of a kube-apiserver that does not serve ---------------------------------------


def test_etcd_flags_reads_both_flag_forms():
    p = pod(3)
    p["spec"]["containers"][0]["command"] = [
        "kube-apiserver",
        "--etcd-servers=http://127.0.0.1:1,http://127.0.0.1:2",
    ]
    p["spec"]["containers"][0]["args"] = ["--etcd-cafile", "/ca.crt", "--secure-port=6443"]
    assert sp.etcd_flags(p) == {
        "etcd-servers": "http://127.0.0.1:1,http://127.0.0.1:2",
        "etcd-cafile": "/ca.crt",
    }
    assert sp.etcd_flags({"spec": {}}) == {}
    assert sp.etcd_direct_check(pod(3), 0.5) is None  # no --etcd-servers: no verdict


def test_unreachable_etcd_of_a_silent_apiserver_is_etcd_unhealthy(root):
    """Nothing listens on the apiserver port nor on its etcd: the verdict is EtcdUnhealthy, not CrashLooping."""
    layout = make_layout(root, live=None)
    p = pod(3)
    p["spec"]["containers"][0]["command"] = ["kube-apiserver", "--etcd-servers=http://127.0.0.1:1"]
    layout.live_manifest.write_text(yaml.safe_dump(p))
    layout.termination_log.write_text(
        "".join(json.dumps({"event": "start", "time": t, "revision": 3}) + "\n" for t in (1, 2))
    )
    o = sp.observe(layout, 3, sp.HttpProber("https://127.0.0.1:1", request_timeout=0.2), 0.0)
    assert (o.healthz.answered, o.etcd.answered, o.etcd.ok) == (False, True, False)
    assert "--etcd-servers" in o.etcd.error and "127.0.0.1:1" in o.etcd.error
    verdict = sp.final_readiness(3, [o, o])
    assert verdict.reason == ETCD_UNHEALTHY


def test_a_bad_kubeconfig_for_the_storage_version_check_fails_naming_it(root):
    layout = make_layout(root, live=3, lkg=2)
    before = layout.live_manifest.read_bytes()
    params = {
        "operand": "kube-apiserver",
        "state": "fallback",
        "manifests_dir": str(layout.manifests_dir),
        "resources_dir": str(layout.resources_dir),
        "lock_file": str(layout.lock_file),
        "storage_version_check": "always",
        "kubeconfig": str(root / "no-such-kubeconfig"),
    }
    write_record(layout, 2, {"core.pods": ["v1"]})
    with pytest.raises(StaticPodError) as err:
        sp.execute(params)
    assert err.value.field == "kubeconfig" and "no-such-kubeconfig" in str(err.value)
    assert layout.live_manifest.read_bytes() == before


# --- the installer ------------------------------------------------------------------------------------


def test_install_writes_the_revision_then_the_live_manifest_and_is_idempotent(root):
    layout = make_layout(root, live=3, lkg=3)
    manifest = dict(pod(4))
    manifest["metadata"] = {"name": "kube-apiserver", "namespace": "kube-system"}  # no revision label yet
    res = sp.install(layout, Options(revision=4), manifest, {"audit-policy.yaml": "rules: []\n"})
    assert res["action"] == "install" and res["changed"] is True and res["revision"] == 4
    assert live(layout)["metadata"]["labels"]["revision"] == "4"
    assert yaml.safe_load(layout.revision_manifest(4).read_text()) == live(layout)
    assert (layout.revision_dir(4) / "audit-policy.yaml").read_text() == "rules: []\n"
    assert str(layout.live_manifest) in res["files_written"]
    again = sp.install(layout, Options(revision=4), manifest, {"audit-policy.yaml": "rules: []\n"})
    assert again["changed"] is False and again["files_written"] == []
    # a revision is immutable: other content is refused, nothing written
    before = layout.live_manifest.read_bytes()
    with pytest.raises(StaticPodError) as err:
        sp.install(layout, Options(revision=4), manifest, {"audit-policy.yaml": "rules: [changed]\n"})
    assert err.value.field == "revision" and "immutable" in str(err.value)
    assert layout.live_manifest.read_bytes() == before


def test_install_leaves_no_non_dot_file_but_the_manifest_and_no_temp_dir(root):
    layout = make_layout(root, live=3)
    seen: list[set[str]] = []

    def look() -> None:  # between the temp write and the rename of the live manifest
        seen.append({p.name for p in layout.manifests_dir.iterdir()})

    sp.install(layout, Options(revision=4, extra={"before_rename": look}), pod(4))
    assert seen and all(n == layout.live_manifest.name or n.startswith(".") for names in seen for n in names)
    assert [p.name for p in layout.manifests_dir.iterdir()] == [layout.live_manifest.name]
    assert not [p for p in layout.resources_dir.iterdir() if p.name.startswith(".")]


def test_install_waits_for_the_lock_and_writes_nothing_while_another_installer_holds_it(root, lock_holder):
    layout = make_layout(root, live=3)
    before = layout.live_manifest.read_bytes()
    holder = lock_holder(layout.lock_file)
    with pytest.raises(StaticPodError) as err:
        sp.install(layout, Options(revision=4, extra={"lock_timeout": 0.3}), pod(4))
    assert err.value.reason == "LockBusy" and "held by another process" in str(err.value)
    assert layout.live_manifest.read_bytes() == before and not layout.revision_dir(4).exists()
    holder.stdin.close()
    holder.wait(timeout=10)
    assert sp.install(layout, Options(revision=4, extra={"lock_timeout": 0.3}), pod(4))["changed"] is True


@pytest.mark.parametrize(
    ("manifest", "files", "field"),
    [
        ("kind: [", None, "manifest"),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, None, "manifest"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}}, None, "manifest"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"revision": "9"}},
          "spec": {"containers": []}}, None, "manifest"),
        (None, {"../escape": "x"}, "files"),
        (None, {"kube-apiserver-pod.yaml": "x"}, "files"),
    ],
)  # fmt: skip
def test_install_bad_input_names_the_field_and_writes_nothing(root, manifest, files, field):
    layout = make_layout(root, live=3)
    before = sorted(p.name for p in layout.resources_dir.iterdir())
    with pytest.raises(StaticPodError) as err:
        sp.install(layout, Options(revision=4), pod(4) if manifest is None else manifest, files)
    assert err.value.field == field, err.value
    assert sorted(p.name for p in layout.resources_dir.iterdir()) == before
    assert live(layout)["metadata"]["labels"]["revision"] == "3"


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
