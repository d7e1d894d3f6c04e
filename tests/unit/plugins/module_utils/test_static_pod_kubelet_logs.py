"""Start attempts from what a kubelet writes under /var/log/pods: the pure readers of directory and
file names, and the observation of a layout whose ``pod_logs_dir`` is set (files laid out here as a
kubelet lays them out; the real kubelet's files are read in tests/integration/test_static_pod_kubelet.py).
"""

from __future__ import annotations

import os
import time

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import Layout, StaticPodError
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.probes import (
    kubelet_start_attempts,
    observe,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    attempts_from_log_files,
    is_pod_log_dir,
    static_pod_name,
)


def test_attempts_are_the_highest_restart_count_plus_one():
    assert attempts_from_log_files([]) == 0
    assert attempts_from_log_files(["0.log"]) == 1
    assert attempts_from_log_files(["3.log", "4.log"]) == 5
    # rotated files and strangers are ignored
    assert attempts_from_log_files(["2.log.20261123-224900", "x.log", ".0.log", "7"]) == 0


def test_pod_log_dir_names_split_on_underscores():
    assert static_pod_name("kube-apiserver", "lab-real-0") == "kube-apiserver-lab-real-0"
    assert is_pod_log_dir("kube-system_kube-apiserver-n1_0123abcd", "kube-system", "kube-apiserver-n1")
    assert not is_pod_log_dir("kube-system_kube-apiserver-n1_", "kube-system", "kube-apiserver-n1")
    assert not is_pod_log_dir("default_kube-apiserver-n1_0123", "kube-system", "kube-apiserver-n1")
    assert not is_pod_log_dir("kube-system_kube-apiserver-n10_0123", "kube-system", "kube-apiserver-n1")


def _pod_dir(root, uid, files, mtime):
    d = root / f"kube-system_kube-apiserver-n1_{uid}"
    (d / "kube-apiserver").mkdir(parents=True)
    for name in files:
        (d / "kube-apiserver" / name).write_text("")
    os.utime(d, (mtime, mtime))
    return d


def test_the_newest_pod_directory_written_after_the_manifest_counts(tmp_path):
    now = time.time()
    _pod_dir(tmp_path, "old", ["8.log", "9.log"], now - 100)  # the previous revision's pod
    assert (
        kubelet_start_attempts(tmp_path, "kube-system", "kube-apiserver-n1", "kube-apiserver", now - 10) == 0
    )
    _pod_dir(tmp_path, "new", ["1.log", "2.log"], now)
    assert (
        kubelet_start_attempts(tmp_path, "kube-system", "kube-apiserver-n1", "kube-apiserver", now - 10) == 3
    )
    assert kubelet_start_attempts(tmp_path, "kube-system", "kube-apiserver-n1", "other", now - 10) == 0
    assert kubelet_start_attempts(tmp_path / "absent", "kube-system", "x", "kube-apiserver", 0) == 0


def _layout(tmp_path, **extra):
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(tmp_path / "manifests"),
        "resources_dir": str(tmp_path / "resources"),
        "pod_logs_dir": str(tmp_path / "pods"),
        "node_name": "n1",
        **extra,
    }
    return Layout.from_params(params)


def test_pod_logs_dir_needs_an_absolute_path(tmp_path):
    # the node name is no longer required here: the monitor finds it on the node (kubelet.py)
    assert _layout(tmp_path, node_name="").node_name == ""
    with pytest.raises(StaticPodError) as err:
        _layout(tmp_path, pod_logs_dir="var/log/pods")
    assert err.value.field == "pod_logs_dir"


def test_observe_reads_the_kubelet_files_of_the_live_manifest(tmp_path):
    layout = _layout(tmp_path)
    layout.manifests_dir.mkdir()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kube-apiserver", "namespace": "kube-system", "labels": {"revision": "4"}},
        "spec": {"containers": [{"name": "kube-apiserver", "image": "x"}]},
    }
    layout.live_manifest.write_text(yaml.safe_dump(pod))
    written = layout.live_manifest.stat().st_mtime
    assert observe(layout, 4, None, 0.0).start_attempts == 0  # nothing started yet
    _pod_dir(tmp_path / "pods", "u4", ["0.log", "1.log"], written + 1)
    seen = observe(layout, 4, None, 1.0)
    assert (seen.start_attempts, seen.running_revision) == (2, 4)
    # the live manifest is another revision's: that revision runs, none of revision 5
    seen = observe(layout, 5, None, 2.0)
    assert (seen.start_attempts, seen.running_revision) == (0, 4)
    # a manifest the kubelet cannot run never starts
    layout.live_manifest.write_text("{not: yaml: [")
    assert observe(layout, 4, None, 3.0).start_attempts == 0
