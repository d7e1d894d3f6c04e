"""Niceness of playbook runs (runner/noderemedy_runner/executor.py ``run_niced``): the run's thread
and the processes it starts are niced; the caller's thread keeps its priority."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from noderemedy_runner.executor import Executor, run_niced

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
