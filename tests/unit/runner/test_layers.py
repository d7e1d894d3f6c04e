"""The dependency arrows of the runner and the collection's plugins point one way.

Every import of every module under ``runner/noderemedy_runner`` and ``plugins/`` is read from its
source (:mod:`ast`: module-level, function-level and ``if TYPE_CHECKING:`` imports alike; an
import under TYPE_CHECKING still ties the two modules together for a reader and for mypy). Two
rules hold:

- **No import cycle** between modules (a module importing itself through others).
- **Layer order** (docs/runner.md "Layout"): ``cli`` (``cli``, ``arguments``) → ``loops`` →
  executors (``executor``, ``outcomes``, ``jobs``, ``job_manifests``, ``playbooks``,
  ``run_processes``) → ``machines`` (pure decisions) → ``config`` and the plain types below
  them; ``kube`` (the one place for API calls) beside loops and executors, importing none of
  cli/loops/executors/machines, and imported by no pure decision code. A module imports only
  from its own layer or a lower one. In ``plugins/``, modules import ``module_utils``, never
  the other way.

The layer of every runner module is named in :data:`LAYERS`: a new top-level module fails the
test until it is placed, so the map stays the one description of the layering.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUNNER = ROOT / "runner"
PLUGINS = ROOT / "plugins"
COLLECTION_PREFIX = "ansible_collections.noderemedy.core."

#: Runner layers, highest first; a module may import its own layer and those listed after it
#: (``kube`` is the exception: see :data:`KUBE_IMPORTERS`). Keys are module name prefixes (the
#: longest matching prefix wins).
LAYERS: dict[str, str] = {
    "noderemedy_runner.cli": "cli",
    "noderemedy_runner.arguments": "cli",  # the command line's flags and their checks
    "noderemedy_runner.loops": "loops",
    "noderemedy_runner.executor": "executors",
    "noderemedy_runner.jobs": "executors",
    "noderemedy_runner.job_batches": "executors",  # a batch of runs as one Job
    "noderemedy_runner.job_manifests": "executors",  # pure, but names the Jobs the executors make
    "noderemedy_runner.outcomes": "executors",  # what a run did, read from its job events
    "noderemedy_runner.batches": "executors",  # runs of many hosts at once, beside the executor
    "noderemedy_runner.batch_hosts": "executors",  # one host's outcome and artifacts in a batch
    "noderemedy_runner.shared_devices": "executors",  # pure: which hosts of a batch share a device call
    "noderemedy_runner.shared_results": "executors",  # pure: what a shared device call settles, per host
    "noderemedy_runner.playbooks": "executors",
    "noderemedy_runner.run_processes": "executors",
    "noderemedy_runner.metrics": "executors",
    "noderemedy_runner.observer": "executors",
    "noderemedy_runner.machines": "machines",
    "noderemedy_runner.config": "config",
    "noderemedy_runner.vocabulary": "types",
    "noderemedy_runner.times": "types",
    "noderemedy_runner.logs": "types",
    "noderemedy_runner": "types",  # the package's __init__ (its version)
    "noderemedy_runner.kube": "kube",
}
ORDER = ("cli", "loops", "executors", "machines", "config", "types")
#: Layers that may import ``kube``: the ones that do I/O, and ``config`` (``--config
#: configmap:…`` reads a ConfigMap). Pure decisions (``machines``) never do.
KUBE_IMPORTERS = frozenset({"cli", "loops", "executors", "config", "kube"})
#: What ``kube`` itself may import besides itself.
KUBE_IMPORTS = frozenset({"kube", "config", "types"})
#: Known upward imports that another change removes; each names why it is still here.
TOLERATED: Mapping[tuple[str, str], str] = {
    ("noderemedy_runner.config.remedy", "noderemedy_runner.machines.metal3"): (
        "the Metal3 remediation config still parses with the Metal3 machine's selector and "
        "timeouts; it moves with the Metal3 rework"
    ),
}


def _module_name(path: Path, base: Path, prefix: str = "") -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return prefix + ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the runner package and of ``plugins/`` by dotted name (plugins under
    their ``ansible_collections.noderemedy.core.plugins`` name)."""
    out = {_module_name(p, RUNNER): p for p in sorted((RUNNER / "noderemedy_runner").rglob("*.py"))}
    for p in sorted(PLUGINS.rglob("*.py")):
        out[_module_name(p, ROOT, COLLECTION_PREFIX)] = p
    return out


def _resolve(target: str, known: Mapping[str, Path]) -> str | None:
    """The known module ``target`` names (itself, or the package holding a name imported from it)."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, known: Mapping[str, Path]) -> Iterator[str]:
    """The known modules that module ``name`` imports, wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports the submodule ``pkg.mod`` when there is one
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            found = _resolve(target, known)
            if found is not None and found != name:
                yield found


def graph() -> dict[str, set[str]]:
    """Module → the known modules it imports."""
    known = modules()
    return {name: set(imports_of(name, path, known)) for name, path in known.items()}


def layer(module: str) -> str:
    """The layer of runner module ``module`` (longest prefix in :data:`LAYERS`); KeyError when
    none is named."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = LAYERS.get(".".join(parts[:n]))
        if found is not None:
            return found
    raise KeyError(module)


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations(edges: Mapping[str, set[str]]) -> list[str]:
    """Every import that breaks the layer order, as ``importer (layer) -> imported (layer)``."""
    out = []
    for importer, targets in sorted(edges.items()):
        if importer.startswith(COLLECTION_PREFIX):
            for target in sorted(targets):
                if ".module_utils" in importer and ".modules" in target.removeprefix(COLLECTION_PREFIX):
                    out.append(f"{importer} (module_utils) -> {target} (modules)")
            continue
        src = layer(importer)
        for target in sorted(targets):
            if target.startswith(COLLECTION_PREFIX) or (importer, target) in TOLERATED:
                continue
            dst = layer(target)
            if dst == "kube":
                ok = src in KUBE_IMPORTERS
            elif src == "kube":
                ok = dst in KUBE_IMPORTS
            else:
                ok = ORDER.index(dst) >= ORDER.index(src)
            if not ok:
                out.append(f"{importer} ({src}) -> {target} ({dst})")
    return out


def test_every_runner_module_has_a_layer() -> None:
    unplaced = []
    for name in modules():
        if name.startswith(COLLECTION_PREFIX):
            continue
        try:
            layer(name)
        except KeyError:
            unplaced.append(name)
    assert unplaced == [], f"modules missing from LAYERS: {unplaced}"


def test_imports_are_read() -> None:
    # the reader sees the kinds of import the rules are about: a top-level one, a function-level
    # one and a collection-path one in plugins/ (a reader that saw none would pass every rule)
    edges = graph()
    assert "noderemedy_runner.executor" in edges["noderemedy_runner.jobs"]
    assert "noderemedy_runner.kube.client" in edges["noderemedy_runner.cli"]  # imported in a function
    assert any(
        t.endswith("module_utils._static_pod.vocabulary")
        for t in edges[COLLECTION_PREFIX + "plugins.module_utils._static_pod.fallback"]
    )


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_layer_order() -> None:
    found = violations(graph())
    assert found == [], "imports against the layer order:\n" + "\n".join(found)


def test_tolerated_imports_are_named() -> None:
    # a tolerated exception says why it is still there
    assert all(why.strip() for why in TOLERATED.values())
