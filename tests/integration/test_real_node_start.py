"""A real node that cannot start stops the start with an error naming the component, and leaves
nothing behind (no process, namespace, link, cgroup, mount or containerd state).

These run the real node machinery (network namespace, veth, bridge, cgroups, containerd with the
lab's images) on their own port base, without a control plane: the kubelet is replaced by a
command that exits at once, which is what a kubelet that cannot start looks like to the lab.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noderemedy_lab import pki
from noderemedy_lab.cgroups import cgroup_hierarchies, make_cgroup
from noderemedy_lab.config import LabConfig
from noderemedy_lab.images import ensure_node_images
from noderemedy_lab.procs import ComponentError, Supervisor
from noderemedy_lab.realnode import READY_TIMEOUT, RealNodes, leftovers
from noderemedy_lab.realnode_host import _links, _netns

#: Holds a port base's claim as a running lab does, says so, and waits to be killed.
CLAIM_AND_WAIT = (
    "import sys, time\n"
    "from noderemedy_lab.realnode_host import claim_prefix\n"
    "claim = claim_prefix(sys.argv[1])\n"
    "print('claimed', flush=True)\n"
    "time.sleep(600)\n"
)

pytestmark = [pytest.mark.lab]


@pytest.fixture
def cfg(tmp_path) -> LabConfig:
    base = int(os.environ.get("NODEREMEDY_LAB_PORT_BASE", "24000")) + 700
    return LabConfig(workdir=tmp_path / "lab", port_base=base, nodes=1, real_nodes=1)


def real_nodes(cfg: LabConfig, kubelet: str) -> tuple[RealNodes, Supervisor]:
    cfg.workdir.mkdir(parents=True)
    pki.generate(cfg.workdir / "pki")
    sup = Supervisor(cfg.workdir / "logs")
    # a kube-proxy that stays up whatever its arguments (/bin/sleep refused --config= and exited 1,
    # which now and then was seen before the kubelet's exit)
    proxy = cfg.workdir / "kube-proxy"
    proxy.write_text("#!/bin/sh\nexec sleep 3600\n")
    proxy.chmod(0o755)
    binaries = {"kubelet": Path(kubelet), "kube-proxy": proxy}
    kube = {"pki": str(cfg.workdir / "pki")}
    return RealNodes(cfg, sup, kube, binaries, ensure_node_images()), sup


def test_a_kubelet_that_exits_is_named_and_nothing_is_left(cfg):
    nodes, sup = real_nodes(cfg, "/bin/false")
    # the relay has no apiserver to forward to here; it still listens on the lab bridge
    try:
        nodes.start()
        # the node's init starts containerd and imports the images before it starts the kubelet
        # (nodeinit.Node.boot): as long as the lab gives a real node to turn Ready
        deadline = time.monotonic() + READY_TIMEOUT
        with pytest.raises(ComponentError) as err:
            while time.monotonic() < deadline:
                nodes.check_alive()
                time.sleep(0.2)
        assert err.value.component == "kubelet lab-real-0", str(err.value)
        assert "exited with 1" in str(err.value)
        # containerd was up (it imported the images) before the kubelet failed
        assert "imported 2 image(s)" in str(err.value)
    finally:
        nodes.stop()
        sup.stop_all()
    assert leftovers(cfg) == []
    assert not any(p.alive() for p in sup.procs.values())


def test_another_running_lab_on_the_port_base_stops_the_start_and_its_names_are_kept(cfg):
    """A process that holds the port base's claim (as a running lab does): the start stops at the
    check naming the network, before anything runs, and the names that lab made are not touched."""
    nodes, sup = real_nodes(cfg, "/bin/false")
    holder = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_WAIT, nodes.prefix], stdout=subprocess.PIPE, text=True
    )
    subprocess.run(["ip", "link", "add", nodes.bridge, "type", "bridge"], check=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "claimed"
        with pytest.raises(ComponentError) as err:
            nodes.start()
        assert err.value.component == "real node network"
        assert "another running lab" in str(err.value), str(err.value)
        assert sup.procs == {}
        nodes.stop()
        assert leftovers(cfg) == [f"link {nodes.bridge}"], "the running lab's bridge was touched"
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "link", "delete", nodes.bridge], check=False)
    assert leftovers(cfg) == []


def test_what_a_killed_lab_left_on_the_port_base_is_removed_by_the_next_lab(cfg):
    """What a lab killed with SIGKILL leaves in the kernel (its namespace, veth and bridge, its
    cgroup with a process of a node still in it): the next lab on the port base says what it
    removed and starts; a lab that refused instead left every later run on that port base
    unable to start real nodes."""
    nodes, sup = real_nodes(cfg, "/bin/false")
    ns, veth = nodes.netns(0), nodes.veth(0)
    for argv in (
        ["ip", "link", "add", nodes.bridge, "type", "bridge"],
        ["ip", "netns", "add", ns],
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
        ["ip", "link", "set", veth, "master", nodes.bridge, "up"],
    ):
        subprocess.run(argv, check=True)
    make_cgroup(nodes.cgroup(0))
    survivor = subprocess.Popen(["sleep", "600"])
    for hier in cgroup_hierarchies():
        (hier / nodes.cgroup(0).strip("/") / "cgroup.procs").write_text(str(survivor.pid))
    said: list[str] = []
    try:
        nodes.start(progress=said.append)
        removed = [line for line in said if line.startswith("removed what a killed lab")]
        assert len(removed) == 1, said
        for name in (f"process {survivor.pid}", f"netns {ns}", f"link {veth}", f"link {nodes.bridge}"):
            assert name in removed[0], removed[0]
        assert survivor.wait(10) == -9
        # the lab's own network is up in the names the killed lab had
        assert {nodes.bridge, veth} <= _links() and ns in _netns()
    finally:
        survivor.kill()
        nodes.stop()
        sup.stop_all()
    assert leftovers(cfg) == []


def test_missing_containerd_is_named_before_anything_runs(cfg, tmp_path, monkeypatch):
    """Every tool a real node needs on PATH but containerd: the start stops at the check, names
    containerd and its Debian package, and nothing was created."""
    nodes, sup = real_nodes(cfg, "/bin/false")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ctr", "runc", "containerd-shim-runc-v2", "socat", "nsenter", "unshare", "ip", "iptables"):
        found = shutil.which(tool)
        assert found, f"{tool} is needed on this machine for the comparison"
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ComponentError) as err:
        nodes.start()
    assert err.value.component == "containerd", str(err.value)
    assert "containerd" in str(err.value).split(":", 1)[1], str(err.value)
    assert sup.procs == {}
    nodes.stop()
    assert leftovers(cfg) == []


def test_a_failed_kubelet_build_stops_lab_up_naming_it_and_nothing_runs(cfg, tmp_path, monkeypatch):
    """A build cache with the control plane but no kubelet, and a Go module proxy that answers
    nothing (GOPROXY=off): ``lab up`` with a real node stops with the kubelet build named, before
    any process of the lab started."""
    from noderemedy_lab import build
    from noderemedy_lab.lab import Lab

    real_cache = build.cache_dir()
    monkeypatch.setenv("NODEREMEDY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", "off")
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "gomod"))
    for name, path in build.binary_paths().items():
        if name in build.NODE_COMMANDS:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(real_cache / path.relative_to(build.cache_dir()))
    lab = Lab(cfg)
    with pytest.raises(ComponentError) as err:
        lab.start()
    assert err.value.component == "build kubelet and kube-proxy", str(err.value)
    assert "GOPROXY=off" in str(err.value)
    assert lab.supervisor is None, "a process started before the build was known to fail"
    assert leftovers(cfg) == []
