"""Unit tests of the remediation pod image's reuse (noderemedy_lab.image): the key of its inputs
follows their contents, not their timestamps, and a last build is reused only when it was built
from the same key and its archive is whole. No debootstrap, no buildah, no network."""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from pathlib import Path

from noderemedy_lab.image import _reusable, inputs_key


def _wheel(path: Path, body: bytes, when: tuple[int, ...]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo("noderemedy_runner/cli.py", date_time=when), body)
    return path


def _tarball(path: Path, body: bytes, mtime: int) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("plugins/modules/ipmi_power.py")
        info.size, info.mtime = len(body), mtime
        tar.addfile(info, io.BytesIO(body))
    return path


def _inputs(tmp: Path, wheel_body: bytes = b"run", when: int = 0) -> tuple[Path, dict, Path, Path]:
    req = tmp / "requirements.txt"
    req.write_text("pyghmi>=1.6.19\n")
    ee = {"tag": "noderemedy/remediation:0.1.0", "pip": ["ansible-core>=2.19,<2.20"], "requirements": req}
    d = tmp / f"dist-{when}"
    d.mkdir(exist_ok=True)
    wheel = _wheel(d / "noderemedy-0.1.0-py3-none-any.whl", wheel_body, (2026, 1, 1 + when, 0, 0, 0))
    tarball = _tarball(d / "noderemedy-core-0.1.0.tar.gz", b"module", 1_700_000_000 + when)
    return tmp / "debian-bookworm-abc.tar", ee, wheel, tarball


def test_the_key_follows_the_contents_not_the_timestamps(tmp_path: Path) -> None:
    first = inputs_key(*_inputs(tmp_path))
    assert inputs_key(*_inputs(tmp_path, when=3)) == first  # rebuilt later, same bytes
    assert inputs_key(*_inputs(tmp_path, wheel_body=b"changed")) != first
    base, ee, wheel, tarball = _inputs(tmp_path)
    assert inputs_key(tmp_path / "debian-bookworm-other.tar", ee, wheel, tarball) != first
    assert inputs_key(base, {**ee, "pip": ["ansible-core>=2.18"]}, wheel, tarball) != first


def test_a_last_build_is_reused_only_from_the_same_key_and_whole(tmp_path: Path) -> None:
    out = tmp_path / "image"
    out.mkdir()
    archive = out / "remediation-0.1.0.oci.tar"
    archive.write_bytes(b"x" * 100)
    doc = {"image": "docker.io/noderemedy/remediation:0.1.0", "archive": str(archive), "size_bytes": 100}
    (out / "image.json").write_text(json.dumps({**doc, "inputs": "k1"}))
    assert _reusable(out, "k1") == {**doc, "inputs": "k1"}
    assert _reusable(out, "k2") is None
    with archive.open("ab") as f:  # a build cut short, or another archive since
        f.write(b"y")
    assert _reusable(out, "k1") is None
    os.unlink(archive)
    assert _reusable(out, "k1") is None
    (out / "image.json").write_text(json.dumps(doc))  # from before the key was recorded
    assert _reusable(out, "k1") is None
    assert _reusable(tmp_path / "nothing-built-yet", "k1") is None
