#!/usr/bin/env python3
"""Benchmark: detection → NodeFence on a 1,000-node kwok lab, 100 nodes failing at once.

What it measures: for each of the 100 failed nodes, the time from the moment the node is seen
NotReady (``Ready`` False/Unknown, set by the real node lifecycle controller) to the moment its
NodeFence is seen created -- both observed by this script's own watches on the API server, on
one clock. Reported as p50/p99/max (target: p99 <= 1 s), with the runner's peak resident memory
(``VmHWM`` of the process; target <= 200 MB) sampled throughout.

Then, from the same runner process, the time from NotReady to the first playbook run of each
NodeFence starting (the executor's ``run <ident>: <playbook> for NodeFence <name>`` log line,
written when a run takes one of the ``--max-concurrent-runs`` slots), and the number of runs in
flight at every moment (from the runs' start and end lines, and the runner's
``noderemedy_runs_in_flight`` gauge sampled every 0.2 s), which must never exceed the bound.

**Stubbed**: the playbooks. The lab has no BMC for 1,000 nodes, so the runner is started with
``--playbook-dir`` pointing at stub playbooks with the collection's file names; each pauses
``--stub-seconds`` (default 1 s) and fails ("no fence device"), so no NodeFence ever gets past its
first step, nothing is tainted, and the step retries keep every slot busy. The bench prints this
and records it in its ``notes``. Everything else is real: the runner, its executor and
ansible-runner starting ``ansible-playbook`` for each run, the API server, the node lifecycle
controller. The threshold period is 0 s, so the NodeFence figure is the detection pipeline itself
(watch event → plan → per-node Lease → NodeFence POST). The storm guard is on (``maxUnhealthy:
20%``) and allows the 100 failures (10% of 1,000). ``--detect-only`` runs the old variant: no runs.

How nodes fail: the lab's power label ``lab.noderemedy.io/power=off`` is set on 100 nodes in one
``kubectl label`` call. That is exactly what each node's BMC power hook does on ``chassis power
off``; setting it directly spares starting 1,000 BMCs (the lab runs with ``devices=False``).
kwok stops heartbeating those nodes and kube-controller-manager turns them NotReady after
``--node-monitor-grace-period``: 40 s here, with kwok's node lease at 40 s, Kubernetes' defaults
(``UPSTREAM_TIMING``; the lab's own 20/10 s are for fast tests). The lab's processes run at nice
-5 while the runner's playbook runs load the 2 cores.

Writes ``bench/results/watcher.json``. No assertion: the figures are data.

The bench's watches, the runner's probes and the fence ConfigMaps are in ``bench/observer.py``
(shared with bench/rack.py and bench/remedy_pods.py, which import them from here or from there).

Usage: ``.venv/bin/python bench/watcher.py [--nodes 1000] [--fail 100] [--port-base 21000]
[--max-concurrent-runs 4] [--stub-seconds 1] [--run-nice 10] [--detect-only]``.
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
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lab"))
sys.path.insert(0, str(ROOT / "bench"))

from kubernetes import config  # noqa: E402
from observer import (  # noqa: E402
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
from noderemedy_runner.machines.actions import PLAYBOOKS  # noqa: E402

RUN_START = re.compile(r"^run (\S+): (\S+\.yml) for NodeFence (\S+)$")
RUN_END = re.compile(r"^run (\S+): (\w+) in ([0-9.]+) s$")
STUB = """\
---
# bench/watcher.py stub (no fence device for 1,000 kwok nodes): pause, then fail.
- name: Bench stub of {name}
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Stand in for the fence devices
      ansible.builtin.pause:
        seconds: {seconds}
    - name: Fail as a fence step without a device would
      ansible.builtin.fail:
        msg: "bench stub: no fence device in this lab"
"""
NAMESPACE = "noderemedy-bench"
CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: bench}
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 0s}
stormGuard: {maxUnhealthy: 20%, cooldown: 60s}
"""


def parse_runs(log_path: Path, wall0: float, mono0: float) -> dict[str, Any]:
    """The executor's run lines in the runner's JSON log: each NodeFence's first run start (on the
    bench's monotonic clock), runs started and finished, their statuses, and the most runs in
    flight that any start line reports (``in_flight``: the executor's own count, taken under its
    lock when the run took its slot)."""
    first: dict[str, float] = {}
    started = finished = peak = 0
    statuses: dict[str, int] = {}
    for line in log_path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        msg = rec.get("msg", "")
        if m := RUN_START.match(msg):
            started += 1
            peak = max(peak, int(rec.get("in_flight") or 0))
            wall = datetime.fromisoformat(rec["time"]).timestamp()
            first.setdefault(m.group(3), wall - wall0 + mono0)
        elif m := RUN_END.match(msg):
            finished += 1
            statuses[m.group(2)] = statuses.get(m.group(2), 0) + 1
    return {
        "first_start": first,
        "started": started,
        "finished": finished,
        "statuses": statuses,
        "max_in_flight": peak,
    }


def serve_lab(args: argparse.Namespace) -> int:
    """Start a kube-only lab in ``args.serve_lab`` and keep it until SIGTERM/SIGINT."""
    import signal

    lab = Lab(
        LabConfig(
            workdir=args.serve_lab,
            nodes=args.nodes,
            port_base=args.port_base,
            devices=False,
            **UPSTREAM_TIMING,
        )
    )
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
    lab = Lab(LabConfig(workdir=lab_dir, nodes=nodes, port_base=port_base, devices=False, **UPSTREAM_TIMING))
    lab.info = json.loads((lab_dir / "lab.json").read_text())
    lab.kubeconfig = Path(lab.info["kube"]["kubeconfig"])
    return lab


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--fail", type=int, default=100)
    ap.add_argument("--port-base", type=int, default=21000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "watcher.json")
    ap.add_argument("--max-concurrent-runs", type=int, default=4, help="the runner's bound (default 4)")
    ap.add_argument(
        "--stub-seconds", type=float, default=1.0, help="how long each stub playbook pauses (default 1)"
    )
    ap.add_argument(
        "--run-nice",
        type=int,
        default=10,
        help="the runner's --run-nice: niceness added to its playbook runs (default 10, the runner's default)",
    )
    ap.add_argument(
        "--detect-only",
        action="store_true",
        help="run the runner with --detect-only: no runs, no run figures",
    )
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
        "measures detection -> NodeFence creation (period 0s)"
        + (
            "; no playbook runs (runner --detect-only)"
            if args.detect_only
            else f" and NotReady -> first playbook run started, with --max-concurrent-runs {args.max_concurrent_runs}"
        ),
        f"nodes fail by setting the power label {POWER_LABEL}=off directly (what the BMC power hook does), "
        "no BMCs started (devices=False)",
        "NotReady set by the real kube-controller-manager node lifecycle controller (Kubernetes' default timing: "
        "node lease 40 s, --node-monitor-grace-period 40s)",
        "times observed by the bench's own watches on one monotonic clock",
        "kwok in this lab sometimes turns an unlabelled node Ready again for a moment (it still heartbeats it "
        "under load); the detector then cancels the not-started NodeFence and creates a new one when the node "
        "is NotReady again: reaction_s counts from that last transition, reaction_from_first_not_ready_s from the first",
    ]
    if not args.detect_only:
        notes.append(
            f"STUBBED: the playbooks. The runner runs with --playbook-dir pointing at stubs of {sorted(set(PLAYBOOKS.values()))} "
            f"that pause {args.stub_seconds:g} s and fail (no fence device for 1,000 kwok nodes): real ansible-runner and "
            "ansible-playbook processes, but no NodeFence gets past its first step and nothing is tainted"
        )
        print(f"NOTE: {notes[-1]}", flush=True)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="nr-bench-watcher-") as tmp:
        tmpdir = Path(tmp)
        stubs = tmpdir / "stub-playbooks"
        stubs.mkdir()
        for name in set(PLAYBOOKS.values()):
            (stubs / name).write_text(STUB.format(name=name, seconds=args.stub_seconds))
        lab_start_s: float | None = None
        if args.lab_dir:
            lab = attach(args.lab_dir, args.nodes, args.port_base)
        else:
            lab = Lab(
                LabConfig(
                    workdir=tmpdir / "lab",
                    nodes=args.nodes,
                    port_base=args.port_base,
                    devices=False,
                    **UPSTREAM_TIMING,
                )
            )
            t0 = time.monotonic()
            lab.start(progress=lambda line: print(f"[lab] {line}", flush=True), ready_timeout=900)
            lab_start_s = time.monotonic() - t0
            print(f"lab with {args.nodes} kwok nodes Ready in {lab_start_s:.1f} s", flush=True)
            if not args.detect_only:
                # the lab stands in for 1,000 machines, whose kubelets would not share 2 cores with
                # the runner's ansible-playbook processes: its processes get the CPU first
                for proc in lab.supervisor.procs.values():
                    os.setpriority(os.PRIO_PROCESS, proc.pid, -5)
                notes.append(
                    "the lab's processes (etcd, kube-apiserver, controller-manager, scheduler, kwok) run at nice -5, "
                    f"the runner at 0 and its ansible-playbook processes at {args.run_nice} (--run-nice): the simulated "
                    "kubelets keep their heartbeats while the runs load the 2 cores, as 1,000 real machines would"
                )
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
            if not args.detect_only:
                objs = tmpdir / "fence-config.json"
                objs.write_text(json.dumps(fence_objects(victims)))
                lab.kubectl("apply", "-n", namespace, "-f", str(objs), check=True, timeout=300)
            lab.wait_nodes(victims, "True", 300)
            cfg = tmpdir / "remedy.yaml"
            cfg.write_text(CONFIG)
            log_path = args.runner_log
            log = open(log_path, "w")
            mode = (
                ["--detect-only"]
                if args.detect_only
                else ["--playbook-dir", str(stubs), "--data-dir", str(tmpdir / "data"),
                      "--max-concurrent-runs", str(args.max_concurrent_runs), "--run-nice", str(args.run_nice)]
            )  # fmt: skip
            runner = subprocess.Popen(
                [str(RUNNER), "--kubeconfig", str(lab.kubeconfig), "--namespace", namespace, "--config", str(cfg),
                 "--metrics-addr", "127.0.0.1:0", "--identity", "bench", *mode],
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
            metrics_url = next(
                "http://" + json.loads(line)["address"] + "/metrics"
                for line in log_path.read_text().splitlines()
                if '"serving /metrics' in line
            )
            # one clock: the runner's log times are wall clock, the bench's watches monotonic
            wall0, mono0 = time.time(), time.monotonic()
            # The bench's own watches are the clock: under the load of the runs, at nice 0 they
            # lagged (the NodeFence of 23 of 100 nodes seen before the node's NotReady). Their
            # threads, started below from this thread, inherit its niceness (the runner, started
            # above, keeps 0).
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), OBSERVER_NICE)
                notes.append(
                    f"the bench's own watches run at nice {OBSERVER_NICE}, above the lab and the runner"
                )
            except PermissionError:
                notes.append("the bench's own watches run at nice 0 (no privilege to raise their priority)")
            api = config.new_client_from_config(str(lab.kubeconfig))
            obs = Observer(api, set(victims))
            obs.start()
            time.sleep(3)  # the bench's watches are listed and running
            peak_rss = idle_rss[0]
            gauge: list[float] = []
            sampling = threading.Event()

            def sample() -> None:
                nonlocal peak_rss
                while not sampling.is_set():
                    peak_rss = max(peak_rss, rss_kb(runner.pid)[0])  # type: ignore[union-attr]
                    value = scrape(metrics_url, "noderemedy_runs_in_flight") if not args.detect_only else None
                    if value is not None and value == value:  # not NaN: the scrape answered
                        gauge.append(value)
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
            runs: dict[str, Any] = {}
            if not args.detect_only:
                # every NodeFence's first run started (they queue for the slots), then a few more
                # seconds of runs: retries of the failing stubs keep every slot busy
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:
                    runs = parse_runs(log_path, wall0, mono0)
                    # victims with a NodeFence and still NotReady: a NodeFence cancelled because
                    # kwok turned its node Ready again never runs
                    with obs.lock:
                        waiting = {n for n in victims if n in obs.fenced and obs.down.get(n)}
                    if waiting <= set(runs["first_start"]):
                        break
                    time.sleep(1)
                time.sleep(5)
                runs = parse_runs(log_path, wall0, mono0)
                runs["max_ansible_playbook_at_once"] = overlap_from_artifacts(tmpdir / "data" / "runs")
            time.sleep(1)
            sampling.set()
            obs.stop.set()
            hwm = rss_kb(runner.pid)[1]
            listed = json.loads(lab.kubectl("get", "nodefences", "-o", "json", timeout=120).stdout or "{}")
            fenced_api = {o["spec"]["node"] for o in listed.get("items", [])}
            with urllib.request.urlopen(metrics_url, timeout=10) as resp:
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
                        "noderemedy_runs_in_flight",
                        "noderemedy_runs_total",
                    )
                )
            ]
            reactions = [
                obs.fenced[n] - obs.last_not_ready[n]
                for n in victims
                if n in obs.fenced and n in obs.last_not_ready
            ]
            # a NodeFence seen before its node's NotReady: the bench's watch of the nodes lagged
            seen_before_not_ready = sorted(
                n for n in victims if n in obs.fenced and n in obs.not_ready and n not in obs.last_not_ready
            )
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
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
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
            "left_out_nodefence_seen_before_not_ready": seen_before_not_ready,
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
    if not args.detect_only:
        starts = [
            runs["first_start"][n] - obs.last_not_ready[n]
            for n in victims
            if n in runs["first_start"] and n in obs.last_not_ready
        ]
        first_slots = sorted(starts)[: args.max_concurrent_runs]
        result["run_started_s"] = {
            "what": "node seen turning NotReady -> the first playbook run of its NodeFence started (it took an "
            f"executor slot; {len(victims)} NodeFences queue for {args.max_concurrent_runs} slots, so most of this is the queue)",
            "samples": len(starts),
            "p50": round(statistics.median(starts), 3) if starts else None,
            "p99": round(percentile(starts, 99), 3) if starts else None,
            "max": round(max(starts), 3) if starts else None,
            "min": round(min(starts), 3) if starts else None,
            f"first_{args.max_concurrent_runs}_no_queue": [round(x, 3) for x in first_slots],
            "nodefences_without_a_run": sorted(set(victims) - set(runs["first_start"])),
        }
        result["runs_in_flight"] = {
            "bound": args.max_concurrent_runs,
            "run_nice": args.run_nice,
            "runs_started": runs["started"],
            "runs_finished": runs["finished"],
            "statuses": runs["statuses"],
            "max_at_run_start": runs["max_in_flight"],
            "max_ansible_playbook_at_once": runs["max_ansible_playbook_at_once"],
            "gauge_samples": len(gauge),
            "gauge_max": max(gauge) if gauge else None,
            "gauge_min": min(gauge) if gauge else None,
            "never_above_bound": max(runs["max_in_flight"], runs["max_ansible_playbook_at_once"])
            <= args.max_concurrent_runs
            and (not gauge or max(gauge) <= args.max_concurrent_runs),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
