"""Unit tests of how the lab installs cluster-api's ``core/config`` (noderemedy_lab.capi): the CRDs
its kustomization lists, with the conversion webhook of their patches pointed at the manager on
127.0.0.1, and the webhook configurations with url client configs. A small copy of that layout in
a temporary directory; no cluster, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from noderemedy_lab.capi import crd_documents, webhook_documents
from noderemedy_lab.procs import ComponentError

URL, CA = "https://127.0.0.1:24040", "Q0E="


def _crd(name: str) -> dict:
    group = name.split(".", 1)[1]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name}, "spec": {"group": group, "scope": "Namespaced", "versions": []}}  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Path:
    crd = tmp_path / "crd"
    (crd / "bases").mkdir(parents=True)
    (crd / "patches").mkdir()
    for name in ("machines.cluster.x-k8s.io", "ipaddresses.ipam.cluster.x-k8s.io"):
        (crd / "bases" / f"{name}.yaml").write_text(yaml.safe_dump(_crd(name)))
    (crd / "patches" / "webhook_in_machines.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "machines.cluster.x-k8s.io"},
                "spec": {
                    "conversion": {
                        "strategy": "Webhook",
                        "webhook": {
                            "clientConfig": {
                                "service": {
                                    "namespace": "system",
                                    "name": "webhook-service",
                                    "path": "/convert",
                                }
                            }
                        },
                    }
                },
            }
        )  # fmt: skip
    )
    (crd / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [
                    "bases/machines.cluster.x-k8s.io.yaml",
                    "bases/ipaddresses.ipam.cluster.x-k8s.io.yaml",
                ],
                "patches": [{"path": "patches/webhook_in_machines.yaml"}],
            }
        )  # fmt: skip
    )
    (tmp_path / "webhook").mkdir()
    hook = {"admissionReviewVersions": ["v1"], "name": "validation.machine.cluster.x-k8s.io",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": "/validate-cluster-x-k8s-io-v1beta2-machine"}}}  # fmt: skip
    (tmp_path / "webhook" / "manifests.yaml").write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingWebhookConfiguration",
                    "metadata": {"name": "validating-webhook-configuration"},
                    "webhooks": [hook],
                }
            ]
        )  # fmt: skip
    )
    return tmp_path


def test_crds_listed_get_their_patch_conversion_webhook_on_loopback(config: Path) -> None:
    docs = {d["metadata"]["name"]: d for d in crd_documents(config, URL, CA)}
    assert list(docs) == ["machines.cluster.x-k8s.io", "ipaddresses.ipam.cluster.x-k8s.io"]
    conv = docs["machines.cluster.x-k8s.io"]["spec"]["conversion"]
    assert conv == {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": URL + "/convert", "caBundle": CA},
        },
    }
    assert "conversion" not in docs["ipaddresses.ipam.cluster.x-k8s.io"]["spec"]  # no patch for it


def test_webhook_configurations_are_prefixed_and_point_at_the_manager(config: Path) -> None:
    (doc,) = webhook_documents(config, URL, CA)
    assert doc["metadata"]["name"] == "capi-validating-webhook-configuration"
    assert doc["webhooks"][0]["clientConfig"] == {
        "url": URL + "/validate-cluster-x-k8s-io-v1beta2-machine",
        "caBundle": CA,
    }


def test_a_kustomization_without_crds_is_an_error(config: Path) -> None:
    (config / "crd" / "kustomization.yaml").write_text("resources: []\n")
    with pytest.raises(ComponentError, match="no CRD listed"):
        crd_documents(config, URL, CA)
