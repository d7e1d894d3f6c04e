# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The revisions on disk: marking one good (the last-known-good link, with its StorageVersion
record), the operand's status, and pruning old revisions."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.install import (
    _point_link,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    InstallerLock,
    Layout,
    write_manifest_atomic,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.options import (
    Options,
    _base_result,
    resolve_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    pod_revision,
    revisions_to_prune,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_LOCK_TIMEOUT,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    STORAGE_VERSIONS_FILE,
    StaticPodError,
)


def _storage_version_record(
    layout: Layout, cur: int, opts: Options, res: dict[str, Any]
) -> tuple[Path, bytes] | None:
    """Read what revision ``cur``'s apiserver decodes, for :func:`mark_good`; nothing is written here.

    Returns ``(record path, record bytes)``, or None when the check is off or the StorageVersion
    API is unavailable (said in ``res["storage_version"]``). Stale entries (apiservers whose
    identity Lease is gone) are named in ``res["storage_version"]["stale_apiservers"]`` and in
    ``res["warnings"]``. StaticPodError (with ``res``, naming the field, e.g. ``apiserver_id``)
    when this node's apiserver cannot be told or reports nothing.
    """
    if opts.storage_versions is None:
        return None
    from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
        StorageVersionError,
        StorageVersionUnavailable,
        record_bytes,
        stale_message,
    )

    try:
        decodable = opts.storage_versions.decodable()
    except StorageVersionUnavailable as exc:
        res["storage_version"] = {"recorded": False, "available": False, "message": str(exc)}
        return None
    except StorageVersionError as exc:
        res["action"] = "refused"
        raise StaticPodError(
            f"{exc} (revision {cur} is not marked good; nothing was written)",
            field=exc.field,
            reason=exc.reason,
            result=res,
        ) from exc
    stale = decodable.get("stale") or {}
    res["storage_version"] = {
        "recorded": True,
        "available": True,
        "record": str(layout.revision_dir(cur) / STORAGE_VERSIONS_FILE),
        "apiserver_id": decodable["apiServerID"],
        "resources": len(decodable["resources"]),
        "stale_apiservers": stale,
    }
    if stale:
        res.setdefault("warnings", []).append(stale_message(stale))
    return layout.revision_dir(cur) / STORAGE_VERSIONS_FILE, record_bytes(cur, decodable)


def mark_good(layout: Layout, opts: Options, current: int | None = None) -> dict[str, Any]:
    """Point the last-known-good link at the current revision's manifest and record its decodable versions.

    Everything is read and checked first (the revision's manifest; with the StorageVersion check
    on, this node's apiserver identity and what it decodes, :func:`_storage_version_record`), so a
    refused mark_good leaves the link and the record as they were. Then, under the installer lock,
    ``storage-versions.json`` is written into the revision directory (KEP-2339: what this
    apiserver reports it can decode) and the link is replaced atomically (temp link + rename), the
    link last. Idempotent. StaticPodError if the revision has no manifest, the lock is busy, or
    the StorageVersion check cannot tell this node's apiserver (e.g. ``apiserver_id``).
    """
    res = _base_result(layout)
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))) as lock:
        res["lock_waited_seconds"] = round(lock.waited, 3)
        cur = current if current is not None else resolve_revision(layout, opts)
        res["revision"] = cur
        manifest = layout.revision_manifest(cur)
        if not manifest.is_file():
            raise StaticPodError(
                f"revision: revision {cur} has no manifest at {manifest}", field="revision", reason="NotFound"
            )
        lkg, state = layout.last_known_good()
        res["previous_last_known_good_revision"] = lkg
        record = _storage_version_record(layout, cur, opts, res)
        res["action"] = "mark_good"
        if record is not None:
            path, data = record
            old = path.read_bytes() if path.exists() else b""
            if json.loads(old or b"{}").get("resources") != json.loads(data)["resources"]:
                res["changed"] = True
                if not opts.check_mode:
                    write_manifest_atomic(path, data)
                res["files_written"].append(str(path))
        if not (state == "ok" and lkg == cur and os.readlink(layout.lkg_link) == str(manifest)):
            res["changed"] = True
            if not opts.check_mode:
                _point_link(layout.lkg_link, manifest)
            res["files_written"].append(str(layout.lkg_link))
        res["last_known_good_revision"] = cur
    res["reason"] = ""
    res["message"] = f"revision {cur} is last-known-good"
    return res


def status(layout: Layout, opts: Options) -> dict[str, Any]:
    """Read-only view: revisions, live revision, last-known-good (and its state), fallback annotations."""
    res = _base_result(layout)
    res["action"] = "status"
    res["revisions"] = layout.revisions()
    res["revisions_with_manifest"] = layout.revisions_with_manifest()
    lkg, state = layout.last_known_good()
    res["last_known_good_revision"] = lkg
    res["last_known_good_state"] = state
    res["revision"] = None
    res["fallback"] = None
    if layout.live_manifest.exists():
        try:
            live = layout.read_pod(layout.live_manifest, "live manifest")
            res["revision"] = pod_revision(live, "live manifest")
            ann = (live.get("metadata") or {}).get("annotations") or {}
            if FALLBACK_FOR_REVISION in ann:
                res["fallback"] = {
                    "for_revision": ann.get(FALLBACK_FOR_REVISION),
                    "reason": ann.get(FALLBACK_REASON),
                    "message": ann.get(FALLBACK_MESSAGE),
                }
        except StaticPodError as exc:
            res["live_manifest_error"] = str(exc)
    res["reason"] = res["fallback"]["reason"] if res["fallback"] else ""
    res["message"] = f"live revision {res['revision']}, last-known-good {lkg} ({state})"
    return res


def prune(layout: Layout, opts: Options) -> dict[str, Any]:
    """Delete revision directories beyond ``revision_limit``, keeping the live and last-known-good ones.

    Under the installer lock. The live revision is read from the live manifest (a fallback manifest
    carries the fallen-back-to revision; its ``fallback-for-revision`` is kept too).
    """
    res = _base_result(layout)
    res["action"] = "prune"
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))):
        keep_extra: set[int] = set()
        cur = opts.revision
        if layout.live_manifest.exists():
            with contextlib.suppress(StaticPodError):
                live = layout.read_pod(layout.live_manifest, "live manifest")
                cur = pod_revision(live, "live manifest") if cur is None else cur
                ann = (live.get("metadata") or {}).get("annotations") or {}
                if str(ann.get(FALLBACK_FOR_REVISION, "")).isdigit():
                    keep_extra.add(int(ann[FALLBACK_FOR_REVISION]))
        lkg, _state = layout.last_known_good()
        revs = layout.revisions()
        try:
            doomed = revisions_to_prune(revs, opts.revision_limit, cur, lkg)
        except ValueError as exc:
            raise StaticPodError(str(exc), field="revision_limit", reason="InvalidInput") from exc
        doomed = [r for r in doomed if r not in keep_extra]
        for r in doomed:
            if not opts.check_mode:
                shutil.rmtree(layout.revision_dir(r))
            res["files_removed"].append(str(layout.revision_dir(r)))
        res["pruned_revisions"] = doomed
        res["kept_revisions"] = [r for r in revs if r not in doomed]
        res["revision"] = cur
        res["last_known_good_revision"] = lkg
        res["changed"] = bool(doomed)
    res["reason"] = ""
    res["message"] = f"pruned {len(doomed)} revision(s)"
    return res
