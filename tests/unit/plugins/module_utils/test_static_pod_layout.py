"""Static-pod fallback (``_static_pod``) under a temporary root: the layout's edges (no link, a
dangling link, a link to a directory, a regular file in place of the link, no earlier revision, no
revision label), fallback, mark-good, status and pruning on the filesystem, the installer lock
against a real second process, and an error and a real process death between the temp write and
the rename.

No network. Behaviour sources: openshift/library-go ``pkg/operator/staticpod/startupmonitor`` and the
OpenShift enhancement "Fallback on failing revisions of static pods".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (
    CRASH_LOOPING,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    NEVER_STARTED_UP,
    NOT_READY,
    UNHEALTHY,
    InstallerLock,
    Layout,
    Options,
    StaticPodError,
)
from ansible_collections.noderemedy.core.tests.unit.plugins.module_utils._static_pod_helpers import (
    live,
    make_layout,
    non_dot_files,
    pod,
)

# --- layout under a temporary root ----------------------------------------------------------------


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
