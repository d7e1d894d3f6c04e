"""Process supervision for the lab: start peers as our own children, wait on them, stop them by PID.

PID 1 on the machines this runs on (containers) may not reap orphans, so every peer
is started with :class:`subprocess.Popen` by the process that will later ``wait()`` on it: the
pytest session, or the CLI's detached supervisor. Nothing is ever killed by name; a process is
signalled only through its own ``Popen`` handle or, from ``noderemedy-lab down``, through a PID
whose recorded start time still matches (so a recycled PID is never hit).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


class ComponentError(RuntimeError):
    """A lab component failed to start or is unhealthy.

    Attributes:
        component: the component's name (``kube-apiserver``, ``bmc lab-node-0``, ``snmpd-pdu``...).
        detail: what went wrong, with the tail of its log where there is one.
    """

    def __init__(self, component: str, detail: str) -> None:
        super().__init__(f"{component}: {detail}")
        self.component = component
        self.detail = detail


def proc_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of ``/proc/PID/stat``), None if gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    rest = data[data.rindex(")") + 2 :].split()
    if rest[0] == "Z":  # a zombie is not a running process
        return None
    return int(rest[19])


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file ('' if it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def require_binary(name: str, component: str, package: str | None = None) -> str:
    """Absolute path of executable ``name``; ComponentError naming ``component`` and the Debian package if missing."""
    path = shutil.which(name)
    if path is None:
        hint = f" (install the Debian package '{package}')" if package else ""
        raise ComponentError(component, f"executable '{name}' not found{hint}")
    return path


def port_free(port: int, proto: str = "tcp", host: str = "127.0.0.1") -> bool:
    """True if nothing is bound to ``host:port`` for ``proto`` ('tcp' or 'udp')."""
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as s:
        if proto == "tcp":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def require_port_free(port: int, component: str, proto: str = "tcp") -> None:
    """ComponentError naming ``component`` if ``127.0.0.1:port`` is taken."""
    if not port_free(port, proto):
        raise ComponentError(component, f"{proto} port 127.0.0.1:{port} is already in use")


def prepare_peer(port: int, component: str, run_dir: Path) -> Path:
    """Check that a peer's TCP port ``127.0.0.1:port`` is free (:func:`require_port_free`: a
    ComponentError naming ``component`` if not) and create its run directory; returns ``run_dir``."""
    require_port_free(port, component)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def udp_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True if a UDP socket is bound on ``host:port`` (read from /proc/net/udp, no packet sent)."""
    want = f"{socket.htonl(int.from_bytes(socket.inet_aton(host), 'big')):08X}:{port:04X}"
    try:
        rows = Path("/proc/net/udp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(row.split()[1] == want for row in rows)


def tcp_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True if a TCP connection to ``host:port`` is accepted by a listener.

    The lab's ports lie in Linux's ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by
    default): a connection whose kernel-chosen source port happens to be ``port`` itself connects
    to itself (TCP simultaneous open) with nothing listening, which is not counted.
    """
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            return bool(s.getsockname() != s.getpeername())
    except OSError:
        return False


@dataclass
class Proc:
    """A started peer: its name, argv, log file and ``Popen`` handle."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def record(self) -> dict:
        """JSON-able row for ``lab.json``: pid, start time (clock ticks), argv, log."""
        return {
            "pid": self.pid,
            "start_time": proc_start_time(self.pid),
            "argv": self.argv,
            "log": str(self.log),
        }


class Supervisor:
    """Starts, watches and stops the lab's processes; the owner must call :meth:`stop_all`.

    Args:
        logdir: directory for ``<name>.log`` files (created).
    """

    def __init__(self, logdir: Path) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}

    def start(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        ready: Callable[[], bool] | None = None,
        timeout: float = 30.0,
    ) -> Proc:
        """Start ``argv`` as peer ``name`` (stdout and stderr to ``logdir/name.log``).

        If ``ready`` is given, poll it every 0.05 s until it returns True; raise ComponentError
        (with the log tail) if the process exits or ``timeout`` seconds pass first, after
        stopping it.
        """
        if name in self.procs and self.procs[name].alive():
            raise ComponentError(name, "already running")
        log = self.logdir / f"{name.replace(' ', '_').replace('/', '_')}.log"
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        with open(log, "ab") as out:
            try:
                popen = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    cwd=str(cwd) if cwd else None,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ComponentError(name, f"cannot execute {argv[0]}: {exc}") from exc
        proc = Proc(name, list(argv), log, popen)
        self.procs[name] = proc
        if ready is not None:
            self.wait_ready(proc, ready, timeout)
        return proc

    def wait_ready(self, proc: Proc, ready: Callable[[], bool], timeout: float) -> None:
        """Poll ``ready`` until True; ComponentError (process stopped) on exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(Exception):
                if ready():
                    return
            if not proc.alive():
                raise ComponentError(
                    proc.name, f"exited with code {proc.popen.returncode}; log {proc.log}:\n{tail(proc.log)}"
                )
            if time.monotonic() > deadline:
                self.stop(proc.name)
                raise ComponentError(
                    proc.name, f"not ready after {timeout:.0f} s; log {proc.log}:\n{tail(proc.log)}"
                )
            time.sleep(0.05)

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """SIGTERM peer ``name`` (its whole session), SIGKILL after ``timeout`` s, and reap it."""
        proc = self.procs.get(name)
        if proc is None:
            return
        stop_popen(proc.popen, timeout)

    def stop_all(self, timeout: float = 10.0) -> None:
        """Stop every peer, most recently started first (kwok before the apiserver before etcd)."""
        for name in reversed(list(self.procs)):
            self.stop(name, timeout)

    def dead(self) -> list[Proc]:
        """Peers that have exited."""
        return [p for p in self.procs.values() if not p.alive()]


def stop_popen(popen: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminate a child we own and its process group, and reap it."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
    else:
        # the leader is gone; its group may still hold helpers (e.g. snmpd's pass_persist scripts)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)


def stop_recorded(pid: int, start_time: int | None, timeout: float = 10.0) -> bool:
    """Stop a process we did not start in this process (from ``lab.json``), by PID and start time.

    Returns True if it was running and has been signalled away; a PID whose start time no longer
    matches is a different process and is left alone.
    """
    if start_time is None or proc_start_time(pid) != start_time:
        return False
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc_start_time(pid) != start_time:
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    return True
