# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe I/O: the operand's ``/healthz`` and ``/readyz`` (names of failed checks and unfinished
post-start hooks), the etcd check, and one observation of a start-up.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib import error as urlerror
from urllib.parse import quote

from ansible.module_utils.urls import Request, open_url

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    Layout,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    Check,
    MirrorPod,
    Observation,
    _check_text,
    attempts_from_log_files,
    is_pod_log_dir,
    mirror_pod_of,
    parse_start_log,
    pod_revision,
    static_pod_name,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    StaticPodError,
)

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
            server verification. On a loopback URL (``localhost``, ``127.0.0.0/8``, ``::1``) the
            chain is verified against ``ca_cert`` but not the host name: a kubeadm serving
            certificate names the node's address and ``kubernetes``, not ``localhost``, and the
            connection does not leave the node.
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
                elif is_loopback_url(self.base_url):
                    ctx.check_hostname = False
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
            if self._ctx is not None:
                opened = Request().open(
                    "GET", self.base_url + path, timeout=t, use_proxy=False, context=self._ctx
                )
            else:
                opened = open_url(self.base_url + path, timeout=t, use_proxy=False, **self._tls)
            with opened as resp:
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
        if self.kind == "kube-apiserver" and out["etcd"].status in (401, 403):
            # anonymous probes (kubeadm: system:public-info-viewer allows /healthz, not /healthz/etcd):
            # the verbose /healthz lists the etcd check too
            from_body = etcd_from_healthz(out["healthz"])
            if from_body is not None:
                out["etcd"] = from_body
        out["readyz"] = self.get(readyz_path, tmo())
        return out


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is ``localhost``, in ``127.0.0.0/8`` or ``::1``."""
    m = re.match(r"^https?://(\[[^]]*\]|[^/:]+)", url or "")
    host = (m.group(1) if m else "").strip("[]").lower()
    return host in ("localhost", "::1") or bool(re.match(r"^127\.\d+\.\d+\.\d+$", host))


def etcd_from_healthz(healthz: Check) -> Check | None:
    """The kube-apiserver's etcd check as its verbose ``/healthz`` lists it (``[+]etcd ok`` or
    ``[-]etcd failed``), or None when the body does not list it."""
    for line in healthz.body.splitlines():
        line = line.strip()
        if line.startswith("[+]etcd "):
            return Check(True, True, 200, line)
        if line.startswith("[-]etcd "):
            return Check(False, True, healthz.status, line)
    return None


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


def kubelet_start_attempts(
    pod_logs_dir: Path, namespace: str, pod_name: str, container: str, since: float
) -> int:
    """Start attempts of ``container`` of static pod ``pod_name`` from the kubelet's log files.

    Looks in ``<pod_logs_dir>/<namespace>_<pod_name>_<uid>/<container>/`` (what a kubelet writes
    under ``/var/log/pods``) of the newest such pod directory modified at or after ``since`` (epoch
    seconds: when the live manifest was written; a new manifest gives the static pod a new UID,
    so older directories are the previous revision's). 0 when there is none yet.
    """
    best: tuple[float, str] | None = None
    try:
        entries = list(os.scandir(pod_logs_dir))
    except OSError:
        return 0
    for entry in entries:
        if not is_pod_log_dir(entry.name, namespace, pod_name):
            continue
        try:
            mtime = entry.stat().st_mtime
        except OSError:
            continue
        if mtime >= since and (best is None or mtime > best[0]):
            best = (mtime, entry.path)
    if best is None:
        return 0
    try:
        return attempts_from_log_files(os.listdir(os.path.join(best[1], container)))
    except OSError:
        return 0


def _manifest_of(layout: Layout, expected_revision: int) -> dict | None:
    for path in (layout.live_manifest, layout.revision_manifest(expected_revision)):
        with contextlib.suppress(StaticPodError):
            candidate = layout.read_pod(path, "manifest")
            if pod_revision(candidate, "manifest") == expected_revision:
                return candidate
    return None


def _kubelet_observation(layout: Layout, expected_revision: int) -> tuple[int, int | None]:
    """(start attempts, running revision) from the kubelet's log files of the live manifest's pod."""
    try:
        since = layout.live_manifest.stat().st_mtime
        live = layout.read_pod(layout.live_manifest, "manifest")
        live_revision = pod_revision(live, "manifest")
        meta = live["metadata"]
        container = str(live["spec"]["containers"][0]["name"])
    except (OSError, StaticPodError, KeyError, IndexError, TypeError):
        # no live manifest, or one the kubelet cannot run (not YAML, not a Pod): no start
        return 0, None
    if layout.pod_logs_dir is None:
        return 0, None
    pod_name = static_pod_name(str(meta.get("name", "")), layout.node_name)
    namespace = str(meta.get("namespace") or "default")
    attempts = kubelet_start_attempts(layout.pod_logs_dir, namespace, pod_name, container, since)
    if attempts == 0:
        return 0, None
    if live_revision != expected_revision:
        return 0, live_revision
    return attempts, live_revision


class MirrorPodReader:
    """Reads the operand's mirror pod through the API server, best effort (the enhancement's steps
    5-6: the monitor reads the mirror pod's revision and readiness from the localhost API server).

    ``client_factory`` returns a ``kubernetes.client.ApiClient`` (:func:`._kube.get_api_client`);
    it is called once, lazily. :meth:`read` never raises: a missing client configuration, an API
    server that does not answer (the usual case while a new kube-apiserver revision starts) or a
    missing pod gives None, and the monitor judges from the files and HTTP checks alone.
    ``request_timeout`` is seconds per request.
    """

    def __init__(self, client_factory: Callable[[], Any], request_timeout: float = 2.0) -> None:
        self._factory = client_factory
        self._client: Any = None
        self._broken = False
        self.request_timeout = request_timeout
        self.last_error = ""

    def read(self, namespace: str, name: str) -> MirrorPod | None:
        """The mirror pod ``namespace/name`` (name: ``<metadata.name>-<node name>``), or None."""
        from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, request

        if self._broken:
            return None
        try:
            if self._client is None:
                self._client = self._factory()
            obj = request(
                self._client,
                "GET",
                f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}",
                timeout=self.request_timeout,
            )
        except KubeError as exc:
            self.last_error = str(exc)
            if exc.reason == "invalid" and self._client is None:
                self._broken = True  # no usable configuration: do not try again every iteration
            return None
        except Exception as exc:  # best effort: any client failure means "not read"
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        return mirror_pod_of(obj)


def observe(
    layout: Layout,
    expected_revision: int,
    prober: HttpProber | None,
    now: float,
    deadline_in: float | None = None,
    mirror: MirrorPodReader | None = None,
) -> Observation:
    """One observation: start attempts, the HTTP checks and, with ``mirror``, the mirror pod.

    Start attempts come from the kubelet's per-container log files when ``layout.pod_logs_dir``
    is set (:func:`kubelet_start_attempts`), else from the termination log when one is given
    (:func:`parse_start_log`), else only from the mirror pod.
    A mirror pod of the expected revision that has started counts ``restartCount + 1`` attempts
    when that is more (the kubelet's own count), and makes the expected revision the running one.
    """
    if layout.pod_logs_dir is not None:
        attempts, running = _kubelet_observation(layout, expected_revision)
    elif layout.termination_log is not None:
        try:
            text = layout.termination_log.read_text(errors="replace")
        except OSError:
            text = ""
        attempts, running = parse_start_log(text, expected_revision)
    else:
        attempts, running = 0, None
    seen: MirrorPod | None = None
    if mirror is not None:
        with contextlib.suppress(StaticPodError, KeyError, TypeError):
            live = layout.read_pod(layout.live_manifest, "manifest")
            meta = live["metadata"]
            seen = mirror.read(
                str(meta.get("namespace") or "default"), static_pod_name(str(meta["name"]), layout.node_name)
            )
        if seen is not None and seen.revision == expected_revision and seen.started:
            attempts = max(attempts, seen.restart_count + 1)
            running = expected_revision if running is None else running
    checks: dict[str, Check] = {}
    if prober is not None and attempts > 0 and running == expected_revision:
        checks = prober.checks(deadline_in, _manifest_of(layout, expected_revision))
    return Observation(
        now, attempts, running, checks.get("healthz"), checks.get("readyz"), checks.get("etcd"), seen
    )
