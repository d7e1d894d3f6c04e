# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure decisions, no I/O: observations of a start-up, the readiness verdict per reason, the
retry policy, the choice of the fallback revision, pruning and the fallback annotations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    CRASH_LOOPING,
    DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_CAP,
    ETCD_UNHEALTHY,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    NEVER_STARTED_UP,
    NOT_READY,
    RETRYABLE_REASONS,
    REVISION_LABEL,
    UNEXPECTED_REVISION,
    UNHEALTHY,
    StaticPodError,
)

# --- pure: observations and readiness -------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One HTTP check: ``ok`` when the endpoint answered 200; ``answered`` when it answered at all.

    ``body`` is the response text (truncated to 4 KiB), ``error`` the transport error, if any.
    """

    ok: bool
    answered: bool
    status: int = 0
    body: str = ""
    error: str = ""


@dataclass(frozen=True)
class MirrorPod:
    """The operand's mirror pod as the API server shows it (the enhancement's steps 5-6).

    Attributes:
        revision: its ``revision`` label (None if absent or not an integer).
        ready: ``status.conditions[type=Ready].status == "True"``.
        restart_count: the first container's ``restartCount`` (0 without a status).
        started: the first container has run at least once (running, terminated, or restarted).
        uid: ``metadata.uid`` of the mirror pod.
    """

    revision: int | None
    ready: bool
    restart_count: int = 0
    started: bool = False
    uid: str = ""


def mirror_pod_of(obj: Any) -> MirrorPod | None:
    """A :class:`MirrorPod` from a Pod as JSON (``GET /api/v1/namespaces/<ns>/pods/<name>``);
    None when ``obj`` is not a Pod."""
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        return None
    meta = obj["metadata"]
    label = str((meta.get("labels") or {}).get(REVISION_LABEL, ""))
    status = obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    statuses = status.get("containerStatuses") or []
    first = statuses[0] if statuses and isinstance(statuses[0], dict) else {}
    restarts = int(first.get("restartCount") or 0)
    state = first.get("state") or {}
    started = restarts > 0 or "running" in state or "terminated" in state
    return MirrorPod(
        int(label) if label.isdigit() else None, ready, restarts, started, str(meta.get("uid", ""))
    )


@dataclass(frozen=True)
class Observation:
    """What one probe iteration saw, at ``time`` (seconds, monotonic clock of the monitor).

    Attributes:
        start_attempts: start attempts of the expected revision (termination log, or the kubelet's
            per-container log files).
        running_revision: revision of the latest start record (None if the log has none).
        healthz / readyz / etcd: the HTTP checks (None if not run this iteration).
        mirror: the operand's mirror pod read through the API server (None when not read: no
            client configuration, or the API server did not answer).
    """

    time: float
    start_attempts: int
    running_revision: int | None = None
    healthz: Check | None = None
    readyz: Check | None = None
    etcd: Check | None = None
    mirror: MirrorPod | None = None


@dataclass(frozen=True)
class Readiness:
    """The verdict on the expected revision: ``ready``, else a ``reason`` and a human ``message``."""

    ready: bool
    reason: str = ""
    message: str = ""


def parse_start_log(text: str, expected_revision: int) -> tuple[int, int | None]:
    """Count start attempts in a termination log (format in the module docstring).

    Returns ``(attempts of expected_revision, revision of the latest start record or None)``. A
    record without ``revision`` counts as ``expected_revision``. Unparseable lines are skipped.
    """
    attempts = 0
    latest: int | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("event") != "start":
            continue
        rev = rec.get("revision", expected_revision)
        try:
            rev = int(rev)
        except (TypeError, ValueError):
            continue
        latest = rev
        if rev == expected_revision:
            attempts += 1
    return attempts, latest


def static_pod_name(manifest_name: str, node_name: str) -> str:
    """The name the kubelet gives a static pod: ``<metadata.name>-<node name>`` (its mirror pod's name)."""
    return f"{manifest_name}-{node_name}"


def is_pod_log_dir(dirname: str, namespace: str, pod_name: str) -> bool:
    """Whether ``dirname`` is a kubelet pod log directory ``<namespace>_<pod name>_<pod uid>`` of that pod.

    Namespaces and pod names cannot contain ``_`` (DNS names), so the split is unambiguous.
    Source: kubelet ``BuildPodLogsDirectory``.
    """
    parts = dirname.split("_")
    return len(parts) == 3 and parts[0] == namespace and parts[1] == pod_name and bool(parts[2])


def attempts_from_log_files(filenames: Iterable[str]) -> int:
    """Start attempts of one container from the names of its kubelet log files.

    The kubelet writes one ``<restartCount>.log`` per start of the container (kubelet
    ``BuildContainerLogsDirectory`` + ``<restartCount>.log``) and deletes those of containers it
    garbage-collects, so the highest ``<n>.log`` gives ``n + 1`` attempts; other names (rotated
    ``<n>.log.<timestamp>`` files) are ignored. 0 when there is none.
    """
    highest = -1
    for name in filenames:
        stem, dot, ext = name.partition(".")
        if dot and ext == "log" and stem.isdigit():
            highest = max(highest, int(stem))
    return highest + 1


def failed_checks(verbose_body: str) -> list[str]:
    """Names of the failing checks in a ``/readyz?verbose`` or ``/healthz?verbose`` body.

    ``"[-]poststarthook/rbac/bootstrap-roles failed: reason withheld"`` gives
    ``"poststarthook/rbac/bootstrap-roles"`` (kube-apiserver's healthz format).
    """
    names = []
    for line in verbose_body.splitlines():
        line = line.strip()
        if line.startswith("[-]"):
            names.append(line[3:].split(" ", 1)[0])
    return names


def _check_text(check: Check) -> str:
    if not check.answered:
        return check.error or "no answer"
    failing = failed_checks(check.body)
    if failing:
        return f"HTTP {check.status}, failing: {', '.join(failing)}"
    body = " ".join(check.body.split())[:300]
    return f"HTTP {check.status}: {body}" if body else f"HTTP {check.status}"


def assess(expected_revision: int, obs: Observation) -> Readiness:
    """Readiness of ``expected_revision`` from one observation (checks in the enhancement's order).

    1. the latest start is of another revision → UnexpectedRevision;
    2. no start attempt → NeverStartedUp;
    3. the etcd check is red → EtcdUnhealthy;
    4. ``/healthz`` red → Unhealthy (CrashLooping if it does not answer and there were several
       start attempts), except when every failing healthz check is a post-start hook: a
       kube-apiserver adds its post-start hooks to ``/healthz`` as well as ``/readyz``
       (k8s.io/apiserver ``AddBootSequenceHealthChecks``), so a hook that never finishes turns
       both red; that is NotReady, naming the hooks;
    5. ``/readyz`` red → NotReady, listing the unfinished post-start hooks;
    6. the mirror pod, when it was read (the enhancement's steps 5-6), is not of the expected
       revision yet or not Ready → NotReady;
    7. otherwise ready.
    """
    if obs.running_revision is not None and obs.running_revision != expected_revision:
        return Readiness(
            False,
            UNEXPECTED_REVISION,
            f"the running pod is of revision {obs.running_revision}, the manifest on disk is "
            f"revision {expected_revision}",
        )
    if obs.start_attempts == 0:
        return Readiness(False, NEVER_STARTED_UP, f"no start-up attempt of revision {expected_revision} seen")
    if obs.etcd is not None and obs.etcd.answered and not obs.etcd.ok:
        return Readiness(False, ETCD_UNHEALTHY, f"etcd check: {_check_text(obs.etcd)}")
    if obs.healthz is not None and not obs.healthz.ok and obs.healthz.answered:
        failing = failed_checks(obs.healthz.body)
        if failing and all(n.startswith("poststarthook/") for n in failing):
            return Readiness(
                False,
                NOT_READY,
                f"healthz: {_check_text(obs.healthz)}; unfinished post-start hooks: {', '.join(failing)}",
            )
    if obs.healthz is not None and not obs.healthz.ok:
        if not obs.healthz.answered and obs.start_attempts > 1:
            return Readiness(
                False,
                CRASH_LOOPING,
                f"{obs.start_attempts} start-up attempts of revision {expected_revision}; "
                f"healthz: {_check_text(obs.healthz)}",
            )
        return Readiness(False, UNHEALTHY, f"healthz: {_check_text(obs.healthz)}")
    if obs.etcd is not None and not obs.etcd.ok:
        return Readiness(False, ETCD_UNHEALTHY, f"etcd check: {_check_text(obs.etcd)}")
    if obs.readyz is not None and not obs.readyz.ok:
        hooks = [n for n in failed_checks(obs.readyz.body) if n.startswith("poststarthook/")]
        unfinished = f"; unfinished post-start hooks: {', '.join(hooks)}" if hooks else ""
        return Readiness(False, NOT_READY, f"readyz: {_check_text(obs.readyz)}{unfinished}")
    if obs.healthz is None and obs.readyz is None:
        return Readiness(False, UNHEALTHY, "no health check was run")
    if obs.mirror is not None and obs.mirror.revision != expected_revision:
        return Readiness(
            False,
            NOT_READY,
            f"the mirror pod is still of revision {obs.mirror.revision} (the kubelet has not updated it)",
        )
    if obs.mirror is not None and not obs.mirror.ready:
        return Readiness(
            False,
            NOT_READY,
            f"the mirror pod of revision {expected_revision} is not Ready (restarts: {obs.mirror.restart_count})",
        )
    return Readiness(True)


def final_readiness(expected_revision: int, observations: Sequence[Observation]) -> Readiness:
    """The verdict when the monitor times out, over all observations of the window.

    The last observation decides, except that:

    * if the operand answered HTTP at least once and its etcd check never passed when it did,
      the reason is EtcdUnhealthy ("the etcd post-start hook never finished"), even if it
      restarted in between;
    * if there was more than one start attempt and the last observation is not ready for a
      reason other than UnexpectedRevision/EtcdUnhealthy, the reason is CrashLooping (the
      enhancement: "more than one start-up attempt ... and the monitor times out").

    Raises ValueError for an empty sequence.
    """
    if not observations:
        raise ValueError("observations: at least one observation is needed")
    last = observations[-1]
    verdict = assess(expected_revision, last)
    if verdict.ready or verdict.reason in (UNEXPECTED_REVISION, NEVER_STARTED_UP):
        return verdict
    etcd_seen = [o.etcd for o in observations if o.etcd is not None and o.etcd.answered]
    if etcd_seen and not any(c.ok for c in etcd_seen):
        return Readiness(
            False,
            ETCD_UNHEALTHY,
            f"the etcd check never passed in {len(etcd_seen)} answers; last: {_check_text(etcd_seen[-1])}",
        )
    if last.start_attempts > 1 and verdict.reason != ETCD_UNHEALTHY:
        if verdict.reason == CRASH_LOOPING:
            return verdict
        return Readiness(
            False, CRASH_LOOPING, f"{last.start_attempts} start-up attempts; last check: {verdict.message}"
        )
    return verdict


def retry_policy(
    reason: str,
    previous_failures: int = 0,
    base: float = DEFAULT_RETRY_BASE,
    cap: float = DEFAULT_RETRY_CAP,
) -> dict[str, Any]:
    """Whether and when the failed revision should be rolled out again (the enhancement's Retries).

    NotReady, EtcdUnhealthy and Unhealthy are retried after ``base * 2**previous_failures``
    seconds, at most ``cap`` seconds; CrashLooping and NeverStartedUp (and any other reason) are not.

    Returns ``{"retryable": bool, "retry_after_seconds": float | None, "previous_failures": int,
    "backoff": {"base_seconds": float, "cap_seconds": float}}``. ValueError on negative input.
    """
    if previous_failures < 0:
        raise ValueError("retry_previous_failures: must be >= 0")
    if base <= 0 or cap < base:
        raise ValueError("retry_base / retry_cap: need 0 < retry_base <= retry_cap")
    retryable = reason in RETRYABLE_REASONS
    after = min(base * (2 ** min(previous_failures, 64)), cap) if retryable else None
    return {
        "retryable": retryable,
        "retry_after_seconds": after,
        "previous_failures": previous_failures,
        "backoff": {"base_seconds": base, "cap_seconds": cap},
    }


def choose_fallback(
    current: int, revisions_with_manifest: Iterable[int], last_known_good: int | None
) -> tuple[int | None, str]:
    """The revision to fall back to from ``current``, and where it came from.

    ``last_known_good`` (if it has a manifest and is not ``current``) wins, source
    ``"last-known-good"``; else the highest revision below ``current`` with a manifest, source
    ``"previous-revision"``; else ``(None, "none")`` (bootstrap: nothing to fall back to).
    Source: library-go ``fallbackToPreviousRevision`` step 0 and the enhancement.
    """
    have = set(revisions_with_manifest)
    if last_known_good is not None and last_known_good != current and last_known_good in have:
        return last_known_good, "last-known-good"
    earlier = sorted(r for r in have if r < current)
    if earlier:
        return earlier[-1], "previous-revision"
    return None, "none"


def revisions_to_prune(
    revisions: Iterable[int], limit: int, current: int | None, last_known_good: int | None
) -> list[int]:
    """Revisions to delete: all but the ``limit`` highest, never ``current`` nor ``last_known_good``.

    The enhancement's Pruner section: the pruner must ignore the linked revision. ValueError if
    ``limit`` < 1.
    """
    if limit < 1:
        raise ValueError("revision_limit: must be >= 1")
    keep = set(sorted(revisions, reverse=True)[:limit])
    keep |= {r for r in (current, last_known_good) if r is not None}
    return sorted(r for r in set(revisions) if r not in keep)


def annotate_fallback(pod: dict, for_revision: int, reason: str, message: str, uid: str) -> dict:
    """A copy of manifest ``pod`` with the three fallback annotations and ``metadata.uid`` set.

    The new UID works around the kubelet ignoring graceful termination of static pods with the same
    name, file and UID (library-go ``fallbackToPreviousRevision``). StaticPodError if ``pod`` is
    not a Pod manifest.
    """
    if not isinstance(pod, dict) or pod.get("kind") != "Pod" or not isinstance(pod.get("metadata"), dict):
        raise StaticPodError(
            "the fallback manifest is not a Pod (kind: Pod with metadata)", reason="InvalidManifest"
        )
    out = json.loads(json.dumps(pod))
    meta = out["metadata"]
    annotations = dict(meta.get("annotations") or {})
    annotations[FALLBACK_FOR_REVISION] = str(for_revision)
    annotations[FALLBACK_REASON] = reason
    annotations[FALLBACK_MESSAGE] = message
    meta["annotations"] = annotations
    meta["uid"] = uid
    return out


def pod_revision(pod: Any, where: str) -> int:
    """The ``revision`` label of a Pod manifest as an int; StaticPodError naming ``where`` otherwise."""
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata"), dict):
        raise StaticPodError(f"{where}: not a Pod manifest", field=where, reason="InvalidManifest")
    value = (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)
    try:
        rev = int(str(value))
    except ValueError:
        rev = -1
    if value is None or rev < 0:
        raise StaticPodError(
            f"{where}: label '{REVISION_LABEL}' is missing or not a non-negative integer ({value!r})",
            field=where,
            reason="InvalidManifest",
        )
    return rev
