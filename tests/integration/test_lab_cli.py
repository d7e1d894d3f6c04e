"""``noderemedy-lab up | status | env | down`` as a user runs it, and its failures.

Bad input must stop with a clear message naming the component and leave nothing running: a port
already taken, a missing Debian package, a failed Go build.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from noderemedy_lab.config import LabConfig
from noderemedy_lab.lab import Lab
from noderemedy_lab.procs import ComponentError, proc_start_time
from noderemedy_lab.pytest_plugin import worker_port_base

pytestmark = pytest.mark.lab

CLI = [sys.executable, "-m", "noderemedy_lab.cli"]

#: Each test's own lab, in this worker's port range past the session lab's: cores at +200..+294,
#: BMCs at +300..+381 (:data:`noderemedy_lab.pytest_plugin.WORKER_PORT_STRIDE`).
BASE = {name: worker_port_base() + off for name, off in
        {"cli": 200, "taken": 220, "bmc": 240, "deb": 260, "go": 280}.items()}  # fmt: skip


def _children_of(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _recorded_alive(state_file: Path) -> list[str]:
    state = json.loads(state_file.read_text())
    return [
        name
        for name, row in state.get("processes", {}).items()
        if row.get("start_time") is not None and proc_start_time(row["pid"]) == row["start_time"]
    ]


def test_cli_up_status_env_down_leaves_nothing(tmp_path):
    workdir = tmp_path / "cli-lab"
    os.chmod(tmp_path, 0o755)
    base = ["--workdir", str(workdir)]
    up = subprocess.run(
        [*CLI, *base, "up", "--nodes", "1", "--port-base", str(BASE["cli"])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "lab up in" in up.stdout
        status = subprocess.run([*CLI, *base, "status"], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stdout + status.stderr
        for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
            assert f"{component + ' health':28s} ok" in status.stdout, status.stdout
        assert "Ready=True" in status.stdout
        env = subprocess.run([*CLI, *base, "env"], capture_output=True, text=True, timeout=30)
        assert env.returncode == 0
        assert "export KUBECONFIG=" in env.stdout and "SNMP_PERSISTENT_DIR" in env.stdout
        # as the README writes it: ./dev's own setup output must not reach the eval
        dev = Path(__file__).resolve().parents[2] / "dev"
        evaluated = subprocess.run(
            ["bash", "-c", f'eval "$({dev} lab --workdir {workdir} env)" && echo "KUBECONFIG=$KUBECONFIG"'],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert evaluated.returncode == 0, evaluated.stderr
        assert "command not found" not in evaluated.stderr, evaluated.stderr
        assert f"KUBECONFIG={workdir}" in evaluated.stdout, evaluated.stdout
        # a second 'up' on the same workdir refuses instead of clobbering the running lab
        again = subprocess.run(
            [*CLI, *base, "up", "--nodes", "1", "--port-base", str(BASE["cli"])],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 1 and "already running" in again.stderr
        supervisor = json.loads((workdir / "lab.json").read_text())["supervisor"]["pid"]
        assert _recorded_alive(workdir / "lab.json")
    finally:
        down = subprocess.run([*CLI, *base, "down"], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no lab process is running" in down.stdout
    assert _recorded_alive(workdir / "lab.json") == []
    assert proc_start_time(supervisor) is None
    status = subprocess.run([*CLI, *base, "status"], capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and "DOWN" in status.stdout


def test_port_already_taken_names_the_component_and_leaves_nothing(tmp_path):
    cfg = LabConfig(workdir=tmp_path / "lab", nodes=1, port_base=BASE["taken"], kube=True)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", cfg.port("kube-apiserver")))
    blocker.listen()
    before = set(_children_of(os.getpid()))  # e.g. the session lab's processes
    lab = Lab(cfg)
    try:
        with pytest.raises(ComponentError) as err:
            lab.start()
    finally:
        blocker.close()
    assert err.value.component == "kube-apiserver"
    assert f"127.0.0.1:{cfg.port('kube-apiserver')} is already in use" in str(err.value)
    assert lab.supervisor is not None
    assert [p.name for p in lab.supervisor.procs.values() if p.alive()] == []
    assert set(_children_of(os.getpid())) - before == set()


def test_busy_bmc_port_names_the_bmc(tmp_path):
    cfg = LabConfig(workdir=tmp_path / "lab", nodes=2, port_base=BASE["bmc"], kube=False)
    blocker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    blocker.bind(("127.0.0.1", cfg.bmc_port(1)))
    lab = Lab(cfg)
    try:
        with pytest.raises(ComponentError) as err:
            lab.start()
    finally:
        blocker.close()
    assert "lab-node-1" in err.value.component or "lab-node-1" in err.value.detail, str(err.value)
    assert str(cfg.bmc_port(1)) in str(err.value)
    assert [p.name for p in lab.supervisor.procs.values() if p.alive()] == []


def test_missing_debian_package_is_named(tmp_path, monkeypatch):
    # a PATH without /usr/bin/ipmi_sim: the lab must say which package provides it
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    cfg = LabConfig(workdir=tmp_path / "lab", nodes=1, port_base=BASE["deb"], kube=False)
    lab = Lab(cfg)
    with pytest.raises(ComponentError) as err:
        lab.start()
    assert "openipmi" in str(err.value), str(err.value)
    assert "ipmi_sim" in str(err.value)
    assert [p.name for p in lab.supervisor.procs.values() if p.alive()] == []


def test_failed_go_build_is_named(tmp_path):
    # a fresh cache and module cache with the module proxy switched off: the real 'go' fails
    env = dict(os.environ)
    env.update(
        {
            "NODEREMEDY_CACHE": str(tmp_path / "cache"),
            "GOMODCACHE": str(tmp_path / "gomod"),
            "GOPROXY": "off",
            "GOFLAGS": "-mod=mod",
        }
    )
    out = subprocess.run(
        [*CLI, "--workdir", str(tmp_path / "lab"), "up", "--nodes", "1", "--port-base", str(BASE["go"])],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 1
    assert "build kubernetes" in out.stderr, out.stderr
    assert "k8s.io/kubernetes" in out.stderr
    assert not (tmp_path / "lab" / "lab.json").exists()
