"""``noderemedy-runner``: the watcher service (the remediation pod image's entry point).

It runs two loops in one process, only on the elected replica when ``--leader-elect`` is given:

* the **detector** (:mod:`noderemedy_runner.loops.detector`): reads the remedy Configuration, watches
  Nodes, and creates one NodeFence per node that stays unhealthy for its period (storm guard,
  exclusions, pauses and per-node Leases respected);
* the **watcher** (:mod:`noderemedy_runner.loops.watcher`): reconciles NodeFence and opted-in
  Metal3Remediation objects by running the collection's playbooks with ansible-runner.

Exit codes: 0 after SIGTERM/SIGINT (Lease released), 1 when leadership was lost or the API
server cannot be reached at start, 2 on bad flags or a bad Configuration. Once the service has
stopped, the process ends at once (:func:`leave`), without the interpreter's slow finalization.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from noderemedy_runner.config import remedy as cfgmod
from noderemedy_runner.logs import setup as setup_logs
from noderemedy_runner.machines.actions import PLAYBOOKS
from noderemedy_runner.machines.nodefence import NodeFencePolicy
from noderemedy_runner.metrics import Health, Metrics, MetricsServer, parse_addr

log = logging.getLogger("noderemedy_runner.cli")

DESCRIPTION = """\
Fence and remediate failed Kubernetes nodes on bare metal.

noderemedy-runner watches the cluster's Nodes. When a node matches one of the remedy
Configuration's thresholds (by default: Ready is False or Unknown) for the threshold's period
(default 5m), it creates a NodeFence named after the node; the same process then runs the
fence steps of that NodeFence (isolation, power management, recovery) as Ansible playbooks,
using the node's fence-config-<node> ConfigMap. A storm guard stops new fencing when too many
nodes look dead at once (default: more than 49% of the selected nodes).
"""

EPILOG = """\
examples:
  check a Configuration file and print what it means, without touching a cluster:
    noderemedy-runner --config remedy.yaml --check-config

  watch a cluster but act on nothing (decisions are logged as JSON lines):
    noderemedy-runner --kubeconfig ~/.kube/config --config remedy.yaml --dry-run

  in the cluster (two replicas, one acts at a time):
    noderemedy-runner --config configmap:noderemedy/noderemedy-config --leader-elect \\
        --metrics-addr :8080

what it writes: NodeFence objects, their status, Leases (leader election and one per node in
remediation) and the ConfigMap noderemedy-status in --namespace, Events. Metrics, /healthz and
/readyz are served on --metrics-addr. See docs/operations.md.
"""


#: The NodeFence machine's defaults (docs/state-machines.md), the defaults of its flags.
_POLICY = NodeFencePolicy()
#: Seconds a stop waits for the detector and the watcher (which cancel their runs at once: the
#: whole stop takes about 1 to 3 s in the lab). Past it the work is still going on: the leader
#: Lease is not released but left to expire. Below the Deployment's terminationGracePeriodSeconds
#: (15), so the runner says so before the kubelet kills it.
STOP_JOIN_SECONDS = 10.0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``--help`` is the user's first documentation)."""
    p = argparse.ArgumentParser(
        prog="noderemedy-runner",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    conn = p.add_argument_group("cluster")
    conn.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="kubeconfig file to reach the API server (default: $KUBECONFIG, else the in-cluster service account)",
    )
    conn.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "noderemedy"),
        metavar="NS",
        help="the runner's namespace: fence ConfigMaps and Secrets, Leases, the noderemedy-status "
        "ConfigMap (default: $POD_NAMESPACE, else %(default)s)",
    )
    det = p.add_argument_group("detection")
    det.add_argument(
        "--config",
        metavar="FILE|configmap:NS/NAME",
        help="the remedy Configuration: a YAML file, or a ConfigMap whose *.yaml keys hold it "
        "(default: built-in -- every node, Ready False/Unknown for 5m, storm guard minHealthy 51%%)",
    )
    det.add_argument(
        "--check-config",
        action="store_true",
        help="parse --config, print what it means, and exit (0 valid, 2 invalid); needs no cluster "
        "for a file",
    )
    only = det.add_mutually_exclusive_group()
    only.add_argument(
        "--detect-only",
        action="store_true",
        help="create/cancel NodeFences but run no playbooks (another process reconciles them)",
    )
    only.add_argument(
        "--reconcile-only",
        action="store_true",
        help="reconcile NodeFence and Metal3Remediation objects but create none (another process, "
        "e.g. a node health check, creates them)",
    )
    act = p.add_argument_group("remediation")
    act.add_argument(
        "--max-concurrent-runs",
        type=int,
        default=4,
        metavar="N",
        help="Ansible playbook runs in flight at once (default %(default)s)",
    )
    act.add_argument(
        "--batch-window",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="runs of the same fence playbook asked for within this many seconds go as one "
        'ansible-playbook run, one inventory host per node (fan-out; docs/runner.md "Batches"; '
        "default %(default)s; 0: every run on its own)",
    )
    act.add_argument(
        "--batch-size",
        type=int,
        default=20,
        metavar="N",
        help="most nodes in one batch run, and its Ansible forks (default %(default)s); at most "
        "--max-concurrent-runs x N nodes are fenced at once",
    )
    act.add_argument(
        "--run-deadline",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a playbook run is killed after this many seconds (default %(default)s)",
    )
    act.add_argument(
        "--run-nice",
        type=int,
        default=10,
        metavar="N",
        help="niceness added to each playbook run, as nice(1) (0-19, default %(default)s): when runs "
        "load every core, detecting failed nodes and writing status keep the runner's priority",
    )
    act.add_argument(
        "--grace-seconds",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="extra wait of the NodeFence machine, counted from the node turning NotReady, before "
        "its first step (default %(default)s: the Configuration's period already applied)",
    )
    act.add_argument(
        "--step-retries",
        type=int,
        default=_POLICY.step_retries,
        metavar="N",
        help="extra attempts of a failed fence step before the NodeFence goes to Error (default %(default)s)",
    )
    act.add_argument(
        "--retry-delay",
        type=float,
        default=_POLICY.retry_delay_seconds,
        metavar="SECONDS",
        help="wait before a step's next attempt (default %(default)s)",
    )
    act.add_argument(
        "--max-restarts",
        type=int,
        default=_POLICY.max_restarts,
        metavar="N",
        help="restarts of a NodeFence's whole flow from Error (default %(default)s)",
    )
    act.add_argument(
        "--restart-delay",
        type=float,
        default=_POLICY.restart_delay_seconds,
        metavar="SECONDS",
        help="wait in Error before a restart (default %(default)s)",
    )
    act.add_argument(
        "--recovery-timeout",
        type=float,
        default=_POLICY.recovery_timeout_seconds,
        metavar="SECONDS",
        help="how long a fenced node may stay NotReady after Recovery before the NodeFence goes to "
        "Error (default %(default)s)",
    )
    act.add_argument(
        "--poll-interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often NodeFence and Metal3Remediation objects are listed (default %(default)s)",
    )
    act.add_argument(
        "--run-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for every playbook run, never a secret (repeatable), "
        "e.g. SNMP_PERSISTENT_DIR=/var/lib/snmp",
    )
    act.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("NODEREMEDY_DATA_DIR", "/var/lib/noderemedy-runner")),
        metavar="DIR",
        help="ansible-runner working directories (default: $NODEREMEDY_DATA_DIR or %(default)s)",
    )
    act.add_argument(
        "--executor",
        choices=("inprocess", "job"),
        default="inprocess",
        help="where playbook runs happen: in this process (default), or as remediation pods -- a "
        "Kubernetes Job per run from this pod's own image, ServiceAccount and placement, never on "
        "the node being fenced (only in a pod: POD_NAME/POD_NAMESPACE; docs/runner.md)",
    )
    act.add_argument(
        "--job-run",
        action="store_true",
        help="be a remediation pod: run the one playbook run in $NODEREMEDY_JOB, write its outcome "
        "to the termination message and exit (what --executor job starts)",
    )
    act.add_argument(
        "--playbook-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the playbooks the runner invokes are (fence_step.yml, fence_verify.yml, "
        "out_of_service_taint.yml, bmh_power.yml; docs/runner.md) (default: the collection's "
        "playbooks/)",
    )
    act.add_argument(
        "--metal3-selector",
        type=_label_selector,
        default=None,
        metavar="JSON",
        help="also reconcile Metal3Remediations whose labels match this metav1.LabelSelector, e.g. "
        '\'{"matchLabels": {"cluster.x-k8s.io/cluster-name": "lab"}}\' (default: only '
        "those annotated remediation.noderemedy.io/runner=true; the annotation wins; docs/metal3.md)",
    )
    act.add_argument(
        "--cloud-credentials-secret",
        default=None,
        metavar="NAME",
        help="a cloud node (spec.providerID aws:///...) without fence-config-<node> gets the seed's "
        "default cloud configuration (mark-unschedulable, restart-instance, mark-unschedulable) with "
        "the credentials of this Secret in --namespace (keys access_key, secret_key) (default: off; "
        "docs/fencing.md)",
    )
    act.add_argument(
        "--cloud-endpoint-url",
        default=None,
        metavar="URL",
        help="with --cloud-credentials-secret: an EC2-compatible endpoint instead of AWS's own",
    )
    act.add_argument(
        "--max-power-fencing",
        type=int,
        default=48,
        metavar="N",
        help="nodes in their PowerManagement step at once (the seed's 'at most N nodes'; default "
        "%(default)s: a whole rack of 1U servers at once; a false mass failure is the storm guard's "
        "to stop: docs/operations.md)",
    )
    act.add_argument(
        "--max-pods-released-per-minute",
        type=int,
        default=0,
        metavar="N",
        help="release rate limit: pods the out-of-service taint may evict within any 60 s (counted "
        "on the node at its release); a release over it waits with WorkloadsReleased=False "
        "ReleaseRateLimited, the fencing does not (default 0: no limit; docs/concepts.md)",
    )
    act.add_argument(
        "--device-check-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="seconds between read-only status checks of every fence device (Pacemaker's monitor; "
        "0: off); fence ConfigMaps are validated every few seconds regardless (docs/operations.md)",
    )
    act.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and report (logs, metrics) but act on nothing: no NodeFence, status, Lease, "
        "Event or playbook",
    )
    ha = p.add_argument_group("high availability")
    ha.add_argument(
        "--leader-elect",
        action="store_true",
        help="run several replicas; only the holder of the Lease <namespace>/noderemedy-runner acts, "
        "the others take over within the lease duration if it dies",
    )
    ha.add_argument(
        "--leader-elect-lease-duration", type=int, default=15, metavar="SECONDS", help="(default %(default)s)"
    )
    ha.add_argument(
        "--leader-elect-renew-deadline", type=int, default=10, metavar="SECONDS", help="(default %(default)s)"
    )
    ha.add_argument(
        "--leader-elect-retry-period", type=int, default=2, metavar="SECONDS", help="(default %(default)s)"
    )
    ha.add_argument(
        "--leader-elect-lease-name", default="noderemedy-runner", metavar="NAME", help="(default %(default)s)"
    )
    ha.add_argument(
        "--identity",
        default=None,
        help="this replica's name in Leases and Events (default: hostname + random suffix)",
    )
    obs = p.add_argument_group("observability")
    obs.add_argument(
        "--metrics-addr",
        default=":8080",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz here; 0 disables (default %(default)s)",
    )
    obs.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="JSON log lines on stderr at this level (default %(default)s)",
    )
    return p


def _positive(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.max_concurrent_runs < 1:
        p.error(f"--max-concurrent-runs: {args.max_concurrent_runs} must be at least 1")
    if args.batch_window < 0:
        p.error(f"--batch-window: {args.batch_window} must be 0 (no batches) or more seconds")
    if args.batch_size < 1:
        p.error(f"--batch-size: {args.batch_size} must be at least 1")
    if args.run_deadline <= 0:
        p.error(f"--run-deadline: {args.run_deadline} must be positive")
    if not 0 <= args.run_nice <= 19:
        p.error(f"--run-nice: {args.run_nice} must be 0..19 (an increase of niceness)")
    for flag in (
        "grace_seconds", "step_retries", "retry_delay", "max_restarts", "restart_delay",
        "max_pods_released_per_minute",
    ):  # fmt: skip
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')}: {getattr(args, flag)} must not be negative")
    if args.recovery_timeout <= 0:
        p.error(f"--recovery-timeout: {args.recovery_timeout} must be positive")
    if args.poll_interval <= 0:
        p.error(f"--poll-interval: {args.poll_interval} must be positive")
    for item in args.run_env:
        if "=" not in item or not item.split("=", 1)[0]:
            p.error(f"--run-env: {item!r} is not NAME=VALUE")
    if args.playbook_dir is not None:
        missing = sorted({n for n in PLAYBOOKS.values() if not (args.playbook_dir / n).is_file()})
        if missing:
            p.error(f"--playbook-dir {str(args.playbook_dir)!r}: missing {', '.join(missing)}")
    try:
        parse_addr(args.metrics_addr)
    except ValueError as exc:
        p.error(str(exc))
    d, r, t = (
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    )
    if t < 1:
        p.error(f"--leader-elect-retry-period: {t} must be at least 1")
    if r <= 1.2 * t:
        p.error(f"--leader-elect-renew-deadline: {r} must exceed 1.2 x --leader-elect-retry-period ({t})")
    if d <= r:
        p.error(f"--leader-elect-lease-duration: {d} must exceed --leader-elect-renew-deadline ({r})")


def describe(configs: cfgmod.ConfigurationSet) -> str:
    """A human summary of the Configurations (``--check-config``)."""
    lines = []
    for c in configs.configurations:
        sel = "every node" if c.node_selector is None else f"nodes matching {c.node_selector}"
        lines.append(f"Configuration {c.name}: {sel}")
        for th in c.thresholds:
            steps = " then ".join("+".join(_remedy_label(r) for r in step) for step in th.remedies)
            lines.append(
                f"  unhealthy when {th.describe()} -> {steps}; recovery {'+'.join(r.name for r in th.recovery)}"
            )
        g = c.storm_guard
        lines.append(f"  storm guard: {g.describe()}, cooldown {g.cooldown:g}s")
        if c.pause_requests:
            lines.append(f"  paused: {', '.join(c.pause_requests)}")
    lines.extend(f"warning: {w}" for w in configs.warnings)
    return "\n".join(lines)


def _remedy_label(r: cfgmod.Remedy) -> str:
    """``repair (pod, 180s)`` / ``fence (fence flow, job)``: a remedy for ``--check-config``."""
    what = ["pod" if r.pod else "fence flow"]
    if r.executor:
        what.append(r.executor)
    if r.period is not None:
        what.append(f"{r.period:g}s")
    if r.clean_resources:
        what.append("clean-resources")
    return f"{r.name} ({', '.join(what)})"


def _api_client(kubeconfig: Path | None) -> Any:
    from noderemedy_runner.kube.client import new_client  # heavy import

    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    api = new_client(path)
    api.configuration.connection_pool_maxsize = 32
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = 32
    return api


def _label_selector(text: str) -> Any:
    """argparse type of ``--metal3-selector``: a metav1.LabelSelector in JSON."""
    import json  # only with the flag

    from noderemedy_runner.config.selectors import parse_label_selector

    try:
        return parse_label_selector(json.loads(text), "--metal3-selector")
    except ValueError as exc:  # FieldError too
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``noderemedy-runner``; returns the exit code (see module docs), except after
    running the service, when it ends the process itself with that code (:func:`leave`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _positive(parser, args)
    setup_logs(args.log_level)
    if args.job_run:
        from noderemedy_runner.jobs import job_run

        leave(job_run(args.playbook_dir))  # the outcome is written: the Job completes at once

    api: Any = None
    needs_api = not args.check_config or (args.config or "").startswith("configmap:")
    if needs_api:
        try:
            api = _api_client(args.kubeconfig)
        except Exception as exc:  # any client construction error is fatal here
            print(f"noderemedy-runner: error: cannot build a Kubernetes client: {exc}", file=sys.stderr)
            return 1
    try:
        configs = cfgmod.load(args.config, api) if args.config else cfgmod.default_configuration()
    except cfgmod.ConfigError as exc:
        print(f"noderemedy-runner: error: {exc}", file=sys.stderr)
        return 2
    if args.check_config:
        print(describe(configs))
        return 0
    for warning in configs.warnings:
        log.warning(warning)

    job_pod = None
    wants_jobs = [  # fence-flow remedies whose runs go as Jobs (remedyConfigs[].executor: job)
        f"{c.name}/{r.name}"
        for c in configs.configurations
        for th in c.thresholds
        for r in th.chain()
        if r.executor == "job"
    ]
    if (args.executor == "job" or wants_jobs) and not args.detect_only:
        from noderemedy_runner.jobs import own_pod
        from noderemedy_runner.kube.errors import KubeError

        try:
            job_pod = own_pod(api)
        except (ValueError, KubeError) as exc:
            what = (
                "--executor job"
                if args.executor == "job"
                else f"remedyConfigs executor: job ({', '.join(wants_jobs)})"
            )
            print(f"noderemedy-runner: error: {what}: {exc}", file=sys.stderr)
            return 2
    identity = args.identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    metrics = Metrics()
    health = Health()
    server: MetricsServer | None = None
    addr = parse_addr(args.metrics_addr)
    if addr is not None:
        try:
            server = MetricsServer(metrics, health, *addr).start()
        except OSError as exc:
            print(
                f"noderemedy-runner: error: --metrics-addr {args.metrics_addr}: {exc.strerror}",
                file=sys.stderr,
            )
            return 2
        log.info(
            "serving /metrics /healthz /readyz", extra={"address": f"{server.address[0]}:{server.address[1]}"}
        )

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    work_stop = threading.Event()
    threads: list[threading.Thread] = []

    def start_work() -> None:
        from noderemedy_runner.loops.detector import Detector

        metrics.set_leader(True)
        detector = None
        if not args.reconcile_only:
            detector = Detector(
                api,
                configs,
                namespace=args.namespace,
                identity=identity,
                dry_run=args.dry_run,
                metrics=metrics,
            )

            def run_detector() -> None:
                detector.run(work_stop, beat=health.beat)

            t = threading.Thread(target=run_detector, name="detector", daemon=True)
            t.start()
            threads.append(t)
        if not args.detect_only:
            from noderemedy_runner.config.fence import CloudDefaults
            from noderemedy_runner.loops.watcher import Watcher

            watcher = Watcher(
                api,
                data_dir=args.data_dir,
                max_concurrent_runs=args.max_concurrent_runs,
                batch_window=args.batch_window,
                batch_size=args.batch_size,
                run_deadline=args.run_deadline,
                run_nice=args.run_nice,
                dry_run=args.dry_run,
                observer=metrics,
                namespace=args.namespace,
                policy=NodeFencePolicy(
                    grace_seconds=args.grace_seconds,
                    step_retries=args.step_retries,
                    retry_delay_seconds=args.retry_delay,
                    recovery_timeout_seconds=args.recovery_timeout,
                    max_restarts=args.max_restarts,
                    restart_delay_seconds=args.restart_delay,
                    max_power_fencing=args.max_power_fencing,
                    max_pods_released_per_minute=args.max_pods_released_per_minute,
                ),
                cloud=CloudDefaults(args.cloud_credentials_secret, args.cloud_endpoint_url)
                if args.cloud_credentials_secret
                else None,
                kubeconfig=args.kubeconfig,
                metal3_selector=args.metal3_selector,
                playbook_dir=args.playbook_dir,
                poll_interval=args.poll_interval,
                extra_env=dict(item.split("=", 1) for item in args.run_env),
                device_check_interval=args.device_check_interval,
                job_pod=job_pod,
                configs=configs,
                default_executor=args.executor,
            )
            metrics.count_runs_in_flight(lambda: watcher.executor.in_flight)
            w = threading.Thread(target=watcher.run, args=(work_stop,), name="watcher", daemon=True)
            w.start()
            threads.append(w)
        if detector is None or detector.ready.wait(90):
            health.set_ready(True, "leading" if args.leader_elect else "running")
        log.info(
            "acting",
            extra={
                "identity": identity,
                "dry_run": args.dry_run,
                "detect_only": args.detect_only,
                "reconcile_only": args.reconcile_only,
            },
        )

    def stop_work() -> bool:
        """Stop acting: cancel the runs, wait for the threads (at most :data:`STOP_JOIN_SECONDS`).
        True when every thread ended: only then may the leader Lease go to another replica."""
        metrics.set_leader(False)
        work_stop.set()
        deadline = time.monotonic() + STOP_JOIN_SECONDS
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            log.error(
                "still working %.0f s after the stop: %s; the leader Lease is left to expire",
                STOP_JOIN_SECONDS,
                ", ".join(alive),
            )
        return not alive

    code = 0
    try:
        if args.leader_elect:
            from noderemedy_runner.kube.leases import LeaderElector

            try:
                elector = LeaderElector(
                    api,
                    name=args.leader_elect_lease_name,
                    namespace=args.namespace,
                    identity=identity,
                    on_started=start_work,
                    on_stopped=stop_work,
                    lease_duration=args.leader_elect_lease_duration,
                    renew_deadline=args.leader_elect_renew_deadline,
                    retry_period=args.leader_elect_retry_period,
                )
            except ValueError as exc:
                print(f"noderemedy-runner: error: --leader-elect-*: {exc}", file=sys.stderr)
                return 2
            health.set_ready(True, "standing by for the leader Lease")
            log.info(
                "campaigning for leadership",
                extra={"identity": identity, "lease": f"{args.namespace}/{args.leader_elect_lease_name}"},
            )

            def follower_beat() -> None:
                while not stop.is_set():
                    if not elector.leading.is_set():
                        health.beat()
                    stop.wait(5)

            threading.Thread(target=follower_beat, daemon=True).start()
            clean = elector.run(stop)
            code = 0 if clean else 1
        else:
            start_work()
            while not stop.wait(1.0):
                pass
            stop_work()
    finally:
        if server is not None:
            server.stop()
    log.info("stopped", extra={"identity": identity, "exit_code": code})
    leave(code)


def leave(code: int) -> NoReturn:
    """End the process with exit code ``code`` once the service has stopped, without the
    interpreter's finalization: log handlers and the standard streams are flushed, then
    ``os._exit``. The finalization frees every object of the kubernetes client's and Ansible's
    modules one by one, with no system call, and took 2 to 3 s of a graceful stop on a loaded
    2-core machine (strace: nothing between the signal handlers' reset and ``exit_group``), more
    than the rest of the stop. Nothing is left for it: the runs have ended, the Events are
    flushed, the Lease is released and the metrics server is closed before ``stopped`` is logged;
    the daemon threads still waiting on the API would be abandoned by the interpreter anyway."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing more can be said there
            pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
