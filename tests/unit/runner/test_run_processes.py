"""How a stop reaches a playbook run (:mod:`noderemedy_runner.run_processes`), with real processes
and ansible-runner's own configuration loader; no network."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ansible_runner.config.runner import RunnerConfig  # type: ignore[import-untyped]

from noderemedy_runner.run_processes import (
    CANCEL_POLL_SECONDS,
    RUN_MARKER,
    kill_run_processes,
    new_token,
    run_pids,
    write_settings,
)

#: A process that detaches as ansible's task workers do (setsid), then starts a child that
#: inherits its environment (the module), prints the child's pid and waits.
DETACHED = (
    "import os, subprocess, sys, time\n"
    "os.setsid()\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def exited(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` has exited (gone, or a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.01)
    return False


def test_the_detached_processes_of_a_run_are_found_and_killed_and_no_others() -> None:
    token, other = new_token(), new_token()
    mine = subprocess.Popen(
        [sys.executable, "-c", DETACHED],
        env={**os.environ, RUN_MARKER: token},
        stdout=subprocess.PIPE,
        text=True,
    )
    theirs = subprocess.Popen(
        [sys.executable, "-c", DETACHED],
        env={**os.environ, RUN_MARKER: other},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert mine.stdout is not None and theirs.stdout is not None
        grandchild = int(mine.stdout.readline())
        their_child = int(theirs.stdout.readline())
        assert os.getpgid(grandchild) != os.getpgid(0), "the module runs in a process group of its own"
        # the grandchild's pid comes once its exec(2) closed the pipe subprocess waits on, which
        # the kernel does before it lays out the new environment: until then it reads empty
        deadline = time.monotonic() + 10
        while sorted(run_pids(token)) != sorted([mine.pid, grandchild]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(run_pids(token)) == sorted([mine.pid, grandchild])

        killed = kill_run_processes(token)

        assert sorted(killed) == sorted([mine.pid, grandchild])
        assert mine.wait(10) == -9
        # kill(2) returns before the target is gone, and the grandchild is no child of ours to
        # wait for: until it has exited, its environment is still there to be found again
        assert exited(grandchild, 10), f"{grandchild} still running 10 s after SIGKILL"
        assert theirs.poll() is None and their_child in run_pids(other), "another run is left alone"
        assert kill_run_processes(token) == []
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait(10)
        kill_run_processes(other)


def test_no_proc_finds_nothing(tmp_path: Path) -> None:
    assert run_pids(new_token(), tmp_path / "no-proc") == []


def test_ansible_runner_reads_the_cancel_poll_from_the_settings_file(tmp_path: Path) -> None:
    """ansible-runner ignores run(settings=...) unless env/settings exists; with the file written,
    its pexpect loop looks at the cancel callback every CANCEL_POLL_SECONDS."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "p.yml").write_text("- hosts: localhost\n  tasks: []\n")
    write_settings(tmp_path)
    write_settings(tmp_path)  # idempotent
    rc = RunnerConfig(private_data_dir=str(tmp_path), playbook="p.yml", suppress_env_files=True)
    rc.prepare()
    assert rc.pexpect_timeout == CANCEL_POLL_SECONDS
    assert rc.suppress_ansible_output is True
    assert sorted(p.name for p in (tmp_path / "env").iterdir()) == ["settings"]
