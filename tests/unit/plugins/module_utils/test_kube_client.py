"""The Kubernetes client layer: argspec with K8S_AUTH_* fallbacks, configuration building, error
classification. No network: a refused connection to a closed local port is the only I/O."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import urllib3
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from kubernetes.client.exceptions import ApiException

from ansible_collections.noderemedy.core.plugins.module_utils import _kube
from ansible_collections.noderemedy.core.plugins.module_utils._kube import (
    KUBE_AUTH_ARGSPEC,
    REASONS,
    KubeError,
    build_configuration,
    classify,
    get_api_client,
    request,
)

ENV = [
    "K8S_AUTH_KUBECONFIG",
    "K8S_AUTH_CONTEXT",
    "K8S_AUTH_HOST",
    "K8S_AUTH_API_KEY",
    "K8S_AUTH_VERIFY_SSL",
    "K8S_AUTH_SSL_CA_CERT",
    "K8S_AUTH_CERT_FILE",
    "K8S_AUTH_KEY_FILE",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV + ["KUBECONFIG"]:
        monkeypatch.delenv(name, raising=False)


def api_error(status: int, message: str = "boom", headers: dict | None = None) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.body = json.dumps({"kind": "Status", "message": message})
    exc.headers = headers or {}
    return exc


def kubeconfig(tmp_path: Path, server: str = "https://127.0.0.1:6443") -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "s3cr3t"}}],
        "contexts": [
            {"name": "one", "context": {"cluster": "c", "user": "u"}},
            {"name": "two", "context": {"cluster": "c", "user": "u", "namespace": "x"}},
        ],
        "current-context": "one",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def token(cfg) -> str:
    return cfg.get_api_key_with_prefix("BearerToken", alias="authorization")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (400, "invalid"),
        (401, "forbidden"),
        (403, "forbidden"),
        (404, "not_found"),
        (409, "conflict"),
        (422, "invalid"),
        (429, "too_many_requests"),
        (500, "other"),
        (504, "timeout"),
    ],
)
def test_classify_http_status(status, reason):
    err = classify(api_error(status, "the message"))
    assert (err.reason, err.status, err.message) == (reason, status, "the message")


def test_classify_connection_errors():
    refused = urllib3.exceptions.MaxRetryError(
        None, "/", urllib3.exceptions.NewConnectionError(None, "Connection refused")
    )
    assert classify(refused).reason == "unreachable"
    read_timeout = urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out")
    assert classify(read_timeout).reason == "timeout"
    assert classify(FileNotFoundError(2, "No such file", "/nope")).reason == "invalid"
    assert classify(RuntimeError("odd")).reason == "other"
    same = KubeError("x", "conflict")
    assert classify(same) is same


def test_kube_error_rejects_unknown_reason():
    with pytest.raises(ValueError, match="reason"):
        raise KubeError("x", "nope")
    assert {
        "not_found",
        "conflict",
        "forbidden",
        "too_many_requests",
        "timeout",
        "unreachable",
        "invalid",
    } < REASONS


def test_argspec_env_fallbacks_and_no_log(monkeypatch, tmp_path):
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(tmp_path / "kc"))
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "two")
    monkeypatch.setenv("K8S_AUTH_HOST", "https://127.0.0.1:1")
    monkeypatch.setenv("K8S_AUTH_API_KEY", "tok")
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "no")
    monkeypatch.setenv("K8S_AUTH_SSL_CA_CERT", "/ca.crt")
    monkeypatch.setenv("K8S_AUTH_CERT_FILE", "/c.crt")
    monkeypatch.setenv("K8S_AUTH_KEY_FILE", "/c.key")
    result = ArgumentSpecValidator(KUBE_AUTH_ARGSPEC).validate({})
    assert not result.error_messages, result.error_messages
    assert result.validated_parameters == {
        "kubeconfig": str(tmp_path / "kc"),
        "context": "two",
        "host": "https://127.0.0.1:1",
        "api_key": "tok",
        "validate_certs": False,
        "ca_cert": "/ca.crt",
        "client_cert": "/c.crt",
        "client_key": "/c.key",
    }
    assert result._no_log_values == {"tok"}


def test_argspec_aliases_of_kubernetes_core():
    result = ArgumentSpecValidator(KUBE_AUTH_ARGSPEC).validate(
        {"verify_ssl": True, "ssl_ca_cert": "/a", "cert_file": "/b", "key_file": "/c"}
    )
    params = result.validated_parameters
    assert (params["validate_certs"], params["ca_cert"], params["client_cert"], params["client_key"]) == (
        True,
        "/a",
        "/b",
        "/c",
    )


def test_configuration_from_kubeconfig_and_context(tmp_path):
    path = kubeconfig(tmp_path)
    cfg = build_configuration({"kubeconfig": str(path), "context": "two"})
    assert cfg.host == "https://127.0.0.1:6443"
    assert token(cfg) == "Bearer s3cr3t"
    assert cfg.verify_ssl is False


def test_explicit_options_override_kubeconfig(tmp_path):
    path = kubeconfig(tmp_path)
    cfg = build_configuration(
        {
            "kubeconfig": str(path),
            "host": "https://127.0.0.1:7443",
            "api_key": "other",
            "validate_certs": True,
        }
    )
    assert (cfg.host, token(cfg), cfg.verify_ssl) == (
        "https://127.0.0.1:7443",
        "Bearer other",
        True,
    )


def test_kubeconfig_as_dict(tmp_path):
    doc = yaml.safe_load(kubeconfig(tmp_path).read_text())
    assert build_configuration({"kubeconfig": doc}).host == "https://127.0.0.1:6443"


def test_default_kubeconfig_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, "https://127.0.0.1:9443")))
    assert build_configuration({}).host == "https://127.0.0.1:9443"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"kubeconfig": "/does/not/exist"}, "kubeconfig"),
        ({"host": "https://127.0.0.1:1", "ca_cert": "/does/not/exist"}, "ca_cert"),
        ({"host": "https://127.0.0.1:1", "client_cert": "/does/not/exist"}, "client_cert"),
    ],
)
def test_missing_files_are_invalid_and_named(params, field):
    with pytest.raises(KubeError) as info:
        build_configuration(params)
    assert info.value.reason == "invalid"
    assert info.value.message.startswith(field)


def test_no_credentials_at_all_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeError, match="no Kubernetes credentials") as info:
        build_configuration({})
    assert info.value.reason == "invalid"


def test_bad_kubeconfig_context_is_invalid(tmp_path):
    with pytest.raises(KubeError) as info:
        build_configuration({"kubeconfig": str(kubeconfig(tmp_path)), "context": "missing"})
    assert info.value.reason == "invalid"
    assert "missing" in info.value.message


def test_client_is_cached_per_auth_options(tmp_path):
    path = str(kubeconfig(tmp_path))
    first = get_api_client({"kubeconfig": path, "name": "a"})
    assert get_api_client({"kubeconfig": path, "name": "b"}) is first
    assert get_api_client({"kubeconfig": path, "context": "two"}) is not first


def test_refused_connection_is_unreachable():
    client = get_api_client({"host": f"https://127.0.0.1:{closed_port()}", "validate_certs": False})
    with pytest.raises(KubeError) as info:
        request(client, "GET", "/api/v1/nodes")
    assert info.value.reason == "unreachable"
    assert "127.0.0.1" in info.value.message
    assert _kube.HAS_KUBERNETES


def test_classify_keeps_status_causes():
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps(
        {
            "kind": "Status",
            "message": 'pods "p" is forbidden: unable to create new content in namespace x because it is being terminated',
            "details": {
                "causes": [{"reason": "NamespaceTerminating", "message": "namespace x is being terminated"}]
            },
        }
    )
    exc.headers = {}
    err = classify(exc)
    assert (err.reason, err.causes) == ("forbidden", ("NamespaceTerminating",))


def test_kube_node_checks_the_name_quotes_the_path_and_names_a_missing_node(monkeypatch):
    with pytest.raises(KubeError, match="^name: the node's name must not be empty$"):
        _kube.KubeNode(None, "")
    node = _kube.KubeNode(None, "a/b", dry_run=True)
    assert node.path == "/api/v1/nodes/a%2Fb"
    assert node.write_query() == [("dryRun", "All")]
    assert _kube.KubeNode(None, "n1").write_query() == []

    def missing(client, method, path, **kw):
        raise KubeError("nodes not found", "not_found", status=404)

    monkeypatch.setattr(_kube, "request", missing)
    with pytest.raises(KubeError, match="^node 'a/b' not found$") as err:
        node.get_node()
    assert err.value.reason == "not_found"
