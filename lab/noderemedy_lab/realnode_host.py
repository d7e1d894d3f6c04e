"""What the lab's real nodes do on the host outside their own processes: ``ip`` commands, the
links and network namespaces they make, readiness checks of the relays, their containerd images,
the claim on their names (:func:`claim_prefix`) and what a stopped or killed lab left behind
(:func:`leftovers`, :func:`remove_prefix`, :func:`cleanup_recorded`)."""

from __future__ import annotations

import contextlib
import errno
import re
import shutil
import socket
import subprocess
from pathlib import Path

from .cgroups import cgroup_hierarchies, cgroup_pids, kill_cgroup, remove_cgroup
from .config import LabConfig
from .procs import ComponentError, require_binary


# ------------------------------------------------------------------------------------ network
def _run(
    argv: list[str], component: str, check: bool = True, timeout: float = 30.0
) -> subprocess.CompletedProcess:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ComponentError(component, f"'{' '.join(argv)}' did not end within {timeout:.0f} s") from exc
    if check and out.returncode != 0:
        raise ComponentError(
            component, f"'{' '.join(argv)}' failed: {out.stderr.strip() or out.stdout.strip()}"
        )
    return out


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines() if ":" in line}


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def leftovers(cfg: LabConfig) -> list[str]:
    """What a stopped lab with ``cfg`` left on the host: processes in its cgroups, mounts under its
    workdir, network namespaces, links, cgroups, containerd state. Empty when clean."""
    prefix = cfg.host_prefix
    out = [f"process {pid}" for pid in sorted(cgroup_pids(f"/{prefix}"))]
    out += [f"netns {n}" for n in sorted(_netns()) if n.startswith(prefix)]
    out += [f"link {n}" for n in sorted(_links()) if n.startswith(prefix)]
    out += [f"cgroup {h / prefix}" for h in cgroup_hierarchies() if (h / prefix).exists()]
    workdir = str(cfg.workdir)
    with open("/proc/self/mountinfo") as f:
        out += [f"mount {line.split()[4]}" for line in f if line.split()[4].startswith(workdir)]
    real = cfg.workdir / "real"
    if real.exists():
        out += [f"containerd state {p}" for p in sorted(real.glob("*/var/lib/containerd"))]
    if run_dir(prefix).exists():
        out.append(f"socket directory {run_dir(prefix)}")
    return out


def run_dir(prefix: str) -> Path:
    """``/tmp/<prefix>``: the lab's real nodes' containerd sockets (short paths: a unix socket path
    has at most 104 bytes; seen by the host and by the node, whose own /run hides the host's)."""
    return Path("/tmp") / prefix


#: Seconds an image import into a real node's containerd may take. The remediation pod image
#: (about 150 MiB) imports in a few seconds on an idle 2-core machine, but took more than 30 s
#: while Go builds and other labs ran beside it.
IMPORT_TIMEOUT = 300.0


def import_image(socket: str, archive: Path, component: str) -> None:
    """``ctr -a <socket> -n k8s.io images import <archive>``, at most :data:`IMPORT_TIMEOUT`
    seconds; ComponentError naming ``component`` when it fails or does not end in time."""
    ctr = require_binary("ctr", component, "containerd")
    _run(
        [ctr, "-a", socket, "-n", "k8s.io", "images", "import", str(archive)],
        component,
        timeout=IMPORT_TIMEOUT,
    )


def claim_prefix(prefix: str) -> socket.socket:
    """Claim the host names of prefix ``prefix`` for this process: bind the abstract unix socket
    ``@noderemedy-lab/<prefix>``. The kernel releases it when the process ends, however it ends
    (SIGKILL included), and it lives in the network namespace the lab's links are made in; so a
    name with this prefix that exists while the claim is ours was left by a lab that was killed.
    Returns the socket (close it to give the claim up; not inherited by child processes).
    ComponentError ``real node network`` when a running process holds it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0noderemedy-lab/{prefix}")
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        raise ComponentError(
            "real node network", f"{prefix}: another running lab uses this port base's names"
        ) from exc
    return sock


def _ours(prefix: str) -> re.Pattern[str]:
    """Names the real nodes of prefix ``prefix`` make: bridge ``<prefix>br``, host-side veths
    ``<prefix>r<j>``, network namespaces ``<prefix>-real<j>``; not another prefix's."""
    return re.compile(rf"{re.escape(prefix)}(br|r\d+|-real\d+)")


def remove_prefix(prefix: str) -> list[str]:
    """Kill what is left in cgroup ``/<prefix>``, delete the network namespaces and links named
    after ``prefix``, its cgroups and its socket directory; returns what was there (``netns X``,
    ``link X``, ``cgroup``, ``process N``), empty when nothing was. For a lab that is gone: the
    caller holds the claim (:func:`claim_prefix`) or knows the supervisor dead."""
    ours = _ours(prefix)
    found = [f"process {pid}" for pid in sorted(cgroup_pids(f"/{prefix}"))]
    with contextlib.suppress(ComponentError):
        kill_cgroup(f"/{prefix}")
    # listed before any is deleted: deleting a namespace deletes the veths with an end in it
    namespaces = sorted(ns for ns in _netns() if ours.fullmatch(ns))
    links = sorted(link for link in _links() if ours.fullmatch(link))
    found += [f"netns {ns}" for ns in namespaces] + [f"link {link}" for link in links]
    for ns in namespaces:
        _run(["ip", "netns", "delete", ns], "real node network", check=False)
    for link in set(links) & _links():
        _run(["ip", "link", "delete", link], "real node network", check=False)
    if any((h / prefix).exists() for h in cgroup_hierarchies()):
        found.append(f"cgroup /{prefix}")
    remove_cgroup(f"/{prefix}")
    shutil.rmtree(run_dir(prefix), ignore_errors=True)
    return found


def cleanup_recorded(state: dict) -> list[str]:
    """Undo the real nodes of a lab whose supervisor is gone, from its ``lab.json`` document:
    kill what is left in its cgroups, delete its namespaces and links (names with its prefix) and
    its cgroups. Returns :func:`leftovers` afterwards."""
    cfg = LabConfig(workdir=Path(state["workdir"]), port_base=state["port_base"])
    remove_prefix(cfg.host_prefix)
    for d in sorted((cfg.workdir / "real").glob("*/var/lib/containerd")):
        shutil.rmtree(d, ignore_errors=True)
    return leftovers(cfg)


def _udp_bound(host: str, port: int) -> bool:
    """Whether a UDP socket is bound to ``host:port`` (``/proc/net/udp``, little-endian hex)."""
    import ipaddress

    want = f"{int.from_bytes(ipaddress.IPv4Address(host).packed, 'little'):08X}:{port:04X}"
    with open("/proc/net/udp") as f:
        return any(line.split()[1] == want for line in f.readlines()[1:])


def _tcp_ok(host: str, port: int) -> bool:
    import socket

    with socket.create_connection((host, port), timeout=0.5):
        return True
