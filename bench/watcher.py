#!/usr/bin/env python3
"""Benchmark: detection → NodeFence on a 1,000-node kwok lab, 100 nodes failing at once.

What it measures: for each of the 100 failed nodes, the time from the moment the node is seen
NotReady (``Ready`` False/Unknown, set by the real node lifecycle controller) to the moment its
NodeFence is seen created -- both observed by this script's own watches on the API server, on
one clock. Reported as p50/p99/max (target: p99 <= 1 s), with the runner's peak resident memory
(``VmHWM`` of the process; target <= 200 MB) sampled throughout.

What it does not measure: playbook runs. The runner is started with ``--detect-only`` and the
threshold period is 0 s, so the figure is the detection pipeline itself (watch event → plan →
per-node Lease → NodeFence POST). The storm guard is on (``maxUnhealthy: 20%``) and allows the
100 failures (10% of 1,000).

How nodes fail: the lab's power label ``lab.noderemedy.io/power=off`` is set on 100 nodes in one
``kubectl label`` call. That is exactly what each node's BMC power hook does on ``chassis power
off``; setting it directly spares starting 1,000 BMCs (the lab runs with ``devices=False``).
kwok stops heartbeating those nodes and kube-controller-manager turns them NotReady after
``--node-monitor-grace-period`` (20 s).

Writes ``bench/results/watcher.json``. No assertion: the figures are data.

Usage: ``.venv/bin/python bench/watcher.py [--nodes 1000] [--fail 100] [--port-base 21000]``.
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
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lab"))

from kubernetes import client, config, watch  # noqa: E402

from noderemedy_lab.config import POWER_LABEL, LabConfig  # noqa: E402
from noderemedy_lab.lab import Lab  # noqa: E402

CRD = ROOT / "deploy" / "crds" / "remediation.noderemedy.io_nodefences.yaml"
RUNNER = Path(sys.executable).parent / "noderemedy-runner"
NAMESPACE = "noderemedy-bench"
CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: bench}
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 0s}
stormGuard: {maxUnhealthy: 20%, cooldown: 60s}
"""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))
    return ordered[rank - 1]


class Observer:
    """This script's own watches: when each node was first seen not Ready, and when each
    NodeFence was first seen (monotonic seconds)."""

    def __init__(self, api: client.ApiClient, watched: set[str]) -> None:
        self.api = api
        self.watched = watched
        self.not_ready: dict[str, float] = {}  # first Ready -> not Ready seen
        self.last_not_ready: dict[str, float] = {}  # latest Ready -> not Ready seen before its NodeFence
        self.transitions: dict[str, int] = {}  # Ready -> not Ready transitions seen
        self.down: dict[str, bool] = {}
        self.fenced: dict[str, float] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def _run(self, list_call: Any, on_event: Any) -> None:
        while not self.stop.is_set():
            try:
                doc = json.loads(list_call(_preload_content=False).data)
                for obj in doc.get("items") or []:
                    on_event(obj)
                rv = doc["metadata"]["resourceVersion"]
                w = watch.Watch()
                for ev in w.stream(list_call, resource_version=rv, timeout_seconds=20, deserialize=False):
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        on_event(ev["object"])
                    if self.stop.is_set():
                        return
            except Exception as exc:  # noqa: BLE001 - relist
                print(f"bench watch: {exc}; relisting", file=sys.stderr)
                time.sleep(0.5)

    def _node(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name not in self.watched:
            return
        ready = next(
            (c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), None
        )
        if ready is None:
            return
        now = time.monotonic()
        with self.lock:
            was_down = self.down.get(name, False)
            is_down = ready["status"] != "True"
            self.down[name] = is_down
            if is_down and not was_down:
                self.not_ready.setdefault(name, now)
                self.transitions[name] = self.transitions.get(name, 0) + 1
                if name not in self.fenced:
                    self.last_not_ready[name] = now

    def _fence(self, obj: dict[str, Any]) -> None:
        node = obj["spec"]["node"]
        with self.lock:
            self.fenced.setdefault(node, time.monotonic())

    def start(self) -> None:
        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        threading.Thread(target=self._run, args=(core.list_node, self._node), daemon=True).start()
        threading.Thread(
            target=self._run,
            args=(
                lambda **kw: custom.list_cluster_custom_object(
                    "remediation.noderemedy.io", "v1alpha1", "nodefences", **kw
                ),
                self._fence,
            ),
            daemon=True,
        ).start()


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in kB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def serve_lab(args: argparse.Namespace) -> int:
    """Start a kube-only lab in ``args.serve_lab`` and keep it until SIGTERM/SIGINT."""
    import signal

    lab = Lab(LabConfig(workdir=args.serve_lab, nodes=args.nodes, port_base=args.port_base, devices=False))
    t0 = time.monotonic()
    lab.start(progress=lambda line: print(f"[lab] {line}", flush=True), ready_timeout=900)
    print(
        f"lab with {args.nodes} kwok nodes Ready in {time.monotonic() - t0:.1f} s; SIGTERM to stop",
        flush=True,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    lab.stop()
    return 0


def attach(lab_dir: Path, nodes: int, port_base: int) -> Lab:
    """A :class:`Lab` object for the lab running in ``lab_dir`` (not stopped by this process)."""
    lab = Lab(LabConfig(workdir=lab_dir, nodes=nodes, port_base=port_base, devices=False))
    lab.info = json.loads((lab_dir / "lab.json").read_text())
    lab.kubeconfig = Path(lab.info["kube"]["kubeconfig"])
    return lab


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--fail", type=int, default=100)
    ap.add_argument("--port-base", type=int, default=21000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "watcher.json")
    ap.add_argument(
        "--serve-lab",
        type=Path,
        metavar="DIR",
        help="only start a lab in DIR and keep it until SIGTERM (development)",
    )
    ap.add_argument(
        "--lab-dir", type=Path, metavar="DIR", help="use the lab --serve-lab started in DIR (development)"
    )
    ap.add_argument(
        "--runner-log", type=Path, default=Path(tempfile.gettempdir()) / "noderemedy-bench-watcher-runner.log"
    )
    args = ap.parse_args()
    if args.serve_lab:
        return serve_lab(args)

    notes = [
        "measures detection -> NodeFence creation; no playbook runs (runner --detect-only, period 0s)",
        f"nodes fail by setting the power label {POWER_LABEL}=off directly (what the BMC power hook does), "
        "no BMCs started (devices=False)",
        "NotReady set by the real kube-controller-manager node lifecycle controller (grace 20 s)",
        "times observed by the bench's own watches on one monotonic clock",
        "kwok in this lab sometimes turns an unlabelled node Ready again for a moment (it still heartbeats it "
        "under load); the detector then cancels the not-started NodeFence and creates a new one when the node "
        "is NotReady again: reaction_s counts from that last transition, reaction_from_first_not_ready_s from the first",
    ]
    with tempfile.TemporaryDirectory(prefix="nr-bench-watcher-") as tmp:
        tmpdir = Path(tmp)
        lab_start_s: float | None = None
        if args.lab_dir:
            lab = attach(args.lab_dir, args.nodes, args.port_base)
        else:
            lab = Lab(
                LabConfig(workdir=tmpdir / "lab", nodes=args.nodes, port_base=args.port_base, devices=False)
            )
            t0 = time.monotonic()
            lab.start(progress=lambda line: print(f"[lab] {line}", flush=True), ready_timeout=900)
            lab_start_s = time.monotonic() - t0
            print(f"lab with {args.nodes} kwok nodes Ready in {lab_start_s:.1f} s", flush=True)
        runner: subprocess.Popen[bytes] | None = None
        namespace = f"{NAMESPACE}-{int(time.time())}"
        victims = [lab.config.node_name(i) for i in range(0, args.nodes, max(1, args.nodes // args.fail))][
            : args.fail
        ]
        try:
            out = lab.kubectl("apply", "-f", str(CRD))
            assert out.returncode == 0, out.stderr
            lab.kubectl(
                "wait", "--for=condition=Established", "crd/nodefences.remediation.noderemedy.io", "--timeout=60s",
                check=True,
            )  # fmt: skip
            lab.kubectl("delete", "nodefences", "--all", "--wait=false", timeout=300)
            lab.kubectl("create", "namespace", namespace, check=True)
            lab.wait_nodes(victims, "True", 300)
            cfg = tmpdir / "remedy.yaml"
            cfg.write_text(CONFIG)
            log_path = args.runner_log
            log = open(log_path, "w")  # noqa: SIM115
            runner = subprocess.Popen(
                [str(RUNNER), "--kubeconfig", str(lab.kubeconfig), "--namespace", namespace, "--config", str(cfg),
                 "--metrics-addr", "127.0.0.1:0", "--detect-only", "--identity", "bench"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            # wait for the runner's first full pass (its 'acting' line)
            deadline = time.monotonic() + 120
            while '"msg": "acting"' not in log_path.read_text():
                if runner.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"runner did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            time.sleep(2)
            idle_rss = rss_kb(runner.pid)
            api = config.new_client_from_config(str(lab.kubeconfig))
            obs = Observer(api, set(victims))
            obs.start()
            time.sleep(3)  # the bench's watches are listed and running
            peak_rss = idle_rss[0]
            sampling = threading.Event()

            def sample() -> None:
                nonlocal peak_rss
                while not sampling.is_set():
                    peak_rss = max(peak_rss, rss_kb(runner.pid)[0])  # type: ignore[union-attr]
                    sampling.wait(0.2)

            threading.Thread(target=sample, daemon=True).start()
            print(f"failing {len(victims)} nodes at once ({POWER_LABEL}=off)", flush=True)
            lab.kubectl(
                "label", "node", *victims, f"{POWER_LABEL}=off", "--overwrite", check=True, timeout=120
            )
            deadline = time.monotonic() + 300
            while (
                len(obs.fenced) < len(victims) or len(obs.not_ready) < len(victims)
            ) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1)
            sampling.set()
            obs.stop.set()
            hwm = rss_kb(runner.pid)[1]
            listed = json.loads(lab.kubectl("get", "nodefences", "-o", "json", timeout=120).stdout or "{}")
            fenced_api = {o["spec"]["node"] for o in listed.get("items", [])}
            metrics_text = ""
            for line in log_path.read_text().splitlines():
                if '"serving /metrics' in line:
                    url = "http://" + json.loads(line)["address"] + "/metrics"
                    with urllib.request.urlopen(url, timeout=10) as resp:
                        metrics_text = resp.read().decode()
            storm_lines = [
                ln
                for ln in metrics_text.splitlines()
                if ln.startswith(
                    (
                        "noderemedy_storm_active",
                        "noderemedy_unhealthy_nodes",
                        "noderemedy_fencing_refused",
                        "noderemedy_reconcile_errors",
                        "noderemedy_detection_seconds_count",
                        "noderemedy_detection_seconds_sum",
                    )
                )
            ]
            reactions = [
                obs.fenced[n] - obs.last_not_ready[n]
                for n in victims
                if n in obs.fenced and n in obs.last_not_ready
            ]
            from_first = [
                obs.fenced[n] - obs.not_ready[n] for n in victims if n in obs.fenced and n in obs.not_ready
            ]
            flapped = sorted(n for n, k in obs.transitions.items() if k > 1)
            missing = sorted(set(victims) - set(obs.fenced))
            never_not_ready = sorted(set(victims) - set(obs.not_ready))
            ready_spread = (
                (max(obs.not_ready.values()) - min(obs.not_ready.values())) if obs.not_ready else None
            )
        finally:
            if runner is not None and runner.poll() is None:
                runner.terminate()
                runner.wait(60)
            # restore: power back on, so a rerun on a kept lab starts clean
            lab.kubectl("label", "node", *victims, f"{POWER_LABEL}=on", "--overwrite", timeout=120)
            if not args.lab_dir:
                lab.stop()

    result = {
        "benchmark": "watcher",
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "notes": notes,
        "nodes": args.nodes,
        "failed_nodes": len(victims),
        "lab_start_s": round(lab_start_s, 1) if lab_start_s is not None else None,
        "nodes_never_seen_not_ready": never_not_ready,
        "not_ready_spread_s": round(ready_spread, 2) if ready_spread is not None else None,
        "nodes_flapping_before_fenced": len(
            [n for n in flapped if n in obs.fenced and obs.last_not_ready.get(n) != obs.not_ready.get(n)]
        ),
        "reaction_from_first_not_ready_s": {
            "what": "first Ready -> NotReady seen -> NodeFence seen (includes Ready spells of flapping nodes)",
            "p50": round(statistics.median(from_first), 3) if from_first else None,
            "p99": round(percentile(from_first, 99), 3) if from_first else None,
            "max": round(max(from_first), 3) if from_first else None,
        },
        "reaction_s": {
            "what": "node seen turning NotReady (its last Ready -> NotReady before the NodeFence) -> its NodeFence seen created",
            "samples": len(reactions),
            "p50": round(statistics.median(reactions), 3) if reactions else None,
            "p99": round(percentile(reactions, 99), 3) if reactions else None,
            "max": round(max(reactions), 3) if reactions else None,
            "min": round(min(reactions), 3) if reactions else None,
            "sorted_samples": [round(x, 3) for x in sorted(reactions)],
            "target_p99": 1.0,
            "meets_target": bool(reactions) and percentile(reactions, 99) <= 1.0 and not missing,
        },
        "nodefences_missing": missing,
        "victims_with_nodefence_in_api": len(fenced_api & set(victims)),
        "nodefences_for_other_nodes": sorted(fenced_api - set(victims)),
        "runner_metrics_at_end": storm_lines,
        "runner_rss_mb": {
            "idle_after_first_pass": round(idle_rss[0] / 1024, 1),
            "peak_sampled": round(peak_rss / 1024, 1),
            "vm_hwm": round(hwm / 1024, 1),
            "target": 200,
            "meets_target": hwm / 1024 <= 200,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
