"""The remediation pod image, built here: a Debian rootfs from ``debootstrap``, pip from PyPI, buildah.

No container registry is reachable, so ``./dev image`` builds the image users run
(``deploy/runner/deployment.yaml``) from nothing but Debian's archive and PyPI, with the contents
``deploy/execution-environment.yml`` describes (one list, read from there):

* the base: ``debootstrap --variant=minbase`` of Debian bookworm with Debian's ``python3``,
  ``python3-venv``, ``dumb-init`` (the entrypoint, as in an execution environment),
  ``ca-certificates``, and the ``[platform:dpkg]`` packages of ``deploy/image/bindep.txt``; cached as
  a tarball under ``<cache>/image-base/`` keyed by that package list (debootstrap is the slow part);
* a venv ``/opt/noderemedy`` with the execution environment's ``ansible_core`` and
  ``ansible_runner`` requirements and ``deploy/image/requirements.txt`` from PyPI, then the runner
  wheel (``--no-deps``, as the execution environment does);
* the collection installed from its own tarball with ``ansible-galaxy collection install
  --offline`` into ``/usr/share/ansible/collections``;
* ``buildah --storage-driver vfs`` (throw-away storage) ``from scratch`` -> ``copy`` the rootfs ->
  ``config`` (entrypoint ``dumb-init --``, PATH with the venv) -> ``commit`` straight to
  ``oci-archive:`` (layer gzipped) with the execution environment's tag (``docker.io/`` prefixed, as
  containerd names it). Nodes import the archive with ``ctr -n k8s.io images import``.

pip runs inside the rootfs (``chroot``) so that compiled wheels match Debian's Python; it uses the
host's CA bundle (``$PIP_CERT`` or ``/etc/ssl/certs/ca-certificates.crt``) and ``resolv.conf``, both
removed again before the commit.

Usage: ``python -m noderemedy_lab.image --dist build/dist --out build/image`` (what ``./dev image``
runs); prints the archive, its size and the build time, and writes them to ``<out>/image.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from .config import cache_dir
from .procs import ComponentError, require_binary

#: Debian suite of the base (the machine's own, so Debian's python3 is 3.11 like the project's).
SUITE = "bookworm"
#: What the base always has, besides the bindep list.
BASE_PACKAGES = ("python3", "python3-venv", "dumb-init", "ca-certificates")
#: Where the venv with ansible and the runner goes inside the image.
VENV = "/opt/noderemedy"
#: Where the collection is installed (a default collections path of ansible-core).
COLLECTIONS = "/usr/share/ansible/collections"


def pinned_versions() -> str:
    """Pip constraints (``name==version`` lines) of every distribution of this interpreter -- the
    project's venv, on the same Python minor version as the image's Debian python3 -- except the
    project itself and the installer's own packages. The image then gets the versions the tests
    ran with, and pip's resolver does not backtrack through the history of packages with many
    releases (boto3/botocore: minutes without constraints)."""
    from importlib import metadata

    skip = {"noderemedy", "pip", "setuptools", "wheel"}
    pins = {
        f"{d.metadata['Name']}=={d.version}"
        for d in metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower() not in skip
    }
    return "".join(f"{line}\n" for line in sorted(pins, key=str.lower))


def read_ee(ee_file: Path) -> dict:
    """The contents ``execution-environment.yml`` asks for: ``{"tag", "pip" (requirement strings:
    ansible-core, ansible-runner), "requirements" (path of the python requirements file),
    "debs" (Debian packages from the bindep file)}``. ValueError naming a missing field."""
    doc = yaml.safe_load(ee_file.read_text())
    try:
        deps = doc["dependencies"]
        tag = doc["options"]["tags"][0]
        pip = [deps["ansible_core"]["package_pip"], deps["ansible_runner"]["package_pip"]]
        requirements = ee_file.parent / deps["python"]
        bindep = ee_file.parent / deps["system"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"{ee_file}: missing field {exc}") from exc
    debs = []
    for line in bindep.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, rest = line.partition(" ")
        if "[" not in rest or "platform:dpkg" in rest:
            debs.append(name)
    return {"tag": tag, "pip": pip, "requirements": requirements, "debs": debs}


def _run(argv: list[str], step: str, timeout: float = 1800, env: dict | None = None) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    if out.returncode != 0:
        detail = (out.stderr.strip() or out.stdout.strip())[-3000:]
        raise ComponentError("image", f"{step} failed (exit {out.returncode}): {detail}")
    return out.stdout.strip()


def ensure_base(debs: list[str], say: Callable[[str], None], mirror: str) -> Path:
    """The debootstrap rootfs tarball for ``BASE_PACKAGES + debs`` (cached; built if missing)."""
    packages = sorted(set(BASE_PACKAGES) | set(debs))
    key = hashlib.sha256(json.dumps([SUITE, packages]).encode()).hexdigest()[:16]
    base = cache_dir() / "image-base"
    tarball = base / f"debian-{SUITE}-{key}.tar"
    if tarball.is_file():
        return tarball
    debootstrap = require_binary("debootstrap", "image", "debootstrap")
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    say(f"  debootstrap {SUITE} (minbase + {', '.join(packages)}) from {mirror}")
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        rootfs = Path(tmp) / "rootfs"
        _run(
            [debootstrap, "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(rootfs), mirror],
            "debootstrap",
        )
        # no package caches or lists in the image
        for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / d).glob("*"):
                if p.is_file():
                    p.unlink()
        part = Path(tmp) / "base.tar"
        with tarfile.open(part, "w") as tar:
            tar.add(rootfs, arcname=".")
        os.replace(part, tarball)
    say(f"  base rootfs in {time.monotonic() - t0:.0f} s: {tarball.name}")
    return tarball


def deps_snapshot(base: Path, ee: dict) -> Path:
    """Where the rootfs with the venv and the execution environment's Python packages (everything
    but the runner wheel and the collection) is cached: ``<cache>/image-deps/deps-<key>.tar``,
    keyed by the base tarball's name, the pip list, the requirements file and the pip
    constraints. A rebuild after a change of the runner or the collection alone starts from it and
    skips the pip install of its dependencies (minutes on 2 cores)."""
    h = hashlib.sha256()
    for part in (base.name, "\n".join(ee["pip"]), ee["requirements"].read_text(), pinned_versions()):
        h.update(part.encode() + b"\0")
    return cache_dir() / "image-deps" / f"deps-{h.hexdigest()[:16]}.tar"


def _snapshot(rootfs: Path, dest: Path, skip: str) -> None:
    """Write ``rootfs`` as an uncompressed tarball ``dest`` (atomically), without ``skip`` (a path
    relative to the rootfs) and what is below it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_suffix(f".{os.getpid()}.part")

    def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = member.name.removeprefix("./")
        return None if name == skip or name.startswith(skip + "/") else member

    with tarfile.open(part, "w") as tar:
        tar.add(rootfs, arcname=".", filter=keep)
    os.replace(part, dest)


def inputs_key(base: Path, ee: dict, wheel: Path, tarball: Path) -> str:
    """SHA-256 (hex) of everything that goes into the image: the base tarball's name (it carries
    its own key), the execution environment's tag and pip list, the requirements file, the pip
    constraints, and the names and bytes of every member of the runner wheel and the collection
    tarball (not their timestamps: a rebuilt wheel of the same checkout gives the same key)."""
    import zipfile

    h = hashlib.sha256()
    for part in (
        base.name,
        ee["tag"],
        "\n".join(ee["pip"]),
        ee["requirements"].read_text(),
        pinned_versions(),
    ):
        h.update(part.encode() + b"\0")
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            h.update(name.encode() + b"\0" + zf.read(name) + b"\0")
    with tarfile.open(tarball) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            f = tar.extractfile(member) if member.isfile() else None
            h.update(member.name.encode() + b"\0" + (f.read() if f else b"") + b"\0")
    return h.hexdigest()


def _reusable(out_dir: Path, key: str) -> dict | None:
    """The last build's ``image.json`` when it was built from ``key`` and its archive is still there
    whole (same size); None otherwise."""
    try:
        last = json.loads((out_dir / "image.json").read_text())
        ok = last.get("inputs") == key and Path(last["archive"]).stat().st_size == last["size_bytes"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return last if ok else None


def build(ee_file: Path, dist: Path, out_dir: Path, progress: Callable[[str], None] | None = None) -> dict:
    """Build the image; returns ``{"image", "archive", "size_bytes", "build_s", "base_s", "inputs",
    "reused"}``.

    ``dist`` holds the runner wheel (``noderemedy-*.whl``) and the collection tarball
    (``noderemedy-core-*.tar.gz``). When ``out_dir`` holds an image built from the same inputs
    (:func:`inputs_key`), it is reused as it is (``reused``: true; ``build_s`` of that build).
    ComponentError (component ``image``) naming the failed step.
    """
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    ee = read_ee(ee_file)
    wheels = sorted(dist.glob("noderemedy-*.whl"))
    tarballs = sorted(dist.glob("noderemedy-core-*.tar.gz"))
    if len(wheels) != 1 or len(tarballs) != 1:
        raise ComponentError("image", f"dist: expected one runner wheel and one collection tarball in {dist}")
    buildah = require_binary("buildah", "image", "buildah")
    chroot = require_binary("chroot", "image", "coreutils")
    mirror = os.environ.get("NODEREMEDY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    image = ee["tag"] if ee["tag"].count("/") > 1 else f"docker.io/{ee['tag']}"
    t0 = time.monotonic()
    base = ensure_base(ee["debs"], say, mirror)
    base_s = time.monotonic() - t0
    key = inputs_key(base, ee, wheels[0], tarballs[0])
    last = _reusable(out_dir, key)
    if last is not None:
        say(f"  same inputs as the last build ({key[:12]}): {Path(last['archive']).name} reused")
        return {**last, "reused": True}
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / f"{image.rsplit('/', 1)[1].replace(':', '-')}.oci.tar"
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        rootfs.mkdir()
        deps = deps_snapshot(base, ee)
        with tarfile.open(deps if deps.is_file() else base) as tar:
            tar.extractall(rootfs, filter="fully_trusted")  # our own debootstrap (+ pip) output
        stage = rootfs / "tmp" / "noderemedy-dist"
        stage.mkdir(parents=True)
        for f in (*wheels, *tarballs, ee["requirements"]):
            shutil.copy2(f, stage / f.name)
        (stage / "constraints.txt").write_text(pinned_versions())
        ca = Path(os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))
        shutil.copy2(ca, stage / "ca.crt")
        resolv = rootfs / "etc" / "resolv.conf"
        resolv_saved = resolv.read_bytes() if resolv.exists() and not resolv.is_symlink() else None
        resolv.unlink(missing_ok=True)
        shutil.copy2("/etc/resolv.conf", resolv)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        t1 = time.monotonic()
        say(f"  pip: {', '.join(ee['pip'])}, -r {ee['requirements'].name}, {wheels[0].name}")
        pip = [chroot, str(rootfs), f"{VENV}/bin/pip", "--disable-pip-version-check", "--no-cache-dir"]
        cert = ["--cert", "/tmp/noderemedy-dist/ca.crt"]
        if deps.is_file():
            say(f"  dependencies from {deps.name} (same pip list, requirements and constraints)")
        else:
            _run([chroot, str(rootfs), "python3", "-m", "venv", VENV], "python3 -m venv", env=env)
            _run(
                [
                    *pip,
                    "install",
                    "-q",
                    *cert,
                    *ee["pip"],
                    "-r",
                    f"/tmp/noderemedy-dist/{ee['requirements'].name}",
                    "-c",
                    "/tmp/noderemedy-dist/constraints.txt",
                ],
                "pip install",
                env=env,
            )
            # the snapshot holds the base's own resolv.conf, not the host's
            resolv.unlink()
            if resolv_saved is not None:
                resolv.write_bytes(resolv_saved)
            _snapshot(rootfs, deps, "tmp/noderemedy-dist")
            resolv.unlink(missing_ok=True)
            shutil.copy2("/etc/resolv.conf", resolv)
        _run(
            [*pip, "install", "-q", *cert, "--no-deps", f"/tmp/noderemedy-dist/{wheels[0].name}"],
            "pip install wheel",
            env=env,
        )
        _run(
            [
                chroot, str(rootfs), f"{VENV}/bin/ansible-galaxy", "collection", "install", "--offline",
                "-p", COLLECTIONS, f"/tmp/noderemedy-dist/{tarballs[0].name}",
            ],
            "ansible-galaxy collection install",
            env=env,
        )  # fmt: skip
        check = _run(
            [chroot, str(rootfs), f"{VENV}/bin/python", "-c",
             "import ansible, ansible_runner, noderemedy_runner, kubernetes, pyghmi, pysnmp; print(ansible.__version__)"],
            "import check", env=env,
        )  # fmt: skip
        say(f"  python packages in {time.monotonic() - t1:.0f} s (ansible-core {check})")
        shutil.rmtree(stage)
        resolv.unlink()
        if resolv_saved is not None:
            resolv.write_bytes(resolv_saved)
        for pyc in rootfs.glob("root/.cache/*"):
            shutil.rmtree(pyc, ignore_errors=True)
        store = ["--root", str(work / "store"), "--runroot", str(work / "run"), "--storage-driver", "vfs"]
        t2 = time.monotonic()
        ctr = _run([buildah, *store, "from", "scratch"], "buildah from")
        try:
            _run([buildah, *store, "copy", ctr, str(rootfs) + "/", "/"], "buildah copy")
            _run(
                [
                    buildah, *store, "config",
                    "--entrypoint", json.dumps(["/usr/bin/dumb-init", "--"]), "--cmd", "",
                    "--env", f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--env", "HOME=/tmp", "--env", "LANG=C.UTF-8", "--workingdir", "/",
                    "--label", f"org.opencontainers.image.description=noderemedy remediation pod ({ee_file.name})",
                    ctr,
                ],
                "buildah config",
            )  # fmt: skip
            # committed straight into the archive, its layer gzipped as a push would: a commit into
            # the store and a push from there wrote and read the whole rootfs once more (3 times
            # the time here, the same layer)
            part = work / "image.tar"
            _run(
                [buildah, *store, "commit", "--quiet", "--disable-compression=false", ctr,
                 f"oci-archive:{part}:{image}"],
                "buildah commit",
            )  # fmt: skip
            os.replace(part, archive)
        finally:
            subprocess.run([buildah, *store, "rm", "--all"], capture_output=True, timeout=120)
            subprocess.run([buildah, *store, "rmi", "--all", "--force"], capture_output=True, timeout=120)
        say(f"  buildah copy + commit in {time.monotonic() - t2:.0f} s")
    result = {
        "image": image,
        "archive": str(archive),
        "size_bytes": archive.stat().st_size,
        "build_s": round(time.monotonic() - t0, 1),
        "base_s": round(base_s, 1),
        "inputs": key,
        "reused": False,
    }
    (out_dir / "image.json").write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m noderemedy_lab.image", description=__doc__.split("\n\n")[0])
    p.add_argument("--ee", default="deploy/execution-environment.yml", type=Path)
    p.add_argument("--dist", default="build/dist", type=Path)
    p.add_argument("--out", default="build/image", type=Path)
    args = p.parse_args(argv)
    try:
        result = build(args.ee, args.dist, args.out)
    except (ComponentError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    how = "reused, built before in" if result.get("reused") else "built in"
    print(
        f"image {result['image']}: {result['archive']} "
        f"({result['size_bytes'] / 2**20:.0f} MiB, {how} {result['build_s']:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
