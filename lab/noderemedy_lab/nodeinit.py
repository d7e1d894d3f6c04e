"""The "init" of a lab real node: one process per node from which everything of the node descends.

Started by the lab's supervisor (``python -m noderemedy_lab.nodeinit <node dir>/spec.json``) already
inside the node's network namespace (``nsenter --net``) and a fresh mount namespace whose mounts are
slaves of the host's (``unshare --mount --propagation slave``). It then, like a machine's boot:

1. joins the node's cgroup ``<cgroup>/system`` in every v1 hierarchy, so that the lab finds (and a
   power cut kills) exactly this node's processes: this one, containerd, its shims, kubelet,
   kube-proxy; the containers live in ``<cgroup>/kubepods`` (kubelet's ``cgroupRoot``);
2. becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``): containerd's shims daemonize and the
   machine's PID 1 does not reap orphans (lab reference, pitfall 18), so they and any orphaned
   container process are reparented to, and reaped by, this process;
3. mounts a fresh tmpfs on ``/run`` (containerd's state, the shims' sockets in ``/run/containerd/s``,
   the pods' network namespaces in ``/run/netns``: gone when the node's processes are) and binds
   the node's own ``var`` directory on ``/var`` (``/var/lib/cni``, ``/var/log/pods``: the node's
   "disk", kept across power cycles); the node's view of the shared storage (see
   :mod:`noderemedy_lab.realnode`) is mounted under ``/var/lab-shared``;
4. starts containerd, waits for its socket, imports the lab's images once (``ctr images import``),
   then starts kubelet and kube-proxy, each logging to ``<workdir>/logs/<component>-<node>.log``;
5. reaps every child. If containerd, kubelet or kube-proxy exits, it writes
   ``ERROR <component>: exited with <code>`` and exits 1 after killing the rest of the node (the lab
   then reports that component). On SIGTERM it stops kube-proxy, kubelet and containerd (SIGTERM,
   then SIGKILL after 10 s), kills whatever is left in the node's cgroup and exits 0.

A power cut does not go through here: the BMC hook SIGKILLs every process of the node's cgroup
(:func:`noderemedy_lab.realnode.kill_node`), this one included; the mount namespace dies with them.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def log(line: str) -> None:
    """One line to stdout (the supervisor's log of this node), with a wall-clock stamp."""
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def join_cgroup(rel: str) -> None:
    """Move this process into ``/sys/fs/cgroup/<hierarchy>/<rel>`` of every hierarchy that has it."""
    joined = 0
    for hier in sorted(Path("/sys/fs/cgroup").iterdir()):
        procs = hier / rel.strip("/") / "cgroup.procs"
        if procs.exists():
            procs.write_text(str(os.getpid()))
            joined += 1
    if not joined:
        raise RuntimeError(f"cgroup {rel}: not found in any hierarchy under /sys/fs/cgroup")


def cgroup_pids(rel: str) -> set[int]:
    """PIDs of every process in cgroup ``rel`` and below (read from the pids hierarchy)."""
    base = Path("/sys/fs/cgroup/pids") / rel.strip("/")
    out: set[int] = set()
    for procs in base.rglob("cgroup.procs"):
        try:
            out.update(int(p) for p in procs.read_text().split())
        except OSError:
            continue
    return out


def mount(*args: str) -> None:
    """``mount ARGS``; RuntimeError with mount's message if it fails."""
    out = subprocess.run(["mount", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"mount {' '.join(args)}: {out.stderr.strip()}")


def setup_mounts(spec: dict) -> None:
    """The node's own /run (tmpfs) and /var (its directory), and its view of the shared storage."""
    var = Path(spec["var"])
    mount("-t", "tmpfs", "-o", "mode=0755,size=256m", "tmpfs", "/run")
    for d in ("netns", "containerd"):
        Path("/run", d).mkdir()
    mount("--bind", str(var), "/var")
    shared = spec.get("shared")
    if shared:
        # a read-only, empty tmpfs under the shared storage: with the storage unmounted (its FC
        # port disabled) every write to /var/lab-shared/data fails with EROFS
        top = Path("/var/lab-shared")
        top.mkdir(exist_ok=True)
        mount("-t", "tmpfs", "-o", "size=1m,mode=0755", "lab-shared", str(top))
        (top / "data").mkdir()
        mount("-o", "remount,ro", str(top))
        mount("--make-rshared", str(top))
        if Path(spec["fc_state"]).read_text().strip() != "down":
            mount("--bind", shared, str(top / "data"))


def write_sysctl(name: str, value: str) -> None:
    """Write a sysctl of this network namespace (``/proc/sys/<name with / for .>``)."""
    Path("/proc/sys", *name.split(".")).write_text(value)


#: Seconds containerd gets to answer on its socket after it starts: a boot right after a power cut,
#: on a host running three labs and the static checks, is slow, and a node whose containerd is late
#: is not a failed node (a failed boot stays down until the next power cut).
CONTAINERD_START_SECONDS = 120.0

#: Seconds one ``ctr version`` probe may take before it counts as "not answering yet".
PROBE_SECONDS = 5.0


def wait_socket(path: str, proc: subprocess.Popen, timeout: float, probe: float = PROBE_SECONDS) -> None:
    """Wait until ``ctr version`` answers on containerd's socket ``path``, at most ``timeout``
    seconds; each probe gets ``probe`` seconds, and a probe that times out (a loaded host) is
    simply tried again. RuntimeError if ``proc`` exits first or the socket never answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before its socket answered")
        if os.path.exists(path):
            try:
                out = subprocess.run(["ctr", "-a", path, "version"], capture_output=True, timeout=probe)
            except subprocess.TimeoutExpired:
                continue
            if out.returncode == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"socket {path} does not answer after {timeout:.0f} s")


class Node:
    """The running node: its spec and the main children (component name -> Popen)."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping = False

    def start(self, component: str, argv: list[str]) -> subprocess.Popen:
        logfile = Path(self.spec["logdir"]) / f"{component}-{self.spec['name']}.log"
        with open(logfile, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.children[component] = proc
        log(f"started {component} (pid {proc.pid}, log {logfile})")
        return proc

    def boot(self) -> None:
        spec = self.spec
        write_sysctl("net.ipv4.ip_forward", "1")
        containerd = self.start("containerd", ["containerd", "--config", spec["containerd_config"]])
        try:
            wait_socket(spec["containerd_socket"], containerd, CONTAINERD_START_SECONDS)
        except RuntimeError as exc:
            raise Failure("containerd", str(exc)) from exc
        marker = Path(spec["var"]) / "lib" / "lab-images-imported"
        imported = marker.read_text().strip() if marker.exists() else ""
        if imported != spec["images_key"]:
            for archive in spec["images"]:
                out = subprocess.run(
                    ["ctr", "-a", spec["containerd_socket"], "-n", "k8s.io", "images", "import", archive],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if out.returncode != 0:
                    raise Failure("containerd", f"image import of {archive} failed: {out.stderr.strip()}")
            marker.write_text(spec["images_key"])
            log(f"imported {len(spec['images'])} image(s)")
        self.start("kubelet", spec["kubelet_argv"])
        self.start("kube-proxy", spec["kube_proxy_argv"])

    def stop(self) -> None:
        """Stop the components in reverse order, then kill what is left of the node."""
        self.stopping = True
        for component in reversed(list(self.children)):
            proc = self.children[component]
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.kill_rest()

    def kill_rest(self) -> None:
        """SIGKILL every other process in the node's cgroup (shims, containers) and reap them."""
        me = os.getpid()
        for _ in range(100):
            pids = cgroup_pids(self.spec["cgroup"]) - {me}
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            reap()
            time.sleep(0.05)
        reap()


class Failure(Exception):
    """A component of the node failed: ``component`` and what happened."""

    def __init__(self, component: str, detail: str) -> None:
        super().__init__(f"{component}: {detail}")
        self.component = component


def reap() -> list[tuple[int, int]]:
    """Reap every exited child (orphans included) without blocking; (pid, status) of each."""
    out = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        out.append((pid, status))
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    join_cgroup(spec["cgroup"] + "/system")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    Path(spec["pid_file"]).write_text(str(os.getpid()))
    node = Node(spec)
    signal.signal(signal.SIGTERM, lambda *_: setattr(node, "stopping", True))
    signal.signal(signal.SIGINT, lambda *_: setattr(node, "stopping", True))
    try:
        setup_mounts(spec)
        node.boot()
    except Failure as exc:
        log(f"ERROR {exc}")
        node.stop()
        return 1
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        log(f"ERROR node: {exc}")
        node.stop()
        return 1
    log("BOOTED")
    while not node.stopping:
        by_pid = {p.pid: name for name, p in node.children.items()}
        for pid, status in reap():
            name = by_pid.get(pid)
            if name is not None and not node.stopping:
                code = os.waitstatus_to_exitcode(status)
                node.children[name].returncode = code
                log(f"ERROR {name}: exited with {code}")
                node.stop()
                return 1
        time.sleep(0.2)
    log("stopping")
    node.stop()
    log("STOPPED")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
