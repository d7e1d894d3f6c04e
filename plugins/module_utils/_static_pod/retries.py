# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Retries that happen by themselves: the startup monitor as a static pod stays after a retryable
fallback, waits until the fallback's ``retry-at``, rolls the failed revision out again and judges
it again, until a revision is marked good.

The OpenShift enhancement "Fallback on failing revisions of static pods" retries a revision that
failed for a reason that may heal (NotReady, EtcdUnhealthy, Unhealthy) forever, with a backoff from
about 10 minutes doubling up to 6 hours. Its operator does that from inside the cluster; on a
single-node cluster nothing inside the cluster runs while the fallback serves, so here the monitor
static pod does it: the kubelet keeps it running (``restartPolicy: OnFailure``; a restarted monitor
finds the fallback in place and resumes waiting), it needs no timer on the node, and it ends the
moment the question is settled. The backoff itself lives in the fallback manifest
(``static-pods.noderemedy.io/retry-at``, :func:`.operations.fallback`), so a restarted monitor, a
``state: retry`` run by hand, or a newer installer all see the same schedule.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.degraded import (
    NodeSignal,
    condition_type,
    degraded_state,
    live_annotations,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.fallback import (
    _parse_rfc3339,
    retry,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    InstallerLock,
    Layout,
    write_manifest_atomic,
    yaml,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.monitor import (
    _judge,
    remove_own_manifest,
    wait_for_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.options import (
    Options,
    resolve_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.probes import HttpProber
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    Observation,
    pod_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_LOCK_TIMEOUT,
    FALLBACK_FOR_REVISION,
    RETRY_AT,
    StaticPodError,
)

#: Seconds between tries of a Degraded report the API server did not take, while a retry is pending.
REPORT_EVERY = 10.0


def pending_retry(layout: Layout, revision: int) -> float | None:
    """When revision ``revision`` is due to be rolled out again (epoch seconds), or None.

    A retry is pending while the live manifest is the fallback for ``revision``
    (``fallback-for-revision``) and carries ``retry-at`` (only retryable reasons get one). A live
    manifest of another revision (an installer wrote one), or none, means no retry is pending.
    """
    with contextlib.suppress(StaticPodError, KeyError, TypeError):
        ann = layout.read_pod(layout.live_manifest, "live manifest")["metadata"].get("annotations") or {}
        if str(ann.get(FALLBACK_FOR_REVISION, "")) == str(revision):
            return _parse_rfc3339(str(ann.get(RETRY_AT, "")))
    return None


def monitor_in_static_pod(
    layout: Layout,
    opts: Options,
    prober: HttpProber | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
    observe_fn: Callable[..., Observation] | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    signal: NodeSignal | None = None,
) -> dict[str, Any]:
    """The startup-monitor static pod's whole run (``in_static_pod: true``).

    1. wait until the live manifest is of the revision (:func:`.operations.wait_for_revision`);
    2. judge it (:func:`.monitor._judge`: mark good, or fall back);
    3. while a retry is pending (:func:`pending_retry`): poll every ``opts.interval`` seconds until
       ``retry-at`` (wall clock), roll the revision out again (:func:`.operations.retry`, which
       carries the failure count so the next backoff doubles, up to ``retry_cap``) and go to 2;
       stop waiting when the live manifest stops being the fallback for the revision (an installer
       wrote another revision);
    4. remove its own manifest (:func:`.operations.remove_own_manifest`).

    ``on_round`` is called with each round's result (2.). With ``signal`` the node shows Degraded
    (:mod:`.degraded`) after each round: while a retry is pending, a report the API server did not
    take is tried again at most every :data:`REPORT_EVERY` seconds of the wait; the state after the
    last round is in the result as ``degraded``. Returns the last round's result with ``retries``
    (rollouts done) and ``rounds`` (each round's ``action``, ``reason`` and ``retry_at``). Raises
    StaticPodError.
    """
    expected = resolve_revision(layout, opts)
    waited = wait_for_revision(layout, expected, opts.interval, clock, sleep)
    rounds: list[dict[str, Any]] = []
    retries = 0
    while True:
        res = _judge(layout, opts, prober, expected, clock, sleep, observe_fn)
        due = pending_retry(layout, expected)
        rounds.append(
            {"action": res.get("action"), "reason": res.get("reason", ""), "retry_at": res.get("retry_at")}
        )
        if on_round is not None:
            on_round(res)
        state = degraded_state(layout.operand, res, live_annotations(layout)) if signal else None
        reported = signal.report(state) if signal is not None and state is not None else True
        tried = clock()
        if signal is not None and state is not None:
            res["degraded"] = {
                "condition": condition_type(layout.operand),
                "status": state["status"],
                "reason": state["reason"],
                "reported": reported,
            }
        if due is None:
            break
        while due is not None and wall() < due:
            sleep(max(0.0, min(opts.interval, due - wall())))
            due = pending_retry(layout, expected)
            if (
                not reported
                and signal is not None
                and state is not None
                and not signal.gave_up
                and clock() - tried >= REPORT_EVERY
            ):
                reported, tried = signal.report(state), clock()
                res["degraded"]["reported"] = reported
        if due is None:
            break
        again = retry(layout, opts, now=wall())
        if again.get("action") == "retry":
            retries += 1
    res["waited_for_revision_seconds"] = round(waited, 3)
    res["retries"] = retries
    res["rounds"] = rounds
    remove_own_manifest(layout, expected, opts, res)
    return res


def hand_over(
    layout: Layout, opts: Options, revision: int, render: Callable[[str], dict[str, Any]]
) -> str | None:
    """After a monitor run outside a static pod (the role, a playbook) fell back with a retry
    pending, write the startup-monitor static pod of ``revision`` (``render(namespace)``, the
    operand's namespace), which then waits for ``retry-at`` and retries by itself
    (:func:`monitor_in_static_pod`: its wait for the revision ends at once on the fallback for it).

    Under the installer lock, through a dot temp file and a rename. Nothing is written when no
    retry is pending or a monitor manifest of ``revision`` is there already. Returns the path
    written (also in check mode, where nothing is), else None. StaticPodError (``LockBusy``, or
    naming ``manifests_dir`` when it cannot be written).
    """
    if pending_retry(layout, revision) is None:
        return None
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))):
        if pending_retry(layout, revision) is None:
            return None
        with contextlib.suppress(StaticPodError):
            mine = layout.read_pod(layout.monitor_manifest, "monitor manifest")
            if pod_revision(mine, "monitor manifest") == revision:
                return None
        namespace = "kube-system"
        with contextlib.suppress(StaticPodError, KeyError, TypeError):
            live = layout.read_pod(layout.live_manifest, "live manifest")
            namespace = str(live["metadata"].get("namespace") or namespace)
        data = yaml.safe_dump(render(namespace), sort_keys=False).encode()
        if not opts.check_mode:
            try:
                write_manifest_atomic(layout.monitor_manifest, data)
            except OSError as exc:
                raise StaticPodError(
                    f"manifests_dir: cannot write {layout.monitor_manifest}: {exc}", field="manifests_dir"
                ) from exc
    return str(layout.monitor_manifest)
