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
import time
from pathlib import Path

import pytest

from noderemedy_lab import pki
from noderemedy_lab.config import LabConfig
from noderemedy_lab.images import ensure_node_images
from noderemedy_lab.procs import ComponentError, Supervisor
from noderemedy_lab.realnode import READY_TIMEOUT, RealNodes, leftovers

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


def test_a_taken_network_name_stops_the_start_before_anything_runs(cfg):
    nodes, sup = real_nodes(cfg, "/bin/false")
    subprocess.run(["ip", "link", "add", nodes.bridge, "type", "bridge"], check=True)
    try:
        with pytest.raises(ComponentError) as err:
            nodes.start()
        assert err.value.component == "real node network"
        assert nodes.bridge in str(err.value)
        assert sup.procs == {}
        nodes.stop()
        # ours to delete: the bridge made here is all there is
        assert leftovers(cfg) == [f"link {nodes.bridge}"]
    finally:
        subprocess.run(["ip", "link", "delete", nodes.bridge], check=False)
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
