# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operations, each returning a JSON-able dict and raising only StaticPodError: the monitor,
fallback (with the StorageVersion gate), mark_good, status and prune.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    InstallerLock,
    Layout,
    _fsync_dir,
    write_manifest_atomic,
    yaml,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.probes import (
    HttpProber,
    observe,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    Observation,
    Readiness,
    annotate_fallback,
    assess,
    choose_fallback,
    final_readiness,
    pod_revision,
    retry_policy,
    revisions_to_prune,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_INTERVAL,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_CAP,
    DEFAULT_REVISION_LIMIT,
    DEFAULT_TIMEOUT,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    FALLBACK_REASONS,
    NEVER_STARTED_UP,
    NOT_READY,
    PREVIOUS_FAILURES,
    RETRY_AT,
    REVISION_LABEL,
    STORAGE_VERSION_SKEW,
    STORAGE_VERSIONS_FILE,
    UNEXPECTED_REVISION,
    StaticPodError,
)

# --- operations -----------------------------------------------------------------------------------


@dataclass
class Options:
    """Operation options (module parameters other than the layout); seconds everywhere."""

    revision: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    interval: float = DEFAULT_INTERVAL
    reason: str = ""
    message: str = ""
    force: bool = False
    revision_limit: int = DEFAULT_REVISION_LIMIT
    retry_previous_failures: int = 0
    retry_base: float = DEFAULT_RETRY_BASE
    retry_cap: float = DEFAULT_RETRY_CAP
    check_mode: bool = False
    #: ``None``: no StorageVersion check. Otherwise a callable returning the current encoding
    #: versions and this apiserver's decodable versions (see :mod:`._storage_version`).
    storage_versions: Any = None
    #: what to do when the StorageVersion API is not served or unreachable: proceed or refuse.
    storage_version_unavailable: str = "proceed"
    #: the monitor runs as the startup-monitor static pod (:mod:`.monitor_pod`): it waits until the
    #: live manifest is of its revision and removes its own manifest when done.
    in_static_pod: bool = False
    #: a :class:`.probes.MirrorPodReader` (the mirror pod through the API server), or None.
    mirror_pods: Any = None
    extra: dict = field(default_factory=dict)


def _base_result(layout: Layout) -> dict[str, Any]:
    return {
        "changed": False,
        "operand": layout.operand,
        "files_written": [],
        "files_removed": [],
    }


def resolve_revision(layout: Layout, opts: Options) -> int:
    """The revision being judged: ``opts.revision`` or the live manifest's ``revision`` label."""
    if opts.revision is not None:
        if opts.revision < 0:
            raise StaticPodError("revision: must be >= 0", field="revision", reason="InvalidInput")
        return opts.revision
    try:
        return layout.live_revision()
    except StaticPodError as exc:
        raise StaticPodError(
            f"revision: not given and the live manifest gives none ({exc})",
            field="revision",
            reason="InvalidInput",
        ) from exc


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


_FILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def _revision_pod(manifest: Any, revision: int) -> dict[str, Any]:
    """``manifest`` (a dict or YAML text) as a Pod labelled ``revision=<revision>``; StaticPodError
    naming ``manifest`` when it is not one."""
    pod = manifest
    if isinstance(manifest, str):
        try:
            pod = yaml.safe_load(manifest)
        except yaml.YAMLError as exc:
            raise StaticPodError(
                f"manifest: not YAML: {exc}", field="manifest", reason="InvalidInput"
            ) from exc
    if not isinstance(pod, dict) or pod.get("kind") != "Pod" or pod.get("apiVersion") != "v1":
        raise StaticPodError(
            "manifest: must be a Pod (apiVersion v1, kind Pod)", field="manifest", reason="InvalidInput"
        )
    meta = pod.get("metadata")
    if (
        not isinstance(meta, dict)
        or not meta.get("name")
        or not isinstance((pod.get("spec") or {}).get("containers"), list)
    ):
        raise StaticPodError(
            "manifest: needs metadata.name and spec.containers", field="manifest", reason="InvalidInput"
        )
    labels = dict(meta.get("labels") or {})
    if REVISION_LABEL in labels and str(labels[REVISION_LABEL]) != str(revision):
        raise StaticPodError(
            f"manifest: label {REVISION_LABEL}={labels[REVISION_LABEL]!r} is not revision {revision}",
            field="manifest",
            reason="InvalidInput",
        )
    labels[REVISION_LABEL] = str(revision)
    return {**pod, "metadata": {**meta, "labels": labels}}


def install(
    layout: Layout,
    opts: Options,
    manifest: Any,
    files: dict[str, str] | None = None,
    monitor: Callable[[str], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Install revision ``opts.revision`` as the seed's installer does, under the installer lock.

    Writes ``<resources_dir>/<operand>-pod-<rev>/`` (the revision manifest, labelled
    ``revision=<rev>``, and ``files``: name -> text, e.g. a revisioned config file) as a dot-named
    directory renamed into place, then the live manifest atomically (:func:`write_manifest_atomic`:
    a dot temp file, never a non-dot partial file the kubelet would read). A revision is
    immutable: installing it again with the same content changes nothing; with other content it is
    refused. While another installer (or a fallback) holds the lock, this waits up to
    ``lock_timeout`` and then fails without writing anything.

    ``monitor``: renders the startup-monitor static pod for the operand's namespace
    (:func:`.monitor_pod.monitor_pod`); when given, and the live manifest changes, the monitor's
    manifest (:attr:`Layout.monitor_manifest`) is written first, the same atomic way, then the
    operand's: the monitor waits until it sees the operand manifest of its revision (the
    enhancement's installer writes both; library-go's monitor waits for its revision).

    Returns the result dict (``action: install``, ``revision``, ``files_written``,
    ``lock_waited_seconds``). Raises StaticPodError naming ``revision``, ``manifest``, ``files``,
    ``lock_file`` or the directory it could not write.
    """
    rev = opts.revision
    if rev is None or rev < 1:
        raise StaticPodError(
            "revision: install needs a revision >= 1", field="revision", reason="InvalidInput"
        )
    pod = _revision_pod(manifest, rev)
    files = dict(files or {})
    manifest_name = layout.live_manifest.name
    for name, text in files.items():
        if not _FILE_NAME_RE.match(str(name)) or name == manifest_name or not isinstance(text, str):
            raise StaticPodError(
                f"files: {name!r} must be a plain file name (not {manifest_name}) with text content",
                field="files",
                reason="InvalidInput",
            )
    data = yaml.safe_dump(pod, sort_keys=False).encode()
    wanted = {manifest_name: data, **{n: t.encode() for n, t in files.items()}}
    monitor_data = None
    if monitor is not None:
        namespace = str(pod["metadata"].get("namespace") or "kube-system")
        monitor_data = yaml.safe_dump(monitor(namespace), sort_keys=False).encode()
    res = _base_result(layout)
    res.update(action="install", revision=rev)
    with InstallerLock(layout.lock_file, float(opts.extra.get("lock_timeout", DEFAULT_LOCK_TIMEOUT))) as lock:
        res["lock_waited_seconds"] = round(lock.waited, 3)
        target = layout.revision_dir(rev)
        if target.exists():
            have = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
            if have != wanted:
                raise StaticPodError(
                    f"revision: {target} exists with other content; a revision is immutable, install a new one",
                    field="revision",
                    reason="InvalidInput",
                    result=res,
                )
        else:
            res["changed"] = True
            res["files_written"] += [str(target / n) for n in sorted(wanted)]
            if not opts.check_mode:
                tmp = layout.resources_dir / f".{target.name}.{uuid.uuid4().hex[:12]}.tmp"
                try:
                    layout.resources_dir.mkdir(parents=True, exist_ok=True)
                    tmp.mkdir(mode=0o755)
                    for name, content in wanted.items():
                        (tmp / name).write_bytes(content)
                    os.replace(tmp, target)
                except OSError as exc:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise StaticPodError(
                        f"resources_dir: cannot write {target}: {exc}", field="resources_dir", result=res
                    ) from exc
        live = layout.live_manifest.read_bytes() if layout.live_manifest.exists() else None
        if live != data:
            res["changed"] = True
            if monitor_data is not None:
                if not opts.check_mode:
                    try:
                        write_manifest_atomic(layout.monitor_manifest, monitor_data)
                    except OSError as exc:
                        raise StaticPodError(
                            f"manifests_dir: cannot write {layout.monitor_manifest}: {exc}",
                            field="manifests_dir",
                            result=res,
                        ) from exc
                res["files_written"].append(str(layout.monitor_manifest))
            if not opts.check_mode:
                _write_live(layout, data, opts, res)
            res["files_written"].append(str(layout.live_manifest))
    return res


def _write_live(layout: Layout, data: bytes, opts: Options, res: dict[str, Any]) -> None:
    """Write the live manifest atomically (:func:`write_manifest_atomic`); StaticPodError naming
    ``manifests_dir`` (with ``res``) when it cannot be written. The caller holds the installer lock."""
    try:
        layout.manifests_dir.mkdir(parents=True, exist_ok=True)
        write_manifest_atomic(layout.live_manifest, data, before_rename=opts.extra.get("before_rename"))
    except OSError as exc:
        raise StaticPodError(
            f"manifests_dir: cannot write {layout.live_manifest}: {exc}", field="manifests_dir", result=res
        ) from exc


def _point_link(link: Path, target: Path) -> None:
    tmp = link.parent / f".{link.name}.{uuid.uuid4().hex[:8]}.tmp"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
