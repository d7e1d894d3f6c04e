#!/usr/bin/env python3
"""Benchmark: a rack fails and is healed, end to end, with the real playbooks, the real devices and
the real runner (no stubs); and the same failure under medik8s fence-agents-remediation (FAR).

The lab is a rack (``noderemedy_lab.rack``): N kwok nodes, each with its own BMC (``ipmi_sim``),
outlet of one APC rack PDU (snmpd) and port of one FC switch (snmpd). The failure is the rack's
power loss: every outlet off in one SNMP SET; the nodes turn NotReady through the real node
lifecycle controller (grace period 20 s).

**Ours.** ``noderemedy-runner`` (this checkout, a host process) with the rack's fence configuration
(isolation ``fc-off``, power management ``pdu-off pdu-on``, recovery ``fc-on``: the PDU both proves
the node off and brings it back), a Configuration that makes a NodeFence as soon as a node is
NotReady (period 0 s) and a storm guard that lets the whole rack be fenced (the lab is the rack).
Each runner setting is one phase: the executor (``--executors``; ``job``: bench/rack_jobs.py;
``inprocess-power``: in process with power management ``pdu-off pdu-on`` only, no isolation or
recovery step, the device work of a peer that only power-fences, as FAR does) and
``--max-power-fencing`` (``default``: the runner's own, whatever it is in the tree; or a number).
A phase ends when every NodeFence is Final (or after ``--timeout``); the rack is then restored
(NodeFences deleted, taints removed, outlets and ports on, every node Ready).

**FAR** (``--far-src DIR``, bench/far.py): built from that checkout, run out of cluster, one
``FenceAgentsRemediation`` created for each node at the moment the node is seen NotReady (when
our detector, period 0 s, creates its NodeFence), ``fence_ipmilan`` (reboot) against the same BMCs,
``OutOfServiceTaint``. Its "Final" is its ``Succeeded`` condition (FAR is done once the taint is on;
a BMC power-on cannot bring back a node whose outlet is off, so its nodes stay down).

Per node, from this script's own watches (seconds after the node was seen NotReady): NodeFence
seen, ``FenceVerified`` seen (FAR: ``FenceAgentActionSucceeded``), out-of-service taint seen
(p50, p99, max), Final seen (max); and the last taint and last Final after the last NotReady. Each
node's own verified, taint and Final times are kept too (``per_node``, ours and FAR's alike), and
drawn per node, ours against FAR's, to ``docs/img/rack-release.{png,svg}`` (``tables.release_plot``)
when both were measured.
Per phase: runs started (the executor's ``run <id>: <playbook> for ...`` lines), ``ansible-playbook``
processes (distinct descendants of the runner seen in ``/proc`` every 0.2 s), CPU seconds of the
runner and its reaped children (``/proc/<pid>/stat`` utime+stime+cutime+cstime), the runner's peak
RSS (``VmHWM``) and ``released_without_evidence``: nodes that got the taint with no power-off of
their own BMC or outlet recorded by the device between the failure and the taint, or without a
verified fence on their object (see :func:`evidence_missing`).

``--rack N``: the rack is the first N nodes of a larger lab (``--nodes``), the others stay
healthy and the storm guard is at its default (a rack of 100 of 1,000 nodes is not a storm); the
results go under ``racks.fail_<N>_of_<nodes>`` and FAR's file is left as it is.

The single node: a power cut of ``lab-node-0`` through its BMC, fenced by ours and by FAR with the
same device work, on the same rack lab (a kwok node, not the demo's real node): ours with power
management ``ipmi-off ipmi-on`` only (no FC isolation or recovery), FAR with ``fence_ipmilan``.

Writes ``bench/results/rack.json`` (``--out``), ``bench/results/peers.json`` (``--peers-out``) and,
when FAR ran, ``docs/img/rack-release.{png,svg}`` (``--plot``).

Usage: ``.venv/bin/python bench/rack.py [--nodes 40] [--port-base 30400] [--executors inprocess,job]
[--max-power-fencing default,40] [--far-src /work/far-src] [--timeout 300]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
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

import far  # noqa: E402
import rack_jobs  # noqa: E402
import tables  # noqa: E402
from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from proc_meter import ProcSampler, cpu_s, cpu_split  # noqa: E402
from watcher import RUNNER, UPSTREAM_TIMING, Observer, percentile, rss_kb  # noqa: E402

from noderemedy_lab.config import LabConfig  # noqa: E402
from noderemedy_lab.lab import Lab  # noqa: E402
from noderemedy_lab.rack import Rack  # noqa: E402

NAMESPACE = "noderemedy-bench"
JOB_NOT_MEASURED = "not run: bench/rack.py --executors inprocess,job (the Job executor: bench/rack_jobs.py)"
#: ``--executors`` values, and the one that fences by power alone (in process).
EXECUTORS, POWER_ONLY = ("inprocess", "job", "inprocess-power"), "inprocess-power"
OOS = "node.kubernetes.io/out-of-service"
NF = ("remediation.noderemedy.io", "v1alpha1", "nodefences")
RUN_START = re.compile(r"^run (\S+): (\S+\.yml) for ")
CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: bench-rack}
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 0s}
stormGuard: {maxUnhealthy: 100%, cooldown: 0s}
"""
#: The Configuration of a rack that is part of a larger lab (``--rack``): the storm guard at its
#: default (NodeHealthCheck's ``minHealthy`` 51%), which a rack of 100 of 1,000 nodes must pass.
CONFIG_DEFAULT_STORM = CONFIG.replace("stormGuard: {maxUnhealthy: 100%, cooldown: 0s}\n", "")


class RackObserver(Observer):
    """:class:`watcher.Observer` (NotReady, NodeFence first seen) plus, per node: the taint, the
    verified fence and Final, first seen (monotonic and wall seconds); ``far`` True: FAR's objects."""

    def __init__(self, api: client.ApiClient, watched: set[str], far_mode: bool = False) -> None:
        super().__init__(api, watched)
        self.far_mode = far_mode
        self.taint: dict[str, float] = {}
        self.taint_wall: dict[str, float] = {}
        self.verified: dict[str, float] = {}
        self.final: dict[str, float] = {}
        self.on_not_ready: Any = None

    def _node(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        before = name in self.not_ready
        super()._node(obj)
        if name not in self.watched:
            return
        if not before and name in self.not_ready and self.on_not_ready is not None:
            self.on_not_ready(name)
        if any(t["key"] == OOS for t in (obj.get("spec") or {}).get("taints") or ()):
            with self.lock:
                if name not in self.taint:
                    self.taint[name], self.taint_wall[name] = time.monotonic(), time.time()

    def _fence(self, obj: dict[str, Any]) -> None:
        if self.far_mode:
            node = obj["metadata"]["name"]
            conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or ()}
            verified, final = (
                conds.get("FenceAgentActionSucceeded") == "True",
                conds.get("Succeeded") == "True",
            )
        else:
            node = obj["spec"]["node"]
            st = obj.get("status") or {}
            conds = {c["type"]: c["status"] for c in st.get("conditions") or ()}
            verified, final = conds.get("FenceVerified") == "True", st.get("status") == "Final"
        if node not in self.watched:  # a node outside the rack (--rack: the rest of the lab)
            return
        now = time.monotonic()
        with self.lock:
            self.fenced.setdefault(node, now)
            if verified:
                self.verified.setdefault(node, now)
            if final:
                self.final.setdefault(node, now)

    def start(self) -> None:
        core = client.CoreV1Api(self.api)
        co = client.CustomObjectsApi(self.api)
        if self.far_mode:

            def objs(**kw: Any) -> Any:
                return co.list_namespaced_custom_object(
                    far.GROUP, far.VERSION, far.NAMESPACE, far.PLURAL, **kw
                )
        else:

            def objs(**kw: Any) -> Any:
                return co.list_cluster_custom_object(*NF, **kw)

        threading.Thread(target=self._run, args=(core.list_node, self._node), daemon=True).start()
        threading.Thread(target=self._run, args=(objs, self._fence), daemon=True).start()


def dist(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": round(statistics.median(values), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2),
    }


def evidence_missing(rack: Rack, obs: RackObserver, nodes: list[str], since: float) -> list[str]:
    """Nodes tainted without their own evidence: no power-off of their own BMC (its power log) or
    outlet (the PDU's SET log) recorded between the failure (``since``, epoch seconds) and the
    taint, or no verified fence on their object (ours ``FenceVerified``, FAR
    ``FenceAgentActionSucceeded``). A reboot counts: its off is in the log before the taint."""
    logs = rack.device_logs()
    bad = []
    for n in nodes:
        if n not in obs.taint_wall:
            continue
        t = obs.taint_wall[n]
        off = any(since <= ts <= t and v == 0 for ts, v in logs[n]["bmc"]) or any(
            since <= ts <= t and v in (2, 6) for ts, v in logs[n]["outlet"]
        )
        if not off or n not in obs.verified:
            bad.append(n)
    return bad


def per_node(obs: RackObserver, nodes: list[str]) -> dict[str, dict[str, float | None]]:
    """Per node (in ``nodes``' order), seconds from its NotReady (first seen) to its verified fence
    (``verified_s``), its out-of-service taint (``taint_s``) and Final (``final_s``; FAR: its
    ``Succeeded``), each first seen by this script's watches; None: not seen (or no NotReady seen)."""

    def at(d: dict[str, float], n: str) -> float | None:
        return round(d[n] - obs.not_ready[n], 2) if n in d and n in obs.not_ready else None

    return {n: {"verified_s": at(obs.verified, n), "taint_s": at(obs.taint, n), "final_s": at(obs.final, n)}
            for n in nodes}  # fmt: skip


def figures(obs: RackObserver, nodes: list[str]) -> dict[str, Any]:
    """The phase's figures over ``nodes`` (module docstring): the distributions, the counts and
    :func:`per_node`'s times under ``per_node``."""

    def rel(d: dict[str, float]) -> list[float]:
        return [d[n] - obs.not_ready[n] for n in nodes if n in d and n in obs.not_ready]

    last_nr = max((obs.not_ready[n] for n in nodes if n in obs.not_ready), default=None)
    return {
        "nodes": len(nodes),
        "not_ready_seen": sum(1 for n in nodes if n in obs.not_ready),
        "object_s": dist(rel(obs.fenced)),
        "verified_s": dist(rel(obs.verified)),
        "taint_s": dist(rel(obs.taint)),
        "final_max_s": dist(rel(obs.final))["max"],
        "tainted": len(obs.taint),
        "final": len(obs.final),
        "last_taint_after_last_not_ready_s": round(max(obs.taint.values()) - last_nr, 2)
        if obs.taint and last_nr
        else None,
        "last_final_after_last_not_ready_s": round(max(obs.final.values()) - last_nr, 2)
        if obs.final and last_nr
        else None,
        "per_node": per_node(obs, nodes),
    }


def wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.5)


def restore(lab: Lab, rack: Rack, nodes: list[str]) -> None:
    """NodeFences gone, taints off, every port and outlet on, every BMC on, every node Ready."""
    co = client.CustomObjectsApi(lab.api_client())
    for obj in co.list_cluster_custom_object(*NF)["items"]:
        name = obj["metadata"]["name"]
        try:
            co.patch_cluster_custom_object(*NF, name, {"metadata": {"finalizers": None}})
            co.delete_cluster_custom_object(*NF, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    core = client.CoreV1Api(lab.api_client())
    for n in nodes:
        taints = core.read_node(n, _request_timeout=10).spec.taints or []
        if any(t.key == OOS for t in taints):
            keep = [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints if t.key != OOS]
            core.patch_node(n, {"spec": {"taints": keep}}, _request_timeout=10)
    for n in nodes:
        lab.fc_port(n, True)
        if Path(rack.bmcs[n]["power_file"]).read_text().strip() != "1":
            lab.power_on(n)
    rack.power_restore()
    lab.wait_nodes(nodes, "True", 300)


def run_ours(lab: Lab, rack: Rack, tmp: Path, label: str, executor: str, mpf: str, nodes: list[str],
             fail: Any, args: argparse.Namespace, job: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One phase of our runner: start it, ``fail()``, wait for every NodeFence Final, measure.
    ``job``: the Job executor's setting (:func:`rack_jobs.prepare`): its namespace and identity."""
    cfg = tmp / "remedy.yaml"
    cfg.write_text(CONFIG if args.rack is None else CONFIG_DEFAULT_STORM)
    log = tmp / f"runner-{label}.log"
    namespace = job["namespace"] if job else NAMESPACE
    argv = [str(RUNNER), "--kubeconfig", str(lab.kubeconfig), "--namespace", namespace, "--config", str(cfg),
            "--metrics-addr", "127.0.0.1:0", "--identity", f"bench-{label}", "--executor", executor,
            "--data-dir", str(tmp / f"data-{label}"), "--device-check-interval", "0", "--retry-delay", "2",
            "--run-env", f"SNMP_PERSISTENT_DIR={lab.info['devices']['snmp_persistent_dir']}"]  # fmt: skip
    if mpf != "default":
        argv += ["--max-power-fencing", mpf]
    argv += args.runner_arg
    env = {**os.environ, **(job["env"] if job else {})}
    runner = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)
    obs = RackObserver(lab.api_client(), set(nodes))
    try:
        wait(lambda: '"msg": "acting"' in log.read_text() or runner.poll() is not None, 120, "the runner")
        if runner.poll() is not None:
            raise RuntimeError(f"runner exited:\n{log.read_text()[-3000:]}")
        sampler, meter = ProcSampler(runner.pid), rack_jobs.PodMeter(lab, job)
        sampler.start()
        meter.start()
        obs.start()
        time.sleep(2)  # the watches have listed
        print(f"[{label}] failing {len(nodes)} node(s)", flush=True)
        since = time.time()
        fail()
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and len(obs.final) < len(nodes):
            if runner.poll() is not None:
                raise RuntimeError(f"runner exited:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        sampler.stop.set()
        obs.stop.set()
        hwm = rss_kb(runner.pid)[1]
        own, children = cpu_split(runner.pid)
    finally:
        runner.terminate()
        runner.wait(60)
    runs = sum(
        1 for line in log.read_text().splitlines()
        if line.startswith("{") and RUN_START.match(json.loads(line).get("msg", ""))
    )  # fmt: skip
    out = figures(obs, nodes)
    out.update({
        "max_power_fencing": mpf,
        "runs_started": runs,
        "ansible_playbook_processes": len(sampler.seen),
        "cpu_s": round(own + children, 1),
        "cpu_runner_s": round(own, 1),
        "cpu_runs_s": round(children, 1),
        "rss_mb": round(hwm / 1024, 1),
        "released_without_evidence": len(bad := evidence_missing(rack, obs, nodes, since)),
        "released_without_evidence_nodes": bad,
        **meter.figures(own, log.read_text()),
    })  # fmt: skip
    print(f"FIGURE rack {label}: {json.dumps(out)}", flush=True)
    return out


def run_far(lab: Lab, rack: Rack, peer: far.FarPeer, label: str, nodes: list[str], fail: Any,
            args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """One FAR phase: FARs created as nodes are seen NotReady; measured as ours."""
    obs = RackObserver(lab.api_client(), set(nodes), far_mode=True)
    pool: list[threading.Thread] = []

    def create(node: str) -> None:
        t = threading.Thread(target=peer.create, args=(node,), daemon=True)
        t.start()
        pool.append(t)

    obs.on_not_ready = create
    assert peer.proc is not None
    cpu0 = cpu_s(peer.proc.pid)
    sampler = ProcSampler(peer.proc.pid, "fence_ipmilan")
    sampler.start()
    obs.start()
    time.sleep(2)
    print(f"[{label}] failing {len(nodes)} node(s)", flush=True)
    since = time.time()
    fail()
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and len(obs.final) < len(nodes):
        time.sleep(0.5)
    sampler.stop.set()
    obs.stop.set()
    out = figures(obs, nodes)
    out.update({
        "agent_processes": len(sampler.seen),
        "cpu_s": round(cpu_s(peer.proc.pid) - cpu0, 1),
        "rss_mb": round(rss_kb(peer.proc.pid)[1] / 1024, 1),
        "released_without_evidence": len(bad := evidence_missing(rack, obs, nodes, since)),
        "released_without_evidence_nodes": bad,
    })  # fmt: skip
    print(f"FIGURE far {label}: {json.dumps(out)}", flush=True)
    peer.delete_all()
    return out


def apply(lab: Lab, docs: list[dict]) -> None:
    path = Path(tempfile.mkstemp(suffix=".json")[1])
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    lab.kubectl("apply", "-f", str(path), check=True, timeout=300)
    path.unlink()


def runner_default_max_power_fencing() -> int | None:
    """The runner's own default of ``--max-power-fencing``, read from its ``--help``."""
    text = " ".join(subprocess.run([str(RUNNER), "--help"], capture_output=True, text=True).stdout.split())
    m = re.search(r"--max-power-fencing N .*?default (\d+)\b", text)
    return int(m.group(1)) if m else None


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1m": os.getloadavg()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("NODEREMEDY_LAB_PORT_BASE", "30400")))
    ap.add_argument("--executors", default="inprocess", help=f"comma-separated: {', '.join(EXECUTORS)}")
    ap.add_argument("--max-power-fencing", default="default,rack",
                    help="comma-separated settings: 'default' (the runner's own), 'rack' (the rack's nodes) or N")  # fmt: skip
    ap.add_argument("--far-src", type=Path, default=None, help="a fence-agents-remediation checkout")
    ap.add_argument("--no-single", action="store_true", help="skip the single-node power cut")
    ap.add_argument("--rack", type=int, default=None, metavar="N",
                    help="the rack is the first N of --nodes (default: all), the storm guard at its default; "
                    "results under racks.fail_<N>_of_<nodes>, peers.json untouched")  # fmt: skip
    ap.add_argument("--timeout", type=float, default=480, help="seconds a phase may take after the failure")
    ap.add_argument("--runner-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for our runner, e.g. --runner-arg=--run-nice=0 (repeatable; in the "
                    "results' command)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rack.json")
    ap.add_argument("--peers-out", type=Path, default=ROOT / "bench" / "results" / "peers.json")
    ap.add_argument("--plot", type=Path, default=tables.RELEASE_PLOT,
                    help="the per-node release plot, ours against FAR (.png and .svg; drawn when both ran)")  # fmt: skip
    args = ap.parse_args()
    # a SIGTERM (a CI timeout, kill) unwinds like Ctrl-C: the lab and the runner are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    executors = args.executors.split(",")
    if set(executors) - set(EXECUTORS):
        ap.error(f"--executors: {args.executors!r}: comma-separated {', '.join(EXECUTORS)}")
    archive = rack_jobs.build_image() if "job" in executors else None  # before the lab: ./dev image
    began = datetime.now(UTC).isoformat(timespec="seconds")
    load0 = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="bench-rack-"))
    os.chmod(work, 0o755)
    far_bin: Path | None = None
    far_reason = "no --far-src given (a fence-agents-remediation checkout: see docs/benchmarks.md)"
    if args.far_src is not None:
        try:
            if far.fence_ipmilan() is None:
                raise RuntimeError("fence_ipmilan not found (install Debian's fence-agents)")
            far_bin = far.build(args.far_src.resolve())
        except (OSError, RuntimeError) as exc:
            far_reason = f"FAR could not be built or run: {exc}"
    # a rack of part of a large lab: upstream's grace period and Lease, as the 1,000-node benches
    # (bench/watcher.py); with the lab's 20 s, a lab of 1,000 kwok nodes never had them all Ready
    # here (about half flapped Unknown for 300 s)
    timing: dict[str, Any] = UPSTREAM_TIMING if args.rack is not None else {}
    timing = {**timing, "real_nodes": rack_jobs.REAL_NODES if archive is not None else 0}
    lab = Lab(
        LabConfig(
            workdir=work / "lab", nodes=args.nodes, port_base=args.port_base, rack=args.rack is None, **timing
        )
    )
    t0 = time.monotonic()
    lab.start(progress=lambda line: print(f"[lab] {line}", flush=True), ready_timeout=300 + args.nodes // 2)
    started_s = round(time.monotonic() - t0, 1)
    bmc_rss = [rss_kb(p.pid)[0] for name, p in lab.supervisor.procs.items() if name.startswith("bmc ")]
    print(f"FIGURE rack lab of {args.nodes} nodes started in {started_s} s; ipmi_sim RSS "
          f"{sum(bmc_rss) / 1024:.0f} MiB for {len(bmc_rss)} BMCs", flush=True)  # fmt: skip
    results: dict[str, Any] = {"executors": {}}
    far_results: dict[str, Any] = {}
    own_rack: Rack | None = None  # --rack: a rack of part of the lab, this script's to close
    try:
        if args.rack is not None:
            own_rack = Rack(lab, list(lab.info["nodes"])[: args.rack]).start()
        rack = own_rack or lab.rack
        nodes = rack.nodes
        lab.kubectl("apply", "-f", str(ROOT / "deploy" / "crds"), check=True)
        lab.kubectl("create", "namespace", NAMESPACE, check=True)
        job = rack_jobs.prepare(lab, rack, archive) if archive is not None else None
        for ex in executors:
            settings = {}
            for mpf in args.max_power_fencing.split(","):
                setting = str(len(nodes)) if mpf == "rack" else mpf
                ns, host = (job["namespace"], job["host"]) if ex == "job" and job else (NAMESPACE, None)
                apply(lab, rack.fence_configuration(ns, power="pdu", host=host, storage=ex != POWER_ONLY))
                settings[mpf] = run_ours(lab, rack, work, f"{ex}-mpf-{setting}", ex.split("-")[0], setting,
                                         nodes, rack.power_loss, args, job if ex == "job" else None)  # fmt: skip
                restore(lab, rack, nodes)
            own = {"fence_configuration": "power_management=pdu-off pdu-on (no isolation or recovery step)"}
            results["executors"][ex] = {**next(iter(settings.values())), "by_max_power_fencing": settings,
                                        **(own if ex == POWER_ONLY else {})}  # fmt: skip
        if "job" not in executors:
            results["executors"]["job"] = {"not_measured": JOB_NOT_MEASURED}
        single: dict[str, Any] = {}
        if not args.no_single:
            apply(lab, rack.fence_configuration(NAMESPACE, power="ipmi", storage=False))
            one = nodes[:1]
            single = run_ours(lab, rack, work, "single-inprocess", "inprocess", "default", one,
                              lambda: lab.power_off(one[0]), args)  # fmt: skip
            restore(lab, rack, nodes)
        if far_bin is not None:
            peer = far.FarPeer(lab, far_bin, args.far_src.resolve(), work)
            peer.install(nodes)
            peer.start()
            try:
                far_results["rack_power_loss"] = run_far(
                    lab, rack, peer, "far-rack", nodes, rack.power_loss, args
                )
                restore(lab, rack, nodes)
                if not args.no_single:
                    one = nodes[:1]
                    far_results["single_node_power_cut"] = run_far(
                        lab, rack, peer, "far-single", one, lambda: lab.power_off(one[0]), args
                    )
                    restore(lab, rack, nodes)
            finally:
                peer.stop()
    finally:
        if own_rack is not None:
            own_rack.close()
        lab.stop()
    meta = {
        "generated_at": began,
        "machine": {
            **machine(),
            "load_average_1m_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
        },
        "command": " ".join([".venv/bin/python", "bench/rack.py", *sys.argv[1:]]),
        "lab": {
            "nodes": args.nodes,
            "started_s": started_s,
            "ipmi_sim_rss_mib": round(sum(bmc_rss) / 1024, 1),
            "grace_period_s": lab.config.node_monitor_grace_period,
        },  # fmt: skip
        "failure": "every outlet of the rack's PDU off in one SNMP SET"
        + (f" ({len(nodes)} of the lab's {args.nodes} nodes)" if args.rack is not None else ""),
        "runner_default_max_power_fencing": runner_default_max_power_fencing(),
        "fence_configuration": "isolation=fc-off, power_management=pdu-off pdu-on, recovery=fc-on",
    }
    key = f"power_loss_{args.nodes}" if args.rack is None else f"fail_{args.rack}_of_{args.nodes}"
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc.setdefault("racks", {})[key] = {**meta, **results}
    if single:
        doc["single_node_power_cut"] = {**meta, "inprocess": single,
                                        "fence_configuration": "power_management=ipmi-off ipmi-on (no isolation or recovery step)"}  # fmt: skip
    doc["racks"].setdefault(
        "fail_100_of_1000", {"not_measured": "not run: bench/rack.py --nodes 1000 --rack 100"}
    )
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    if args.rack is not None:  # FAR and the plot are measured on a whole-lab rack
        print(f"wrote {args.out}")
        return 0
    peers = json.loads(args.peers_out.read_text()) if args.peers_out.exists() else {}
    if far_bin is None:
        peers["far"] = {"not_measured": far_reason}
    else:
        peers["far"] = {
            **meta,
            "far_commit": far.source_id(args.far_src.resolve()),
            f"rack_power_loss_{args.nodes}": far_results.get("rack_power_loss"),
            "single_node_power_cut": far_results.get("single_node_power_cut"),
            "ours_inprocess": {
                key: results["executors"].get("inprocess"),
                "single_node_power_cut": single,
                f"{key}_power_only": results["executors"].get(POWER_ONLY),
            },
        }
    args.peers_out.write_text(json.dumps(peers, indent=1) + "\n")
    print(f"wrote {args.out} and {args.peers_out}")
    for path in tables.release_plot(doc, peers, args.plot):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
