"""Leader-election wrapper and per-node Lease helpers: the parts that need no API server
(timing validation, names, expiry, holder identities). Election and release themselves are
tested against the lab in tests/integration/test_watcher_leader.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client

from noderemedy_runner.kube.leases import HOLDER_PREFIX, LeaderElector, NodeLease, NodeLeases, node_lease_name


def elector(**timings: int) -> LeaderElector:
    return LeaderElector(
        client.ApiClient(), name="l", namespace="ns", identity="me", on_started=lambda: None, **timings
    )


def test_library_lock_points_at_our_client() -> None:
    api = client.ApiClient()
    e = LeaderElector(api, name="l", namespace="ns", identity="me", on_started=lambda: None)
    assert e._lock.api_instance.api_client is api  # LeaseLock would use the default configuration


@pytest.mark.parametrize(
    ("timings", "message"),
    [
        ({"retry_period": 0}, "retry_period 0 s must be at least 1"),
        ({"renew_deadline": 2, "retry_period": 2}, "renew_deadline 2 s must exceed 1.2 x retry_period 2 s"),
        ({"lease_duration": 10, "renew_deadline": 10}, "lease_duration 10 s must exceed renew_deadline 10 s"),
    ],
)
def test_bad_timings_raise_instead_of_sys_exit(timings: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        elector(**timings)


@settings(deadline=None)
@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,300}[a-z0-9])?", fullmatch=True))
def test_node_lease_name_fits(node: str) -> None:
    name = node_lease_name(node)
    assert len(name) <= 253 and name.startswith("noderemedy-")
    if len(node) <= 242:
        assert name == f"noderemedy-{node}"


def test_lease_expiry() -> None:
    assert NodeLease("n", None, 100.0, 300).expired(101.0)
    assert NodeLease("n", "x", None, 300).expired(101.0)
    assert not NodeLease("n", "x", 100.0, 300).expired(400.0)
    assert NodeLease("n", "x", 100.0, 300).expired(400.5)


def test_holders() -> None:
    with pytest.raises(ValueError, match="must start with 'noderemedy-runner/'"):
        NodeLeases(client.ApiClient(), "ns", "me")
    leases = NodeLeases(client.ApiClient(), "ns", HOLDER_PREFIX + "a")
    assert (
        leases.ours(HOLDER_PREFIX + "b")
        and not leases.ours("self-node-remediation")
        and not leases.ours(None)
    )
