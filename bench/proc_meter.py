"""Process metering for the benchmarks: the distinct processes a parent starts, and CPU seconds
from ``/proc/<pid>/stat`` (proc(5); Linux only)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class ProcSampler(threading.Thread):
    """Every 0.2 s: the distinct processes (pid, start time) below ``pid`` whose command line holds
    ``name`` (``ansible-playbook``; FAR: ``fence_ipmilan``), not counting their forks."""

    def __init__(self, pid: int, name: str = "ansible-playbook") -> None:
        super().__init__(daemon=True)
        self.pid, self.name, self.seen, self.stop = pid, name, set(), threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            parent: dict[int, int] = {}
            info: dict[int, tuple[str, str]] = {}
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    stat = Path(f"/proc/{d}/stat").read_text()
                    cmd = (
                        Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    )
                except OSError:
                    continue
                fields = stat.rsplit(")", 1)[1].split()
                parent[int(d)] = int(fields[1])
                info[int(d)] = (cmd, fields[19])
            for p, (cmd, start) in info.items():
                # the process, not one of its forks (which share its command line)
                if self.name not in cmd or self.name in info.get(parent[p], ("", ""))[0]:
                    continue
                q, hops = p, 0
                while q in parent and q != self.pid and hops < 20:
                    q, hops = parent[q], hops + 1
                if q == self.pid:
                    self.seen.add((p, start))


def cpu_split(pid: int) -> tuple[float, float]:
    """CPU seconds of ``pid`` itself (utime + stime) and of its children it has waited for
    (cutime + cstime: for the runner, its ``ansible-playbook`` runs and their modules)."""
    fields = [int(x) for x in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:15]]
    tick = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[1]) / tick, (fields[2] + fields[3]) / tick


def cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` in seconds."""
    return sum(cpu_split(pid))
