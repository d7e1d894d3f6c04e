# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitor: wait for the revision to be live, judge it (mark good, or fall back), and, run
as the startup-monitor static pod, remove its own manifest."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.fallback import (
    fallback,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    InstallerLock,
    Layout,
    _fsync_dir,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.options import (
    Options,
    _base_result,
    resolve_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.probes import (
    HttpProber,
    observe,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    Observation,
    Readiness,
    assess,
    final_readiness,
    pod_revision,
    retry_policy,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.revisions import (
    mark_good,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_LOCK_TIMEOUT,
    FALLBACK_FOR_REVISION,
    FALLBACK_REASON,
    FALLBACK_REASONS,
    NEVER_STARTED_UP,
    NOT_READY,
    StaticPodError,
)


def run_monitor(
    layout: Layout,
    opts: Options,
    prober: HttpProber | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    observe_fn: Callable[..., Observation] | None = None,
) -> dict[str, Any]:
    """Probe until the revision is ready or ``opts.timeout`` seconds pass, then mark good or fall back.

    Each iteration: read the termination log, run the HTTP checks, :func:`assess`. Ready → the
    revision becomes last-known-good (:func:`mark_good`). Timeout → :func:`final_readiness` gives
    the reason; a fallback reason falls back (:func:`fallback`); UnexpectedRevision does nothing
    (library-go: never judge a revision that is not running). ``clock``/``sleep``/``observe_fn``
    are injectable for the pure loop tests.

    With ``opts.in_static_pod`` (the monitor is the startup-monitor static pod the installer
    wrote): first :func:`wait_for_revision`, and at the end :func:`remove_own_manifest` (result
    keys ``waited_for_revision_seconds``, the monitor manifest in ``files_removed``).

    Result keys besides the operation's: ``ready``, ``reason``, ``message``, ``observations``,
    ``elapsed_seconds``, ``decision_seconds`` (from the deadline to the write), ``retry``.
    """
    expected = resolve_revision(layout, opts)
    if opts.timeout <= 0 or opts.interval <= 0:
        raise StaticPodError(
            "timeout / interval: must be > 0 seconds", field="timeout", reason="InvalidInput"
        )
    waited = wait_for_revision(layout, expected, opts.interval, clock, sleep) if opts.in_static_pod else 0.0
    res = _judge(layout, opts, prober, expected, clock, sleep, observe_fn)
    if opts.in_static_pod:
        res["waited_for_revision_seconds"] = round(waited, 3)
        remove_own_manifest(layout, expected, opts, res)
    return res


def wait_for_revision(
    layout: Layout,
    expected: int,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait, without a deadline, until the live manifest is of revision ``expected`` (or is already
    the fallback for it); returns the seconds waited.

    The startup monitor as a static pod can start before the installer's operand manifest is in
    place, or next to an operand manifest of another revision (an installer that died, a
    downgrade): it then neither judges nor writes anything (library-go ``startupmonitor``: wait
    until the operand's revision is the monitor's). Polls every ``interval`` seconds.
    """
    start = clock()
    while True:
        with contextlib.suppress(StaticPodError):
            live = layout.read_pod(layout.live_manifest, "live manifest")
            ann = live["metadata"].get("annotations") or {}
            if str(ann.get(FALLBACK_FOR_REVISION, "")) == str(expected):
                break
            if pod_revision(live, "live manifest") == expected:
                break
        sleep(interval)
    return clock() - start


def remove_own_manifest(layout: Layout, expected: int, opts: Options, res: dict[str, Any]) -> None:
    """The startup monitor of revision ``expected`` removes its own manifest
    (:attr:`Layout.monitor_manifest`) under the installer lock, once it has marked the revision
    good, fallen back or found nothing to judge; the kubelet then stops it. A monitor manifest of
    another revision (a newer installer's) is left alone. Adds the path to ``res["files_removed"]``.
    StaticPodError (``LockBusy``, or naming ``manifests_dir`` when the file cannot be removed)."""
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))):
        try:
            mine = pod_revision(
                layout.read_pod(layout.monitor_manifest, "monitor manifest"), "monitor manifest"
            )
        except StaticPodError:
            return
        if mine != expected:
            return
        if not opts.check_mode:
            try:
                layout.monitor_manifest.unlink()
                _fsync_dir(layout.manifests_dir)
            except OSError as exc:
                raise StaticPodError(
                    f"manifests_dir: cannot remove {layout.monitor_manifest}: {exc}",
                    field="manifests_dir",
                    result=res,
                ) from exc
        res["changed"] = True
        res["files_removed"].append(str(layout.monitor_manifest))


def _judge(
    layout: Layout,
    opts: Options,
    prober: HttpProber | None,
    expected: int,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    observe_fn: Callable[..., Observation] | None,
) -> dict[str, Any]:
    # a monitor restarted after its fallback (its process or container killed): the fallback is in
    # place, so there is nothing to watch and nothing to write again
    if layout.live_manifest.exists():
        with contextlib.suppress(StaticPodError):
            ann = layout.read_pod(layout.live_manifest, "live manifest")["metadata"].get("annotations") or {}
            if str(ann.get(FALLBACK_FOR_REVISION, "")) == str(expected):
                res = fallback(layout, opts, str(ann.get(FALLBACK_REASON) or NOT_READY), "", current=expected)
                res.update(ready=False, revision=expected, observations=0, elapsed_seconds=0.0)
                return res
    obs_fn = observe_fn or (lambda now, left: observe(layout, expected, prober, now, left, opts.mirror_pods))
    start = clock()
    deadline = start + opts.timeout
    observations: list[Observation] = []
    verdict = Readiness(False, NEVER_STARTED_UP, "not probed")
    while True:
        now = clock()
        o = obs_fn(now, deadline - now)
        observations.append(o)
        verdict = assess(expected, o)
        if verdict.ready:
            break
        now = clock()
        if now >= deadline:
            break
        sleep(min(opts.interval, deadline - now))
    timed_out_at = clock()
    if verdict.ready:
        res = mark_good(layout, opts, current=expected)
        res.update(ready=True, reason="", message=f"revision {expected} is ready; {res['message']}")
    else:
        verdict = final_readiness(expected, observations)
        if verdict.reason in FALLBACK_REASONS:
            res = fallback(layout, opts, verdict.reason, verdict.message, current=expected)
            res["reason"] = (
                verdict.reason if res.get("action") == "fallback" else res.get("reason", verdict.reason)
            )
            res.setdefault(
                "retry",
                retry_policy(verdict.reason, opts.retry_previous_failures, opts.retry_base, opts.retry_cap),
            )
        else:
            res = _base_result(layout)
            res.update(action="none", reason=verdict.reason, revision=expected)
        res["message"] = (
            verdict.message if res.get("action") == "fallback" else res.get("message") or verdict.message
        )
        if res.get("action") == "none" and verdict.message not in res["message"]:
            res["message"] = f"{res['message']} ({verdict.reason}: {verdict.message})"
        res["ready"] = False
    end = clock()
    res["revision"] = expected
    res["observations"] = len(observations)
    res["elapsed_seconds"] = round(end - start, 3)
    res["decision_seconds"] = round(end - timed_out_at, 3)
    res["last_observation"] = asdict(observations[-1])
    return res
