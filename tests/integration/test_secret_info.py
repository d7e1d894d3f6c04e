"""noderemedy.core.secret_info against the lab's real kube-apiserver: the decoded data, the
errors users see (a missing Secret, a missing key, no rights), and no secret value in any error."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest
from kube_helpers import identity

pytestmark = [pytest.mark.lab, pytest.mark.kube]

PASSWORD = f"pw-{uuid.uuid4().hex}"  # a per-run value, so a leak cannot match by chance


@pytest.fixture
def secret(lab_kube, tmp_path: Path):
    """Secret ``bmc`` in a fresh namespace: username, password (text) and raw (not UTF-8)."""
    ns = f"sec-{uuid.uuid4().hex[:6]}"
    lab_kube.kubectl("create", "namespace", ns, check=True)
    raw = base64.b64encode(b"\xff\xfe").decode()
    manifest = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bmc", "namespace": ns},
        "stringData": {"username": "admin", "password": PASSWORD},
        "data": {"raw": raw},
    }
    (tmp_path / "secret.json").write_text(json.dumps(manifest))
    lab_kube.kubectl("apply", "-f", str(tmp_path / "secret.json"), check=True)
    yield ns
    lab_kube.kubectl("delete", "namespace", ns, "--wait=false")


def task(title: str, kubeconfig, **opts) -> dict:
    return {
        "name": title,
        "noderemedy.core.secret_info": {"kubeconfig": str(kubeconfig), **opts},
        "ignore_errors": True,
    }


def test_reads_decoded_keys_and_names_what_is_missing(lab_kube, secret, run_playbook):
    kc = lab_kube.kubeconfig
    out = run_playbook(
        [
            task("some", kc, name="bmc", namespace=secret, keys=["username", "password"]),
            task("all", kc, name="bmc", namespace=secret, keys=["username"]),
            task("missing key", kc, name="bmc", namespace=secret, keys=["username", "community"]),
            task("not utf-8", kc, name="bmc", namespace=secret, keys=["raw"]),
            task("missing secret", kc, name="nope", namespace=secret),
        ]
    )
    some = out.task("some")
    assert not some.get("failed") and some["changed"] is False
    assert some["data"] == {"username": "admin", "password": PASSWORD}
    assert some["keys"] == ["password", "username"]
    assert out.task("all")["data"] == {"username": "admin"}
    missing = out.task("missing key")
    assert missing["failed"] and missing["reason"] == "invalid"
    assert (
        missing["msg"]
        == f"Secret {secret}/bmc: key 'community' missing; keys are ['password', 'raw', 'username']"
    )
    bad = out.task("not utf-8")
    assert bad["failed"] and bad["msg"] == f"Secret {secret}/bmc: key 'raw' is not UTF-8 text"
    gone = out.task("missing secret")
    assert (
        gone["failed"] and gone["reason"] == "not_found" and gone["msg"] == f"Secret {secret}/nope not found"
    )
    for name in ("missing key", "not utf-8", "missing secret"):
        assert PASSWORD not in str(out.task(name)), name


def test_kubeconfig_without_rights_is_forbidden(lab_kube, secret, run_playbook, tmp_path: Path):
    kc = identity(lab_kube, tmp_path, f"nobody-{uuid.uuid4().hex[:6]}")
    res = run_playbook([task("read", kc, name="bmc", namespace=secret)]).task("read")
    assert res["failed"] and res["reason"] == "forbidden", res
    assert "secrets" in res["msg"] and PASSWORD not in str(res)
