"""Shared pieces of the watcher integration tests (tests/integration/test_watcher_*.py): the
CRDs applied on the lab, a namespace for the runner, and :class:`Runner`, a real
``noderemedy-runner`` process (the installed entry point) with its JSON log and metrics.

Fixtures are registered under their short names (``api``, ``namespace``, ``runners``,
``powered_on``); a test module imports the ``*_fixture`` functions to make them visible.

Every wait here is a condition polled until it holds (an error naming what did not happen when
it never does); no test asserts on durations.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import wait_for
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "deploy" / "crds" / "remediation.noderemedy.io_nodefences.yaml"
GROUP, VERSION, PLURAL = "remediation.noderemedy.io", "v1alpha1", "nodefences"
RUNNER = Path(sys.executable).parent / "noderemedy-runner"


@pytest.fixture(scope="module", name="api")
def api_fixture(lab_kube: Any) -> Iterator[client.ApiClient]:
    """Admin ApiClient with the NodeFence CRD applied and Established."""
    out = lab_kube.kubectl("apply", "-f", str(CRD))
    assert out.returncode == 0, out.stderr
    out = lab_kube.kubectl(
        "wait", "--for=condition=Established", "crd/nodefences.remediation.noderemedy.io", "--timeout=60s"
    )
    assert out.returncode == 0, out.stderr
    api_client = config.new_client_from_config(str(lab_kube.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture(name="namespace")
def namespace_fixture(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for the runner (Leases, status ConfigMap); NodeFences deleted after."""
    name = f"nr-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    delete_nodefences(api)
    core.delete_namespace(name)


def delete_nodefences(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    for obj in co.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        try:
            co.delete_cluster_custom_object(GROUP, VERSION, PLURAL, obj["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 404:
                raise


def nodefences(api: client.ApiClient) -> dict[str, dict[str, Any]]:
    """Every NodeFence by name."""
    items = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    return {o["metadata"]["name"]: o for o in items}


def events(api: client.ApiClient, kind: str, name: str, namespace: str = "default") -> list[Any]:
    """core/v1 Events on ``kind/name`` written by noderemedy-runner."""
    sel = f"involvedObject.kind={kind},involvedObject.name={name},source=noderemedy-runner"
    return list(client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=sel).items)


def ready_condition(api: client.ApiClient, node: str) -> Any:
    conds = client.CoreV1Api(api).read_node(node).status.conditions or []
    return next(c for c in conds if c.type == "Ready")


def write_config(tmp: Path, body: str) -> Path:
    path = tmp / f"remedy-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(body)
    yaml.safe_load_all(body)  # a typo in a test shows here, not as a runner error
    return path


class Runner:
    """A ``noderemedy-runner`` process (``--detect-only`` unless told otherwise), JSON log in
    ``log_path``; ``metrics_url`` once it serves. Kill it with :meth:`kill9` or :meth:`stop`."""

    def __init__(
        self, lab: Any, namespace: str, cfg: Path, tmp: Path, *extra: str, identity: str | None = None
    ) -> None:
        self.identity = identity or f"test-{uuid.uuid4().hex[:6]}"
        self.log_path = tmp / f"runner-{self.identity}.log"
        argv = [
            str(RUNNER),
            "--kubeconfig",
            str(lab.kubeconfig),
            "--namespace",
            namespace,
            "--config",
            str(cfg),
            "--metrics-addr",
            "127.0.0.1:0",
            "--identity",
            self.identity,
            "--data-dir",
            str(tmp / f"data-{self.identity}"),
            *extra,
        ]
        if "--with-watcher" in argv:
            argv.remove("--with-watcher")
        else:
            argv.append("--detect-only")
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()/kill9()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ})
        self.metrics_url = wait_for(self._metrics_url, 60, f"runner {self.identity} to serve metrics")

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines so far (non-JSON lines skipped)."""
        out = []
        for raw in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out

    def _metrics_url(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"runner exited {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}"
            )
        for line in self.lines():
            if line.get("msg") == "serving /metrics /healthz /readyz":
                return f"http://{line['address']}"
        return None

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """A sample's value from /metrics (None when absent)."""
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        want = name + (
            "{" + ",".join(f'{k}="{v}"' for k, v in sorted((labels or {}).items())) + "}" if labels else ""
        )
        for line in text.splitlines():
            if line.startswith(want + " "):
                return float(line.split()[-1])
        return None

    def logged(self, pattern: str) -> list[dict[str, Any]]:
        """Log lines whose ``msg`` matches the regex ``pattern``."""
        return [line for line in self.lines() if re.search(pattern, str(line.get("msg", "")))]

    def stop(self, timeout: float = 40) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)
        self._log.close()
        return int(self.proc.returncode)

    def kill9(self) -> None:
        """SIGKILL (no cleanup at all) and reap."""
        self.proc.kill()
        self.proc.wait(10)
        self._log.close()


@pytest.fixture(name="runners")
def runners_fixture() -> Iterator[list[Runner]]:
    """Runners started by a test; every one still alive is stopped afterwards."""
    started: list[Runner] = []
    yield started
    for r in started:
        if r.proc.poll() is None:
            r.stop()


@pytest.fixture(name="powered_on")
def powered_on_fixture(lab_kube: Any) -> Iterator[Any]:
    """The lab, with every node powered on and Ready again after the test."""
    yield lab_kube
    for node in lab_kube.info["nodes"]:
        lab_kube.power_on(node)
    lab_kube.wait_nodes(lab_kube.info["nodes"], "True", 90)
