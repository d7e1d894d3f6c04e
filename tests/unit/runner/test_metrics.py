"""Metrics implement the Observer seam; the HTTP endpoints serve /metrics, /healthz, /readyz."""

from __future__ import annotations

import inspect
import urllib.error
import urllib.request

import pytest

from noderemedy_runner.metrics import Health, Metrics, MetricsServer, parse_addr
from noderemedy_runner.observer import NullObserver, Observer


def test_same_methods_as_the_observer_protocol() -> None:
    m: Observer = Metrics()  # mypy checks the structural match
    for name, fn in inspect.getmembers(NullObserver, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert inspect.signature(getattr(type(m), name)) == inspect.signature(fn), name


def test_observer_calls_update_metrics() -> None:
    m = Metrics()
    v = m.registry.get_sample_value
    m.remediation_started("NodeFence", "n1", "n1")
    m.remediation_finished("NodeFence", "n1", "n1", "Final")
    m.fence_verified("ipmi", "n1", 3.5)
    in_flight = [3]
    m.count_runs_in_flight(lambda: in_flight[0])
    assert v("noderemedy_runs_in_flight") == 3
    in_flight[0] = 0
    m.run_finished("NodeFence", "n1", "fence_step.yml", "successful", 2.0)
    m.reconcile_error("Metal3Remediation", "m", "boom")
    m.configuration_state("workers", 3, 2, True)
    m.nodefence_created(0.2)
    m.nodefence_cancelled()
    m.fencing_refused("StormGuard")
    m.set_leader(True)
    assert v("noderemedy_remediations_started_total", {"kind": "NodeFence"}) == 1
    assert v("noderemedy_remediations_finished_total", {"kind": "NodeFence", "result": "Final"}) == 1
    assert v("noderemedy_fence_duration_seconds_sum", {"method": "ipmi"}) == 3.5
    assert v("noderemedy_fence_duration_seconds_bucket", {"method": "ipmi", "le": "5.0"}) == 1
    assert v("noderemedy_runs_in_flight") == 0
    assert (
        v(
            "noderemedy_runs_total",
            {"kind": "NodeFence", "playbook": "fence_step.yml", "status": "successful"},
        )
        == 1
    )
    assert v("noderemedy_reconcile_errors_total", {"kind": "Metal3Remediation"}) == 1
    assert v("noderemedy_unhealthy_nodes", {"configuration": "workers"}) == 2
    assert v("noderemedy_selected_nodes", {"configuration": "workers"}) == 3
    assert v("noderemedy_storm_active", {"configuration": "workers"}) == 1
    assert v("noderemedy_nodefences_created_total") == 1
    assert v("noderemedy_detection_seconds_count") == 1
    assert v("noderemedy_nodefences_cancelled_total") == 1
    assert v("noderemedy_fencing_refused_total", {"reason": "StormGuard"}) == 1
    assert v("noderemedy_leader") == 1


def test_observer_never_raises() -> None:
    m = Metrics()
    m.run_finished("NodeFence", "n1", "p", "failed", float("nan"))  # histogram accepts nan; nothing raises
    m.fence_verified("ipmi", "n1", -1.0)
    assert m.registry.get_sample_value("noderemedy_fence_duration_seconds_count", {"method": "ipmi"}) == 1


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_endpoints() -> None:
    m, h = Metrics(), Health(stale_after=3600)
    m.configuration_state("default", 3, 0, False)
    server = MetricsServer(m, h, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{server.address[1]}"
    try:
        code, body = _get(base + "/metrics")
        assert code == 200 and 'noderemedy_storm_active{configuration="default"} 0.0' in body
        assert _get(base + "/healthz")[0] == 200
        code, body = _get(base + "/readyz")
        assert code == 503 and "starting" in body
        h.set_ready(True, "leading")
        assert _get(base + "/readyz") == (200, "ok: leading\n")
        assert _get(base + "/nope")[0] == 404
    finally:
        server.stop()


def test_stale_loop_is_not_alive() -> None:
    h = Health(stale_after=0.0)
    h._last -= 1.0  # the loop beat a second ago; nothing may be that old
    assert h.alive()[0] is False


@pytest.mark.parametrize(
    ("addr", "parsed"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        (":9090", ("0.0.0.0", 9090)),
        ("0", None),
        ("[::1]:80", ("::1", 80)),
    ],
)
def test_parse_addr(addr: str, parsed: tuple[str, int] | None) -> None:
    assert parse_addr(addr) == parsed


@pytest.mark.parametrize("addr", ["8080", "host:", "host:99999", "host:x"])
def test_parse_addr_bad(addr: str) -> None:
    with pytest.raises(ValueError, match="--metrics-addr"):
        parse_addr(addr)
