#!/usr/bin/env python3
"""Benchmark: a real node powered off, remediated through cluster-api's own MachineHealthCheck and
noderemedy-runner's Metal3Remediation, timed from NotReady to each step.

One lab with 2 real nodes (kubelet + containerd + runc) and cluster-api's controller manager
(:mod:`noderemedy_lab.capi`, built from ``sigs.k8s.io/cluster-api``); the MHC judges Ready
False/Unknown for 10 s (the lab's node monitor grace period is the test suite's, 10 s), its
``remediationTemplate`` is a Metal3RemediationTemplate (Reboot strategy), and noderemedy-runner
(``--reconcile-only``, opted in by the Cluster's label) powers the host through its ipmi_sim BMC.
The scenario is :func:`noderemedy_lab.mhc.power_off_remediated`, the one
``tests/integration/test_capi_mhc.py`` asserts on; ``--runs`` repeats it on the same node.

Writes ``"mhc"`` into ``bench/results/metal3.json`` (other keys kept): each step's median over the
runs (``notready_to_remediation_s``, ``to_power_off_verified_s``, ``to_taint_s``,
``to_node_ready_s``, ``to_object_deleted_s``), the samples, and how it was measured. No assertion:
the figures are data.

Usage: ``NODEREMEDY_LAB_PORT_BASE=29200 /tmp/nr/labrun .venv/bin/python bench/metal3_mhc.py [--runs 3]``
(``--port-base`` overrides the environment).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lab"))

import yaml  # noqa: E402

from noderemedy_lab.capi import CapiCluster  # noqa: E402
from noderemedy_lab.config import CLUSTER_API_VERSION, KUBERNETES_VERSION, LabConfig  # noqa: E402
from noderemedy_lab.lab import Lab  # noqa: E402
from noderemedy_lab.mhc import (  # noqa: E402
    MHC_LABEL,
    RUNNER_SELECTOR,
    create_mhc,
    metal3_objects,
    mhc_body,
    power_off_remediated,
)

STEPS = (
    "notready_to_remediation_s",
    "to_power_off_verified_s",
    "to_taint_s",
    "to_node_ready_s",
    "to_object_deleted_s",
)
NODE = "lab-real-0"
RESULTS = ROOT / "bench" / "results" / "metal3.json"


def _crds(lab: Lab) -> None:
    """The Metal3 CRDs of deploy/crds (BareMetalHost, Metal3Remediation, its template)."""
    # cluster-api's own Machine CRD comes with its manager
    paths = [
        p
        for p in sorted((ROOT / "deploy" / "crds").glob("*.yaml"))
        if p.name != "cluster.x-k8s.io_machines.yaml"
    ]
    for path in paths:
        lab.kubectl("apply", "--server-side", "-f", str(path), check=True)
    for path in paths:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        lab.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s", check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("NODEREMEDY_LAB_PORT_BASE", "21000")))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-metal3-mhc-"))
    lab = Lab(
        LabConfig(
            workdir=tmp / "lab",
            nodes=1,
            real_nodes=2,
            port_base=args.port_base,
            node_monitor_grace_period=10,
            node_heartbeat_seconds=2.0,
        )
    )
    lab.start(progress=lambda line: print(f"[lab] {line}", flush=True))
    capi = CapiCluster(lab)
    runner = None
    samples: list[dict[str, float]] = []
    try:
        _crds(lab)
        capi.start(progress=lambda line: print(f"[capi] {line}", flush=True))
        capi.add_machine(NODE, {MHC_LABEL: "real"})
        metal3_objects(lab, capi, [NODE], {"type": "Reboot", "retryLimit": 1, "timeout": "300s"})
        lab.kubectl("create", "namespace", "bench-runner", check=True)
        log = (tmp / "runner.log").open("ab")
        runner = subprocess.Popen(
            [str(Path(sys.executable).parent / "noderemedy-runner"), "--kubeconfig", str(lab.kubeconfig),
             "--namespace", "bench-runner", "--metrics-addr", "127.0.0.1:0", "--data-dir", str(tmp / "data"),
             "--reconcile-only", "--poll-interval", "0.2", "--metal3-selector", json.dumps(RUNNER_SELECTOR)],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        create_mhc(lab, capi, mhc_body("real", "real"))
        for i in range(args.runs):
            out = power_off_remediated(lab, capi, NODE)
            samples.append(out["steps"])
            print(f"run {i + 1}: {json.dumps(out['steps'])}", flush=True)
    finally:
        if runner is not None:
            runner.terminate()
            runner.wait(40)
        capi.stop()
        lab.stop()
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    doc["mhc"] = {
        **{step: round(statistics.median(s[step] for s in samples), 2) for step in STEPS},
        "samples": samples,
        "how": (
            f"{args.runs} power cuts of real node {NODE} at its ipmi_sim BMC; cluster-api "
            f"v{CLUSTER_API_VERSION} MachineHealthCheck (Ready False/Unknown 10 s) -> Metal3Remediation "
            f"(Reboot) -> noderemedy-runner; seconds from the node seen NotReady (grace period 10 s), "
            "polled every 0.25 s; medians"
        ),
        "kubernetes": KUBERNETES_VERSION,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["mhc"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
