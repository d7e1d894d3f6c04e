"""How a stop reaches a playbook run: ansible-runner's cancel poll, and the run's processes, found
and ended as a whole.

ansible-runner looks at a run's cancel callback only when its ``pexpect`` read of the playbook's
output returns, at the latest after ``pexpect_timeout`` (5 s by default): :func:`write_settings`
sets :data:`CANCEL_POLL_SECONDS` instead.

ansible-runner ends a canceled or timed-out run by killing the process group of the
``ansible-playbook`` it spawned (``Runner.handle_termination``: ``killpg(SIGKILL)``). That does not
reach the work itself: ansible-core's task workers call ``setsid()`` when they start
(``WorkerProcess._detach`` in ``ansible/executor/process/worker.py``), so each worker, and the
module process it runs, lives in a session and process group of its own. A canceled fence step
would go on waiting for its BMC or setting its switch port after the runner said ``canceled``,
next to the replay a successor starts.

So each run carries a marker in its environment (:data:`RUN_MARKER` = a random token), which
every process of the run inherits (ansible passes its environment to workers and to local module
processes), and :func:`kill_run_processes` kills every process of this user whose environment
holds the run's token, read from ``/proc/<pid>/environ`` (Linux, proc(5)). A process that changed
its own environment away is not found; fencing modules do not.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The environment variable that marks the processes of one run.
RUN_MARKER = "NODEREMEDY_RUN_TOKEN"

_PROC = Path("/proc")

#: Seconds between two looks of ansible-runner at the cancel event (its ``pexpect_timeout``,
#: 5 s by default: a graceful stop waited that long for a quiet run to notice it).
CANCEL_POLL_SECONDS = 0.2
#: ansible-runner settings of every run (``env/settings``): no output of its own, and the cancel
#: event looked at every :data:`CANCEL_POLL_SECONDS`.
RUN_SETTINGS: dict[str, Any] = {"suppress_ansible_output": True, "pexpect_timeout": CANCEL_POLL_SECONDS}


def write_settings(private_dir: Path) -> Path:
    """Write :data:`RUN_SETTINGS` to ``<private_dir>/env/settings`` (JSON, which is YAML) and
    return its path. A file, because ansible-runner (2.4) drops the ``settings`` argument of
    ``run()`` when that file is missing (``BaseConfig.prepare_env`` resets the settings to {} on
    the missing file), so its default ``pexpect_timeout`` of 5 s would hold. No secret in it."""
    path = private_dir / "env" / "settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(RUN_SETTINGS, sort_keys=True) + "\n"
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_name(f".settings.{os.getpid()}.{threading.get_native_id()}")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def new_token() -> str:
    """A fresh run token (32 hex digits): unique per run, so a replay's processes are never
    taken for those of the run it replays."""
    return uuid.uuid4().hex


def run_pids(token: str, proc: Path = _PROC) -> list[int]:
    """Pids of the live processes whose environment holds ``RUN_MARKER=token``, this process
    excluded. Processes that vanish or cannot be read (another user's) are skipped; an empty list
    where ``proc`` does not exist (not Linux). A process in the middle of exec(2) shows an empty
    environment for an instant (the kernel closes its close-on-exec files, then lays out the new
    stack) and is not found in that instant."""
    want = f"{RUN_MARKER}={token}".encode()
    me = os.getpid()
    pids: list[int] = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return pids
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if want in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_run_processes(token: str, proc: Path = _PROC) -> list[int]:
    """SIGKILL every process of the run ``token`` (:func:`run_pids`); returns the pids signalled.
    A process that ended meanwhile is skipped. Never raises."""
    killed = []
    for pid in run_pids(token, proc):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            continue
    if killed:
        log.info("killed %d leftover process(es) of a stopped run: %s", len(killed), killed)
    return killed


__all__ = [
    "CANCEL_POLL_SECONDS",
    "RUN_MARKER",
    "RUN_SETTINGS",
    "kill_run_processes",
    "new_token",
    "run_pids",
    "write_settings",
]
