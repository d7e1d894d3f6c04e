"""Fan-out batches: per-host routing of job events and outcomes (pure), and real ansible-runner
batch runs of small local playbooks (no network): one run serves many callers, a failed host fails
only its own caller, a slow host does not hold back the others' results, a finished host's outcome
is recovered after a restart and an interrupted one replayed."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noderemedy_runner.batch_hosts import host_outcome, host_stats, rotate_batches
from noderemedy_runner.batches import (
    DONE_FACT,
    GATHER_WINDOWS,
    BatchingExecutor,
    ends_host,
    gather_deadline,
    host_name,
)
from noderemedy_runner.executor import Executor
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.outcomes import RunOutcome


def ev(kind: str, host: str, **data: object) -> dict[str, Any]:
    return {"event": kind, "event_data": {"host": host, **data}}


def done_ev(host: str) -> dict[str, Any]:
    return ev("runner_on_ok", host, task="Mark", res={"ansible_facts": {DONE_FACT: True}})


def evidence_ev(host: str, fenced: bool) -> dict[str, Any]:
    fence = {"verified": fenced, "method": "ipmi", "target": "h:1", "state": "off", "verified_at": 5.0}
    return ev(
        "runner_on_ok",
        host,
        task="Evidence",
        res={
            "ansible_facts": {
                "fence_step_reading": {"fenced": fenced, "kind": "power_off", "source": "ipmi-off"},
                "fence_step_evidence": fence if fenced else {},
            }
        },
    )


# --- pure ------------------------------------------------------------------------------------------
def test_host_names_are_inventory_safe() -> None:
    assert host_name("nf-worker-1") == "nf-worker-1"
    assert host_name("a b/c") == "a-b-c"
    assert host_name("") == "unnamed"


def test_a_host_ends_at_its_done_fact_its_failure_or_unreachable_not_an_ignored_error() -> None:
    assert ends_host(done_ev("a")) == "done"
    assert ends_host(ev("runner_on_failed", "a", res={"msg": "no"})) == "failed"
    assert ends_host(ev("runner_on_failed", "a", ignore_errors=True, res={})) is None
    assert ends_host(ev("runner_on_unreachable", "a", res={})) == "unreachable"
    assert ends_host(ev("runner_on_ok", "a", res={"changed": True})) is None
    assert ends_host({"event": "playbook_on_stats", "event_data": {}}) is None


def test_a_batch_gathers_while_runs_keep_coming_and_no_longer_than_its_cap() -> None:
    """A lone run starts one window after it joined; runs joining a window apart or closer keep
    the batch open (a rack's NodeFences ask over a second or two); never past the cap."""
    assert gather_deadline(10.0, 10.0, 0.25) == 10.25
    assert gather_deadline(10.0, 10.6, 0.25) == 10.85  # the latest joined 0.6 s after the first
    cap = 10.0 + 0.25 * GATHER_WINDOWS
    assert gather_deadline(10.0, cap, 0.25) == cap  # still coming at the cap: the batch goes
    assert GATHER_WINDOWS > 1


def test_host_stats_count_only_that_hosts_events() -> None:
    events = [
        ev("runner_on_ok", "a", res={"changed": True}),
        ev("runner_on_ok", "a", res={}),
        ev("runner_on_failed", "a", ignore_errors=True, res={}),
        ev("runner_on_skipped", "a", res={}),
    ]
    stats = host_stats("a", events)["event_data"]
    assert (stats["ok"], stats["changed"], stats["failures"], stats["skipped"]) == (
        {"a": 3},
        {"a": 1},
        {"a": 0},
        {"a": 1},
    )


def test_each_host_gets_its_own_evidence_and_a_failed_host_only_its_own_failure() -> None:
    """Events of a batch, interleaved as the free strategy gives them, split per host: the fenced
    host's outcome holds its verified evidence; the failed host's holds its failure and no
    evidence; neither sees the other's."""
    batch = [
        ev("runner_on_ok", "a", task="Check", res={}),
        ev("runner_on_ok", "b", task="Check", res={}),
        ev("runner_on_failed", "b", task="Power off", res={"msg": "BMC stayed on"}),
        evidence_ev("a", True),
        done_ev("a"),
    ]
    per_host: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    ends: dict[str, str] = {}
    for e in batch:
        h = e["event_data"]["host"]
        per_host[h].append(e)
        end = ends_host(e)
        if end is not None:
            ends[h] = end
    a = host_outcome("nf-a-r0", "a", per_host["a"], ends["a"], None, 1.0)
    b = host_outcome("nf-b-r0", "b", per_host["b"], ends["b"], None, 1.0)
    assert a.succeeded and a.evidence is not None and a.evidence.fenced and a.failed == 0
    assert a.evidence.fence["verified"] is True
    assert not b.succeeded and b.status == "failed" and b.evidence is None
    assert b.failed_tasks == ("Power off: BMC stayed on",) and b.failed == 1
    assert a.ident == "nf-a-r0" and b.ident == "nf-b-r0"


def test_a_host_cut_off_by_the_end_of_the_run_gets_the_runs_status() -> None:
    events = [ev("runner_on_ok", "a", task="Check", res={})]
    assert host_outcome("i", "a", events, None, "timeout", 3.0).timed_out
    cut = host_outcome("i", "a", events, None, "successful", 3.0)
    assert cut.status == "failed" and "before this host's last task" in cut.failed_tasks[-1]


def test_bad_batch_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_window"):
        BatchingExecutor(tmp_path, tmp_path, batch_window=0)
    with pytest.raises(ValueError, match="batch_size"):
        BatchingExecutor(tmp_path, tmp_path, batch_size=0)


# --- real ansible-runner batch runs of local playbooks -----------------------------------------------
#: A stand-in for fence_step.yml: each host's `hold` file must exist before it ends (the test holds
#: a host back by not creating it), `fail` fails that host; the last task marks the host done.
FENCE_STEP = [
    {
        "name": "step",
        "hosts": "{{ noderemedy_hosts | default('localhost') }}",
        "gather_facts": False,
        "tasks": [
            {"name": "Say", "ansible.builtin.debug": {"msg": "{{ node }}"}},
            {
                "name": "Wait for the device",
                "ansible.builtin.wait_for": {"path": "{{ hold }}", "timeout": 60},
                "when": "hold is defined",
            },
            {
                "name": "Break",
                "ansible.builtin.fail": {"msg": "device said no"},
                "when": "fail | default(false)",
            },
            {"name": "Mark", "ansible.builtin.set_fact": {DONE_FACT: True}},
        ],
    }
]


@pytest.fixture
def playbooks(tmp_path: Path) -> Path:
    d = tmp_path / "playbooks"
    d.mkdir()
    (d / "fence_step.yml").write_text(json.dumps(FENCE_STEP))
    return d


def step(ident: str, node: str, **extravars: object) -> Action:
    return Action(
        kind="run_step", playbook="fence_step.yml", ident=ident, extravars={"node": node, **extravars}
    )


def run_all(ex: Executor, jobs: dict[str, Action]) -> tuple[dict[str, RunOutcome], list[str]]:
    """Run every ``name -> action`` from a thread of its own (as the watcher's workers do);
    returns the outcomes and the order in which the callers got them."""
    out: dict[str, RunOutcome] = {}
    order: list[str] = []
    lock = threading.Lock()

    def one(name: str, act: Action) -> None:
        res = ex.run(act, kind="NodeFence", name=name)
        with lock:
            out[name] = res
            order.append(name)

    threads = [threading.Thread(target=one, args=item) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out, order


def test_one_run_serves_many_callers_and_a_failed_host_fails_only_its_own(
    tmp_path: Path, playbooks: Path
) -> None:
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=2.0, batch_size=3, run_deadline=60, idle_start=False
    )
    out, _ = run_all(
        ex,
        {
            "nf-a": step("nf-a-r0", "a"),
            "nf-b": step("nf-b-r0", "b", fail=True),
            "nf-c": step("nf-c-r0", "c"),
        },
    )
    assert ex.batches_started == 1 and ex.hosts_served == 3
    assert out["nf-a"].succeeded and out["nf-c"].succeeded
    assert out["nf-b"].status == "failed" and out["nf-b"].failed_tasks == ("Break: device said no",)
    # each caller's run is in its own private data dir, under its own ident, as a run of its own
    for name in ("nf-a", "nf-b", "nf-c"):
        art = tmp_path / "runs" / "nodefence" / f"_cluster_{name}" / "artifacts" / f"{name}-r0"
        assert (art / "status").read_text() == out[name].status


def test_a_slow_host_does_not_hold_back_the_others(tmp_path: Path, playbooks: Path) -> None:
    """Host b waits for a file the test creates only once host a's caller has its outcome: the
    batch could not end otherwise (no timing involved)."""
    hold = tmp_path / "device-b-answers"
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=2.0, batch_size=2, run_deadline=60, idle_start=False
    )
    results: dict[str, RunOutcome] = {}

    def run_b() -> None:
        results["b"] = ex.run(step("nf-b-r0", "b", hold=str(hold)), kind="NodeFence", name="nf-b")

    tb = threading.Thread(target=run_b)
    tb.start()
    results["a"] = ex.run(step("nf-a-r0", "a"), kind="NodeFence", name="nf-a")
    assert results["a"].succeeded and "b" not in results  # b's host still waits for its device
    hold.write_text("on")
    tb.join(60)
    assert results["b"].succeeded and ex.batches_started == 1


def test_finished_hosts_are_recovered_and_interrupted_ones_replayed(tmp_path: Path, playbooks: Path) -> None:
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=2.0, batch_size=2, run_deadline=60, idle_start=False
    )
    first, _ = run_all(ex, {"nf-a": step("nf-a-r0", "a"), "nf-b": step("nf-b-r0", "b")})
    # b's run died with the runner: its artifacts have no status
    (tmp_path / "runs" / "nodefence" / "_cluster_nf-b" / "artifacts" / "nf-b-r0" / "status").unlink()
    again = BatchingExecutor(tmp_path / "runs", playbooks, batch_window=0.1, batch_size=2, run_deadline=60)
    second, _ = run_all(again, {"nf-a": step("nf-a-r0", "a"), "nf-b": step("nf-b-r0", "b")})
    assert second["nf-a"].recovered and second["nf-a"].ok == first["nf-a"].ok
    assert not second["nf-b"].recovered and second["nf-b"].succeeded
    assert again.hosts_served == 1  # only b ran again


def test_a_canceled_caller_returns_canceled_and_a_finished_one_keeps_its_result(
    tmp_path: Path, playbooks: Path
) -> None:
    hold = tmp_path / "never"
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=2.0, batch_size=2, run_deadline=60, idle_start=False
    )
    cancel = threading.Event()
    results: dict[str, RunOutcome] = {}

    def run_a() -> None:
        results["a"] = ex.run(
            step("nf-a-r0", "a", hold=str(hold)), kind="NodeFence", name="nf-a", cancel=cancel
        )

    ta = threading.Thread(target=run_a)
    ta.start()
    tb = threading.Thread(
        target=lambda: results.setdefault("b", ex.run(step("nf-b-r0", "b"), kind="NodeFence", name="nf-b"))
    )
    tb.start()
    tb.join(60)  # b's host is done while a's waits for its device
    cancel.set()
    ta.join(60)
    assert results["a"].status == "canceled" and results["b"].succeeded
    # back only once its batch is over, as a run of its own: its artifacts say canceled (replayed
    # after a restart, never read back as a result)
    art = tmp_path / "runs" / "nodefence" / "_cluster_nf-a" / "artifacts" / "nf-a-r0"
    assert (art / "status").read_text() == "canceled"


def test_a_caller_canceled_while_its_batch_waits_for_a_slot_returns_canceled(
    tmp_path: Path, playbooks: Path
) -> None:
    ex = BatchingExecutor(tmp_path / "runs", playbooks, batch_window=0.1, max_concurrent_runs=1)
    assert ex.slots.acquire(0, threading.Event())  # every slot busy
    cancel = threading.Event()
    results: dict[str, RunOutcome] = {}
    t = threading.Thread(
        target=lambda: results.setdefault(
            "a", ex.run(step("nf-a-r0", "a"), kind="NodeFence", name="nf-a", cancel=cancel)
        )
    )
    t.start()
    cancel.set()
    t.join(60)
    ex.slots.release(0)
    assert results["a"].status == "canceled" and ex.batches_started == 0


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_run_that_finds_its_playbook_idle_starts_at_once_and_the_runs_asked_meanwhile_gather(
    tmp_path: Path, playbooks: Path
) -> None:
    """With a window of 600 s, a gathering batch of 1 could start only when full (2 hosts): the
    first run's batch starting on its own shows it did not gather. The two runs asked while it
    runs find the playbook busy and gather into one batch, which starts full."""
    hold = tmp_path / "device-a-answers"
    ex = BatchingExecutor(tmp_path / "runs", playbooks, batch_window=600.0, batch_size=2, run_deadline=60)
    results: dict[str, RunOutcome] = {}

    def run(h: str, **extravars: object) -> threading.Thread:
        t = threading.Thread(
            target=lambda: results.setdefault(
                h, ex.run(step(f"nf-{h}-r0", h, **extravars), kind="NodeFence", name=f"nf-{h}")
            )
        )
        t.start()
        return t

    threads = [run("a", hold=str(hold))]
    wait_until(lambda: ex.batches_started == 1, 60, "the first run's batch started on its own")
    assert not ex.idle("fence_step.yml", time.monotonic())  # a batch of it is running
    threads += [run("b"), run("c")]
    wait_until(lambda: len(results) == 2, 60, "b and c served by a batch of their own")
    assert "a" not in results and results["b"].succeeded and results["c"].succeeded
    hold.write_text("on")
    for t in threads:
        t.join(60)
    assert results["a"].succeeded and (ex.batches_started, ex.hosts_served) == (2, 3)
    # a batch ended less than a window ago: the next run gathers; a window later it would not
    wait_until(lambda: ex.idle("fence_step.yml", time.monotonic() + 600.0), 60, "both batches over")
    now = time.monotonic()
    assert not ex.idle("fence_step.yml", now)
    assert ex.idle("out_of_service_taint.yml", now)  # per playbook
    ex.busy_resources = lambda: 2  # another NodeFence is at work: its runs gather with this one
    assert not ex.idle("out_of_service_taint.yml", now)
    ex.busy_resources, ex.idle_start = (lambda: 1), False
    assert not ex.idle("out_of_service_taint.yml", now)


def test_a_batch_waiting_for_a_slot_takes_the_runs_asked_for_meanwhile(
    tmp_path: Path, playbooks: Path
) -> None:
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=0.05, batch_size=5, max_concurrent_runs=1
    )
    assert ex.slots.acquire(0, threading.Event())  # every slot busy
    threads = [
        threading.Thread(
            target=ex.run, args=(step("nf-a-r0", "a"),), kwargs={"kind": "NodeFence", "name": "nf-a"}
        )
    ]
    threads[0].start()
    wait_until(lambda: ex.slots.queued == 1, 30, "the first batch waiting for a slot")
    for h in ("b", "c"):
        t = threading.Thread(
            target=ex.run, args=(step(f"nf-{h}-r0", h),), kwargs={"kind": "NodeFence", "name": f"nf-{h}"}
        )
        t.start()
        threads.append(t)
    wait_until(
        lambda: any(
            b.playbook == "fence_step.yml" and len(b.requests) == 3 for b in list(ex._pending.values())
        ),
        30,
        "3 runs in it",
    )
    ex.slots.release(0)
    for t in threads:
        t.join(60)
    assert (ex.batches_started, ex.hosts_served) == (1, 3)


def test_batches_running_at_once_each_run_their_own_hosts(tmp_path: Path, playbooks: Path) -> None:
    """Batches of one playbook in flight together: each has its own inventory (its own private
    data dir), so every host runs once, in its own batch."""
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=0.05, batch_size=1, max_concurrent_runs=4
    )
    out, _ = run_all(ex, {f"nf-{h}": step(f"nf-{h}-r0", h) for h in "abcd"})
    assert all(o.succeeded and o.ok == 2 for o in out.values()), out
    assert ex.batches_started == 4
    # each caller gets its outcome at its host's last event, before ansible-runner has written the
    # run's last event files: read them once every batch has given its slot back (its run is over)
    wait_until(lambda: ex.slots.in_flight == 0, 60, "the batches' runs to end")
    runs = list((tmp_path / "runs" / "batches" / "fence_step").iterdir())
    assert len(runs) == 4
    hosts = []
    for run in runs:
        events = [
            json.loads(p.read_text()) for p in (run / "artifacts" / run.name / "job_events").glob("*.json")
        ]
        seen = {e["event_data"]["host"] for e in events if (e.get("event_data") or {}).get("host")}
        assert len(seen) == 1, (run.name, seen)
        hosts += seen
    assert sorted(hosts) == ["nf-a", "nf-b", "nf-c", "nf-d"]


def test_old_batch_dirs_are_rotated(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"batch-{i}").mkdir()
        os.utime(tmp_path / f"batch-{i}", (1000 + i, 1000 + i))
    rotate_batches(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-3", "batch-4"]


def pdu_off(plug: str, address: str) -> list[dict[str, object]]:
    """A run's ``methods``: one pdu ``off`` on ``plug`` of the PDU at ``address``."""
    host, port = address.split(":")
    return [
        {"name": "pdu-off", "device_type": "pdu", "ipaddr": host, "ipport": int(port), "plug": plug,
         "action": "off", "state": "off", "options": {}, "secret_name": "pdu", "template": f"t-{plug}"}
    ]  # fmt: skip


def test_runs_on_two_pdus_go_in_a_batch_per_pdu_each_with_its_plugs_for_one_call(
    tmp_path: Path, playbooks: Path
) -> None:
    """Batches form per shared device (shared_devices.shared_key): two PDUs, two batches, each
    given its hosts' plugs as the extra variable noderemedy_shared_device."""
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=2.0, batch_size=4, run_deadline=60, idle_start=False
    )
    out, _ = run_all(
        ex,
        {
            "nf-a": step("nf-a-r0", "a", methods=pdu_off("1", "127.0.0.1:161")),
            "nf-b": step("nf-b-r0", "b", methods=pdu_off("2", "127.0.0.1:161")),
            "nf-c": step("nf-c-r0", "c", methods=pdu_off("1", "127.0.0.2:161")),
            "nf-d": step("nf-d-r0", "d", methods=pdu_off("2", "127.0.0.2:161")),
        },
    )
    assert all(o.succeeded for o in out.values()), out
    assert ex.batches_started == 2 and ex.hosts_served == 4
    shared = []
    for command in (tmp_path / "runs" / "batches" / "fence_step").glob("*/artifacts/*/command"):
        argv = json.loads(command.read_text())["command"]
        shared.append(json.loads(argv[argv.index("-e") + 1])["noderemedy_shared_device"])
    got = sorted((s["method"]["ipaddr"], s["hosts"], s["plugs"]) for s in shared)
    assert got == [("127.0.0.1", ["nf-a", "nf-b"], ["1", "2"]), ("127.0.0.2", ["nf-c", "nf-d"], ["1", "2"])]


def test_a_batch_on_a_shared_device_holds_more_hosts_than_forks(tmp_path: Path, playbooks: Path) -> None:
    """With a window of 600 s a batch starts only when full: three runs on one PDU fill a batch of
    ``shared_batch_size`` 3 where ``batch_size`` is 2, and its forks stay at 2. Runs on no shared
    device still fill a batch at ``batch_size``."""
    ex = BatchingExecutor(
        tmp_path / "runs", playbooks, batch_window=600.0, batch_size=2, shared_batch_size=3,
        run_deadline=60, idle_start=False,
    )  # fmt: skip
    forks: list[str] = []
    real_run = ex.ansible_run

    def spy(*args: Any, **kwargs: Any) -> Any:  # the real run, its forks noted
        forks.append(kwargs["env"]["ANSIBLE_FORKS"])
        return real_run(*args, **kwargs)

    ex.ansible_run = spy  # type: ignore[method-assign]
    on_pdu = {
        f"nf-{h}": step(f"nf-{h}-r0", h, methods=pdu_off(str(i), "127.0.0.1:161"))
        for i, h in enumerate("abc")
    }
    out, _ = run_all(ex, on_pdu)
    assert all(o.succeeded for o in out.values()), out
    assert (ex.batches_started, ex.hosts_served, forks) == (1, 3, ["2"])
    out, _ = run_all(ex, {f"nf-{h}": step(f"nf-{h}-r0", h) for h in "de"})
    assert all(o.succeeded for o in out.values()), out
    assert (ex.batches_started, ex.hosts_served, forks) == (2, 5, ["2", "2"])


def test_shared_batch_size_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shared_batch_size"):
        BatchingExecutor(tmp_path, tmp_path, shared_batch_size=0)
