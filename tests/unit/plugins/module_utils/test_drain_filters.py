"""kubectl's drain filters (k8s.io/kubectl/pkg/drain filters.go) on pod dicts: pure logic, no network."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.noderemedy.core.plugins.module_utils._drain import (
    DAEMONSET_FATAL,
    DAEMONSET_WARNING,
    DELETED_SKIP,
    ERROR,
    LOCAL_STORAGE_FATAL,
    LOCAL_STORAGE_WARNING,
    MIRROR_SKIP,
    OKAY,
    SKIP,
    UNMANAGED_FATAL,
    UNMANAGED_WARNING,
    WARNING,
    DrainOptions,
    decide,
    refusal_message,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError

NOW = 1_800_000_000.0  # epoch seconds


def pod(
    name: str = "p",
    owner: str | None = "ReplicaSet",
    owner_name: str = "rs",
    phase: str = "Running",
    emptydir: bool = False,
    mirror: bool = False,
    deleted_ago: float | None = None,
) -> dict:
    meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": owner_name, "controller": True, "uid": "o"}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    if deleted_ago is not None:
        meta["deletionTimestamp"] = datetime.fromtimestamp(NOW - deleted_ago, UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
    volumes = (
        [{"name": "scratch", "emptyDir": {}}] if emptydir else [{"name": "cfg", "configMap": {"name": "x"}}]
    )
    return {"metadata": meta, "spec": {"nodeName": "n", "volumes": volumes}, "status": {"phase": phase}}


def ds_present(namespace: str, name: str) -> bool:
    return True


def ds_absent(namespace: str, name: str) -> bool:
    return False


def run(p: dict, exists=ds_present, **opts) -> tuple[bool, str, str]:
    d = decide(p, DrainOptions(**opts), exists, NOW)
    return d.delete, d.status, d.message


def test_replicated_pod_is_evicted_without_flags():
    assert run(pod()) == (True, OKAY, "")


def test_daemonset_pod_refuses_without_ignore_daemonsets():
    assert run(pod(owner="DaemonSet")) == (False, ERROR, DAEMONSET_FATAL)


def test_daemonset_pod_is_left_in_place_with_ignore_daemonsets():
    assert run(pod(owner="DaemonSet"), ignore_daemonsets=True) == (False, WARNING, DAEMONSET_WARNING)


def test_orphaned_daemonset_pod_needs_force():
    delete, status, msg = run(
        pod(owner="DaemonSet", owner_name="gone"), exists=ds_absent, ignore_daemonsets=True
    )
    assert (delete, status) == (False, ERROR)
    assert '"gone" not found' in msg
    delete, status, _msg = run(pod(owner="DaemonSet"), exists=ds_absent, force=True)
    assert (delete, status) == (True, WARNING)


def test_daemonset_lookup_error_refuses_the_pod_with_its_message():
    def broken(namespace: str, name: str) -> bool:
        raise KubeError("daemonsets.apps is forbidden", "forbidden")

    assert run(pod(owner="DaemonSet"), exists=broken, ignore_daemonsets=True) == (
        False,
        ERROR,
        "daemonsets.apps is forbidden",
    )


def test_mirror_pod_is_skipped_even_with_force():
    assert run(pod(owner="Node", mirror=True), force=True) == (False, SKIP, MIRROR_SKIP)
    assert run(pod(owner=None, mirror=True)) == (False, SKIP, MIRROR_SKIP)


def test_emptydir_pod_needs_delete_emptydir_data():
    assert run(pod(emptydir=True)) == (False, ERROR, LOCAL_STORAGE_FATAL)
    assert run(pod(emptydir=True), delete_emptydir_data=True) == (True, WARNING, LOCAL_STORAGE_WARNING)


def test_bare_pod_needs_force():
    assert run(pod(owner=None)) == (False, ERROR, UNMANAGED_FATAL)
    assert run(pod(owner=None), force=True) == (True, WARNING, UNMANAGED_WARNING)


def test_bare_emptydir_pod_reports_the_first_refusal_then_the_last_warning():
    # kubectl: the first filter that refuses wins; of several warnings the last is reported
    assert run(pod(owner=None, emptydir=True), force=True) == (False, ERROR, LOCAL_STORAGE_FATAL)
    assert run(pod(owner=None, emptydir=True), force=True, delete_emptydir_data=True) == (
        True,
        WARNING,
        UNMANAGED_WARNING,
    )


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_are_always_deletable(phase):
    assert run(pod(owner=None, phase=phase)) == (True, OKAY, "")
    assert run(pod(owner=None, emptydir=True, phase=phase)) == (True, OKAY, "")
    assert run(pod(owner="DaemonSet", phase=phase), exists=ds_absent) == (True, OKAY, "")


def test_pod_terminating_longer_than_skip_wait_for_delete_timeout_is_skipped():
    assert run(pod(deleted_ago=120), skip_wait_for_delete_timeout=60) == (False, SKIP, DELETED_SKIP)
    assert run(pod(deleted_ago=30), skip_wait_for_delete_timeout=60) == (True, OKAY, "")
    # 0 disables the skip (kubectl's default)
    assert run(pod(deleted_ago=10_000)) == (True, OKAY, "")


def test_refusal_message_groups_pods_by_reason_like_kubectl():
    opts = DrainOptions()
    decisions = [
        decide(pod("a", emptydir=True), opts, ds_present, NOW),
        decide(pod("b", owner=None), opts, ds_present, NOW),
        decide(pod("c", emptydir=True), opts, ds_present, NOW),
        decide(pod("d"), opts, ds_present, NOW),
    ]
    assert refusal_message(decisions) == (
        "cannot delete Pods with local storage (use delete_emptydir_data to override): ns/a, ns/c; "
        "cannot delete Pods that declare no controller (use force to override): ns/b"
    )
    assert refusal_message([decide(pod("d"), opts, ds_present, NOW)]) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [("grace_period", -2), ("timeout", -1), ("skip_wait_for_delete_timeout", -5), ("retry_delay", 0)],
)
def test_bad_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        DrainOptions(**{field: value})


@settings(deadline=None)
@given(
    owner=st.sampled_from([None, "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Node"]),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
    emptydir=st.booleans(),
    mirror=st.booleans(),
    ds_exists=st.booleans(),
    force=st.booleans(),
    ignore_daemonsets=st.booleans(),
    delete_emptydir_data=st.booleans(),
)
def test_filter_invariants(
    owner, phase, emptydir, mirror, ds_exists, force, ignore_daemonsets, delete_emptydir_data
):
    p = pod(owner=owner, phase=phase, emptydir=emptydir, mirror=mirror)
    delete, status, _msg = run(
        p,
        exists=ds_present if ds_exists else ds_absent,
        force=force,
        ignore_daemonsets=ignore_daemonsets,
        delete_emptydir_data=delete_emptydir_data,
    )
    finished = phase in ("Succeeded", "Failed")
    # a verdict is consistent: errors and skips never delete
    if status in (ERROR, SKIP):
        assert not delete
    # mirror pods are never deleted, whatever the flags
    if mirror:
        assert not delete
    # a live DaemonSet's running pod is never deleted
    if owner == "DaemonSet" and ds_exists and not finished:
        assert not delete
    # without force, a running pod with no controller is never deleted
    if owner is None and not force and not finished:
        assert not delete
    # without delete_emptydir_data, a running emptyDir pod is never deleted
    if emptydir and not delete_emptydir_data and not finished:
        assert not delete
    # a plain replicated running pod without local storage is always deleted
    if owner in ("ReplicaSet", "StatefulSet", "Job") and not emptydir and not mirror:
        assert delete
