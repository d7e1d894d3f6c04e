"""Unit tests of the real nodes' cgroup walks (noderemedy_lab.realnode) on a directory tree that
stands in for a cgroup hierarchy: a cgroup the kubelet removes while the lab walks the node's tree
is skipped, never an error (the power watcher printed ``[Errno 2]`` for it during healthy demos).
No cgroup filesystem, no processes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noderemedy_lab import (
    cgroups as realnode,  # the cgroup walks live in cgroups.py (realnode re-exports them)
)


class _Listing:
    """What os.scandir returns, over entries read before the tree changed."""

    def __init__(self, entries: list[os.DirEntry]) -> None:
        self.entries = iter(entries)

    def __iter__(self) -> Iterator[os.DirEntry]:
        return self

    def __next__(self) -> os.DirEntry:
        return next(self.entries)

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def close(self) -> None:
        return None


@pytest.fixture
def hierarchy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One stand-in hierarchy with a node cgroup holding two pod cgroups, each with a container
    (plain directories: rmdir of a cgroup with no tasks behaves as rmdir of an empty one)."""
    hier = tmp_path / "memory"
    for pod in ("pod-a", "pod-b"):
        (hier / "nr1" / "lab-real-0" / "kubepods" / pod / "ctr").mkdir(parents=True)
    monkeypatch.setattr(realnode, "cgroup_hierarchies", lambda: [hier])
    return hier


def _kubelet_removes_while_listed(monkeypatch: pytest.MonkeyPatch, listed: Path, removed: Path) -> None:
    """The listing of ``listed`` is read, then ``removed`` (below it) disappears before the walk
    reaches it: what the kubelet does to a pod's cgroup when the pod ends. Every listing of
    ``listed`` is that first one."""
    real_scandir = os.scandir
    listing: list[os.DirEntry] = []

    def scandir(path: Any = ".") -> Any:
        if isinstance(path, (str, os.PathLike)) and Path(path) == listed:
            if not listing:  # the first listing is read, then the kubelet removes the cgroup
                with real_scandir(path) as it:
                    listing.extend(it)
                shutil.rmtree(removed)
            return _Listing(listing)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_remove_cgroup_skips_a_cgroup_removed_during_the_walk(
    hierarchy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubepods = hierarchy / "nr1" / "lab-real-0" / "kubepods"
    _kubelet_removes_while_listed(monkeypatch, kubepods, kubepods / "pod-a")
    failed = realnode.remove_cgroup("/nr1/lab-real-0/kubepods")
    assert failed == []
    assert not kubepods.exists() and (hierarchy / "nr1" / "lab-real-0").is_dir()


def test_remove_cgroup_removes_deepest_first_and_keeps_self_when_asked(hierarchy: Path) -> None:
    kubepods = hierarchy / "nr1" / "lab-real-0" / "kubepods"
    assert realnode.remove_cgroup("/nr1/lab-real-0/kubepods", keep_self=True) == []
    assert kubepods.is_dir() and list(kubepods.iterdir()) == []


def test_cgroup_pids_skips_a_cgroup_removed_during_the_walk(
    hierarchy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubepods = hierarchy / "nr1" / "lab-real-0" / "kubepods"
    (kubepods / "pod-b" / "cgroup.procs").write_text("4242\n4343\n")
    _kubelet_removes_while_listed(monkeypatch, kubepods, kubepods / "pod-a")
    assert realnode.cgroup_pids("/nr1/lab-real-0") == {4242, 4343}
