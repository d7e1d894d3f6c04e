"""Unit tests of the lab's build orchestration (noderemedy_lab.build.ensure_binaries) with the Go
builds replaced by functions that write the binaries: which builds run for which caller, that
they run side by side, and how a failed one is reported. No Go, no network."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from noderemedy_lab import build
from noderemedy_lab.procs import ComponentError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NODEREMEDY_CACHE", str(tmp_path))
    return tmp_path


def _writes(*names: str) -> Callable[[], None]:
    def make() -> None:
        for name in names:
            path = build.binary_paths()[name]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("#!/bin/true\n")

    return make


class StandIns:
    """Stand-ins for the four builds: ``asked`` records what each was asked to build. With
    ``together(n)``, each build waits (30 s at most) until ``n`` builds have started: builds run one
    after another would end in a BrokenBarrierError."""

    def __init__(self) -> None:
        self.asked: dict[str, list[str]] = {}
        self.started = threading.Barrier(1)

    def together(self, parties: int) -> None:
        self.started = threading.Barrier(parties)

    def run(self, name: str, what: list[str], make: Callable[[], None]) -> None:
        self.asked[name] = what
        self.started.wait(timeout=30)
        make()


@pytest.fixture
def builds(cache: Path, monkeypatch: pytest.MonkeyPatch) -> StandIns:
    s = StandIns()

    def kube(say: Callable[[str], None], commands: tuple[str, ...] = build.KUBE_COMMANDS) -> None:
        s.run("kubernetes", list(commands), _writes(*commands))

    def go_install(pkg: str, version: str, dest: Path, name: str, say: Callable[[str], None]) -> None:
        s.run(name, [pkg], _writes(name))

    monkeypatch.setattr(build, "build_kubernetes", kube)
    monkeypatch.setattr(build, "_go_install", go_install)
    monkeypatch.setattr(build, "build_etcd", lambda say: s.run("etcd", ["etcd"], _writes("etcd")))
    monkeypatch.setattr(build, "build_vcsim", lambda say: s.run("vcsim", ["vcsim"], _writes("vcsim")))
    monkeypatch.setattr(
        build, "build_cluster_api", lambda say: s.run("cluster-api", ["cluster-api"], _writes("cluster-api"))
    )
    return s


def test_the_demo_builds_everything_but_vcsim_side_by_side(builds: StandIns) -> None:
    builds.together(3)  # kubernetes, kwok, etcd: all started before any finishes
    lines: list[str] = []
    got = build.ensure_binaries(lines.append, node=True, vcsim=False)
    assert set(builds.asked) == {"kubernetes", "kwok", "etcd"} and "vcsim" not in got
    # the control plane and the node's commands in one go build
    assert builds.asked["kubernetes"] == [*build.KUBE_COMMANDS, *build.NODE_COMMANDS]
    assert set(got) == {*build.KUBE_COMMANDS, *build.NODE_COMMANDS, "kwok", "etcd"}
    assert lines and "side by side: kubernetes" in lines[0] and "vcsim" not in lines[0]
    # a second call finds everything built and builds nothing
    builds.asked.clear()
    assert build.ensure_binaries(lines.append, node=True, vcsim=False) == got and builds.asked == {}


def test_only_the_missing_are_built(builds: StandIns) -> None:
    _writes(*build.KUBE_COMMANDS, *build.NODE_COMMANDS, "kwok", "etcd")()
    got = build.ensure_binaries(lambda line: None)
    assert list(builds.asked) == ["vcsim"] and "vcsim" in got


def test_a_failed_build_is_named_after_every_build_has_ended(
    builds: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(say: Callable[[str], None]) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(build, "build_etcd", broken)
    with pytest.raises(ComponentError, match="build etcd: no space left on device"):
        build.ensure_binaries(lambda line: None, vcsim=False)
    # the others finished meanwhile: only etcd is left for the next run
    assert build.missing() == ["etcd", "vcsim", "cluster-api"]  # vcsim, cluster-api not asked for


def test_a_failed_build_of_only_the_nodes_commands_names_them(
    builds: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    _writes(*build.KUBE_COMMANDS, "kwok", "etcd")()

    def offline(say: Callable[[str], None], commands: tuple[str, ...] = build.KUBE_COMMANDS) -> None:
        raise ComponentError(f"build kubernetes ({', '.join(commands)})", "GOPROXY=off")

    monkeypatch.setattr(build, "build_kubernetes", offline)
    with pytest.raises(ComponentError) as err:
        build.ensure_binaries(lambda line: None, vcsim=False)
    assert err.value.component == "build kubelet and kube-proxy" and "GOPROXY=off" in str(err.value)


def test_setup_builds_cluster_api_beside_the_others_and_a_lab_start_does_not(builds: StandIns) -> None:
    # what a lab start asks for: no cluster-api (only the capi stand-in cluster needs it)
    got = build.ensure_binaries(lambda line: None, node=True, vcsim=False)
    assert "cluster-api" not in builds.asked and "cluster-api" not in got
    builds.asked.clear()
    # what `noderemedy-lab build` (./dev setup) asks for: cluster-api too, named in the progress line
    lines: list[str] = []
    got = build.ensure_binaries(lines.append, node=True, vcsim=False, capi=True)
    assert builds.asked == {"cluster-api": ["cluster-api"]} and got["cluster-api"].is_file()
    assert "side by side: cluster-api" in lines[0]


def test_a_progress_line_says_the_time_left_from_the_typical_build_then_from_this_machines_last(
    cache: Path,
) -> None:
    label = "kwok v0.7.0"
    typical = build.TYPICAL_BUILD_SECONDS["kwok"]
    assert build._expected_seconds(label) == typical
    assert (
        build.progress_line(label, 15, typical) == f"  kwok v0.7.0:   15 s, about {typical - 15} s left ..."
    )
    assert build.progress_line(label, 30, 630) == "  kwok v0.7.0:   30 s, about 10 min left ..."
    assert build.progress_line(label, 90, 60) == "  kwok v0.7.0:   90 s, longer than the usual 60 s ..."
    assert build.progress_line("other v1", 15, None) == "  other v1:   15 s ..."
    build._record_seconds(label, 41.26)
    build._record_seconds("etcd v3.6.16", 20)
    assert build._expected_seconds(label) == 41.3
    assert build._expected_seconds("etcd v3.6.16") == 20
    assert build._expected_seconds("unknown v1") is None
