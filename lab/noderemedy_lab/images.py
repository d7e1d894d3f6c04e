"""Container images for the lab's real nodes, built here with buildah (no registry is reachable).

Two tiny images from one rootfs made of Debian's statically linked ``busybox`` (package
``busybox-static``) and a symlink per applet:

* :data:`PAUSE_IMAGE` - the pod sandbox image (containerd's ``sandbox_image``): ``sleep infinity``.
  Any image whose entrypoint sleeps forever serves as "pause" (lab reference, real node, item 4).
* :data:`BUSYBOX_IMAGE` - the workload image tests and the demo run (``/bin/sh`` and friends).

Each is built with ``buildah --storage-driver vfs`` in a throw-away storage directory
(``from scratch`` -> ``copy`` the rootfs -> ``config`` -> ``commit`` -> ``push oci-archive:``) and
cached as an OCI archive under ``<cache>/images/``, keyed by the busybox binary's hash and the
recipe, so a warm run does nothing. Nodes import the archives with ``ctr -n k8s.io images import``;
pods use ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .config import cache_dir
from .procs import ComponentError, require_binary

PAUSE_IMAGE = "noderemedy.local/pause:lab"
BUSYBOX_IMAGE = "noderemedy.local/busybox:lab"

#: busybox applets linked into the rootfs (what the pause image, tests and the demo run).
APPLETS = (
    "sh", "sleep", "echo", "cat", "date", "ls", "mkdir", "printf", "tail", "head", "true", "false",
    "env", "wc", "grep", "id", "touch", "rm", "test", "[", "hostname", "ps", "kill", "stat",
)  # fmt: skip

#: image name -> OCI config (entrypoint, cmd) applied with ``buildah config``.
RECIPES: dict[str, dict[str, list[str]]] = {
    PAUSE_IMAGE: {"entrypoint": ["/bin/sleep", "infinity"], "cmd": []},
    BUSYBOX_IMAGE: {"entrypoint": [], "cmd": ["/bin/sh"]},
}


def _key(busybox: Path) -> str:
    h = hashlib.sha256(busybox.read_bytes())
    h.update(json.dumps([APPLETS, RECIPES], sort_keys=True).encode())
    return h.hexdigest()[:16]


def archive_paths(busybox: Path) -> dict[str, Path]:
    """Where each image's OCI archive is cached: image name -> path (may not exist yet)."""
    key = _key(busybox)
    base = cache_dir() / "images"
    return {name: base / f"{name.split('/')[-1].replace(':', '-')}-{key}.tar" for name in RECIPES}


def _buildah(buildah: str, store: Path, *args: str) -> str:
    argv = [
        buildah, "--root", str(store / "root"), "--runroot", str(store / "runroot"),
        "--storage-driver", "vfs", *args,
    ]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise ComponentError(
            "images", f"'buildah {' '.join(args[:2])}' failed (exit {out.returncode}): {out.stderr.strip()}"
        )
    return out.stdout.strip()


def _from_rootfs(buildah: str, store: Path, rootfs: Path) -> str:
    """A new scratch container holding ``rootfs``; returns its id."""
    ctr = _buildah(buildah, store, "from", "scratch")
    _buildah(buildah, store, "copy", ctr, str(rootfs) + "/", "/")
    return ctr


def _commit(buildah: str, store: Path, ctr: str, name: str, dest: Path, *config: str) -> None:
    """Configure container ``ctr`` (``buildah config`` arguments ``config``), commit it as image
    ``name`` and write its OCI archive to ``dest`` (replaced whole: never half-written). ``store``
    lies in the build's temporary directory, where the archive is written first."""
    _buildah(buildah, store, "config", *config, ctr)
    _buildah(buildah, store, "commit", "--quiet", ctr, name)
    out = store.parent / "image.tar"  # the build's own temporary directory: removed on failure
    _buildah(buildah, store, "push", "--quiet", name, f"oci-archive:{out}:{name}")
    os.replace(out, dest)


def _remove_all(buildah: str, store: Path) -> None:
    """Remove every container of ``store``: vfs keeps plain directories, but be sure nothing
    buildah mounted survives the removal of the store."""
    subprocess.run(
        [buildah, "--root", str(store / "root"), "--runroot", str(store / "runroot"),
         "--storage-driver", "vfs", "rm", "--all"],
        capture_output=True, timeout=60,
    )  # fmt: skip


def _require_static(binary: Path | str, hint: str = "") -> None:
    """ComponentError ``images`` if ``binary`` is dynamically linked (``ldd`` lists libraries): the
    image would need its libraries too."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    if out.returncode == 0 and "=>" in out.stdout:
        raise ComponentError("images", f"{binary} is not statically linked{hint}")


def ensure_node_images(progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    """Build the real nodes' images if not cached; returns image name -> OCI archive path.

    Raises ComponentError (component ``images``) if busybox or buildah is missing or a buildah
    step fails; nothing half-built is left in the cache (archives are moved into place whole).
    """
    say = progress or (lambda line: None)
    busybox = Path(require_binary("busybox", "images", "busybox-static"))
    paths = archive_paths(busybox)
    todo = [name for name, path in paths.items() if not path.is_file()]
    if not todo:
        return paths
    buildah = require_binary("buildah", "images", "buildah")
    _require_static(busybox, " (install 'busybox-static')")
    t0 = time.monotonic()
    base = cache_dir() / "images"
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev", "data"):
            (rootfs / d).mkdir(parents=True)
        os.chmod(rootfs / "tmp", 0o1777)
        shutil.copy2(busybox, rootfs / "bin" / "busybox")
        for applet in APPLETS:
            (rootfs / "bin" / applet).symlink_to("busybox")
        (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n")
        (rootfs / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        store = work / "store"
        try:
            for name in todo:
                recipe = RECIPES[name]
                ctr = _from_rootfs(buildah, store, rootfs)
                _commit(
                    buildah, store, ctr, name, paths[name],
                    "--entrypoint", json.dumps(recipe["entrypoint"]),
                    "--cmd", " ".join(recipe["cmd"]),
                    "--env", "PATH=/bin", "--workingdir", "/",
                )  # fmt: skip
                _buildah(buildah, store, "rm", ctr)
        finally:
            _remove_all(buildah, store)
    say(f"  built images {', '.join(todo)} in {time.monotonic() - t0:.1f} s")
    return paths


def ensure_binary_image(
    name: str, binaries: dict[str, Path], progress: Callable[[str], None] | None = None
) -> Path:
    """An image ``name`` holding statically linked ``binaries`` (path in the image -> file here) and
    an empty ``/tmp``, no entrypoint (pods give ``command``); returns its cached OCI archive.

    Cached under ``<cache>/images/`` keyed by each binary's path, size and mtime. Raises
    ComponentError (component ``images``) if a binary is missing or dynamically linked, or a buildah
    step fails; nothing half-built is left in the cache.
    """
    say = progress or (lambda line: None)
    h = hashlib.sha256(name.encode())
    for dest, src in sorted(binaries.items()):
        st = Path(src).stat()
        h.update(f"{dest}={src}:{st.st_size}:{st.st_mtime_ns}".encode())
    base = cache_dir() / "images"
    path = base / f"{name.split('/')[-1].replace(':', '-')}-{h.hexdigest()[:16]}.tar"
    if path.is_file():
        return path
    for src in binaries.values():
        _require_static(src)
    buildah = require_binary("buildah", "images", "buildah")
    t0 = time.monotonic()
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        work = Path(tmp)
        rootfs = work / "rootfs"
        (rootfs / "tmp").mkdir(parents=True)
        os.chmod(rootfs / "tmp", 0o1777)
        for dest, src in binaries.items():
            target = rootfs / dest.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
        store = work / "store"
        try:
            ctr = _from_rootfs(buildah, store, rootfs)
            _commit(buildah, store, ctr, name, path, "--env", "PATH=/usr/local/bin", "--workingdir", "/")
        finally:
            _remove_all(buildah, store)
    say(f"  built image {name} in {time.monotonic() - t0:.1f} s")
    return path
