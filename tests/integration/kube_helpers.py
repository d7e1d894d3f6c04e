"""Helpers shared by the integration tests that talk to the lab's API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noderemedy_lab import pki


def identity(lab: Any, tmp_path: Path, user: str) -> Path:
    """A kubeconfig for a client certificate of ``user`` minted from the lab CA (no RBAC rights)."""
    pki_dir = Path(lab.info["kube"]["pki"])
    work = tmp_path / "pki"
    work.mkdir(exist_ok=True)
    for f in ("ca.crt", "ca.key"):
        (work / f).write_bytes((pki_dir / f).read_bytes())
    pki.issue_client_cert(work, user, user)
    return pki.write_kubeconfig(tmp_path / f"{user}.kubeconfig", lab.info["kube"]["server"], work, user)
