# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Static-pod fallback to the last-known-good revision (private to noderemedy.core).

Behaviour source: the OpenShift enhancement "Fallback on failing revisions of static pods" and its
implementation in openshift/library-go ``pkg/operator/staticpod/startupmonitor`` (``fallback.go``,
``monitor.go``) with the kube-apiserver readiness checks of cluster-kube-apiserver-operator
``pkg/cmd/startupmonitorreadiness``; the parts library-go left as TODOs (NeverStartedUp,
CrashLooping from the termination log, pruner protecting the linked revision) are implemented here
as the enhancement describes them. StorageVersion safety follows KEP-2339 (see
:mod:`._storage_version`). Design: ``docs/static-pod-fallback.md``.

Split:

* pure decisions, no I/O: :func:`assess`, :func:`final_readiness`, :func:`retry_policy`,
  :func:`choose_fallback`, :func:`revisions_to_prune`, :func:`annotate_fallback`,
  :func:`parse_start_log`, :func:`failed_checks`;
* I/O at the edges: :class:`Layout` (filesystem), :class:`InstallerLock` (flock),
  :class:`HttpProber` (``/healthz``, ``/readyz``, etcd check), :func:`write_manifest_atomic`;
* the operations: :func:`run_monitor`, :func:`fallback`, :func:`mark_good`, :func:`status`,
  :func:`prune`. Every operation returns a JSON-able ``dict``; every error is a
  :class:`StaticPodError`.

Layout (all paths are parameters; defaults as on an OpenShift node)::

    /etc/kubernetes/manifests/<operand>-pod.yaml                        live manifest (kubelet)
    /etc/kubernetes/static-pod-resources/<operand>-pod-<REV>/<operand>-pod.yaml   revision REV
    /etc/kubernetes/static-pod-resources/<operand>-last-known-good      symlink to a revision manifest
    /var/lock/<operand>-installer.lock                                  installer lock (flock)
    /var/log/<operand>/termination.log                                  start-attempt log (see below)

Start attempts are observed from the termination log (the enhancement's
``/var/log/kube-apiserver/termination.log``), one JSON object per line, written by whatever starts
the operand (the kubelet's wrapper on a node, the test harness in ``tests/integration``)::

    {"event": "start", "time": 1763712000.5, "revision": 3, "pid": 4242}
    {"event": "exit", "time": 1763712001.2, "revision": 3, "exitCode": 1}

``time`` is seconds since the epoch; ``revision`` may be absent (then the record counts for the
revision on disk). Lines that are not such objects are ignored (a torn last line included).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import ssl
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib import error as urlerror

from ansible.module_utils.urls import open_url

try:
    import yaml
except ImportError:  # the module reports missing_required_lib("PyYAML")
    yaml = None
    HAS_YAML = False
    YAML_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_YAML = True
    YAML_IMPORT_ERROR = None

# --- vocabulary (OpenShift startup monitor) -------------------------------------------------------

ANNOTATION_PREFIX = "startup-monitor.static-pods.openshift.io/"
FALLBACK_FOR_REVISION = ANNOTATION_PREFIX + "fallback-for-revision"
FALLBACK_REASON = ANNOTATION_PREFIX + "fallback-reason"
FALLBACK_MESSAGE = ANNOTATION_PREFIX + "fallback-message"
#: The pod label holding the revision (as on OpenShift's revisioned static pods).
REVISION_LABEL = "revision"

NEVER_STARTED_UP = "NeverStartedUp"
CRASH_LOOPING = "CrashLooping"
UNHEALTHY = "Unhealthy"
NOT_READY = "NotReady"
ETCD_UNHEALTHY = "EtcdUnhealthy"
UNEXPECTED_REVISION = "UnexpectedRevision"
STORAGE_VERSION_SKEW = "StorageVersionSkew"

#: Reasons the enhancement retries after a backoff (external causes may heal).
RETRYABLE_REASONS = frozenset({NOT_READY, ETCD_UNHEALTHY, UNHEALTHY})
#: Reasons that lead to a fallback when the monitor times out.
FALLBACK_REASONS = frozenset({NEVER_STARTED_UP, CRASH_LOOPING, UNHEALTHY, NOT_READY, ETCD_UNHEALTHY})

#: File in a revision directory recording what that revision's apiserver could decode (KEP-2339).
STORAGE_VERSIONS_FILE = "storage-versions.json"

DEFAULT_TIMEOUT = 300.0
DEFAULT_INTERVAL = 2.0
DEFAULT_RETRY_BASE = 600.0
DEFAULT_RETRY_CAP = 3600.0
DEFAULT_LOCK_TIMEOUT = 30.0
DEFAULT_REVISION_LIMIT = 5

#: Shared argspec of the layout options; documented 1:1 by doc fragment ``noderemedy.core.static_pod``.
LAYOUT_ARGSPEC: dict[str, dict[str, Any]] = {
    "operand": {"type": "str", "required": True},
    "manifests_dir": {"type": "path", "default": "/etc/kubernetes/manifests"},
    "resources_dir": {"type": "path", "default": "/etc/kubernetes/static-pod-resources"},
    "lock_file": {"type": "path"},
    "lock_timeout": {"type": "float", "default": DEFAULT_LOCK_TIMEOUT},
    "termination_log": {"type": "path"},
}

_OPERAND_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class StaticPodError(Exception):
    """Any failure of a static-pod operation (bad input, layout, lock, write, StorageVersion).

    Attributes:
        field: the parameter or path at fault ('' if none), for clear module errors.
        reason: a machine-readable reason (e.g. ``LockBusy``, ``InvalidInput``, ``StorageVersionSkew``).
        result: a partial result dict for the caller to return (what was observed before the error).
    """

    def __init__(self, message: str, *, field: str = "", reason: str = "Error", result: dict | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason
        self.result = result or {}


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
class Observation:
    """What one probe iteration saw, at ``time`` (seconds, monotonic clock of the monitor).

    Attributes:
        start_attempts: start records of the expected revision in the termination log.
        running_revision: revision of the latest start record (None if the log has none).
        healthz / readyz / etcd: the HTTP checks (None if not run this iteration).
    """

    time: float
    start_attempts: int
    running_revision: int | None = None
    healthz: Check | None = None
    readyz: Check | None = None
    etcd: Check | None = None


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
       start attempts);
    5. ``/readyz`` red → NotReady, listing the unfinished post-start hooks;
    6. otherwise ready.
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
    termination_log: Path

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
        log = Path(params.get("termination_log") or f"/var/log/{operand}/termination.log")
        for name, p in (("manifests_dir", manifests), ("resources_dir", resources)):
            if not p.is_absolute():
                raise StaticPodError(
                    f"{name}: must be an absolute path, got {p}", field=name, reason="InvalidInput"
                )
        return cls(operand, manifests, resources, lock, log)

    @property
    def live_manifest(self) -> Path:
        """``<manifests_dir>/<operand>-pod.yaml``."""
        return self.manifests_dir / f"{self.operand}-pod.yaml"

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


# --- I/O: probes ----------------------------------------------------------------------------------

#: Shared argspec of the probe options; documented 1:1 by doc fragment ``noderemedy.core.static_pod.probe``.
PROBE_ARGSPEC: dict[str, dict[str, Any]] = {
    "probe_url": {"type": "str"},
    "probe_kind": {"type": "str", "choices": ["kube-apiserver", "etcd"]},
    "probe_ca_cert": {"type": "path"},
    "probe_client_cert": {"type": "path"},
    "probe_client_key": {"type": "path", "no_log": False},
    "probe_validate_certs": {"type": "bool", "default": True},
    "probe_request_timeout": {"type": "float", "default": 2.0},
}

#: Paths of the three checks per probe kind: (healthz, readyz, etcd check).
PROBE_PATHS = {
    "kube-apiserver": ("/healthz?verbose", "/readyz?verbose", "/healthz/etcd"),
    "etcd": ("/livez", "/readyz", "/health"),
}


class HttpProber:
    """Runs the health checks of one operand over HTTP(S) on 127.0.0.1/localhost.

    Args:
        base_url: e.g. ``https://127.0.0.1:6443`` (kube-apiserver) or ``http://127.0.0.1:2379`` (etcd).
        kind: ``kube-apiserver`` (``/healthz?verbose``, ``/readyz?verbose``, ``/healthz/etcd`` as in
            cluster-kube-apiserver-operator's startup-monitor readiness) or ``etcd`` (``/livez``,
            ``/readyz``, ``/health``).
        ca_cert / client_cert / client_key: PEM files for TLS; ``validate_certs`` False skips
            server verification.
        request_timeout: seconds per request.
    """

    def __init__(
        self,
        base_url: str,
        kind: str = "kube-apiserver",
        ca_cert: str | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
        validate_certs: bool = True,
        request_timeout: float = 2.0,
    ) -> None:
        if kind not in PROBE_PATHS:
            raise StaticPodError(f"probe_kind: must be one of {sorted(PROBE_PATHS)}", field="probe_kind")
        if not re.match(r"^https?://", base_url or ""):
            raise StaticPodError(
                f"probe_url: must start with http:// or https://, got {base_url!r}", field="probe_url"
            )
        self.base_url = base_url.rstrip("/")
        self.kind = kind
        self.request_timeout = request_timeout
        self._tls = {
            "validate_certs": validate_certs,
            "ca_path": ca_cert if validate_certs else None,
            "client_cert": client_cert,
            "client_key": client_key,
        }
        self._ctx: ssl.SSLContext | None = None
        if self.base_url.startswith("https://"):
            try:
                ctx = ssl.create_default_context(cafile=ca_cert if validate_certs else None)
                if not validate_certs:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
                if client_cert:
                    ctx.load_cert_chain(client_cert, client_key)
            except (OSError, ssl.SSLError) as exc:
                raise StaticPodError(
                    f"probe_ca_cert / probe_client_cert: {exc}", field="probe_client_cert"
                ) from exc
            self._ctx = ctx

    def get(self, path: str, timeout: float | None = None) -> Check:
        """GET ``path``; a Check (never raises for transport errors)."""
        t = self.request_timeout if timeout is None else max(0.1, timeout)
        try:
            with open_url(self.base_url + path, timeout=t, use_proxy=False, **self._tls) as resp:
                body = resp.read(4096).decode(errors="replace")
                ok = resp.getcode() == 200
                if self.kind == "etcd" and path == "/health":
                    ok = ok and '"health":"true"' in body.replace(" ", "")
                return Check(ok, True, resp.getcode(), body)
        except urlerror.HTTPError as exc:
            body = exc.read(4096).decode(errors="replace") if exc.fp else ""
            return Check(False, True, exc.code, body)
        except (urlerror.URLError, OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", exc)
            return Check(False, False, 0, "", f"{type(reason).__name__}: {reason}")

    def checks(self, deadline_in: float | None = None, pod: dict | None = None) -> dict[str, Check]:
        """Run the checks: ``{"healthz": Check, "readyz"?: Check, "etcd"?: Check}``.

        When healthz gets no answer, readyz is skipped (nothing is serving) and, for a
        kube-apiserver whose manifest ``pod`` is given, the etcd check is run directly against the
        ``--etcd-servers`` of that manifest (:func:`etcd_direct_check`): a kube-apiserver with an
        unreachable etcd does not serve at all before it exits ("context deadline exceeded"), so
        its own ``/healthz/etcd`` can never say so. ``deadline_in`` bounds each request's timeout
        (seconds left before the monitor's deadline).
        """
        healthz_path, readyz_path, etcd_path = PROBE_PATHS[self.kind]

        def tmo() -> float:
            return (
                self.request_timeout
                if deadline_in is None
                else min(self.request_timeout, max(0.1, deadline_in))
            )

        out = {"healthz": self.get(healthz_path, tmo())}
        if not out["healthz"].answered:
            if self.kind == "kube-apiserver" and pod is not None:
                direct = etcd_direct_check(pod, tmo())
                if direct is not None:
                    out["etcd"] = direct
            return out
        out["etcd"] = self.get(etcd_path, tmo())
        out["readyz"] = self.get(readyz_path, tmo())
        return out


def etcd_flags(pod: dict) -> dict[str, str]:
    """The ``--etcd-*`` flags of a kube-apiserver manifest's first container (``command`` + ``args``).

    Returns e.g. ``{"etcd-servers": "https://127.0.0.1:2379", "etcd-cafile": ...}`` (``--flag=value``
    and ``--flag value`` forms).
    """
    try:
        container = pod["spec"]["containers"][0]
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    except (KeyError, IndexError, TypeError, AttributeError):
        return {}
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--etcd-"):
            continue
        name, eq, value = arg[2:].partition("=")
        if not eq and i + 1 < len(argv):
            value = argv[i + 1]
        out[name] = value
    return out


def etcd_direct_check(pod: dict, timeout: float) -> Check | None:
    """The etcd check of a kube-apiserver that does not serve: ``GET <server>/health`` on its etcd servers.

    Uses the manifest's ``--etcd-servers`` and ``--etcd-cafile/--etcd-certfile/--etcd-keyfile``; ok
    when one server reports ``"health":"true"``. ``answered`` is True when the check reached a
    verdict (a refused connection is a red verdict); None when the manifest names no etcd server.
    """
    flags = etcd_flags(pod)
    servers = [s for s in flags.get("etcd-servers", "").split(",") if s]
    if not servers:
        return None
    details = []
    for server in servers:
        try:
            prober = HttpProber(
                server,
                "etcd",
                flags.get("etcd-cafile") or None,
                flags.get("etcd-certfile") or None,
                flags.get("etcd-keyfile") or None,
                request_timeout=timeout,
            )
        except StaticPodError as exc:
            details.append(f"{server}: {exc}")
            continue
        check = prober.get("/health", timeout)
        if check.ok:
            return Check(True, True, check.status, check.body)
        details.append(f"{server}: {_check_text(check)}")
    return Check(
        False, True, 0, "", "etcd (from the manifest's --etcd-servers) unhealthy: " + "; ".join(details)
    )


def observe(
    layout: Layout,
    expected_revision: int,
    prober: HttpProber | None,
    now: float,
    deadline_in: float | None = None,
) -> Observation:
    """One observation: start attempts from the termination log plus the HTTP checks."""
    try:
        text = layout.termination_log.read_text(errors="replace")
    except OSError:
        text = ""
    attempts, running = parse_start_log(text, expected_revision)
    checks: dict[str, Check] = {}
    if prober is not None and attempts > 0 and running == expected_revision:
        pod = None
        for path in (layout.live_manifest, layout.revision_manifest(expected_revision)):
            with contextlib.suppress(StaticPodError):
                candidate = layout.read_pod(path, "manifest")
                if pod_revision(candidate, "manifest") == expected_revision:
                    pod = candidate
                    break
        checks = prober.checks(deadline_in, pod)
    return Observation(
        now, attempts, running, checks.get("healthz"), checks.get("readyz"), checks.get("etcd")
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
    return {
        "checked": True,
        "available": True,
        "record": str(record_path),
        "skew": skew,
        "unknown_to_revision": unknown_to_record(current, record),
        "message": "revision can decode every stored encoding version"
        if not skew
        else "; ".join(
            f"{s['resource']}: stored as {s['encodingVersion']}, decodable {s['decodableVersions']}"
            for s in skew
        ),
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
        data = yaml.safe_dump(pod, sort_keys=False).encode()
        res.update(action="fallback", message=message, changed=True)
        if not opts.check_mode:
            for stale in layout.manifests_dir.glob(f".{layout.live_manifest.name}.*.tmp"):
                # left by a writer that died between write and rename; we hold the lock, nobody else writes
                with contextlib.suppress(OSError):
                    stale.unlink()
                    res["files_removed"].append(str(stale))
            try:
                write_manifest_atomic(
                    layout.live_manifest, data, before_rename=opts.extra.get("before_rename")
                )
            except OSError as exc:
                raise StaticPodError(
                    f"manifests_dir: cannot write {layout.live_manifest}: {exc}",
                    field="manifests_dir",
                    result=res,
                ) from exc
            res["written_at"] = time.time()
        res["files_written"].append(str(layout.live_manifest))
    res["retry"] = retry_policy(reason, opts.retry_previous_failures, opts.retry_base, opts.retry_cap)
    return res


def _point_link(link: Path, target: Path) -> None:
    tmp = link.parent / f".{link.name}.{uuid.uuid4().hex[:8]}.tmp"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def mark_good(layout: Layout, opts: Options, current: int | None = None) -> dict[str, Any]:
    """Point the last-known-good link at the current revision's manifest and record its decodable versions.

    The link is replaced atomically (temp link + rename) under the installer lock; with the
    StorageVersion check on, ``storage-versions.json`` is written into the revision directory
    (KEP-2339: what this apiserver reports it can decode). Idempotent. StaticPodError if the
    revision has no manifest or the lock is busy.
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
        res["action"] = "mark_good"
        if not (state == "ok" and lkg == cur and os.readlink(layout.lkg_link) == str(manifest)):
            res["changed"] = True
            if not opts.check_mode:
                _point_link(layout.lkg_link, manifest)
            res["files_written"].append(str(layout.lkg_link))
        res["last_known_good_revision"] = cur
        if opts.storage_versions is not None:
            from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
                StorageVersionError,
                StorageVersionUnavailable,
                record_bytes,
            )

            try:
                decodable = opts.storage_versions.decodable()
            except StorageVersionUnavailable as exc:
                res["storage_version"] = {"recorded": False, "available": False, "message": str(exc)}
            except StorageVersionError as exc:
                raise StaticPodError(str(exc), field=exc.field, reason=exc.reason, result=res) from exc
            else:
                path = layout.revision_dir(cur) / STORAGE_VERSIONS_FILE
                data = record_bytes(cur, decodable)
                old = path.read_bytes() if path.exists() else b""
                same = json.loads(old or b"{}").get("resources") == json.loads(data)["resources"]
                if not same:
                    res["changed"] = True
                    if not opts.check_mode:
                        write_manifest_atomic(path, data)
                    res["files_written"].append(str(path))
                res["storage_version"] = {
                    "recorded": True,
                    "available": True,
                    "record": str(path),
                    "apiserver_id": decodable["apiServerID"],
                    "resources": len(decodable["resources"]),
                }
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

    Result keys besides the operation's: ``ready``, ``reason``, ``message``, ``observations``,
    ``elapsed_seconds``, ``decision_seconds`` (from the deadline to the write), ``retry``.
    """
    expected = resolve_revision(layout, opts)
    if opts.timeout <= 0 or opts.interval <= 0:
        raise StaticPodError(
            "timeout / interval: must be > 0 seconds", field="timeout", reason="InvalidInput"
        )
    obs_fn = observe_fn or (lambda now, left: observe(layout, expected, prober, now, left))
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
            res["retry"] = retry_policy(
                verdict.reason, opts.retry_previous_failures, opts.retry_base, opts.retry_cap
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


# --- module entry -----------------------------------------------------------------------------------

#: Options of ``noderemedy.core.static_pod_fallback`` beyond the shared groups (documented in the module).
STATES = ("monitor", "fallback", "mark_good", "status", "prune")

#: Shared argspec of the StorageVersion options; documented 1:1 by doc fragment
#: ``noderemedy.core.static_pod.storage_version``.
STORAGE_VERSION_ARGSPEC: dict[str, dict[str, Any]] = {
    "storage_version_check": {"type": "str", "choices": ["auto", "always", "never"], "default": "auto"},
    "apiserver_id": {"type": "str"},
    "storage_version_unavailable": {"type": "str", "choices": ["proceed", "refuse"], "default": "proceed"},
}


def default_probe_url(kind: str) -> str:
    """Default probe base URL: the kube-apiserver's ``https://localhost:6443`` or etcd's ``https://localhost:2379``."""
    return "https://localhost:2379" if kind == "etcd" else "https://localhost:6443"


def execute(params: dict[str, Any], check_mode: bool = False, storage_versions: Any = None) -> dict[str, Any]:
    """Run ``params["state"]`` with module-style ``params``; the module's whole job.

    ``storage_versions``: a :class:`._storage_version.StorageVersionSource`-like object, or None to
    build one from the kube auth options when the StorageVersion check is on (``always``, or
    ``auto`` for operand ``kube-apiserver``). Returns the result dict; raises StaticPodError.
    """
    layout = Layout.from_params(params)
    state = params.get("state") or "status"
    if state not in STATES:
        raise StaticPodError(
            f"state: must be one of {', '.join(STATES)}", field="state", reason="InvalidInput"
        )
    for name in ("timeout", "interval", "lock_timeout"):
        if params.get(name) is not None and float(params[name]) <= 0:
            raise StaticPodError(f"{name}: must be > 0 seconds", field=name, reason="InvalidInput")
    svc = params.get("storage_version_check") or "auto"
    sv_on = svc == "always" or (svc == "auto" and layout.operand == "kube-apiserver")
    if sv_on and storage_versions is None and state in ("monitor", "fallback", "mark_good"):
        from ansible_collections.noderemedy.core.plugins.module_utils._kube import get_api_client
        from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
            StorageVersionSource,
        )

        storage_versions = StorageVersionSource(
            lambda: get_api_client(params), params.get("apiserver_id"), strict=svc == "always"
        )
    opts = Options(
        revision=params.get("revision"),
        timeout=float(params.get("timeout") or DEFAULT_TIMEOUT),
        interval=float(params.get("interval") or DEFAULT_INTERVAL),
        reason=params.get("reason") or "",
        message=params.get("fallback_message") or "",
        force=bool(params.get("force")),
        revision_limit=int(params.get("revision_limit") or DEFAULT_REVISION_LIMIT),
        retry_previous_failures=int(params.get("retry_previous_failures") or 0),
        retry_base=float(params.get("retry_base") or DEFAULT_RETRY_BASE),
        retry_cap=float(params.get("retry_cap") or DEFAULT_RETRY_CAP),
        check_mode=check_mode,
        storage_versions=storage_versions if sv_on else None,
        storage_version_unavailable=params.get("storage_version_unavailable") or "proceed",
        extra={"lock_timeout": float(params.get("lock_timeout") or DEFAULT_LOCK_TIMEOUT)},
    )
    try:
        retry_policy("", opts.retry_previous_failures, opts.retry_base, opts.retry_cap)
    except ValueError as exc:
        raise StaticPodError(str(exc), field="retry_base", reason="InvalidInput") from exc
    if opts.reason and opts.reason not in FALLBACK_REASONS:
        raise StaticPodError(
            f"reason: must be one of {', '.join(sorted(FALLBACK_REASONS))}",
            field="reason",
            reason="InvalidInput",
        )
    if state == "status":
        res = status(layout, opts)
    elif state == "prune":
        res = prune(layout, opts)
    elif state == "mark_good":
        res = mark_good(layout, opts)
    elif state == "fallback":
        res = fallback(layout, opts)
    else:
        kind = params.get("probe_kind") or ("etcd" if layout.operand == "etcd" else "kube-apiserver")
        prober = HttpProber(
            params.get("probe_url") or default_probe_url(kind),
            kind,
            params.get("probe_ca_cert"),
            params.get("probe_client_cert"),
            params.get("probe_client_key"),
            params.get("probe_validate_certs", True) is not False,
            float(params.get("probe_request_timeout") or 2.0),
        )
        res = run_monitor(layout, opts, prober)
    res["state"] = state
    res.setdefault("reason", "")
    res.setdefault("message", "")
    return res
