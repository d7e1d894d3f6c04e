"""The executor: event parsing (pure), and real ansible-runner runs of small local
playbooks (no network): deadline, cancellation, concurrency bound, suppressed env files, artifact
recovery after a restart, references-only extravars."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from noderemedy_runner.executor import Executor, ExecutorError, link_collection, private_dir_name
from noderemedy_runner.machines.actions import Action, ActionError
from noderemedy_runner.outcomes import RunOutcome, parse_events, release_from_events
from noderemedy_runner.run_processes import RUN_SETTINGS


def ev(kind: str, **data: object) -> dict:
    return {"event": kind, "event_data": data}


def fence_res(action: str, verified: bool, state: str, module: str = "noderemedy.core.ipmi_power") -> dict:
    return ev(
        "runner_on_ok",
        task="t",
        resolved_action=module,
        res={
            "power_state": state,
            "fence": {
                "verified": verified,
                "method": "ipmi",
                "target": "h:1",
                "state": state,
                "verified_at": 5.0,
            },
        },
    )


def test_parse_events_counts_failures_and_module_results_in_order() -> None:
    events = [
        ev("runner_on_ok", task="Check", resolved_action="ansible.builtin.assert", res={}),
        ev(
            "runner_on_ok",
            task="fc",
            resolved_action="noderemedy.core.fc_port",
            res={"state": "disabled", "fence": {"verified": True, "method": "fc", "state": "disabled"}},
        ),
        ev(
            "runner_on_failed",
            task="Switch the BMC power (ipmi method)",
            resolved_action="noderemedy.core.ipmi_power",
            res={
                "msg": "authentication failed at 127.0.0.1:623",
                "error": "auth",
                "fence": {"verified": False},
            },
        ),
        ev("runner_on_failed", task="ignored", resolved_action="x", ignore_errors=True, res={"msg": "nope"}),
        ev(
            "playbook_on_stats",
            ok={"localhost": 3},
            changed={"localhost": 1},
            failures={"localhost": 1},
            dark={},
        ),
    ]
    counts, failed, modules = parse_events(events)
    assert counts == {"ok": 3, "changed": 1, "failed": 1}
    assert failed == ["Switch the BMC power (ipmi method): authentication failed at 127.0.0.1:623"]
    assert [(m.device_type, m.ok, m.state, m.fence.get("verified"), m.error) for m in modules] == [
        ("fc", True, "disabled", True, ""),
        ("ipmi", False, None, False, "auth"),
    ]


def taint_res(kind: str = "runner_on_ok", **res: object) -> dict:
    return ev(kind, task="Release", resolved_action="noderemedy.core.node_taint", res=res)


def test_release_task_result_is_read_from_the_events() -> None:
    fence = fence_res("off", True, "off")
    assert release_from_events([fence]) is None  # no release task in the run
    assert release_from_events([fence, taint_res(skipped=True, changed=False)]) is None
    added = release_from_events([fence, taint_res(changed=True, taints=[{}], added=[{"key": "k"}])])
    assert added is not None and added.added and added.message == ""
    already = release_from_events([taint_res(changed=False, taints=[{}], added=[])])
    assert already is not None and not already.added
    # failed_when: false turns node_taint's refusal into an ok event carrying its reason
    refused = release_from_events(
        [taint_res(failed=False, reason="conflict", msg="node worker-1 is Ready: refusing", node="worker-1")]
    )
    assert refused is not None and not refused.added
    assert refused.message == "conflict: node worker-1 is Ready: refusing"


def test_private_dir_name_is_a_safe_relative_path() -> None:
    assert private_dir_name("NodeFence", "nf-1") == "nodefence/_cluster_nf-1"
    uid = "0b5e8f2a-1111-2222-3333-444455556666"
    assert private_dir_name("NodeFence", "nf-1", None, uid) == "nodefence/_cluster_nf-1_0b5e8f2a"
    assert private_dir_name("Metal3Remediation", "m/../x", "ns") == "metal3remediation/ns_m-..-x"


def test_link_collection_points_noderemedy_core_at_the_checkout(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    base = link_collection(tmp_path / "c", root)
    assert (base / "ansible_collections" / "noderemedy" / "core").resolve() == root
    other = tmp_path / "other"
    other.mkdir()
    link_collection(tmp_path / "c", other)
    assert (base / "ansible_collections" / "noderemedy" / "core").resolve() == other


# --- real ansible-runner runs of local playbooks ---------------------------------------------------
PLAYS = {
    "ok.yml": [
        {
            "name": "ok",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"name": "Say", "ansible.builtin.debug": {"msg": "{{ node }}"}},
                {"name": "Change", "ansible.builtin.command": "true", "changed_when": True},
            ],
        }
    ],
    "fail.yml": [
        {
            "name": "fail",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "Break", "ansible.builtin.fail": {"msg": "device said no"}}],
        }
    ],
    "sleep.yml": [
        {
            "name": "sleep",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "Sleep", "ansible.builtin.command": "sleep {{ seconds | default(30) }}"}],
        }
    ],
}


@pytest.fixture
def playbooks(tmp_path: Path) -> Path:
    d = tmp_path / "playbooks"
    d.mkdir()
    for name, plays in PLAYS.items():
        (d / name).write_text(json.dumps(plays))
    return d


def action(playbook: str, ident: str, **extravars: object) -> Action:
    return Action(kind="run_step", playbook=playbook, ident=ident, extravars={"node": "n1", **extravars})


def test_successful_run_counts_and_suppressed_env_files(tmp_path: Path, playbooks: Path) -> None:
    ex = Executor(tmp_path / "runs", playbooks, run_deadline=60)
    out = ex.run(action("ok.yml", "nf-r0-isolation-a0"), kind="NodeFence", name="nf")
    assert out.succeeded and (out.ok, out.changed, out.failed) == (2, 1, 0), out
    private = tmp_path / "runs" / "nodefence" / "_cluster_nf"
    assert (private / "artifacts" / "nf-r0-isolation-a0" / "status").read_text() == "successful"
    env = private / "env"
    assert not (env / "extravars").exists() and not (env / "envvars").exists()
    # the only env file: ansible-runner's settings (the cancel poll), no reference, no secret
    assert json.loads((env / "settings").read_text()) == RUN_SETTINGS


def test_failed_run_reports_the_failed_task_message(tmp_path: Path, playbooks: Path) -> None:
    out = Executor(tmp_path, playbooks).run(action("fail.yml", "f-1"), kind="NodeFence", name="nf")
    assert out.status == "failed" and not out.succeeded
    assert out.failed == 1 and out.failed_tasks == ("Break: device said no",)
    assert "device said no" in out.summary()


def test_a_finished_run_is_recovered_from_its_artifacts_not_repeated(tmp_path: Path, playbooks: Path) -> None:
    first = Executor(tmp_path, playbooks).run(action("fail.yml", "f-2"), kind="NodeFence", name="nf")
    again = Executor(tmp_path, playbooks).run(action("fail.yml", "f-2"), kind="NodeFence", name="nf")
    assert again.recovered and not first.recovered
    assert (again.status, again.failed, again.failed_tasks) == (
        first.status,
        first.failed,
        first.failed_tasks,
    )


def test_incomplete_artifacts_are_removed_and_the_run_replayed(tmp_path: Path, playbooks: Path) -> None:
    ex = Executor(tmp_path, playbooks)
    art = ex.private_data_dir("NodeFence", "nf") / "artifacts" / "r-1"
    (art / "job_events").mkdir(parents=True)  # a runner killed mid-run leaves no status/rc
    assert ex.recover(art.parent.parent, "r-1") is None and not art.exists()
    out = ex.run(action("ok.yml", "r-1"), kind="NodeFence", name="nf")
    assert out.succeeded and not out.recovered


def test_deadline_kills_the_run(tmp_path: Path, playbooks: Path) -> None:
    out = Executor(tmp_path, playbooks, run_deadline=3).run(
        action("sleep.yml", "s-1"), kind="NodeFence", name="nf"
    )
    assert out.status == "timeout" and out.timed_out
    assert any(t.startswith("deadline:") for t in out.failed_tasks)


def test_cancel_stops_the_run(tmp_path: Path, playbooks: Path) -> None:
    cancel = threading.Event()
    ex = Executor(tmp_path, playbooks, run_deadline=120)
    timer = threading.Timer(2.0, cancel.set)
    timer.start()
    try:
        out = ex.run(action("sleep.yml", "c-1"), kind="NodeFence", name="nf", cancel=cancel)
    finally:
        timer.cancel()
    assert out.status == "canceled"


def _pids_running(argv: list[str]) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:-1] == [
                a.encode() for a in argv
            ]:
                out.append(int(entry.name))
        except OSError:
            continue
    return out


def test_a_canceled_run_leaves_no_process_behind(tmp_path: Path, playbooks: Path) -> None:
    """The task's process runs under an ansible worker that left the playbook's process group
    (setsid): killing that group, as ansible-runner does, would leave it running. Canceled once
    the task's process is there; when run() returns, it is gone."""
    seconds = f"61.{uuid.uuid4().int % 10**6}"  # a command line no other process has
    cancel = threading.Event()

    def cancel_when_started() -> None:
        deadline = time.monotonic() + 120
        while not _pids_running(["sleep", seconds]) and time.monotonic() < deadline:
            time.sleep(0.05)
        cancel.set()

    watcher = threading.Thread(target=cancel_when_started, daemon=True)
    watcher.start()
    out = Executor(tmp_path, playbooks, run_deadline=120).run(
        action("sleep.yml", "c-2", seconds=seconds), kind="NodeFence", name="nf", cancel=cancel
    )
    watcher.join()
    assert out.status == "canceled"
    assert _pids_running(["sleep", seconds]) == []


def test_a_canceled_run_is_replayed_after_a_restart_not_recovered(tmp_path: Path, playbooks: Path) -> None:
    """A graceful stop cancels the run in flight (status ``canceled``, rc 254): it never finished,
    so the next process replays it instead of reading back "canceled" and asking again forever."""
    cancel = threading.Event()
    timer = threading.Timer(2.0, cancel.set)
    timer.start()
    try:
        first = Executor(tmp_path, playbooks, run_deadline=120).run(
            action("sleep.yml", "c-2", seconds=30), kind="NodeFence", name="nf", cancel=cancel
        )
    finally:
        timer.cancel()
    art = Path(first.artifact_dir)
    assert first.status == "canceled" and (art / "status").read_text().strip() == "canceled"
    ex = Executor(tmp_path, playbooks, run_deadline=120)
    assert ex.recover(art.parent.parent, "c-2") is None and not art.exists()
    again = ex.run(action("sleep.yml", "c-2", seconds=0), kind="NodeFence", name="nf")
    assert again.succeeded and not again.recovered


def test_concurrent_runs_are_bounded(tmp_path: Path, playbooks: Path) -> None:
    ex = Executor(tmp_path, playbooks, max_concurrent_runs=1, run_deadline=60)
    outs: list[RunOutcome] = []
    threads = [
        threading.Thread(
            target=lambda i=i: outs.append(
                ex.run(action("sleep.yml", f"b-{i}", seconds=1), kind="NodeFence", name=f"nf{i}")
            )
        )
        for i in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.status for o in outs] == ["successful", "successful"]
    assert ex.peak_in_flight == 1


def test_secret_looking_extravars_and_missing_playbooks_are_refused(tmp_path: Path, playbooks: Path) -> None:
    ex = Executor(tmp_path, playbooks)
    with pytest.raises(ActionError, match="password"):
        ex.run(action("ok.yml", "x-1"), kind="NodeFence", name="nf", extra_extravars={"bmc_password": "x"})
    with pytest.raises(ExecutorError, match="not found"):
        ex.run(action("nope.yml", "x-2"), kind="NodeFence", name="nf")
    with pytest.raises(ExecutorError, match="ident"):
        ex.run(action("ok.yml", "bad ident"), kind="NodeFence", name="nf")
    with pytest.raises(ValueError, match="max_concurrent_runs"):
        Executor(tmp_path, playbooks, max_concurrent_runs=0)
