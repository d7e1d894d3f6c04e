"""The runner under test: :class:`Runner`, a real ``noderemedy-runner`` process (the installed entry
point, as users run it) with its JSON log and metrics, and helpers that read what it wrote.

The fixtures that start and stop runners (``api``, ``namespace``, ``runners``, ``powered_on``) are
in ``conftest.py``. Every wait here is a condition polled until it holds (an error naming what did
not happen when it never does); no test asserts on durations.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml
from kube_helpers import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "deploy" / "crds"
GROUP, VERSION, PLURAL = "remediation.noderemedy.io", "v1alpha1", "nodefences"
RUNNER = Path(sys.executable).parent / "noderemedy-runner"

__all__ = ["GROUP", "PLURAL", "VERSION", "Runner", "events", "nodefences", "wait_for", "write_config"]


def delete_nodefences(api: client.ApiClient) -> None:
    """Delete every NodeFence (cluster-scoped), finalizers first: no runner cleans up after a
    test, and a NodeFence left deleting would be cleaned up by the next test's runner."""
    co = client.CustomObjectsApi(api)
    for obj in co.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
        try:
            if obj["metadata"].get("finalizers"):
                co.patch_cluster_custom_object(
                    GROUP, VERSION, PLURAL, obj["metadata"]["name"], {"metadata": {"finalizers": None}}
                )
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
    """The Ready condition of ``node`` (a V1NodeCondition)."""
    conds = client.CoreV1Api(api).read_node(node).status.conditions or []
    return next(c for c in conds if c.type == "Ready")


def write_config(tmp: Path, body: str) -> Path:
    """A remedy Configuration file under ``tmp`` with ``body`` (checked to be YAML)."""
    path = tmp / f"remedy-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(body)
    yaml.safe_load_all(body)  # a typo in a test shows here, not as a runner error
    return path


class Runner:
    """A ``noderemedy-runner`` process against the lab, started at once (``start=False``: by
    :meth:`start`) and restartable with the same data dir and log.

    Args:
        lab: the started lab (its kubeconfig).
        namespace: ``--namespace``.
        tmp: where the data dir (``data-<identity>``) and the log (``<identity>.log``, appended
            over restarts) go.
        args: more flags, e.g. ``--detect-only`` or ``--reconcile-only`` and the policy.
        config: ``--config`` (a file from :func:`write_config`); None: the built-in Configuration.
        identity: ``--identity`` (default: ``runner-<6 hex>``).

    Metrics are served on a free loopback port (``metrics_url`` once the process says so).
    """

    def __init__(
        self,
        lab: Any,
        namespace: str,
        tmp: Path,
        *args: str,
        config: Path | None = None,
        identity: str | None = None,
        start: bool = True,
    ) -> None:
        self.lab, self.namespace = lab, namespace
        self.identity = identity or f"runner-{uuid.uuid4().hex[:6]}"
        self.data_dir = tmp / f"data-{self.identity}"
        self.log_path = tmp / f"{self.identity}.log"
        self.args = [*(["--config", str(config)] if config else []), *args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_url = ""
        self.starts = 0
        if start:
            self.start()

    def start(self) -> None:
        """Start the process; returns once it serves its metrics."""
        argv = [
            str(RUNNER),
            "--kubeconfig", str(self.lab.kubeconfig),
            "--namespace", self.namespace,
            "--metrics-addr", "127.0.0.1:0",
            "--identity", self.identity,
            "--data-dir", str(self.data_dir),
            *self.args,
        ]  # fmt: skip
        served = len(self._served())
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        self.starts += 1
        self.metrics_url = wait_for(
            lambda: self._metrics_url(served), 60, f"runner {self.identity} to serve metrics"
        )

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines so far, over every start (other output, e.g. a traceback, skipped)."""
        out = []
        for raw in self.log_path.read_text().splitlines() if self.log_path.exists() else []:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
        return out

    def _served(self) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("msg") == "serving /metrics /healthz /readyz"]

    def _metrics_url(self, before: int) -> str | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"runner exited {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}"
            )
        served = self._served()
        return f"http://{served[-1]['address']}" if len(served) > before else None

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

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 40) -> int:
        """SIGTERM and wait (SIGKILL after ``timeout`` seconds); returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)

    def kill9(self) -> None:
        """SIGKILL (no cleanup at all) and reap."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)
