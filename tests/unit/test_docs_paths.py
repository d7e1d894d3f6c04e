"""The docs name only code that exists.

Every backquoted name in README.md, docs/*.md and the roles' READMEs that points into the
repository is checked against the checkout, so a rename or a removed module fails here instead of
leaving a reader at a dead end:

* a path (``runner/...``, ``plugins/...``, ``lab/...``, ``deploy/...``, ...) exists; in a role's
  README a path relative to the role (``meta/argument_specs.yml``) counts too;
* a bare Python file name (``executor.py``) is a file somewhere in the project's Python trees;
* a ``module.name`` whose module is one of the project's Python modules (``nodefence.decide``,
  ``lab.kubeconfig``) names a function, class, constant or attribute that module defines.

No network, no lab: the files are read as text.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: First path components that point into this repository.
TOP = ("runner", "plugins", "lab", "bench", "deploy", "roles", "playbooks", "tests", "docs", "extensions",
       "changelogs", "meta", "dev")  # fmt: skip
#: Trees whose ``*.py`` files are the project's Python modules.
PY_TREES = ("runner", "plugins", "lab", "bench", "tests")
#: ``x.y`` spans whose ``y`` is a file extension, not an attribute (``lab.json``, ``drain.go``).
EXTENSIONS = {"json", "yml", "yaml", "go", "md", "txt", "toml", "cfg", "properties", "kubeconfig", "py",
              "sh", "tar", "log", "png", "svg", "pem", "crt", "key", "ini", "j2"}  # fmt: skip
#: Dotted spans that are keys of data the docs describe (a module result, the lab's JSON), not code.
DATA_KEYS = {"fence.verified", "devices.relay_host"}


def _tracked() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [f for f in out.stdout.splitlines() if (ROOT / f).exists()]


FILES = _tracked()
MODULES: dict[str, list[Path]] = {}
for _f in FILES:
    if _f.endswith(".py") and _f.split("/")[0] in PY_TREES:
        MODULES.setdefault(Path(_f).stem, []).append(ROOT / _f)
        if (ROOT / _f).parent.joinpath("__init__.py").is_file():
            # a package (``machines/nodefence/``) is named like a module: its files define its names
            MODULES.setdefault(Path(_f).parent.name, []).append(ROOT / _f)
DOCS = sorted(
    f for f in FILES
    if f == "README.md" or (f.startswith("docs/") and f.endswith(".md"))
    or (f.startswith("roles/") and f.endswith("/README.md"))
)  # fmt: skip


def _spans(doc: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every inline code span of ``doc``, fenced blocks left out."""
    fenced = False
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            for span in re.findall(r"`([^`\n]+)`", line):
                yield number, span.strip()


def _defines(path: Path, name: str) -> bool:
    text = path.read_text()
    pattern = (
        rf"^\s*(?:async\s+)?def\s+{name}\b|^\s*class\s+{name}\b|^{name}\s*[:=]"
        rf"|self\.{name}\s*[:=]|^\s+{name}\s*:"
    )
    return re.search(pattern, text, re.M) is not None


def problems(doc: Path, role: bool = False) -> list[str]:
    """What the Markdown file ``doc`` names that does not exist, as ``"doc:line: `span`: why"``
    strings. ``role``: ``doc`` is a role's README (paths relative to the role count too)."""
    found = []
    for number, span in _spans(doc):
        where = f"{doc.name}:{number}: `{span}`"
        path = span.split("#")[0].split("::")[0].rstrip("/")
        if re.fullmatch(r"[A-Za-z0-9_.*/-]+", path) and "/" in path:
            if "*" in path or path.startswith(("/", "./", "../")):
                continue
            if role and (doc.parent / path).exists():
                continue
            if path.split("/")[0] in TOP and not (ROOT / path).exists():
                found.append(f"{where}: no such path")
        elif re.fullmatch(r"[a-z_][a-z0-9_]*\.py", span):
            if Path(span).stem not in MODULES:
                found.append(f"{where}: no such Python file in {', '.join(PY_TREES)}")
        elif m := re.fullmatch(r"([a-z_][a-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\(\))?", span):
            module, name = m.groups()
            if module in MODULES and name not in EXTENSIONS and f"{module}.{name}" not in DATA_KEYS:
                if not any(_defines(p, name) or p.stem == name for p in MODULES[module]):
                    shown = ", ".join(str(p.relative_to(ROOT)) for p in MODULES[module])
                    found.append(f"{where}: {shown} defines no {name}")
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_every_code_path_the_docs_name_exists(doc: str) -> None:
    assert problems(ROOT / doc, role=doc.startswith("roles/")) == []


def test_the_check_finds_a_missing_path_file_and_function(tmp_path: Path) -> None:
    """The check itself can fail: a doc naming a removed file, Python file and function."""
    doc = tmp_path / "probe.md"
    doc.write_text(
        "`runner/noderemedy_runner/nosuch.py`, `reconcile.py`, `executor.no_such_function`,\n"
        "`runner/noderemedy_runner/executor.py`, `executor.py`, `lab.json`\n"
        "```\n`in/a/fenced/block.py`\n```\n"
    )
    found = problems(doc)
    assert [f.split(": ", 2)[1] for f in found] == [
        "`runner/noderemedy_runner/nosuch.py`",
        "`reconcile.py`",
        "`executor.no_such_function`",
    ]
