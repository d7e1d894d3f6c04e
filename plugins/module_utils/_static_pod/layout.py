# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filesystem I/O: the revision layout, the installer lock (flock) and atomic manifest writes
(a dot-prefixed temp file renamed into place: the kubelet reads every non-dot file).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

try:
    import yaml
except ImportError:  # the module reports missing_required_lib("PyYAML")
    yaml = None
    HAS_YAML = False
    YAML_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_YAML = True
    YAML_IMPORT_ERROR = None

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    pod_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    _OPERAND_RE,
    DEFAULT_LOCK_TIMEOUT,
    StaticPodError,
)

# --- I/O: layout, lock, atomic writes -------------------------------------------------------------


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest_atomic(
    path: Path, data: bytes, mode: int = 0o644, before_rename: Callable[[], None] | None = None
):
    """Write ``data`` to ``path`` atomically: dot-prefixed temp file in the same directory, fsync, rename.

    kubelet reads every non-dot file of the manifests directory, so the temp file is
    ``.<name>.<random>.tmp`` and no non-dot partial file ever exists; on any error the temp file is
    removed. ``before_rename`` is a test hook called between the write and the rename. Model:
    community.crypto ``_io.write_file`` + ``atomic_move``. Raises OSError.
    """
    path = Path(path)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if before_rename is not None:
            before_rename()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


@dataclass
class Layout:
    """The on-disk layout of one operand (see the module docstring). Paths are ``Path``s.

    Build it with :meth:`from_params`; ``StaticPodError`` names the bad field.
    """

    operand: str
    manifests_dir: Path
    resources_dir: Path
    lock_file: Path
    termination_log: Path | None
    pod_logs_dir: Path | None = None
    node_name: str = ""

    @classmethod
    def from_params(cls, params: dict) -> Layout:
        """Layout from module parameters (keys of :data:`LAYOUT_ARGSPEC`); defaults per operand."""
        operand = params.get("operand") or ""
        if not _OPERAND_RE.match(operand):
            raise StaticPodError(
                f"operand: must be a DNS label like 'kube-apiserver' or 'etcd', got {operand!r}",
                field="operand",
                reason="InvalidInput",
            )
        manifests = Path(params.get("manifests_dir") or "/etc/kubernetes/manifests")
        resources = Path(params.get("resources_dir") or "/etc/kubernetes/static-pod-resources")
        lock = Path(params.get("lock_file") or f"/var/lock/{operand}-installer.lock")
        log = Path(params["termination_log"]) if params.get("termination_log") else None
        for name, p in (("manifests_dir", manifests), ("resources_dir", resources)):
            if not p.is_absolute():
                raise StaticPodError(
                    f"{name}: must be an absolute path, got {p}", field=name, reason="InvalidInput"
                )
        pod_logs = params.get("pod_logs_dir")
        node_name = params.get("node_name") or ""
        if pod_logs and not Path(pod_logs).is_absolute():
            raise StaticPodError(
                f"pod_logs_dir: must be an absolute path, got {pod_logs}",
                field="pod_logs_dir",
                reason="InvalidInput",
            )
        return cls(operand, manifests, resources, lock, log, Path(pod_logs) if pod_logs else None, node_name)

    @property
    def live_manifest(self) -> Path:
        """``<manifests_dir>/<operand>-pod.yaml``."""
        return self.manifests_dir / f"{self.operand}-pod.yaml"

    @property
    def monitor_manifest(self) -> Path:
        """``<manifests_dir>/<operand>-startup-monitor-pod.yaml``: the startup monitor's own static pod."""
        return self.manifests_dir / f"{self.operand}-startup-monitor-pod.yaml"

    @property
    def lkg_link(self) -> Path:
        """``<resources_dir>/<operand>-last-known-good``."""
        return self.resources_dir / f"{self.operand}-last-known-good"

    def revision_dir(self, revision: int) -> Path:
        """``<resources_dir>/<operand>-pod-<revision>``."""
        return self.resources_dir / f"{self.operand}-pod-{revision}"

    def revision_manifest(self, revision: int) -> Path:
        """``<resources_dir>/<operand>-pod-<revision>/<operand>-pod.yaml``."""
        return self.revision_dir(revision) / f"{self.operand}-pod.yaml"

    def revisions(self) -> list[int]:
        """Revision numbers of the ``<operand>-pod-<N>`` directories, ascending (misnamed ones skipped)."""
        prefix = f"{self.operand}-pod-"
        out = []
        try:
            entries = list(os.scandir(self.resources_dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
                suffix = entry.name[len(prefix) :]
                if suffix.isdigit():
                    out.append(int(suffix))
        return sorted(out)

    def revisions_with_manifest(self) -> list[int]:
        """Revisions whose directory holds ``<operand>-pod.yaml`` (a regular file)."""
        return [r for r in self.revisions() if self.revision_manifest(r).is_file()]

    def last_known_good(self) -> tuple[int | None, str]:
        """``(revision, state)`` of the last-known-good link.

        ``state`` is ``"ok"``, ``"missing"`` (no link), ``"dangling"`` (its target does not
        exist), or ``"invalid"`` (not a link, or not into a revision of this operand). The link may
        point at the revision's manifest (as library-go creates it) or at its directory.
        """
        link = self.lkg_link
        if not link.is_symlink():
            return (None, "invalid") if link.exists() else (None, "missing")
        target = Path(os.readlink(link))
        if not target.is_absolute():
            target = link.parent / target
        m = None
        for part in reversed(target.parts):
            m = re.fullmatch(rf"{re.escape(self.operand)}-pod-(\d+)", part)
            if m:
                break
        if m is None:
            return None, "invalid"
        rev = int(m.group(1))
        if not self.revision_manifest(rev).is_file():
            return rev, "dangling"
        return rev, "ok"

    def read_pod(self, path: Path, where: str) -> dict:
        """Parse the Pod manifest at ``path``; StaticPodError naming ``where`` if missing or invalid."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise StaticPodError(
                f"{where}: cannot read {path}: {exc.strerror}", field=where, reason="NotFound"
            ) from exc
        try:
            pod = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise StaticPodError(
                f"{where}: {path} is not valid YAML: {exc}", field=where, reason="InvalidManifest"
            ) from exc
        if not isinstance(pod, dict) or pod.get("kind") != "Pod":
            raise StaticPodError(
                f"{where}: {path} is not a Pod manifest", field=where, reason="InvalidManifest"
            )
        return pod

    def live_revision(self) -> int:
        """Revision label of the live manifest; StaticPodError if absent or invalid."""
        return pod_revision(self.read_pod(self.live_manifest, "live manifest"), "live manifest")


class InstallerLock:
    """The installer lock: an exclusive, non-blocking ``flock`` on ``path``, polled until ``timeout``.

    Source: the enhancement's "Coordination of Installer and Startup-Monitor"
    (``/var/lock/<operand>-installer.lock``). Use as a context manager; entering raises
    StaticPodError(reason ``LockBusy``) after ``timeout`` seconds if another process holds it.
    The file is created if missing (mode 0644) and never deleted (deleting a flock file races).
    """

    def __init__(self, path: Path, timeout: float = DEFAULT_LOCK_TIMEOUT, poll: float = 0.1) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.poll = poll
        self._fd: int | None = None
        self.waited = 0.0

    def __enter__(self) -> InstallerLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StaticPodError(
                f"lock_file: cannot open {self.path}: {exc.strerror}", field="lock_file", reason="LockError"
            ) from exc
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise StaticPodError(f"lock_file: flock {self.path}: {exc}", field="lock_file") from exc
                if time.monotonic() - start >= self.timeout:
                    os.close(fd)
                    raise StaticPodError(
                        f"installer lock {self.path} is held by another process (waited {self.timeout:g} s); "
                        "nothing was written",
                        field="lock_file",
                        reason="LockBusy",
                    ) from exc
                time.sleep(self.poll)
        self.waited = time.monotonic() - start
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
