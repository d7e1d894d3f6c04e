"""What bench/fencing.py's measurements are made of: the median of interleaved timed rounds, a
checked subprocess run, and a one-task ``ansible-playbook`` play run against this checkout as the
``noderemedy.core`` collection.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def collections_path(tmp: Path) -> Path:
    """``tmp/collections/ansible_collections/noderemedy/core`` -> this checkout; importable too."""
    base = tmp / "collections"
    ns = base / "ansible_collections" / "noderemedy"
    ns.mkdir(parents=True, exist_ok=True)
    link = ns / "core"
    if not link.exists():
        link.symlink_to(ROOT)
    sys.path.insert(0, str(base))
    return base


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(
    fns: dict[str, Callable[[], object]], reset: Callable[[], object] | None, samples: int
) -> dict[str, float]:
    """Median wall-clock seconds of each of ``fns`` over ``samples`` rounds, after one warm-up round.

    Each round runs every function once, in turn (``reset`` untimed before each), so ours and the
    anchor see the same machine load even when other work on the host comes and goes.
    """
    values: dict[str, list[float]] = {name: [] for name in fns}
    for round_no in range(samples + 1):
        for name, fn in fns.items():
            if reset:
                reset()
            seconds = timed(fn)
            if round_no:  # round 0 is the warm-up
                values[name].append(seconds)
    return {name: statistics.median(v) for name, v in values.items()}


def run(argv: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode not in ok:
        shown = " ".join(a if not a.startswith("-p") else "-p ***" for a in argv[:3])
        raise RuntimeError(f"{shown}... exited {proc.returncode}: {proc.stderr[-1500:]}{proc.stdout[-1500:]}")


class Playbook:
    """Run one module task with ``ansible-playbook`` (local connection, no facts) and check it passed."""

    def __init__(self, tmp: Path, collections: Path) -> None:
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env.update(
            {
                "ANSIBLE_COLLECTIONS_PATH": str(collections),
                "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
                "ANSIBLE_LOCALHOST_WARNING": "False",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
                "ANSIBLE_NOCOLOR": "1",
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        self.n = 0

    def argv(self, module: str, args: dict | None) -> list[str]:
        """The ``ansible-playbook`` command of a play with one ``module`` task; ``args`` None: the
        same play with a ``meta: noop`` task instead."""
        self.n += 1
        path = self.tmp / f"bench{self.n}.yml"
        task = {"ansible.builtin.meta": "noop"} if args is None else {module: args}
        play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [task]}]
        path.write_text(yaml.safe_dump(play, sort_keys=False))
        return [str(BIN / "ansible-playbook"), "-i", "localhost,", str(path)]

    def __call__(self, module: str, args: dict | None) -> Callable[[], None]:
        """A run of one ``module`` task; ``args`` None: the same play with a ``meta: noop`` task
        instead (ansible-playbook's own cost, subtracted in the rows that say "minus no-op")."""
        argv = self.argv(module, args)
        return lambda: run(argv, self.env)
