"""Prometheus metrics (prometheus_client) and the HTTP endpoints on ``--metrics-addr``:
``/metrics`` (text exposition), ``/healthz`` (liveness: the main loop beat recently) and
``/readyz`` (readiness: configuration loaded and the API server answered the last list).

:class:`Metrics` implements :class:`noderemedy_runner.observer.Observer` for the reconcilers and
adds what the detector reports. Metric names (all prefixed ``noderemedy_``):

==================================================  =========  ==============================
``remediations_started_total{kind}``                counter    NodeFence / Metal3Remediation
``remediations_finished_total{kind,result}``        counter    result: final status / phase
``fence_duration_seconds{method}``                  histogram  run start → fence verified
``runs_in_flight``                                  gauge      runs holding an executor slot
``runs_total{kind,playbook,status}``                counter    finished runs
``run_duration_seconds{kind,playbook}``             histogram
``reconcile_errors_total{kind}``                    counter    kind also ``Detector``
``unhealthy_nodes{configuration}``                  gauge      threshold matching (storm count)
``selected_nodes{configuration}``                   gauge      nodes the Configuration selects
``storm_active{configuration}``                     gauge      1 while no new fencing
``nodefences_created_total``                        counter    by the detector
``nodefences_cancelled_total``                      counter    node recovered before fencing
``fencing_refused_total{reason}``                   counter    Excluded, Paused, StormGuard, …
``detection_seconds``                               histogram  due time → NodeFence created
``leader``                                          gauge      1 while this replica leads
``node_remediations_total{kind,node}``              counter    remediations begun, per node
``fence_device_healthy{template,plug,device_type}`` gauge      1 answered a status read, else 0
``fence_device_checks_total{template,plug,reason}`` counter    reason: FenceDeviceHealthy, …
``fence_config_valid{configmap}``                   gauge      1 parsed, 0 FenceConfigInvalid
``replica_respreads_total{result}``                 counter    evictions of the runner's own
                                                               replicas sharing a node
                                                               (result: evicted, refused, failed)
==================================================  =========  ==============================
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger("noderemedy_runner.metrics")

FENCE_BUCKETS = (1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
DETECTION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    """Every runner metric in its own ``registry`` (a fresh CollectorRegistry by default, so
    tests and replicas in one process do not collide). Thread-safe; methods never raise."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.started = Counter(
            "noderemedy_remediations_started", "Remediations begun, by kind", ["kind"], registry=r
        )
        self.finished = Counter(
            "noderemedy_remediations_finished",
            "Remediations that reached a terminal state, by kind and result",
            ["kind", "result"],
            registry=r,
        )
        self.fence_duration = Histogram(
            "noderemedy_fence_duration_seconds",
            "Seconds from a fence run's start to its verified fence, by method",
            ["method"],
            buckets=FENCE_BUCKETS,
            registry=r,
        )
        self.runs_in_flight = Gauge("noderemedy_runs_in_flight", "ansible-runner runs in flight", registry=r)
        self.runs = Counter(
            "noderemedy_runs", "Finished ansible-runner runs", ["kind", "playbook", "status"], registry=r
        )
        self.run_duration = Histogram(
            "noderemedy_run_duration_seconds",
            "ansible-runner run durations",
            ["kind", "playbook"],
            buckets=FENCE_BUCKETS,
            registry=r,
        )
        self.reconcile_errors = Counter(
            "noderemedy_reconcile_errors", "Reconciles that raised (retried), by kind", ["kind"], registry=r
        )
        self.unhealthy = Gauge(
            "noderemedy_unhealthy_nodes",
            "Nodes whose threshold condition matches (what the storm guard counts), by Configuration",
            ["configuration"],
            registry=r,
        )
        self.selected = Gauge(
            "noderemedy_selected_nodes", "Nodes a Configuration selects", ["configuration"], registry=r
        )
        self.storm = Gauge(
            "noderemedy_storm_active",
            "1 while the storm guard blocks new fencing (storm or cooldown), by Configuration",
            ["configuration"],
            registry=r,
        )
        self.created = Counter(
            "noderemedy_nodefences_created", "NodeFences created by the detector", registry=r
        )
        self.cancelled = Counter(
            "noderemedy_nodefences_cancelled", "NodeFences cancelled before fencing started", registry=r
        )
        self.refused = Counter(
            "noderemedy_fencing_refused",
            "Unhealthy nodes refused a NodeFence, by reason",
            ["reason"],
            registry=r,
        )
        self.detection = Histogram(
            "noderemedy_detection_seconds",
            "Seconds from a node's threshold period running out to its NodeFence being created",
            buckets=DETECTION_BUCKETS,
            registry=r,
        )
        self.leader = Gauge("noderemedy_leader", "1 while this replica is the leader", registry=r)
        self.node_started = Counter(
            "noderemedy_node_remediations",
            "Remediations begun, by node (alert: the same node remediated again and again)",
            ["kind", "node"],
            registry=r,
        )
        self.device_healthy = Gauge(
            "noderemedy_fence_device_healthy",
            "1 when the fence device answered its last read-only status check, else 0",
            ["template", "plug", "device_type"],
            registry=r,
        )
        self.device_checks = Counter(
            "noderemedy_fence_device_checks",
            "Read-only status checks of fence devices, by outcome",
            ["template", "plug", "reason"],
            registry=r,
        )
        self.config_valid = Gauge(
            "noderemedy_fence_config_valid",
            "1 when the fence ConfigMap parses, 0 when it is refused (FenceConfigInvalid)",
            ["configmap"],
            registry=r,
        )

        self.respreads = Counter(
            "noderemedy_replica_respreads",
            "Evictions the leader asked for of its own replicas sharing a node while a node hosted "
            "none, by result (evicted; refused: 429, the PodDisruptionBudget; failed)",
            ["result"],
            registry=r,
        )

    @staticmethod
    def _safe(fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # observers never raise (observe.Observer contract)
            log.exception("metrics update failed")

    # --- observe.Observer ----------------------------------------------------------------------
    def remediation_started(self, kind: str, name: str, node: str) -> None:
        """A remediation of ``node`` began."""
        self._safe(lambda: self.started.labels(kind).inc())
        self._safe(lambda: self.node_started.labels(kind, node).inc())

    def remediation_finished(self, kind: str, name: str, node: str, result: str) -> None:
        """A remediation reached a terminal state with ``result``."""
        self._safe(lambda: self.finished.labels(kind, result).inc())

    def fence_verified(self, method: str, node: str, seconds: float) -> None:
        """A fence by ``method`` was verified ``seconds`` after its run started."""
        self._safe(lambda: self.fence_duration.labels(method).observe(seconds))

    def count_runs_in_flight(self, count: Callable[[], float]) -> None:
        """Make ``noderemedy_runs_in_flight`` read ``count()`` (the executor's own count of runs
        holding one of its ``--max-concurrent-runs`` slots, ``Executor.in_flight``) at each
        scrape, so the gauge is exact: never above the bound, never negative."""
        self.runs_in_flight.set_function(count)

    def run_finished(self, kind: str, name: str, playbook: str, status: str, seconds: float) -> None:
        """A run ended with ``status`` after ``seconds``."""

        def update() -> None:
            self.runs.labels(kind, playbook, status).inc()
            self.run_duration.labels(kind, playbook).observe(seconds)

        self._safe(update)

    def reconcile_error(self, kind: str, name: str, error: str) -> None:
        """A reconcile of ``kind`` raised."""
        self._safe(lambda: self.reconcile_errors.labels(kind).inc())

    # --- detector --------------------------------------------------------------------------------
    def configuration_state(
        self, configuration: str, selected: int, unhealthy: int, storm_active: bool
    ) -> None:
        """The counts and storm state of one Configuration after a detection pass."""

        def update() -> None:
            self.selected.labels(configuration).set(selected)
            self.unhealthy.labels(configuration).set(unhealthy)
            self.storm.labels(configuration).set(1 if storm_active else 0)

        self._safe(update)

    def nodefence_created(self, seconds_late: float) -> None:
        """The detector created a NodeFence ``seconds_late`` after the node's period ran out."""

        def update() -> None:
            self.created.inc()
            self.detection.observe(max(0.0, seconds_late))

        self._safe(update)

    def nodefence_cancelled(self) -> None:
        """The detector cancelled a not-yet-started NodeFence."""
        self._safe(self.cancelled.inc)

    def fencing_refused(self, reason: str) -> None:
        """An unhealthy node was refused a NodeFence for ``reason`` (counted once per refusal)."""
        self._safe(lambda: self.refused.labels(reason).inc())

    def fence_device_checked(self, template: str, plug: str, device_type: str, reason: str) -> None:
        """A fence device (and plug) was read (:class:`noderemedy_runner.machines.health.HealthObserver`)."""

        def update() -> None:
            healthy = 1 if reason == "FenceDeviceHealthy" else 0
            self.device_healthy.labels(template, plug, device_type).set(healthy)
            self.device_checks.labels(template, plug, reason).inc()

        self._safe(update)

    def fence_config_checked(self, configmap: str, valid: bool) -> None:
        """A fence ConfigMap was validated."""
        self._safe(lambda: self.config_valid.labels(configmap).set(1 if valid else 0))

    def replica_respread(self, result: str) -> None:
        """The leader asked to evict one of its replicas (``noderemedy_runner.loops.respread``)."""
        self._safe(lambda: self.respreads.labels(result).inc())

    def set_leader(self, leading: bool) -> None:
        """Whether this replica leads."""
        self._safe(lambda: self.leader.set(1 if leading else 0))

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return bytes(generate_latest(self.registry))


class Health:
    """Liveness and readiness. ``beat()`` from the main loop; alive while the last beat is at
    most ``stale_after`` seconds old. ``set_ready(ok, reason)`` from the detector."""

    def __init__(self, stale_after: float = 120.0) -> None:
        self.stale_after = stale_after
        self._last = time.monotonic()
        self._ready = False
        self._reason = "starting"
        self._lock = threading.Lock()

    def beat(self) -> None:
        """The main loop is alive."""
        with self._lock:
            self._last = time.monotonic()

    def set_ready(self, ok: bool, reason: str = "") -> None:
        """Readiness and why not."""
        with self._lock:
            self._ready, self._reason = ok, reason

    def alive(self) -> tuple[bool, str]:
        """(alive, detail)."""
        with self._lock:
            age = time.monotonic() - self._last
        return age <= self.stale_after, f"last loop {age:.1f}s ago"

    def ready(self) -> tuple[bool, str]:
        """(ready, reason)."""
        with self._lock:
            return self._ready, self._reason or "ok"


def parse_addr(addr: str) -> tuple[str, int] | None:
    """``host:port`` (``:8080`` = every interface; port 0 = any free port) → (host, port);
    ``"0"`` or ``""`` → None (endpoints disabled). Raises ValueError naming the flag."""
    if addr in ("", "0"):
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--metrics-addr {addr!r}: expected host:port, :port or 0 (disabled)")
    return host.strip("[]") or "0.0.0.0", int(port)


class MetricsServer:
    """A threaded HTTP server for ``/metrics``, ``/healthz``, ``/readyz`` on ``(host, port)``.
    :attr:`address` is the bound (host, port). ``start()`` serves in a daemon thread; ``stop()``
    shuts it down. Raises OSError when the address cannot be bound."""

    def __init__(self, metrics: Metrics, health: Health, host: str, port: int) -> None:
        self.metrics = metrics
        self.health = health
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server API
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, code, ctype = outer.metrics.exposition(), 200, CONTENT_TYPE_LATEST
                elif path in ("/healthz", "/livez"):
                    ok, detail = outer.health.alive()
                    body, code, ctype = (
                        f"{'ok' if ok else 'stale'}: {detail}\n".encode(),
                        200 if ok else 500,
                        "text/plain",
                    )
                elif path == "/readyz":
                    ok, detail = outer.health.ready()
                    body, code, ctype = (
                        f"{'ok' if ok else 'not ready'}: {detail}\n".encode(),
                        200 if ok else 503,
                        "text/plain",
                    )
                else:
                    body, code, ctype = b"not found: try /metrics, /healthz, /readyz\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.address: tuple[str, int] = (
            str(self._server.server_address[0]),
            int(self._server.server_address[1]),
        )
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()


__all__ = ["Health", "Metrics", "MetricsServer", "parse_addr"]
