# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the monitor learns from the node's kubelet, with no option set: the node name as the kubelet
has it, where it keeps the pods' logs, and which sources of start attempts can work.

A stock kubeadm node runs one kubelet, started by systemd with ``--config=/var/lib/kubelet/config.yaml``
(``staticPodPath: /etc/kubernetes/manifests``) and, when the node's name is not its host name,
``--hostname-override`` (kubeadm's ``KUBELET_KUBEADM_ARGS``). The kubelet names a node (and the
static pods it runs, ``<pod>-<node>``) after ``--hostname-override``, else the host name in lower
case (kubelet ``nodeutil.GetHostname``), and writes container logs under ``podLogsDir`` (default
``/var/log/pods``; KubeletConfiguration v1beta1).

The kubelet that matters is the one whose static pod path is our ``manifests_dir`` (the same
directory, compared by device and inode, so a bind mount of it matches too): a machine may run
several kubelets, and only that one runs the operand.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import yaml
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    StaticPodError,
)

#: The kubelet's default ``podLogsDir`` (KubeletConfiguration v1beta1).
DEFAULT_POD_LOGS_DIR = "/var/log/pods"
#: kubeadm's cluster CA, which signs the kube-apiserver's serving certificate.
KUBEADM_CA = "/etc/kubernetes/pki/ca.crt"
#: Reason of the refusal when no source of start attempts can work.
NO_START_ATTEMPT_SOURCE = "NoStartAttemptSource"


@dataclass(frozen=True)
class Kubelet:
    """One running kubelet as read from ``/proc``.

    Attributes:
        pid: its process id.
        hostname_override: its ``--hostname-override`` ('' when not given).
        static_pod_path: ``--pod-manifest-path`` or the config file's ``staticPodPath`` ('' if none),
            as the kubelet names it.
        pod_logs_dir: the config file's ``podLogsDir``, else :data:`DEFAULT_POD_LOGS_DIR`.
    """

    pid: int
    hostname_override: str = ""
    static_pod_path: str = ""
    pod_logs_dir: str = DEFAULT_POD_LOGS_DIR


def parse_kubelet_argv(argv: list[str]) -> dict[str, str]:
    """The kubelet flags of ``argv`` (``--flag=value`` and ``--flag value``) as ``{flag: value}``;
    only the flags the monitor uses: ``hostname-override``, ``config``, ``pod-manifest-path``."""
    wanted = ("hostname-override", "config", "pod-manifest-path")
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        if name not in wanted:
            continue
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        out[name] = value
    return out


def _is_kubelet(argv: list[str]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) == "kubelet"


def read_kubelet(pid: int, argv: list[str], proc: Path) -> Kubelet:
    """A :class:`Kubelet` from its command line and config file (read through ``<proc>/<pid>/root``,
    the kubelet's own view of the file system; a relative path is relative to its working
    directory). An unreadable or invalid config file leaves the defaults."""
    flags = parse_kubelet_argv(argv)
    config: dict[str, Any] = {}
    if flags.get("config"):
        path = flags["config"]
        base = proc / str(pid) / "root"
        full = base / path.lstrip("/") if path.startswith("/") else proc / str(pid) / "cwd" / path
        try:
            loaded = yaml.safe_load(full.read_text()) if yaml is not None else None
        except (OSError, ValueError, AttributeError):
            loaded = None
        except Exception:  # yaml.YAMLError: not the kubelet's config; ignore it
            loaded = None
        if isinstance(loaded, dict):
            config = loaded
    return Kubelet(
        pid,
        flags.get("hostname-override", "").strip().lower(),
        flags.get("pod-manifest-path") or str(config.get("staticPodPath") or ""),
        str(config.get("podLogsDir") or DEFAULT_POD_LOGS_DIR),
    )


def _same_dir(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def find_kubelet(manifests_dir: Path, proc: Path = Path("/proc")) -> Kubelet | None:
    """The running kubelet whose static pod path is ``manifests_dir`` (same device and inode, seen
    through the kubelet's root), or None when there is none (or ``/proc`` cannot be read)."""
    try:
        pids = [int(p) for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return None
    for pid in sorted(pids):
        try:
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if not _is_kubelet(argv):
            continue
        kubelet = read_kubelet(pid, argv, proc)
        if not kubelet.static_pod_path:
            continue
        seen = proc / str(pid) / "root" / kubelet.static_pod_path.lstrip("/")
        if _same_dir(seen, manifests_dir) or _same_dir(Path(kubelet.static_pod_path), manifests_dir):
            return kubelet
    return None


def kubelet_hostname(hostname: Callable[[], str] = socket.gethostname) -> str:
    """The host name as the kubelet takes it without ``--hostname-override``: lower case, trimmed
    (kubelet ``nodeutil.GetHostname``)."""
    return hostname().strip().lower()


@dataclass
class Sources:
    """The sources of start attempts the monitor will use, and what it resolved by itself.

    Attributes:
        node_name: the node name used (given, the kubelet's ``--hostname-override``, or the host name).
        node_name_from: ``node_name`` (given), ``kubelet --hostname-override`` or ``hostname``.
        pod_logs_dir: the kubelet's pod logs directory when it can be read, else None.
        mirror_pod: the mirror pod will be read (a client configuration and ``mirror_pod: auto``).
        termination_log: the termination log was given (``termination_log``).
        kubelet_pid: the pid of the kubelet found for ``manifests_dir`` (None when none was).
        notes: why a source is not used.
    """

    node_name: str = ""
    node_name_from: str = ""
    pod_logs_dir: str | None = None
    mirror_pod: bool = False
    termination_log: bool = False
    kubelet_pid: int | None = None
    notes: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        """The sources in use, by name: ``pod_logs_dir``, ``mirror_pod``, ``termination_log``."""
        out = []
        if self.pod_logs_dir:
            out.append("pod_logs_dir")
        if self.mirror_pod:
            out.append("mirror_pod")
        if self.termination_log:
            out.append("termination_log")
        return out

    def as_result(self) -> dict[str, Any]:
        """A JSON-able summary for the module's result (``start_attempt_sources``)."""
        return {
            "used": self.names(),
            "node_name": self.node_name,
            "node_name_from": self.node_name_from,
            "pod_logs_dir": self.pod_logs_dir,
            "kubelet_pid": self.kubelet_pid,
            "notes": list(self.notes),
        }


def resolve_sources(
    params: dict[str, Any],
    mirror_possible: bool,
    proc: Path = Path("/proc"),
    hostname: Callable[[], str] = socket.gethostname,
) -> Sources:
    """Which sources of start attempts can work for module ``params``, filling in what is not given.

    * node name: ``node_name``; else the ``--hostname-override`` of the kubelet that runs
      ``manifests_dir`` (:func:`find_kubelet`); else the host name (:func:`kubelet_hostname`);
    * the kubelet's pod logs: ``pod_logs_dir``; else, unless ``termination_log`` is given, that
      kubelet's ``podLogsDir`` or ``/var/log/pods``; used when it is a directory;
    * the mirror pod: ``mirror_possible`` (a client configuration, ``mirror_pod: auto`` and the
      kubernetes library), with the node name;
    * the termination log: only when ``termination_log`` is given (its JSON-lines format is
      written by a wrapper of the operand, not by the kubelet).

    Pure apart from reading ``proc`` and the file system. Never raises; :func:`require_sources`
    refuses when nothing works.
    """
    out = Sources()
    manifests = Path(params.get("manifests_dir") or "/etc/kubernetes/manifests")
    kubelet = find_kubelet(manifests, proc)
    out.kubelet_pid = kubelet.pid if kubelet else None
    if params.get("node_name"):
        out.node_name, out.node_name_from = str(params["node_name"]), "node_name"
    elif kubelet is not None and kubelet.hostname_override:
        out.node_name, out.node_name_from = kubelet.hostname_override, "kubelet --hostname-override"
    else:
        out.node_name, out.node_name_from = kubelet_hostname(hostname), "hostname"
        if kubelet is None:
            out.notes.append(f"no running kubelet has {manifests} as its static pod path")
    out.termination_log = bool(params.get("termination_log"))
    logs = params.get("pod_logs_dir")
    if not logs and not out.termination_log:
        logs = kubelet.pod_logs_dir if kubelet is not None else DEFAULT_POD_LOGS_DIR
    if logs:
        if Path(logs).is_dir():
            out.pod_logs_dir = str(logs)
        else:
            out.notes.append(f"pod_logs_dir: {logs} is not a directory")
    out.mirror_pod = bool(mirror_possible and out.node_name)
    if not mirror_possible:
        out.notes.append("mirror_pod: no client configuration (kubeconfig or host), or mirror_pod: never")
    return out


def require_sources(sources: Sources, operand: str) -> None:
    """Refuse to monitor when no source of start attempts can work: a monitor that cannot see a
    start attempt would judge every revision NeverStartedUp and roll back a healthy one.

    Raises StaticPodError (reason :data:`NO_START_ATTEMPT_SOURCE`, field ``pod_logs_dir``) naming
    the options that give a source.
    """
    if sources.names():
        return
    raise StaticPodError(
        f"cannot see start attempts of {operand}, refusing to monitor (nothing judged, nothing written): "
        f"{'; '.join(sources.notes)}. Give one of: pod_logs_dir (the kubelet's pod logs, with node_name), "
        "kubeconfig or host (the mirror pod, with mirror_pod: auto and node_name), termination_log "
        "(a JSON-lines start log the operand's wrapper writes)",
        field="pod_logs_dir",
        reason=NO_START_ATTEMPT_SOURCE,
    )


def default_probe_ca_cert(operand: str, exists: Callable[[str], bool] = os.path.exists) -> str | None:
    """The probe CA when none is given: kubeadm's cluster CA :data:`KUBEADM_CA` for a kube-apiserver
    when that file exists (it signs the apiserver's serving certificate), else None (the system
    CAs)."""
    if operand == "kube-apiserver" and exists(KUBEADM_CA):
        return KUBEADM_CA
    return None
