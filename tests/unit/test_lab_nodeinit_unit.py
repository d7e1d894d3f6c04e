"""Unit tests of a lab real node's boot wait (noderemedy_lab.nodeinit.wait_socket) with a stand-in
``ctr`` on PATH: a probe that hangs on a loaded host is tried again, never the end of the node's
boot (a node whose first probe hung after a power cut stayed down for the rest of a test session).
No containerd, no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from noderemedy_lab import nodeinit

# a ctr that hangs on its first call and answers on the next ones (the calls are counted in a file)
FAKE_CTR = """#!/bin/sh
n=$(cat "$CALLS" 2>/dev/null || echo 0)
echo $((n + 1)) > "$CALLS"
[ "$n" = 0 ] && exec sleep 30
exit 0
"""


@pytest.fixture
def fake_ctr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ctr = bin_dir / "ctr"
    ctr.write_text(FAKE_CTR)
    ctr.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(calls))
    return calls


def _daemon() -> subprocess.Popen:
    """A process standing in for containerd: alive for the test."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_probe_that_hangs_is_tried_again_until_the_socket_answers(fake_ctr: Path, tmp_path: Path) -> None:
    socket = tmp_path / "containerd.sock"
    socket.touch()
    proc = _daemon()
    try:
        nodeinit.wait_socket(str(socket), proc, timeout=20, probe=0.5)
    finally:
        proc.kill()
        proc.wait()
    assert int(fake_ctr.read_text()) == 2  # the hung probe, then the one that answered


def test_a_containerd_that_exits_before_answering_is_reported(fake_ctr: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(RuntimeError, match="exited with 3"):
        nodeinit.wait_socket(str(tmp_path / "containerd.sock"), proc, timeout=5, probe=0.5)


def test_a_socket_that_never_answers_is_reported_after_the_timeout(tmp_path: Path) -> None:
    proc = _daemon()
    try:
        with pytest.raises(RuntimeError, match="does not answer after 1 s"):
            nodeinit.wait_socket(str(tmp_path / "missing.sock"), proc, timeout=1, probe=0.5)
    finally:
        proc.kill()
        proc.wait()
