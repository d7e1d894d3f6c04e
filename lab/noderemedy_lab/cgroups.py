"""The cgroups of the lab's real nodes: one per node in every cgroup v1 hierarchy, and the kill of
a node's whole cgroup that its BMC's power off is (:func:`kill_node`)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from .procs import ComponentError


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy (and the hybrid layout's ``unified``) under /sys/fs/cgroup."""
    base = Path("/sys/fs/cgroup")
    return sorted(p for p in base.iterdir() if p.is_dir() and os.path.ismount(p))


def make_cgroup(rel: str) -> None:
    """Create cgroup ``rel`` (and its parents) in every hierarchy; cpuset's cpus and mems are
    copied from the parent (a new v1 cpuset is empty, and an empty one refuses tasks)."""
    for hier in cgroup_hierarchies():
        path = hier
        for part in rel.strip("/").split("/"):
            parent, path = path, path / part
            if not path.exists():
                path.mkdir()
                if hier.name == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        (path / f).write_text((parent / f).read_text())


#: cpu.shares (cgroup v1) of one real node: the weight of as many busy tasks as the host has cores.
#: A real node stands for a machine of its own; with the default 1024, every real node of a lab
#: together weighs as much as one busy process of the host, and a host busy with other work (a
#: parallel test suite, a build) starves the nodes' kubelets until they all turn NotReady at once.
NODE_CPU_SHARES = 1024 * (os.cpu_count() or 1)
#: Seconds :func:`kill_cgroup` waits for the freezer to report FROZEN before it signals the tasks
#: anyway (and signals again until the cgroup is empty).
FREEZE_WAIT = 1.0


def set_cpu_shares(rel: str, shares: int) -> None:
    """Give cgroup ``rel`` the CPU weight ``shares``: its cgroup v1 ``cpu.shares``, clamped to the
    kernel's 2..262144 (the lab's cgroups are v1, see :func:`cgroup_hierarchies`). A cgroup that
    cannot be written keeps the default weight: the lab still runs, only slower under load."""
    with contextlib.suppress(OSError):
        Path("/sys/fs/cgroup/cpu", rel.strip("/"), "cpu.shares").write_text(str(max(2, min(262144, shares))))


def make_node_cgroup(rel: str, nodes: int) -> None:
    """Create real node cgroup ``rel`` with its ``system`` child, weighed as a machine (each node
    :data:`NODE_CPU_SHARES`) and its parent, the lab's, as ``nodes`` machines."""
    make_cgroup(rel + "/system")
    set_cpu_shares(rel, NODE_CPU_SHARES)
    set_cpu_shares(str(Path(rel).parent), NODE_CPU_SHARES * nodes)


def cgroup_pids(rel: str) -> set[int]:
    """PIDs in cgroup ``rel`` and below, from every hierarchy (a process is in each)."""
    out: set[int] = set()
    for hier in cgroup_hierarchies():
        base = hier / rel.strip("/")
        if not base.exists():
            continue
        # os.walk, not rglob: a cgroup the kubelet removes meanwhile is skipped, not an error
        for dirpath, _dirs, files in os.walk(base):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError, ValueError):
                    out.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
    return out


def remove_cgroup(rel: str, keep_self: bool = False) -> list[str]:
    """rmdir cgroup ``rel`` and everything below it, deepest first, in every hierarchy
    (``keep_self``: only what is below it). Returns the directories that could not be removed."""
    failed = []
    for hier in cgroup_hierarchies():
        base = hier / rel.strip("/")
        if not base.exists():
            continue
        # os.walk, not rglob: a cgroup the kubelet removes meanwhile is skipped, not an error
        dirs = [Path(d) for d, _subdirs, _files in os.walk(base, topdown=False) if Path(d) != base]
        if not keep_self:
            dirs.append(base)
        for d in dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(str(d))
    return failed


def kill_cgroup(rel: str, timeout: float = 10.0, spare: set[int] | None = None) -> None:
    """SIGKILL every process in cgroup ``rel`` and below, all at once: the cgroup is frozen
    (freezer hierarchy) so nothing forks meanwhile, every task is signalled, then thawed so the
    signals are delivered. Returns once the cgroup is empty; ComponentError after ``timeout`` s."""
    freezer = Path("/sys/fs/cgroup/freezer") / rel.strip("/")
    state = freezer / "freezer.state"
    spare = spare or set()
    deadline = time.monotonic() + timeout
    while True:
        frozen = False
        if state.exists():
            with contextlib.suppress(OSError):
                state.write_text("FROZEN")
                frozen = True
                # a task in uninterruptible sleep keeps the cgroup FREEZING: kill it unfrozen
                # after a while rather than spend the whole timeout waiting
                freeze_by = min(deadline, time.monotonic() + FREEZE_WAIT)
                while state.read_text().strip() != "FROZEN" and time.monotonic() < freeze_by:
                    time.sleep(0.01)
        pids = cgroup_pids(rel) - spare
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if frozen:
            with contextlib.suppress(OSError):
                state.write_text("THAWED")
        if not pids:
            return
        if time.monotonic() > deadline:
            raise ComponentError("real node", f"cgroup {rel} still has processes {sorted(pids)}")
        time.sleep(0.05)


def kill_node(spec: dict) -> None:
    """Power cut of a real node: SIGKILL every process of the node (its init, containerd, shims,
    kubelet, kube-proxy, every container) at once, then remove the pods' cgroups (a machine that
    boots again starts with none). The node's mount namespace dies with its last process."""
    kill_cgroup(spec["cgroup"])
    remove_cgroup(spec["cgroup"] + "/kubepods")
    with contextlib.suppress(FileNotFoundError):
        Path(spec["pid_file"]).unlink()
