"""Shared test helpers: the collection as ``noderemedy.core`` and a real ``ansible-playbook`` runner.

The lab fixtures (``lab``) come from the ``noderemedy_lab`` pytest plugin (pyproject entry point).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _collection_on_path() -> Path:
    """Make ``ansible_collections.noderemedy.core`` importable as *this* checkout.

    A symlink ``tests/output/collections/ansible_collections/noderemedy/core -> <checkout>``
    (inside the checkout, git-ignored, so two checkouts on one machine never import each other's
    code), put first on ``sys.path``. ``ansible-test units`` runs in a real collection tree instead.
    """
    base = ROOT / "tests" / "output" / "collections"
    link = base / "ansible_collections" / "noderemedy" / "core"
    if not link.is_symlink() or link.resolve() != ROOT:
        # made under a temporary name and renamed over: pytest-xdist workers do this at once
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".core.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(ROOT)
        os.replace(tmp, link)
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    return base


COLLECTIONS_BASE = _collection_on_path()


@pytest.fixture(scope="session")
def collections_path() -> Path:
    """A collections path whose ``ansible_collections/noderemedy/core`` is this checkout (symlink)."""
    return COLLECTIONS_BASE


@dataclass
class PlaybookResult:
    """Outcome of one ``ansible-playbook`` run: return code, output, and per-task results.

    ``results`` maps a task's name to its result dict (from the ``nr_json`` stdout callback's
    last host entry for that task), so tests assert on what the module returned.
    """

    rc: int
    stdout: str
    stderr: str
    results: dict[str, dict]

    def task(self, name: str) -> dict:
        """The result of task ``name``; KeyError naming the known tasks if it did not run."""
        if name not in self.results:
            raise KeyError(
                f"task {name!r} not in results; ran: {sorted(self.results)}\n{self.stderr[-2000:]}"
            )
        return self.results[name]


@pytest.fixture(scope="session")
def run_playbook(collections_path: Path, tmp_path_factory: pytest.TempPathFactory):
    """Run a list of tasks (or a whole play list) with the real ``ansible-playbook`` on localhost.

    Usage: ``run_playbook(tasks, check=False, extra_env=None, extravars=None, timeout=300)`` returns a
    :class:`PlaybookResult`. The test-only JSON stdout callback ``tests/callback_plugins/nr_json.py``
    is used so results are machine-readable.
    """
    workdir = tmp_path_factory.mktemp("plays")
    bindir = Path(sys.executable).parent
    counter = iter(range(1_000_000))

    def _run(
        tasks: list[dict] | None = None,
        *,
        plays: list[dict] | None = None,
        check: bool = False,
        diff: bool = False,
        extra_env: dict[str, str] | None = None,
        extravars: dict | None = None,
        timeout: float = 300,
    ) -> PlaybookResult:
        if plays is None:
            plays = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": tasks}]
        path = workdir / f"play{next(counter)}.yml"
        path.write_text(yaml.safe_dump(plays, sort_keys=False))
        argv = [str(bindir / "ansible-playbook"), "-i", "localhost,", str(path)]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        if extravars:
            argv += ["-e", json.dumps(extravars)]
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
                "ANSIBLE_STDOUT_CALLBACK": "nr_json",
                "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "tests" / "callback_plugins"),
                "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
                "ANSIBLE_LOCALHOST_WARNING": "False",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
                "ANSIBLE_NOCOLOR": "1",
                "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}",
            }
        )
        if extra_env:
            env.update(extra_env)
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        results: dict[str, dict] = {}
        try:
            doc = json.loads(proc.stdout)
            for play in doc.get("plays", []):
                for task in play.get("tasks", []):
                    hosts = task.get("hosts", {})
                    if hosts:
                        results[task["task"]["name"]] = list(hosts.values())[-1]
        except json.JSONDecodeError:
            pass
        return PlaybookResult(proc.returncode, proc.stdout, proc.stderr, results)

    return _run


#: Lines a test prints starting with this word are measurements: collected from every test (and
#: every pytest-xdist worker) into the run's summary and ``build/test-logs/figures.txt``.
FIGURE_PREFIX = "FIGURE "
_figures: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the ``FIGURE`` lines of a passed test's captured stdout (xdist forwards it)."""
    if report.when == "call" and report.passed:
        _figures.extend(
            f"{report.nodeid}: {line[len(FIGURE_PREFIX) :]}"
            for line in report.capstdout.splitlines()
            if line.startswith(FIGURE_PREFIX)
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the collected figures and write them to ``build/test-logs/figures.txt`` (on the
    controller only: an xdist worker's ``config`` has ``workerinput``)."""
    if not _figures or hasattr(terminalreporter.config, "workerinput"):
        return
    terminalreporter.section("figures (measured by the tests above)")
    for line in _figures:
        terminalreporter.write_line(line)
    out = ROOT / "build" / "test-logs"
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures.txt").write_text("\n".join(_figures) + "\n")
