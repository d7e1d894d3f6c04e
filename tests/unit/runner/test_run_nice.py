"""Niceness of playbook runs (runner/noderemedy_runner/executor.py ``run_niced``, ``nice_for``): the
run's thread and the processes it starts are niced, runs after a release more than fences; the
caller's thread keeps its priority."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from noderemedy_runner.executor import (
    AFTER_RELEASE_NICE,
    AFTER_RELEASE_PRIORITY,
    Executor,
    nice_for,
    run_niced,
)
from noderemedy_runner.machines.actions import Action

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's (sched(7))"
)


main = threading.current_thread()


def own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def child_nice() -> int:
    """Niceness of a process started from the calling thread (``nice`` prints its own)."""
    return int(subprocess.run(["nice"], capture_output=True, text=True, check=True).stdout)


def test_a_run_and_the_process_it_starts_are_niced_and_the_caller_is_not() -> None:
    base = own_nice()
    want = min(19, base + 10)
    seen = run_niced(10, lambda: (own_nice(), child_nice(), threading.current_thread() is not main))
    assert seen == (want, want, True)
    assert own_nice() == base
    assert child_nice() == base


def test_zero_runs_in_the_callers_thread_unchanged() -> None:
    base = own_nice()
    assert run_niced(0, lambda: (own_nice(), threading.current_thread())) == (
        base,
        threading.current_thread(),
    )


def test_errors_reach_the_caller() -> None:
    def boom() -> None:
        raise KeyError("from the run")

    with pytest.raises(KeyError, match="from the run"):
        run_niced(5, boom)


@pytest.mark.parametrize("bad", [-1, 20])
def test_executor_refuses_a_niceness_outside_0_to_19(tmp_path: Path, bad: int) -> None:
    with pytest.raises(ValueError, match=f"run_nice = {bad}: must be 0..19"):
        Executor(tmp_path / "runs", tmp_path, run_nice=bad)


def test_runs_after_a_release_run_nicer_than_fences(tmp_path: Path) -> None:
    """A real ansible-runner run: at priority 0 (a fence) its task runs at the executor's niceness,
    at AFTER_RELEASE_PRIORITY (recovery) at 19, so a fence shares the cores with recovery runs as
    110 to 15 (sched(7)). With run_nice 0 neither is niced."""
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    task = {"name": "Nice", "ansible.builtin.shell": "nice > {{ playbook_dir }}/nice-{{ node }}"}
    play = [{"name": "nice", "hosts": "localhost", "gather_facts": False, "tasks": [task]}]
    (playbooks / "nice.yml").write_text(json.dumps(play))
    base = own_nice()
    for run_nice, node, priority, want in (
        (10, "fence", 0, min(19, base + 10)),
        (10, "recovery", AFTER_RELEASE_PRIORITY, 19),
        (0, "unniced", AFTER_RELEASE_PRIORITY, base),
    ):
        ex = Executor(tmp_path / f"runs-{node}", playbooks, run_nice=run_nice, run_deadline=60)
        act = Action(kind="run_step", playbook="nice.yml", ident=f"{node}-1", extravars={"node": node})
        out = ex.run(act, kind="NodeFence", name=node, priority=priority)
        assert out.succeeded, out
        assert int((playbooks / f"nice-{node}").read_text()) == want, node
    assert own_nice() == base


def test_nice_for_raises_only_runs_after_a_release_and_never_past_19() -> None:
    assert nice_for(10, 0) == 10
    assert nice_for(10, AFTER_RELEASE_PRIORITY - 1) == 10
    assert nice_for(10, AFTER_RELEASE_PRIORITY) == 10 + AFTER_RELEASE_NICE == 19
    assert nice_for(15, AFTER_RELEASE_PRIORITY + 1_000_000) == 19
    assert nice_for(0, AFTER_RELEASE_PRIORITY) == 0
