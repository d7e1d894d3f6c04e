# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Falling back to the last-known-good revision (with the StorageVersion gate) and rolling a
failed revision out again once its backoff has passed (the enhancement's Retries)."""

from __future__ import annotations

import calendar
import contextlib
import time
import uuid
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.install import (
    _write_live,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    InstallerLock,
    Layout,
    yaml,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.options import (
    Options,
    _base_result,
    resolve_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    annotate_fallback,
    choose_fallback,
    pod_revision,
    retry_policy,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_LOCK_TIMEOUT,
    FALLBACK_FOR_REVISION,
    FALLBACK_REASON,
    NOT_READY,
    PREVIOUS_FAILURES,
    RETRY_AT,
    STORAGE_VERSION_SKEW,
    STORAGE_VERSIONS_FILE,
    UNEXPECTED_REVISION,
    StaticPodError,
)


def _storage_version_gate(layout: Layout, target: int, opts: Options) -> dict[str, Any]:
    """Compare the cluster's encoding versions with what ``target`` recorded it could decode."""
    from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
        StorageVersionError,
        StorageVersionUnavailable,
        check_rollback,
        load_record,
        stale_message,
        unknown_to_record,
    )

    if opts.storage_versions is None:
        return {"checked": False, "message": "StorageVersion check disabled"}
    record_path = layout.revision_dir(target) / STORAGE_VERSIONS_FILE
    try:
        record = load_record(record_path)
    except StorageVersionError as exc:
        raise StaticPodError(str(exc), field="storage_versions", reason="InvalidInput") from exc
    try:
        current = opts.storage_versions.encodings()
    except StorageVersionUnavailable as exc:
        return {"checked": False, "available": False, "message": f"StorageVersion API unavailable: {exc}"}
    except StorageVersionError as exc:
        raise StaticPodError(str(exc), field=exc.field, reason=exc.reason) from exc
    if record is None:
        return {
            "checked": False,
            "available": True,
            "message": f"revision {target} has no StorageVersion record ({record_path}); it was never marked good "
            "with the StorageVersion check on",
        }
    skew = check_rollback(current, record)
    # entries of apiservers whose identity Lease is gone are already out of ``current``
    stale = getattr(opts.storage_versions, "stale", dict)()
    message = (
        "; ".join(
            f"{s['resource']}: stored as {s['encodingVersion']}, decodable {s['decodableVersions']}"
            for s in skew
        )
        if skew
        else "revision can decode every stored encoding version"
    )
    return {
        "checked": True,
        "available": True,
        "record": str(record_path),
        "skew": skew,
        "unknown_to_revision": unknown_to_record(current, record),
        "stale_apiservers": stale,
        "message": message,
        "warnings": [stale_message(stale)] if stale else [],
    }


def fallback(
    layout: Layout,
    opts: Options,
    reason: str | None = None,
    message: str | None = None,
    current: int | None = None,
) -> dict[str, Any]:
    """Fall back from the current revision: copy the chosen revision's manifest, annotated, into place.

    Under the installer lock: re-read the live revision (if an installer wrote another revision
    meanwhile, nothing is written, reason UnexpectedRevision), choose the target
    (:func:`choose_fallback`), run the StorageVersion gate, write atomically.

    Returns the result dict (``action`` is ``fallback``, ``none`` or ``refused``). Raises
    StaticPodError (``LockBusy``, ``InvalidManifest``, ``StorageVersionSkew`` with ``result``).
    Idempotent: if the live manifest already is the annotated fallback for this revision, nothing
    is written.
    """
    reason = reason or opts.reason or NOT_READY
    message = message if message is not None else (opts.message or f"fallback requested ({reason})")
    res = _base_result(layout)
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))) as lock:
        res["lock_waited_seconds"] = round(lock.waited, 3)
        live: dict | None = None
        if layout.live_manifest.exists():
            with contextlib.suppress(StaticPodError):
                live = layout.read_pod(layout.live_manifest, "live manifest")
        live_ann = ((live or {}).get("metadata") or {}).get("annotations") or {}
        if current is None and opts.revision is None and FALLBACK_FOR_REVISION in live_ann:
            cur = (
                int(live_ann[FALLBACK_FOR_REVISION]) if str(live_ann[FALLBACK_FOR_REVISION]).isdigit() else -1
            )
        else:
            cur = current if current is not None else resolve_revision(layout, opts)
        res["revision"] = cur
        if live is not None:
            with contextlib.suppress(StaticPodError):
                ann = live_ann
                if ann.get(FALLBACK_FOR_REVISION) == str(cur):
                    res.update(
                        action="none",
                        reason=ann.get(FALLBACK_REASON, reason),
                        message=f"already fallen back from revision {cur}",
                        fallback_revision=pod_revision(live, "live manifest"),
                    )
                    return res
                live_rev = pod_revision(live, "live manifest")
                if current is not None and live_rev != current:
                    res.update(
                        action="none",
                        reason=UNEXPECTED_REVISION,
                        message=f"the live manifest changed to revision {live_rev} while revision {current} "
                        "was monitored; not falling back",
                    )
                    return res
        lkg, lkg_state = layout.last_known_good()
        res["last_known_good_revision"] = lkg if lkg_state == "ok" else None
        res["last_known_good_state"] = lkg_state
        target, source = choose_fallback(
            cur, layout.revisions_with_manifest(), lkg if lkg_state == "ok" else None
        )
        res["fallback_revision"] = target
        res["fallback_source"] = source
        res["reason"] = reason
        if target is None:
            res.update(
                action="none",
                message=f"no last-known-good and no earlier revision with a manifest than {cur}: nothing to fall "
                f"back to (bootstrap); {message}",
            )
            return res
        gate = _storage_version_gate(layout, target, opts)
        warnings = gate.pop("warnings", [])
        if warnings:
            res.setdefault("warnings", []).extend(warnings)
        res["storage_version"] = gate
        if gate.get("available") is False and opts.storage_version_unavailable == "refuse" and not opts.force:
            res.update(action="refused", message=gate["message"] + "; storage_version_unavailable=refuse")
            raise StaticPodError(res["message"], reason="StorageVersionUnavailable", result=res)
        if gate.get("skew"):
            names = ", ".join(s["resource"] for s in gate["skew"])
            if not opts.force:
                res.update(
                    action="refused",
                    reason=STORAGE_VERSION_SKEW,
                    message=f"revision {target} cannot decode what the cluster now stores: {gate['message']}",
                    skewed_resources=[s["resource"] for s in gate["skew"]],
                )
                raise StaticPodError(
                    f"refusing to fall back from revision {cur} to {target}: StorageVersionSkew on {names} "
                    "(force: true overrides)",
                    reason=STORAGE_VERSION_SKEW,
                    result=res,
                )
            res["storage_version"]["forced"] = True
        pod = layout.read_pod(layout.revision_manifest(target), f"revision {target} manifest")
        pod = annotate_fallback(pod, cur, reason, message, str(uuid.uuid4()))
        # the failed revision's failures so far: those it carried (a retry) and this one
        carried = str(live_ann.get(PREVIOUS_FAILURES, "0"))
        failures = (int(carried) if carried.isdigit() else 0) + 1
        plan = retry_policy(reason, failures - 1, opts.retry_base, opts.retry_cap)
        pod["metadata"]["annotations"][PREVIOUS_FAILURES] = str(failures)
        if plan["retryable"]:
            pod["metadata"]["annotations"][RETRY_AT] = _rfc3339(time.time() + plan["retry_after_seconds"])
            res["retry_at"] = pod["metadata"]["annotations"][RETRY_AT]
        data = yaml.safe_dump(pod, sort_keys=False).encode()
        res.update(action="fallback", message=message, changed=True)
        if not opts.check_mode:
            for stale in layout.manifests_dir.glob(f".{layout.live_manifest.name}.*.tmp"):
                # left by a writer that died between write and rename; we hold the lock, nobody else writes
                with contextlib.suppress(OSError):
                    stale.unlink()
                    res["files_removed"].append(str(stale))
            _write_live(layout, data, opts, res)
            res["written_at"] = time.time()
        res["files_written"].append(str(layout.live_manifest))
    carried = str(live_ann.get(PREVIOUS_FAILURES, "0"))
    previous = max(opts.retry_previous_failures, int(carried) if carried.isdigit() else 0)
    res["retry"] = retry_policy(reason, previous, opts.retry_base, opts.retry_cap)
    return res


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _parse_rfc3339(text: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


def retry(layout: Layout, opts: Options, now: float | None = None) -> dict[str, Any]:
    """Roll a failed revision out again once its backoff has passed (the enhancement's Retries).

    The live manifest must be a fallback (``fallback-for-revision``) for a retryable reason, with
    :data:`RETRY_AT` set by :func:`fallback` (``retry_base * 2**failures``, at most ``retry_cap``
    seconds after it). Before that time, or for a reason that is not retried (CrashLooping,
    NeverStartedUp), nothing is written (``action: none``, with ``retry_at``). Once it has passed,
    under the installer lock, the failed revision's manifest becomes the live manifest again,
    annotated with :data:`PREVIOUS_FAILURES` (so its next fallback doubles the backoff) and a new
    uid; the last-known-good link stays. Run ``state: monitor`` on it next.

    Returns the result dict (``action``: ``retry`` or ``none``, ``revision``, ``retry_at``).
    Raises StaticPodError (``LockBusy``, a failed revision without a manifest).
    """
    now = time.time() if now is None else now
    res = _base_result(layout)
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))) as lock:
        res["lock_waited_seconds"] = round(lock.waited, 3)
        live = layout.read_pod(layout.live_manifest, "live manifest")
        ann = live["metadata"].get("annotations") or {}
        failed = str(ann.get(FALLBACK_FOR_REVISION, ""))
        if not failed.isdigit():
            res.update(action="none", message="the live manifest is not a fallback: nothing to retry")
            return res
        rev = int(failed)
        res.update(revision=rev, reason=ann.get(FALLBACK_REASON, ""), retry_at=ann.get(RETRY_AT))
        due = _parse_rfc3339(str(ann.get(RETRY_AT, "")))
        if due is None:
            res.update(action="none", message=f"revision {rev} failed with {res['reason']}: not retried")
            return res
        if now < due:
            res.update(action="none", message=f"revision {rev} is retried at {ann[RETRY_AT]}")
            return res
        pod = layout.read_pod(layout.revision_manifest(rev), f"revision {rev} manifest")
        meta = pod["metadata"]
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            PREVIOUS_FAILURES: str(ann.get(PREVIOUS_FAILURES, "1")),
        }
        meta["uid"] = str(uuid.uuid4())
        res.update(action="retry", changed=True, message=f"revision {rev} rolled out again after its backoff")
        if not opts.check_mode:
            _write_live(layout, yaml.safe_dump(pod, sort_keys=False).encode(), opts, res)
        res["files_written"].append(str(layout.live_manifest))
    return res
