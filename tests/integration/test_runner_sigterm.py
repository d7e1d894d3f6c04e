"""A graceful stop hands over in seconds, wherever it lands (against the lab).

Two ``noderemedy-runner`` replicas with ``--leader-elect`` drive one NodeFence of a hung node
(power on, kubelet silent) through its whole flow: Isolation (``fc-off``), PowerManagement
(``ipmi-off``, the release of the workloads in the same run, ``ipmi-on``) and Recovery
(``fc-on``). At each segment the leader gets SIGTERM; it must exit within :data:`STOP_BOUND`
seconds, the bound that a stop must keep to leave the kubelet no reason to kill the pod
(the run in flight canceled, its whole process tree gone, the Lease released after the work
stopped), and the other replica takes over and carries on; the stopped one comes back as the
follower. The NodeFence ends Final. Each exit time and takeover time is printed as a ``FIGURE``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner, write_config
from test_runner_e2e import (  # noqa: F401 - fixtures are used by name
    DEAD,
    POLICY,
    FenceNamespace,
    conds,
    fence_ns,
    get_nf,
    nodefence,
    oos_on,
)
from test_runner_restart import NF, hung, in_flight, power_sets  # noqa: F401 - hung is a fixture

from noderemedy_runner.run_processes import RUN_MARKER

pytestmark = [pytest.mark.lab, pytest.mark.kube]

#: Seconds a graceful stop may take in this test, wherever it lands: well inside the Deployment's
#: ``terminationGracePeriodSeconds`` (15), so the kubelet never has to kill the runner, and far
#: below the 30 s that a worker left busy by a canceled run used to cost. The target is 3 s
#: (docs/runner.md "Stopping"): each stop is printed as a ``FIGURE`` against it; the bound here
#: leaves room for a 2-core machine running three labs at once, where a stop measured 4.3 s.
STOP_BOUND = 10.0
#: The stop time the product aims at (seconds), printed beside each measured stop.
STOP_TARGET = 3.0

#: Seconds after the start of a run at which the SIGTERM lands in that run: the playbook is then
#: past its start-up and inside the step's module (the BMC's power-off, the FC switch's SET).
INTO_RUN = 1.5


#: The detector runs too (as in a deployment; its wait for node changes must end on a stop), on a
#: Configuration that selects no node, so the NodeFence under test is the only one.
IDLE_CONFIG = """\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: sigterm}
nodeSelector: kubernetes.io/hostname=no-such-node
thresholdConfigs:
- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 5s}
"""


@pytest.fixture
def replicas(lab_kube: Any, fence_ns: FenceNamespace, tmp_path: Path) -> Iterator[Callable[..., Runner]]:  # noqa: F811
    """Runner replicas with the detector and the watcher (no ``--reconcile-only``); stopped after."""
    made: list[Runner] = []
    config = write_config(tmp_path, IDLE_CONFIG)

    def make(*args: str) -> Runner:
        snmp_dir = lab_kube.info["devices"]["snmp_persistent_dir"]
        r = Runner(
            lab_kube, fence_ns.name, tmp_path, "--poll-interval", "0.2",
            "--run-env", f"SNMP_PERSISTENT_DIR={snmp_dir}", *POLICY, *args,
            config=config, identity=f"replica{len(made)}",
        )  # fmt: skip
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


def _lease_args(name: str) -> tuple[str, ...]:
    return (
        "--leader-elect",
        "--leader-elect-lease-name", name,
        "--leader-elect-lease-duration", "6",
        "--leader-elect-renew-deadline", "4",
        "--leader-elect-retry-period", "1",
    )  # fmt: skip


def _started(r: Runner, ident: str) -> float | None:
    """Epoch seconds of runner ``r``'s last log line starting the run ``ident`` (None: never)."""
    starts = [ln for ln in r.lines() if str(ln.get("msg", "")).startswith(f"run {ident}: ")]
    starts = [ln for ln in starts if " for NodeFence " in str(ln.get("msg", ""))]
    if not starts:
        return None
    return datetime.strptime(str(starts[-1]["time"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def run_tokens(kubeconfig: str) -> set[str]:
    """The run tokens (:data:`RUN_MARKER`) of the live playbook-run processes against this lab
    (their environment names its kubeconfig), read from ``/proc/<pid>/environ``."""
    want = f"K8S_AUTH_KUBECONFIG={kubeconfig}".encode()
    tokens = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env:
            tokens |= {v.split(b"=", 1)[1].decode() for v in env if v.startswith(RUN_MARKER.encode() + b"=")}
    return tokens


def _acting(r: Runner) -> int:
    return len(r.logged("^acting$"))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("successor", ["replica", "restart"])
def test_sigterm_at_every_segment_exits_in_seconds_and_another_runner_carries_on(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    replicas: Callable[..., Runner],
    hung: str,  # noqa: F811
    successor: str,
) -> None:
    """``replica``: two replicas, the follower takes over. ``restart``: one runner alone, a new
    one (empty data dir) started after it exited; nothing else writes to the cluster meanwhile, so
    a loop that only wakes on changes would hold the stop up (the detector waited out its 30 s
    resync), which the other replica's status writes hide in the first mode."""
    co = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    name = f"nf-term-{uuid.uuid4().hex[:4]}"
    lease = f"nr-term-{uuid.uuid4().hex[:4]}"
    iso, pm_off, pm_on, rec = (
        f"{name}-r0-isolation-a0",
        f"{name}-r0-power-management-a0",
        f"{name}-r0-power-management-a0-s1",
        f"{name}-r0-recovery-a0",
    )
    since = time.time()
    a = replicas(*_lease_args(lease))
    wait_for(lambda: _acting(a), 60, "the first replica to lead")
    both = [a, replicas(*_lease_args(lease))] if successor == "replica" else [a]
    nodefence(co, name, DEAD)

    def leader() -> Runner:
        acting = [r for r in both if r.alive() and r.metric("noderemedy_leader") == 1]
        assert len(acting) <= 1, "two replicas act at once"
        return acting[0]

    def run_for(ident: str, offset: float) -> Callable[[], bool]:
        def reached() -> bool:
            r = leader()
            at = _started(r, ident)
            return at is not None and in_flight(r, ident) and time.time() - at >= offset

        return reached

    def power_cut_in_run() -> bool:  # the release: the BMC reads off, the run is still in flight
        return "0" in power_sets(lab_kube, DEAD, since) and in_flight(leader(), pm_off)

    points: list[tuple[str, Callable[[], bool]]] = [
        ("isolation (fc-off run)", run_for(iso, INTO_RUN)),
        ("power off (ipmi-off run)", run_for(pm_off, INTO_RUN)),
        ("taint (the power-off run's release)", power_cut_in_run),
        ("power on (ipmi-on run)", run_for(pm_on, INTO_RUN)),
        ("recovery (fc-on run)", run_for(rec, INTO_RUN)),
    ]
    rows: list[tuple[str, float, float]] = []
    for what, reached in points:
        wait_for(reached, 240, f"{what} (NodeFence {name}: {get_nf(co, name).get('status')})", interval=0.1)
        stopped = leader()
        other = next((r for r in both if r is not stopped), None)
        before = _acting(other) if other is not None else 0
        running = run_tokens(str(lab_kube.kubeconfig))
        t0 = time.monotonic()
        code = stopped.stop(timeout=60)
        exit_s = time.monotonic() - t0
        left = running & run_tokens(str(lab_kube.kubeconfig))
        if other is None:  # a new runner, started once this one has exited
            other = replicas(*_lease_args(lease))
            both = [other]
        wait_for(
            lambda other=other, before=before: _acting(other) > before,
            60,
            f"the next runner to act after {what}",
            interval=0.05,
        )
        takeover_s = time.monotonic() - t0
        rows.append((what, exit_s, takeover_s))
        print(
            f"\nFIGURE SIGTERM ({successor}) at {what}: exit {exit_s:.2f} s (target {STOP_TARGET:g} s, code {code}), "
            f"the {'other replica' if successor == 'replica' else 'restarted runner'} acts {takeover_s:.2f} s after the signal"
        )
        assert code == 0, stopped.log_path.read_text()[-3000:]
        assert running, f"no run in flight at {what}"
        assert not left, f"processes of the canceled run outlived the stop at {what}: {left}"
        if successor == "replica":
            stopped.start()  # back as the follower

    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        300,
        f"NodeFence {name} Final",
    )
    co.delete_cluster_custom_object(*NF, name)
    assert final["status"]["status"] == "Final" and conds(final)["Succeeded"]["status"] == "True", final[
        "status"
    ]
    assert not oos_on(core, DEAD)
    slow = [(what, round(s, 2)) for what, s, _ in rows if s > STOP_BOUND]
    assert not slow, f"graceful stops over {STOP_BOUND} s: {slow}"
