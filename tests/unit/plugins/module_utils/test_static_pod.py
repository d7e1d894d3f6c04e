"""Static-pod fallback (``_static_pod``): the pure decisions, exhaustively -- every reason and the
final verdict over a window, the start log and verbose check bodies, the retry policy (with
property tests), the choice of the fallback revision, pruning, and the fallback annotations.
Under a temporary root: test_static_pod_layout.py (the layout's edges, the installer lock, a crash
between write and rename), test_static_pod_install.py (the StorageVersion gate, the etcd check,
the installer), test_static_pod_monitor.py (the monitor loop, retries, the startup monitor as a
static pod, the mirror pod).

No network. Behaviour sources: openshift/library-go ``pkg/operator/staticpod/startupmonitor`` and the
OpenShift enhancement "Fallback on failing revisions of static pods".
"""

from __future__ import annotations

import json

import pytest
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
    StaticPodError,
)
from ansible_collections.noderemedy.core.tests.unit.plugins.module_utils._static_pod_helpers import (
    ETCD_RED,
    OK,
    READYZ_HOOKS,
    REFUSED,
    obs,
)

# --- pure: reasons --------------------------------------------------------------------------------


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
