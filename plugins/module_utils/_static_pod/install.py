# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Installing a revision: its manifest under the revisions directory, then the live manifest
(under the installer lock)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    InstallerLock,
    Layout,
    write_manifest_atomic,
    yaml,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.options import (
    Options,
    _base_result,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_LOCK_TIMEOUT,
    REVISION_LABEL,
    StaticPodError,
)

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
