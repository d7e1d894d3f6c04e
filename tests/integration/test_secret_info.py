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


def test_fencing_module_reads_its_credentials_from_a_secret(lab_kube, run_playbook, tmp_path: Path):
    """ipmi_power with credentials_secret against the node's real BMC: the status read works with
    the Secret's username/password, the password appears nowhere in the result (not even with
    -vvv output), and a missing Secret fails before anything is sent, naming the Secret."""
    node = lab_kube.info["nodes"][0]
    bmc = lab_kube.info["devices"]["bmcs"][node]
    ns = f"cred-{uuid.uuid4().hex[:6]}"
    lab_kube.kubectl("create", "namespace", ns, check=True)
    try:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "bmc", "namespace": ns},
            "stringData": {"username": bmc["username"], "password": bmc["password"]},
        }
        (tmp_path / "bmc.json").write_text(json.dumps(secret))
        lab_kube.kubectl("apply", "-f", str(tmp_path / "bmc.json"), check=True)

        def ipmi(title: str, secret_name: str) -> dict:
            return {
                "name": title,
                "noderemedy.core.ipmi_power": {
                    "ipaddr": bmc["host"],
                    "ipport": bmc["port"],
                    "cipher": bmc["cipher"],
                    "state": "status",
                    "credentials_secret": {
                        "name": secret_name,
                        "namespace": ns,
                        "kubeconfig": str(lab_kube.kubeconfig),
                    },
                },
                "ignore_errors": True,
            }

        out = run_playbook([ipmi("status", "bmc"), ipmi("missing", "nope")])
        ok = out.task("status")
        assert not ok.get("failed") and ok["power_state"] in ("on", "off"), ok
        missing = out.task("missing")
        assert missing["failed"] and missing["error"] == "config" and missing["reason"] == "not_found"
        assert missing["msg"] == f"credentials_secret: Secret {ns}/nope not found"
        assert missing["fence"]["verified"] is False
        assert bmc["password"] not in out.stdout + out.stderr
    finally:
        lab_kube.kubectl("delete", "namespace", ns, "--wait=false")
