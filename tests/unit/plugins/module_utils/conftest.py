"""Fixtures of the static-pod fallback's tests (test_static_pod*.py): a temporary root, and a real
second process that holds the installer lock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def lock_holder():
    procs = []

    def hold(path: Path) -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout.readline().strip() == "locked"
        return p

    yield hold
    for p in procs:
        if p.poll() is None:
            p.stdin.close()
        p.wait(timeout=10)
