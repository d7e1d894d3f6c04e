"""medik8s fence-agents-remediation (FAR) as the peer of bench/rack.py: built from a checkout, run out
of cluster against the lab, fencing the lab's nodes through ``fence_ipmilan`` and the same BMCs.

How FAR is run here, and why (read from its source, ``main.go``, ``api/v1alpha1``, ``controllers``):

* built with ``go build -mod=vendor`` (its repository vendors every dependency; it is not on the Go
  module proxy), the binary cached under ``~/.cache/noderemedy/far/<commit or tree hash>/manager``;
* started with ``--kubeconfig`` (controller-runtime's flag), its metrics and probes on loopback,
  ``DEPLOYMENT_NAMESPACE`` (the namespace it reads its Secrets from: ``pkg/utils/namespaces.go``) and
  ``/usr/sbin`` on ``PATH`` (Debian's ``fence-agents`` puts ``fence_ipmilan`` there);
* its two CRDs from ``config/crd/bases`` applied; no webhook configuration is installed, but its
  webhook server still wants a certificate, any certificate, in controller-runtime's default
  serving-certs directory ``$TMPDIR/k8s-webhook-server/serving-certs/tls.{crt,key}`` (a
  self-signed one made with openssl, ``TMPDIR`` the bench's own directory);
* each ``FenceAgentsRemediation`` (named after its node, as NodeHealthCheck names them) sets
  ``sharedSecretName`` explicitly (its defaulting webhook does not run) and ``nodeSecretNames``:
  the shared Secret holds ``--username``, each node's Secret its BMC's ``--password``; the BMC's
  port is a node parameter, ``--ip``, ``--lanplus``, ``--cipher`` shared parameters;
  ``remediationStrategy: OutOfServiceTaint``, agent ``fence_ipmilan``, action ``reboot`` (its
  default).

What is measured of FAR is what bench/rack.py measures of ours, from the same watches
(``rack.run_far``): per node, seconds from its NotReady to ``FenceAgentActionSucceeded``, the
out-of-service taint and ``Succeeded`` (its "Final"), each node's own under ``per_node`` in
``bench/results/peers.json`` beside the distributions, and the ``fence_ipmilan`` processes, CPU
seconds and peak RSS of the manager.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "fence-agents-remediation.medik8s.io", "v1alpha1", "fenceagentsremediations"
NAMESPACE = "far-bench"
#: Seconds ``go build -mod=vendor`` may take (about 2 min on this machine, idle).
BUILD_TIMEOUT = 1800


def cache_dir() -> Path:
    env = os.environ.get("NODEREMEDY_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "noderemedy") / "far"


def source_id(src: Path) -> str:
    """The checkout's commit (``git rev-parse HEAD``), else a hash of its Go files' paths and sizes."""
    out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    if out.returncode == 0:
        return out.stdout.strip()[:12]
    h = hashlib.sha256()
    for p in sorted(src.rglob("*.go")):
        if "vendor" not in p.parts:
            h.update(f"{p.relative_to(src)} {p.stat().st_size}\n".encode())
    h.update((src / "go.mod").read_bytes())
    return "tree-" + h.hexdigest()[:12]


def build(src: Path, say: Any = print) -> Path:
    """The FAR manager binary of checkout ``src`` (built once per commit). RuntimeError with the
    build's output tail if it fails; FileNotFoundError if ``src`` is not a FAR checkout."""
    if not (src / "main.go").exists() or not (src / "vendor").is_dir():
        raise FileNotFoundError(
            f"--far-src {src}: no main.go and vendor/ (a fence-agents-remediation checkout)"
        )
    out = cache_dir() / source_id(src) / "manager"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    say(f"building FAR from {src} (go build -mod=vendor)")
    tmp = out.with_name("manager.tmp")
    res = subprocess.run(
        ["go", "build", "-mod=vendor", "-o", str(tmp), "."], cwd=src, capture_output=True, text=True,
        timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"go build of FAR failed:\n{(res.stdout + res.stderr)[-3000:]}")
    os.replace(tmp, out)
    return out


def fence_ipmilan() -> str | None:
    """Path of Debian's ``fence_ipmilan`` (``/usr/sbin``), or None."""
    return shutil.which("fence_ipmilan", path=os.environ.get("PATH", "") + ":/usr/sbin")


class FarPeer:
    """A FAR manager process against ``lab``, with its CRDs, namespace and Secrets.

    Args:
        lab: the started lab (kubeconfig, BMC endpoints).
        binary: from :func:`build`.
        src: the checkout (its ``config/crd/bases``).
        workdir: the bench's directory (FAR's ``TMPDIR``, log).
    """

    def __init__(self, lab: Any, binary: Path, src: Path, workdir: Path) -> None:
        self.lab, self.binary, self.src, self.workdir = lab, binary, src, workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "far.log"
        self.api = lab.api_client()

    def install(self, nodes: list[str]) -> None:
        """CRDs, namespace, the shared Secret and one Secret per node (its BMC's password)."""
        for crd in sorted((self.src / "config" / "crd" / "bases").glob("*.yaml")):
            self.lab.kubectl("apply", "--server-side", "-f", str(crd), check=True)
        self.lab.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{PLURAL}.{GROUP}", check=True
        )
        core = client.CoreV1Api(self.api)
        try:
            core.create_namespace({"metadata": {"name": NAMESPACE}})
        except ApiException as exc:
            if exc.status != 409:
                raise
        bmcs = self.lab.info["devices"]["bmcs"]
        secrets = [("far-shared", {"--username": bmcs[nodes[0]]["username"]})]
        secrets += [(f"far-bmc-{n}", {"--password": bmcs[n]["password"]}) for n in nodes]
        for name, data in secrets:
            body = {"metadata": {"name": name, "namespace": NAMESPACE}, "stringData": data}
            try:
                core.create_namespaced_secret(NAMESPACE, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                core.replace_namespaced_secret(name, NAMESPACE, body)

    def start(self) -> None:
        """Start the manager (a self-signed serving certificate first); returns once it logs that
        its controllers started. RuntimeError with its log tail if it exits or stays silent."""
        certs = self.workdir / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=far-bench",
             "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt")],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        env = {
            **os.environ,
            "TMPDIR": str(self.workdir),
            "DEPLOYMENT_NAMESPACE": NAMESPACE,
            "PATH": os.environ.get("PATH", "") + ":/usr/sbin",
        }
        argv = [
            str(self.binary), "--kubeconfig", str(self.lab.kubeconfig),
            "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0",
        ]  # fmt: skip
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir
            )
        deadline = time.monotonic() + 120
        while "Starting workers" not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"FAR did not start:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def create(self, node: str) -> None:
        """The FenceAgentsRemediation of ``node`` (see the module docstring)."""
        bmc = self.lab.info["devices"]["bmcs"][node]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "FenceAgentsRemediation",
            "metadata": {"name": node, "namespace": NAMESPACE},
            "spec": {
                "agent": "fence_ipmilan",
                "sharedparameters": {"--ip": bmc["host"], "--lanplus": "", "--cipher": str(bmc["cipher"])},
                "nodeparameters": {"--ipport": {node: str(bmc["port"])}},
                "sharedSecretName": "far-shared",
                "nodeSecretNames": {node: f"far-bmc-{node}"},
                "remediationStrategy": "OutOfServiceTaint",
                "retrycount": 5,
                "retryinterval": "5s",
                "timeout": "60s",
            },
        }
        client.CustomObjectsApi(self.api).create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, PLURAL, body
        )

    def delete_all(self) -> None:
        """Delete every FAR (FAR's finalizer removes its taints first) and wait until they are gone."""
        co = client.CustomObjectsApi(self.api)
        co.delete_collection_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)
        deadline = time.monotonic() + 120
        while co.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]:
            if time.monotonic() > deadline:
                raise RuntimeError("FenceAgentsRemediations not deleted after 120 s")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


__all__ = ["GROUP", "NAMESPACE", "PLURAL", "VERSION", "FarPeer", "build", "fence_ipmilan"]
