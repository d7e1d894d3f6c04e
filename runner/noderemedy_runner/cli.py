"""``noderemedy-runner``: the watcher service (the remediation pod image's entry point).

It runs two loops in one process, only on the elected replica when ``--leader-elect`` is given:

* the **detector** (:mod:`noderemedy_runner.loops.detector`): reads the remedy Configuration, watches
  Nodes, and creates one NodeFence per node that stays unhealthy for its period (storm guard,
  exclusions, pauses and per-node Leases respected);
* the **watcher** (:mod:`noderemedy_runner.loops.watcher`): reconciles NodeFence and opted-in
  Metal3Remediation objects by running the collection's playbooks with ansible-runner.

With ``--leader-elect`` in a pod, the leader also keeps the runner's own replicas spread over nodes
(:mod:`noderemedy_runner.loops.respread`; ``--no-respread`` turns it off).

Exit codes: 0 after SIGTERM/SIGINT (Lease released), 1 when leadership was lost or the API
server cannot be reached at start, 2 on bad flags or a bad Configuration. Once the service has
stopped, the process ends at once (:func:`leave`), without the interpreter's slow finalization.
The flags and their checks are :mod:`noderemedy_runner.arguments`; this module wires what they say.
"""

from __future__ import annotations

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

from noderemedy_runner.arguments import parse_args, policy, run_env
from noderemedy_runner.config import remedy as cfgmod
from noderemedy_runner.logs import setup as setup_logs
from noderemedy_runner.metrics import Health, Metrics, MetricsServer, parse_addr

log = logging.getLogger("noderemedy_runner.cli")

#: Seconds a stop waits for the detector and the watcher (which cancel their runs at once: the
#: whole stop takes about 1 to 3 s in the lab). Past it the work is still going on: the leader
#: Lease is not released but left to expire. Below the Deployment's terminationGracePeriodSeconds
#: (15), so the runner says so before the kubelet kills it.
STOP_JOIN_SECONDS = 10.0


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


#: Connections to the API server kept open for reuse. Every custom resource at work has a worker
#: thread making its own calls: a rack of 100 NodeFences had urllib3 discard connections 268 times
#: in one run with 32 ("Connection pool is full"), each one a TLS handshake more on both sides.
API_POOL_SIZE = 128


def _api_client(kubeconfig: Path | None) -> Any:
    from noderemedy_runner.kube.client import new_client  # heavy import

    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    api = new_client(path)
    api.configuration.connection_pool_maxsize = API_POOL_SIZE
    api.rest_client.pool_manager.connection_pool_kw["maxsize"] = API_POOL_SIZE
    return api


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``noderemedy-runner``; returns the exit code (see module docs), except after
    running the service, when it ends the process itself with that code (:func:`leave`)."""
    args = parse_args(argv)
    setup_logs(args.log_level)
    if args.job_run:
        from noderemedy_runner.job_batches import job_run

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
        from noderemedy_runner.loops.respread import Respreader, in_cluster

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
                shared_batch_size=args.shared_batch_size,
                idle_start=args.idle_start,
                run_deadline=args.run_deadline,
                run_nice=args.run_nice,
                dry_run=args.dry_run,
                observer=metrics,
                namespace=args.namespace,
                policy=policy(args),
                cloud=CloudDefaults(args.cloud_credentials_secret, args.cloud_endpoint_url)
                if args.cloud_credentials_secret
                else None,
                kubeconfig=args.kubeconfig,
                metal3_selector=args.metal3_selector,
                playbook_dir=args.playbook_dir,
                poll_interval=args.poll_interval,
                extra_env=run_env(args),
                device_check_interval=args.device_check_interval,
                job_pod=job_pod,
                configs=configs,
                default_executor=args.executor,
                nodes=detector.nodes if detector is not None else None,
            )
            metrics.count_runs_in_flight(lambda: watcher.executor.in_flight)
            w = threading.Thread(target=watcher.run, args=(work_stop,), name="watcher", daemon=True)
            w.start()
            threads.append(w)
        respread_pod = in_cluster() if args.leader_elect and args.respread else None
        if respread_pod is not None:
            respreader = Respreader(
                api,
                pod_name=respread_pod[0],
                namespace=respread_pod[1],
                observer=metrics,
                dry_run=args.dry_run,
            )
            r = threading.Thread(target=respreader.run, args=(work_stop,), name="respread", daemon=True)
            r.start()
            threads.append(r)
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
