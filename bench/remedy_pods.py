#!/usr/bin/env python3
"""Benchmark: the Job executor (remediation pods) against the in-process executor, in one run on one
lab: 1,000 kwok nodes plus 2 real nodes (kubelet + containerd + runc), 100 kwok nodes failing at
once per executor.

What it measures, per executor: the time from the moment a node is seen NotReady to the moment the
first run of its NodeFence starts (the executor's ``run <ident>: <playbook> for NodeFence <name>``
log line, written when the run took one of the ``--max-concurrent-runs`` slots: for the Job executor
the Job is created right after), p50 and p99; runs completed per minute while every slot is busy;
the runner's peak resident memory (``VmHWM``); and the most runs in flight at once, from the
runner's ``noderemedy_runs_in_flight`` gauge sampled every 0.2 s and, independently, from the
Jobs the API server reports active (Job executor) or ansible-runner's own job events (in-process),
against the bound (4).

Both executors run the **real** playbooks of this checkout (in-process) and of the remediation pod
image built from it (``./dev image``; the Job pods run ``noderemedy-runner --job-run``), against a
fence configuration whose credentials Secret does not exist: every run fails in its first fencing
module ("Secret not found"), the same task in both, so no device is needed for 1,000 nodes and the
step retries keep every slot busy. The difference measured is the executor's: a pod start on a
real node against a process start. The Job executor's runner is a host process given the identity
of a placeholder pod of the deployment's own pod template (``POD_NAME``/``POD_NAMESPACE``), so its
Jobs take that pod's image, ServiceAccount, placement and least-privilege RBAC, as in a cluster;
its RSS is the runner's only (the Job pods' memory is the nodes').

Nodes fail as in ``bench/watcher.py``: the power label set on 100 nodes in one call, NotReady from
the real node lifecycle controller at Kubernetes' default timing. The two executors get disjoint
sets of 100 nodes; the first set is powered on and its NodeFences deleted before the second.

Writes ``bench/results/remedy-pods.json`` (``executors.job`` / ``executors.inprocess``). No
assertion: the figures are data.

Usage: ``.venv/bin/python bench/remedy_pods.py [--nodes 1000] [--fail 100] [--port-base 21000]
[--max-concurrent-runs 4] [--window 60]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lab"))
sys.path.insert(0, str(ROOT / "bench"))

from kubernetes import client, config  # noqa: E402
from watcher import (  # noqa: E402
    CRD,
    OBSERVER_NICE,
    RUNNER,
    UPSTREAM_TIMING,
    Observer,
    fence_objects,
    overlap_from_artifacts,
    percentile,
    rss_kb,
    scrape,
)

from noderemedy_lab.config import POWER_LABEL, LabConfig  # noqa: E402
from noderemedy_lab.lab import Lab  # noqa: E402

NAMESPACE = "noderemedy-system"
OVERLAY = ROOT / "lab" / "deploy"
RUN_START = re.compile(r"^run (\S+): (\S+\.yml) for NodeFence (\S+)(?: as Job \S+)?$")
#: a finished run: in-process ``run <id>: <status> in <s> s``; Job ``run <id>: Job <j> <Complete|Failed>...``
RUN_END = re.compile(r"^run (\S+): (?:(\w+) in [0-9.]+ s|Job \S+ (Complete|Failed)\b.*)$")
CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: bench}
nodeSelector: type=kwok
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 0s}
stormGuard: {maxUnhealthy: 20%, cooldown: 0s}
"""


def build_image() -> Path:
    """The remediation pod image's archive (``./dev image``, cached when unchanged)."""
    out = subprocess.run([str(ROOT / "dev"), "image"], capture_output=True, text=True, timeout=1800, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-3000:])
    return Path(json.loads((ROOT / "build" / "image" / "image.json").read_text())["archive"])


def placeholder_pod(lab: Lab) -> str:
    """A pod of the runner Deployment's own pod template that only sleeps (the Deployment is scaled
    to 0): the Job executor's runner takes its identity. Returns its name once it runs."""
    dep = json.loads(
        lab.kubectl("-n", NAMESPACE, "get", "deployment", "noderemedy-runner", "-o", "json").stdout
    )
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    c.update({"command": ["sleep", "infinity"], "args": []})
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        c.pop(probe, None)
    spec.pop("affinity", None)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench-runner", "namespace": NAMESPACE},
        "spec": spec,
    }
    path = Path(tempfile.mkstemp(suffix=".json")[1])
    path.write_text(json.dumps(pod))
    lab.kubectl("apply", "-f", str(path), check=True)
    lab.kubectl(
        "-n", NAMESPACE, "wait", "--for=condition=Ready", "pod/bench-runner", "--timeout=180s", check=True
    )
    return "bench-runner"


def parse_runs(log_path: Path, wall0: float, mono0: float) -> dict[str, Any]:
    """Run start and end lines of the runner's JSON log: each NodeFence's first start (bench
    monotonic clock), every start and end time (same clock), and the end statuses."""
    first: dict[str, float] = {}
    starts: list[float] = []
    ends: list[float] = []
    statuses: dict[str, int] = {}
    for line in log_path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        msg = rec.get("msg", "")
        t = datetime.fromisoformat(rec["time"]).timestamp() - wall0 + mono0
        if m := RUN_START.match(msg):
            starts.append(t)
            first.setdefault(m.group(3), t)
        elif m := RUN_END.match(msg):
            ends.append(t)
            status = m.group(2) or m.group(3)
            statuses[status] = statuses.get(status, 0) + 1
    return {"first_start": first, "starts": starts, "ends": ends, "statuses": statuses}


def phase(
    lab: Lab, executor: str, victims: list[str], tmpdir: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Fail ``victims`` under a runner with ``--executor executor``; its figures."""
    cfg = tmpdir / "remedy.yaml"
    cfg.write_text(CONFIG)
    log_path = tmpdir / f"runner-{executor}.log"
    env = dict(os.environ)
    if executor == "job":
        env.update({"POD_NAME": placeholder_pod(lab), "POD_NAMESPACE": NAMESPACE})
    runner = subprocess.Popen(
        [str(RUNNER), "--kubeconfig", str(lab.kubeconfig), "--namespace", NAMESPACE, "--config", str(cfg),
         "--metrics-addr", "127.0.0.1:0", "--identity", f"bench-{executor}", "--executor", executor,
         "--data-dir", str(tmpdir / f"data-{executor}"), "--max-concurrent-runs", str(args.max_concurrent_runs),
         "--device-check-interval", "0"],
        stdout=log_path.open("w"), stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while '"msg": "acting"' not in log_path.read_text():
            if runner.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"runner did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        time.sleep(2)
        idle = rss_kb(runner.pid)[0]
        metrics_url = next(
            "http://" + json.loads(line)["address"] + "/metrics"
            for line in log_path.read_text().splitlines()
            if '"serving /metrics' in line
        )
        wall0, mono0 = time.time(), time.monotonic()
        api = config.new_client_from_config(str(lab.kubeconfig))
        batch = client.BatchV1Api(api)
        obs = Observer(api, set(victims))
        obs.start()
        time.sleep(3)
        gauge: list[float] = []
        active_jobs: list[int] = []
        peak = idle
        sampling = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not sampling.is_set():
                peak = max(peak, rss_kb(runner.pid)[0])
                value = scrape(metrics_url, "noderemedy_runs_in_flight")
                if value == value:
                    gauge.append(value)
                if executor == "job":
                    try:
                        jobs = batch.list_namespaced_job(NAMESPACE, _request_timeout=5).items
                        active_jobs.append(sum(1 for j in jobs if (j.status.active or 0) > 0))
                    except Exception as exc:  # a missed sample, not a figure
                        print(f"bench: listing Jobs: {exc}", file=sys.stderr)
                sampling.wait(0.2)

        threading.Thread(target=sample, daemon=True).start()
        print(f"[{executor}] failing {len(victims)} nodes at once", flush=True)
        lab.kubectl("label", "node", *victims, f"{POWER_LABEL}=off", "--overwrite", check=True, timeout=120)
        deadline = time.monotonic() + 300
        while len(obs.fenced) < len(victims) and time.monotonic() < deadline:
            time.sleep(0.5)
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            runs = parse_runs(log_path, wall0, mono0)
            with obs.lock:
                waiting = {n for n in victims if n in obs.fenced and obs.down.get(n)}
            if waiting <= set(runs["first_start"]):
                break
            time.sleep(1)
        # then a window with every slot busy (step retries of the failing runs)
        t_window = time.monotonic()
        time.sleep(args.window)
        runs = parse_runs(log_path, wall0, mono0)
        sampling.set()
        obs.stop.set()
        hwm = rss_kb(runner.pid)[1]
    finally:
        runner.terminate()
        runner.wait(60)
    starts = [
        runs["first_start"][n] - obs.last_not_ready[n]
        for n in victims
        if n in runs["first_start"] and n in obs.last_not_ready
    ]
    t0 = min(runs["starts"]) if runs["starts"] else t_window
    ends = [t for t in runs["ends"] if t0 <= t <= t_window + args.window]
    minutes = (t_window + args.window - t0) / 60
    independent = (
        max(active_jobs, default=0)
        if executor == "job"
        else overlap_from_artifacts(tmpdir / f"data-{executor}" / "runs")
    )
    return {
        "run_started_p50_s": round(statistics.median(starts), 3) if starts else None,
        "run_started_p99_s": round(percentile(starts, 99), 3) if starts else None,
        "run_started_max_s": round(max(starts), 3) if starts else None,
        "run_started_samples": len(starts),
        "first_4_no_queue_s": [round(x, 3) for x in sorted(starts)[: args.max_concurrent_runs]],
        "nodefences_without_a_run": sorted(
            n for n in victims if n in obs.fenced and n not in runs["first_start"]
        ),
        "runs_per_min": round(len(ends) / minutes, 1) if minutes > 0 else None,
        "runs_completed": len(ends),
        "over_s": round(minutes * 60, 1),
        "statuses": runs["statuses"],
        "rss_mb": round(hwm / 1024, 1),
        "rss_idle_mb": round(idle / 1024, 1),
        "rss_peak_sampled_mb": round(peak / 1024, 1),
        "max_in_flight": int(max([*gauge, independent], default=0)),
        "max_in_flight_gauge": max(gauge, default=None),
        "max_in_flight_independent": independent,
        "independent_source": "Jobs with status.active, listed every 0.2 s"
        if executor == "job"
        else "ansible-runner job events (first to last event of each run)",
        "bound": args.max_concurrent_runs,
        "bound_honoured": max([*gauge, independent], default=0) <= args.max_concurrent_runs,
    }


def restore(lab: Lab, victims: list[str]) -> None:
    """Power the nodes back on, delete every NodeFence and Job; wait until the nodes are Ready."""
    lab.kubectl("label", "node", *victims, f"{POWER_LABEL}=on", "--overwrite", timeout=120)
    lab.kubectl("delete", "nodefences", "--all", "--wait=false", timeout=300)
    lab.kubectl("-n", NAMESPACE, "delete", "jobs", "--all", "--wait=false", timeout=300)
    lab.wait_nodes(victims, "True", 300)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--fail", type=int, default=100)
    ap.add_argument("--port-base", type=int, default=21000)
    ap.add_argument("--max-concurrent-runs", type=int, default=4)
    ap.add_argument(
        "--window", type=float, default=60, help="seconds of busy slots measured after the first runs"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "remedy-pods.json")
    args = ap.parse_args()
    t_image = time.monotonic()
    archive = build_image()
    image_s = time.monotonic() - t_image
    notes = [
        "one lab: kwok nodes + 2 real nodes (kubelet + containerd + runc), Kubernetes' default node timing; "
        f"{args.fail} kwok nodes fail per executor (disjoint sets), by the power label as in bench/watcher.py",
        "both executors run the real playbooks (in-process: this checkout; Job: the remediation pod image built "
        "from it) against a fence configuration whose credentials Secret does not exist: every run fails in its "
        "first fencing module, the same task in both; the step retries keep every slot busy",
        "Job executor: the runner is a host process with the identity of a placeholder pod of the Deployment's "
        "pod template (its image, ServiceAccount, RBAC, placement); rss_mb is the runner's VmHWM only",
        "run_started: node seen NotReady -> the first run of its NodeFence took a slot (100 NodeFences queue "
        f"for {args.max_concurrent_runs} slots, so most of it is the queue); runs_per_min: runs ended from the "
        f"first run start to the end of a {args.window:g} s window after every NodeFence had started one",
    ]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nr-bench-pods-") as tmp:
        tmpdir = Path(tmp)
        lab = Lab(
            LabConfig(
                workdir=tmpdir / "lab",
                nodes=args.nodes,
                real_nodes=2,
                port_base=args.port_base,
                devices=False,
                **UPSTREAM_TIMING,
            )
        )
        t0 = time.monotonic()
        lab.start(progress=lambda line: print(f"[lab] {line}", flush=True), ready_timeout=900)
        lab_s = time.monotonic() - t0
        for proc in lab.supervisor.procs.values():
            os.setpriority(os.PRIO_PROCESS, proc.pid, -5)
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), OBSERVER_NICE)
        except PermissionError:
            notes.append("the bench's watches at nice 0 (no privilege to raise them)")
        try:
            lab.import_image(archive)
            lab.kubectl("apply", "--server-side", "-f", str(CRD), check=True)
            lab.kubectl("apply", "--server-side", "-k", str(OVERLAY), check=True, timeout=120)
            lab.kubectl(
                "-n", NAMESPACE, "scale", "deployment", "noderemedy-runner", "--replicas=0", check=True
            )
            kwok = [lab.config.node_name(i) for i in range(args.nodes)]
            step = max(1, args.nodes // args.fail)
            sets = {"inprocess": kwok[0::step][: args.fail], "job": kwok[step // 2 :: step][: args.fail]}
            objs = tmpdir / "fence-config.json"
            objs.write_text(json.dumps(fence_objects(sets["inprocess"] + sets["job"], secret=False)))
            lab.kubectl("apply", "-n", NAMESPACE, "-f", str(objs), check=True, timeout=300)
            for executor in ("inprocess", "job"):
                lab.wait_nodes(sets[executor], "True", 300)
                results[executor] = phase(lab, executor, sets[executor], tmpdir, args)
                print(f"[{executor}] {json.dumps(results[executor])}", flush=True)
                restore(lab, sets[executor])
        finally:
            lab.stop()
    doc = {
        "benchmark": "remedy-pods",
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "notes": notes,
        "nodes": {"kwok": args.nodes, "real": 2},
        "failed_nodes_per_executor": args.fail,
        "lab_start_s": round(lab_s, 1),
        "image_build_s": round(image_s, 1),
        "executors": results,
        "ratios_job_over_inprocess": {
            key: round(results["job"][key] / results["inprocess"][key], 2)
            for key in ("run_started_p50_s", "run_started_p99_s", "runs_per_min", "rss_mb")
            if results.get("job", {}).get(key) and results.get("inprocess", {}).get(key)
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
