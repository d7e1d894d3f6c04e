"""Build the lab's Kubernetes binaries from the Go module proxy, cached outside the repository.

No package registry ships kube-apiserver. The Go module proxy serves ``k8s.io/kubernetes``, but its
go.mod lists every staging module (``k8s.io/api``, ``k8s.io/client-go``...) at v0.0.0 with
``replace`` directives into ``./staging``, which a consumer does not have. So we write a small
consumer module that requires ``k8s.io/kubernetes vX.Y.Z`` and replaces each staging module with
its published ``v0.Y.Z`` (lab reference, "The Kubernetes control plane"), then ``go build`` the
commands. kwok and etcd are built the same way (their own modules, pinned), and so is cluster-api's
controller manager (``sigs.k8s.io/cluster-api/core``), whose go.mod replaces its ``api`` module
with ``./api``: the consumer module requires both at the pinned version.

Layout under :func:`noderemedy_lab.config.cache_dir`::

    src/kubernetes-v1.34.4/go.mod        the consumer module
    bin/kubernetes-v1.34.4/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
    bin/kubernetes-v1.34.4/{kubelet,kube-proxy}       (the real nodes'; same consumer module)
    bin/kwok-v0.7.0/kwok
    bin/etcd-v3.6.16/etcd
    bin/cluster-api-v1.14.2/cluster-api-manager   (only when asked for: ``noderemedy-lab build``,
                                             the ``capi`` stand-in cluster)
    bin/vcsim-lab-govmomi-v0.52.0-<hash>/vcsim-lab   govmomi's vCenter simulator + the lab's main
                                             (<hash>: of data/vcsim/{main.go,go.mod}, so a
                                             changed main is rebuilt, never served stale)
    logs/build-*.log

A warm run (all binaries present) does nothing. Each target is built into a temporary directory and
moved into place only when complete, so an interrupted build never leaves a half binary behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .config import (
    CLUSTER_API_VERSION,
    ETCD_VERSION,
    GOVMOMI_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    cache_dir,
)
from .procs import ComponentError, tail

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
#: What a real node runs, built from the same consumer module (about 4 more minutes on 2 cores).
NODE_COMMANDS = ("kubelet", "kube-proxy")


def _vcsim_source_key() -> str:
    """First 12 hex digits of the SHA-256 of the lab's vcsim main and go.mod (the build's input
    besides govmomi's version)."""
    from .bmc import data_path

    h = hashlib.sha256()
    for name in ("vcsim/main.go", "vcsim/go.mod"):
        h.update(data_path(name).read_bytes())
    return h.hexdigest()[:12]


def _bin_dirs() -> dict[str, Path]:
    base = cache_dir() / "bin"
    return {
        "kubernetes": base / f"kubernetes-v{KUBERNETES_VERSION}",
        "kwok": base / f"kwok-v{KWOK_VERSION}",
        "etcd": base / f"etcd-v{ETCD_VERSION}",
        "vcsim": base / f"vcsim-lab-govmomi-v{GOVMOMI_VERSION}-{_vcsim_source_key()}",
        "cluster-api": base / f"cluster-api-v{CLUSTER_API_VERSION}",
    }


def binary_paths() -> dict[str, Path]:
    """Where each lab binary lives once built: name -> path (may not exist yet)."""
    dirs = _bin_dirs()
    paths = {name: dirs["kubernetes"] / name for name in KUBE_COMMANDS + NODE_COMMANDS}
    paths["kwok"] = dirs["kwok"] / "kwok"
    paths["etcd"] = dirs["etcd"] / "etcd"
    paths["vcsim"] = dirs["vcsim"] / "vcsim-lab"
    paths["cluster-api"] = dirs["cluster-api"] / "cluster-api-manager"
    return paths


def missing(node: bool = True) -> list[str]:
    """Names of lab binaries not built yet (``node``: count the real nodes' kubelet and kube-proxy)."""
    return [
        name
        for name, path in binary_paths().items()
        if not path.is_file() and (node or name not in NODE_COMMANDS)
    ]


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ComponentError(
            "go toolchain", "the 'go' command is not on PATH (needed to build the control plane)"
        )
    return go


#: Seconds each Go build took on an idle 2-core machine of this kind with empty caches (module
#: downloads included), by the first word of its progress label: the estimate of the time left
#: until this machine has built it once (:func:`_build_times`).
TYPICAL_BUILD_SECONDS = {"kubernetes": 300, "kwok": 75, "etcd": 30, "vcsim-lab": 25, "cluster-api": 150}


#: Serialises :func:`_record_seconds` between the build threads of :func:`ensure_binaries`.
_TIMES_LOCK = threading.Lock()


def _build_times() -> Path:
    """``<cache>/logs/build-times.json``: label -> seconds of the last build of each component here."""
    return cache_dir() / "logs" / "build-times.json"


def _expected_seconds(component: str) -> float | None:
    """Seconds the build of ``component`` (a progress label) is expected to take: its last build
    on this machine, else :data:`TYPICAL_BUILD_SECONDS`; None when neither knows it."""
    try:
        last = json.loads(_build_times().read_text()).get(component)
    except (OSError, ValueError, AttributeError):
        last = None
    if isinstance(last, int | float):
        return float(last)
    typical = TYPICAL_BUILD_SECONDS.get(component.split(" ", 1)[0])
    return float(typical) if typical is not None else None


def _record_seconds(component: str, seconds: float) -> None:
    """Record ``seconds`` as the last build of ``component`` in :func:`_build_times`."""
    with _TIMES_LOCK:
        _write_seconds(component, seconds)


def _write_seconds(component: str, seconds: float) -> None:
    path = _build_times()
    try:
        times = json.loads(path.read_text())
    except (OSError, ValueError):
        times = {}
    if not isinstance(times, dict):
        times = {}
    times[component] = round(seconds, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".{os.getpid()}.part")
    part.write_text(json.dumps(times, indent=1, sort_keys=True))
    os.replace(part, path)


def progress_line(component: str, elapsed: float, expected: float | None) -> str:
    """The progress line of a build running for ``elapsed`` seconds: the time spent and, when
    ``expected`` (seconds) is known, the time left (``about 4 min left``), or that it takes longer
    than usual."""
    line = f"  {component}: {elapsed:4.0f} s"
    if expected is None:
        return line + " ..."
    left = expected - elapsed
    if left <= 0:
        return line + f", longer than the usual {expected:.0f} s ..."
    when = f"{left:.0f} s" if left < 90 else f"{left / 60:.0f} min"
    return line + f", about {when} left ..."


def _run(
    argv: list[str],
    cwd: Path,
    log: Path,
    component: str,
    progress: Callable[[str], None],
    env_extra: dict[str, str] | None = None,
) -> None:
    """Run a go command (``env_extra`` added to its environment), saying every 15 s how long it
    has run, in one line naming ``component``; ComponentError with the log tail on failure."""
    env = {**os.environ, **(env_extra or {})}
    env.setdefault("GOFLAGS", "-mod=mod")
    env["GOFLAGS"] = env["GOFLAGS"] if "-mod=" in env["GOFLAGS"] else env["GOFLAGS"] + " -mod=mod"
    env.setdefault("CGO_ENABLED", "0")
    start = time.monotonic()
    expected = _expected_seconds(component)
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        last = 0.0
        while proc.poll() is None:
            time.sleep(1)
            now = time.monotonic()
            if now - last >= 15:
                last = now
                progress(progress_line(component, now - start, expected))
    if proc.returncode != 0:
        raise ComponentError(
            f"build {component}",
            f"'{' '.join(argv[:3])} ...' failed (exit {proc.returncode}); log {log}:\n{tail(log, 25)}",
        )
    took = time.monotonic() - start
    _record_seconds(component, took)
    progress(f"  {component}: built in {took:.0f} s")


def _mod_download(
    module: str, key: str, cwd: Path, component: str, timeout: float | None = None
) -> dict[str, str]:
    """``go mod download -json module@version`` (run in ``cwd``, at most ``timeout`` seconds): the
    module's JSON record (``Dir``, ``GoMod``...). ComponentError naming ``component`` when the
    proxy does not serve it or the record has no ``key``."""
    out = subprocess.run(
        [_go(), "mod", "download", "-json", module],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        timeout=timeout,
    )
    try:
        info = json.loads(out.stdout)
    except json.JSONDecodeError:
        info = {"Error": out.stderr.strip() or out.stdout.strip()}
    if out.returncode != 0 or info.get("Error") or not info.get(key):
        raise ComponentError(
            component, f"cannot fetch {module} from the Go module proxy: {info.get('Error')}"
        )
    return dict(info)


def _kube_gomod(workdir: Path, log: Path, progress: Callable[[str], None]) -> None:
    """Write the consumer go.mod for k8s.io/kubernetes with replaces for every staging module."""
    info = _mod_download(f"k8s.io/kubernetes@v{KUBERNETES_VERSION}", "GoMod", workdir, "build kubernetes")
    upstream = Path(info["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", upstream, flags=re.M)
    if not staging:
        raise ComponentError(
            "build kubernetes", "no staging replace directives found in k8s.io/kubernetes go.mod"
        )
    minor = KUBERNETES_VERSION.split(".", 1)[1]
    lines = [
        "module noderemedy.local/kubebuild",
        "",
        "go 1.24.0",
        "",
        f"require k8s.io/kubernetes v{KUBERNETES_VERSION}",
        "",
        "replace (",
        *[f"\t{mod} => {mod} v0.{minor}" for mod in staging],
        ")",
        "",
    ]
    (workdir / "go.mod").write_text("\n".join(lines))
    progress(f"  kubernetes: consumer module with {len(staging)} staging replaces")


def _workdirs(name: str, log_name: str | None = None) -> tuple[Path, Path]:
    """The consumer module's folder ``src/<name>`` under :func:`~noderemedy_lab.config.cache_dir`
    (created) and its build log ``logs/build-<log_name or name>.log`` (folder created)."""
    src = cache_dir() / "src" / name
    src.mkdir(parents=True, exist_ok=True)
    log = cache_dir() / "logs" / f"build-{log_name or name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return src, log


def _go_build(
    progress: Callable[[str], None],
    src: Path,
    log: Path,
    label: str,
    binaries: dict[str, str],
    dest: Path,
    ldflags: str = "-s -w",
) -> None:
    """``go build -trimpath`` each package of ``binaries`` (binary name -> package) in the consumer
    module ``src`` into a temporary directory, then move the binaries into ``dest`` (created), so an
    interrupted build never leaves a half binary. Several binaries are named after their packages
    (``go build -o dir/``); one is named by its key. ``label`` names the build in the progress
    lines; ComponentError with the log's tail (``_run``) when ``go build`` fails."""
    with tempfile.TemporaryDirectory(dir=src) as tmp:
        if len(binaries) == 1:
            ((name, package),) = binaries.items()
            out = [f"{tmp}/{name}", package]
        else:
            out = [tmp + "/", *binaries.values()]
        _run([_go(), "build", "-trimpath", "-ldflags", ldflags, "-o", *out], src, log, label, progress)
        dest.mkdir(parents=True, exist_ok=True)
        for name in binaries:
            os.replace(Path(tmp) / name, dest / name)


def build_kubernetes(progress: Callable[[str], None], commands: tuple[str, ...] = KUBE_COMMANDS) -> None:
    """Build ``commands`` of ``k8s.io/kubernetes/cmd`` (version stamped) from the consumer module:
    by default kube-apiserver, kube-controller-manager, kube-scheduler and kubectl."""
    src, log = _workdirs(f"kubernetes-v{KUBERNETES_VERSION}")
    if not (src / "go.mod").is_file():
        _kube_gomod(src, log, progress)
    major, minor, _ = KUBERNETES_VERSION.split(".")
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion=v{KUBERNETES_VERSION}",
            f"-X k8s.io/component-base/version.gitMajor={major}",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion=v{KUBERNETES_VERSION}",
        ]
    )
    _go_build(
        progress,
        src,
        log,
        f"kubernetes v{KUBERNETES_VERSION} ({', '.join(commands)})",
        {c: f"k8s.io/kubernetes/cmd/{c}" for c in commands},
        _bin_dirs()["kubernetes"],
        ldflags,
    )


def _go_install(
    module_pkg: str, version: str, dest: Path, name: str, progress: Callable[[str], None]
) -> None:
    """``go install pkg@version`` into a temp GOBIN, then move the binary into ``dest``."""
    log = cache_dir() / "logs" / f"build-{name}-v{version}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    work = cache_dir() / "src"
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        _run(
            [_go(), "install", "-trimpath", "-ldflags", "-s -w", f"{module_pkg}@v{version}"],
            work,
            log,
            f"{name} v{version}",
            progress,
            env_extra={"GOBIN": tmp},  # its own: other builds run beside it (ensure_binaries)
        )
        built = Path(tmp) / Path(module_pkg).name
        if not built.is_file():
            candidates = list(Path(tmp).iterdir())
            if len(candidates) != 1:
                raise ComponentError(f"build {name}", f"go install produced {candidates}")
            built = candidates[0]
        dest.mkdir(parents=True, exist_ok=True)
        os.replace(built, dest / name)


def build_etcd(progress: Callable[[str], None]) -> None:
    """Build the etcd server. Its go.mod has relative ``replace`` directives, so ``go install
    pkg@version`` refuses it; a consumer module requiring ``go.etcd.io/etcd/server/v3`` builds it."""
    src, log = _workdirs(f"etcd-v{ETCD_VERSION}")
    (src / "go.mod").write_text(
        f"module noderemedy.local/etcdbuild\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 v{ETCD_VERSION}\n"
    )
    binaries = {"etcd": "go.etcd.io/etcd/server/v3"}
    _go_build(progress, src, log, f"etcd v{ETCD_VERSION}", binaries, _bin_dirs()["etcd"])


def build_vcsim(progress: Callable[[str], None]) -> None:
    """Build ``vcsim-lab``: govmomi's vCenter simulator (package ``simulator``) with the lab's power
    hook (``data/vcsim/main.go``). govmomi's own ``vcsim`` command is a nested module the Go
    module proxy does not serve, so a consumer module requiring ``github.com/vmware/govmomi``
    builds the lab's small main instead."""
    from .bmc import data_path

    dest = _bin_dirs()["vcsim"]
    src, log = _workdirs(dest.name, f"vcsim-lab-v{GOVMOMI_VERSION}")
    shutil.copyfile(data_path("vcsim/main.go"), src / "main.go")
    gomod = data_path("vcsim/go.mod").read_text()
    (src / "go.mod").write_text(re.sub(r"govmomi v[0-9.]+", f"govmomi v{GOVMOMI_VERSION}", gomod))
    _go_build(progress, src, log, f"vcsim-lab (govmomi v{GOVMOMI_VERSION})", {"vcsim-lab": "."}, dest)


def build_cluster_api(progress: Callable[[str], None]) -> None:
    """Build cluster-api's controller manager (``sigs.k8s.io/cluster-api/core``, the ``main`` of
    its core provider) as ``cluster-api-manager``, version stamped. Its go.mod replaces
    ``sigs.k8s.io/cluster-api/api`` with ``./api``, which ``go install pkg@version`` refuses, so a
    consumer module requires both modules at :data:`~noderemedy_lab.config.CLUSTER_API_VERSION`
    (the ``api`` module is published on its own with the same tags)."""
    src, log = _workdirs(f"cluster-api-v{CLUSTER_API_VERSION}")
    (src / "go.mod").write_text(
        "module noderemedy.local/capibuild\n\ngo 1.26.0\n\nrequire (\n"
        f"\tsigs.k8s.io/cluster-api v{CLUSTER_API_VERSION}\n"
        f"\tsigs.k8s.io/cluster-api/api v{CLUSTER_API_VERSION}\n)\n"
    )
    _go_build(
        progress,
        src,
        log,
        f"cluster-api v{CLUSTER_API_VERSION} (controller manager)",
        {"cluster-api-manager": "sigs.k8s.io/cluster-api/core"},
        _bin_dirs()["cluster-api"],
        f"-s -w -X sigs.k8s.io/cluster-api/version.gitVersion=v{CLUSTER_API_VERSION}",
    )


def cluster_api_module_dir() -> Path:
    """The pinned ``sigs.k8s.io/cluster-api`` module in Go's module cache (its ``core/config``:
    the real CRDs and webhook manifests), downloaded if absent; ComponentError if the proxy does
    not serve it."""
    info = _mod_download(
        f"sigs.k8s.io/cluster-api@v{CLUSTER_API_VERSION}", "Dir", cache_dir(), "cluster-api", 600
    )
    return Path(info["Dir"])


def ensure_binaries(
    progress: Callable[[str], None] | None = None,
    node: bool = True,
    vcsim: bool = True,
    capi: bool = False,
) -> dict[str, Path]:
    """Build whatever lab binary is missing and return name -> path for all of them.

    ``node``: also the real nodes' kubelet and kube-proxy (False: a kwok-only lab does not wait
    for them; they are then absent from the result if not built). ``vcsim``: also the vCenter
    simulator (False: the demo and a lab without the vSphere peer do without it). ``capi``: also
    cluster-api's controller manager (``noderemedy-lab build`` and the ``capi`` stand-in cluster
    ask for it; a lab start does not wait for it).

    The builds run side by side, each in its own thread: Kubernetes (the control plane and, in the
    same ``go build``, the node's commands, which share most packages), kwok, etcd, vcsim and
    cluster-api. On
    2 cores the Kubernetes build takes most of the CPU; the others spend much of their time
    fetching modules, which then overlaps it. Each says how long it has run every 15 s, in one
    line naming it (``progress``, default: stderr). The first build takes several minutes on 2
    cores; later calls return at once. Raises ComponentError naming the component whose build
    failed (the first one, once every build has ended).
    """
    from concurrent.futures import ThreadPoolExecutor

    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    wanted = [
        n
        for n in binary_paths()
        if (node or n not in NODE_COMMANDS) and (vcsim or n != "vcsim") and (capi or n != "cluster-api")
    ]
    todo = [n for n in missing(node) if n in wanted]
    jobs: list[tuple[str, Callable[[], None]]] = []
    kube_todo = tuple(n for n in KUBE_COMMANDS + NODE_COMMANDS if n in todo)
    if kube_todo:

        def kube() -> None:
            try:
                build_kubernetes(say, kube_todo)
            except ComponentError as exc:
                if set(kube_todo) <= set(NODE_COMMANDS):  # only the node's: name them
                    raise ComponentError(f"build {' and '.join(kube_todo)}", str(exc)) from exc
                raise

        jobs.append((f"kubernetes ({', '.join(kube_todo)})", kube))
    if "kwok" in todo:
        jobs.append(
            (
                "kwok",
                lambda: _go_install(
                    "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION, _bin_dirs()["kwok"], "kwok", say
                ),
            )
        )
    if "etcd" in todo:
        jobs.append(("etcd", lambda: build_etcd(say)))
    if "vcsim" in todo:
        jobs.append(("vcsim", lambda: build_vcsim(say)))
    if "cluster-api" in todo:
        jobs.append(("cluster-api", lambda: build_cluster_api(say)))
    if jobs:
        say(
            f"building from the Go module proxy, side by side: {', '.join(n for n, _ in jobs)} "
            f"(Kubernetes v{KUBERNETES_VERSION}: about 5 min on 2 cores the first time)"
        )
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            futures = [(name, pool.submit(job)) for name, job in jobs]
        for name, fut in futures:
            exc = fut.exception()
            if isinstance(exc, ComponentError):
                raise exc
            if exc is not None:
                raise ComponentError(f"build {name}", str(exc)) from exc
    still = [n for n in missing(node) if n in wanted]
    if still:
        raise ComponentError("build", f"binaries still missing after build: {', '.join(still)}")
    return {name: path for name, path in binary_paths().items() if path.is_file()}
