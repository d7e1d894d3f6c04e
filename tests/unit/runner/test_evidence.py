"""The fence evidence a run reports: the rule of ``roles/fence_step/tasks/evidence.yml`` run by real
``ansible-runner`` on local playbooks (no network, no device: the method read-backs are given as
``fence_step_results``), and the runner's parsing of that task's result out of the job events."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ansible_runner  # type: ignore[import-untyped]
import pytest

from noderemedy_runner.executor import Executor
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.outcomes import (
    EVIDENCE_FACT,
    READING_FACT,
    RunOutcome,
    StepEvidence,
    evidence_from_events,
    fence_reading,
)


def method(name: str, device_type: str, action: str, verified: bool) -> dict[str, Any]:
    """One entry of ``fence_step_results`` as roles/fence_step/tasks/method.yml records it."""
    return {
        "name": name,
        "device_type": device_type,
        "action": action,
        "fence": {"verified": verified, "method": device_type, "target": f"{name}:1", "verified_at": 5.0},
    }


# host name → (fence_step_results, expected (fenced, kind, source, evidence's target) or None)
CASES: dict[str, tuple[list[dict[str, Any]], tuple[bool, str, str, str | None] | None]] = {
    "nothing": ([], None),
    "pdu_off": ([method("p", "pdu", "off", True)], (True, "power_off", "p", "p:1")),
    "ipmi_off_read_on": ([method("i", "ipmi", "off", False)], None),
    "pdu_reboot": ([method("p", "pdu", "reboot", True)], None),
    "power_cycle": (
        [method("i-off", "ipmi", "off", True), method("i-on", "ipmi", "on", False)],
        (True, "power_off", "i-off", "i-off:1"),
    ),
    "cordon_then_stop": (
        [method("cordon", "node", "off", False), method("stop", "aws", "off", True)],
        (True, "power_off", "stop", "stop:1"),
    ),
    "fc_all_down": (
        [method("f1", "fc", "off", True), method("f2", "fc", "off", True)],
        (True, "storage_isolated", "f1,f2", "f1:1"),
    ),
    "fc_one_up": (
        [method("f1", "fc", "off", True), method("f2", "fc", "off", False)],
        (False, "storage_isolated", "f1,f2", None),
    ),
    "fc_on": ([method("f1", "fc", "on", True)], None),
    "power_beats_ports": (
        [method("f1", "fc", "off", False), method("p", "pdu", "off", True)],
        (True, "power_off", "p", "p:1"),
    ),
}

PLAY = [
    {
        "name": "evidence",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Stop before the evidence (a method failed)",
                "ansible.builtin.fail": {"msg": "method failed"},
                "when": "stop | default(false)",
            },
            {
                "name": "Choose the evidence",
                "ansible.builtin.include_role": {
                    "name": "noderemedy.core.fence_step",
                    "tasks_from": "evidence",
                },
            },
        ],
    }
]


def _host(**hostvars: Any) -> dict[str, Any]:
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **hostvars}


@pytest.fixture(scope="module")
def events_by_host(collections_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """One real ansible-runner run of the role's evidence task, one inventory host per case, plus
    ``broken`` (no ``fence_step_results``: the task fails) and ``stopped`` (the play stops before it)."""
    import yaml

    base = tmp_path_factory.mktemp("evidence")
    (base / "project").mkdir()
    (base / "project" / "evidence.yml").write_text(yaml.safe_dump(PLAY))
    hosts = {name: _host(fence_step_results=results) for name, (results, _) in CASES.items()}
    hosts["broken"] = _host()
    hosts["stopped"] = _host(stop=True, fence_step_results=[method("p", "pdu", "off", True)])
    runner = ansible_runner.run(
        private_data_dir=str(base),
        playbook="evidence.yml",
        inventory={"all": {"hosts": hosts}},
        envvars={
            "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        },
        suppress_env_files=True,
        quiet=True,
        timeout=120,
    )
    assert runner.status == "failed", runner.stdout.read()  # broken and stopped fail; the rest run
    out: dict[str, list[dict]] = {}
    for ev in runner.events:
        host = (ev.get("event_data") or {}).get("host")
        if host:
            out.setdefault(host, []).append(ev)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_role_rule_read_from_real_events(case: str, events_by_host: dict[str, list[dict]]) -> None:
    got = evidence_from_events(events_by_host[case])
    expected = CASES[case][1]
    if expected is None:
        assert got is None
        return
    assert got is not None
    fenced, kind, source, target = expected
    assert (got.fenced, got.kind, got.source) == (fenced, kind, source)
    if target is None:
        assert got.fence == {}
    else:
        assert got.fence["verified"] is True and got.fence["target"] == target


def test_a_failed_or_skipped_evidence_task_gives_no_evidence(events_by_host: dict[str, list[dict]]) -> None:
    broken, stopped = events_by_host["broken"], events_by_host["stopped"]
    assert any(
        e["event"] == "runner_on_failed"
        and e["event_data"]["task"] == "Choose this run's evidence of a verified fence"
        for e in broken
    )
    assert any(e["event"] == "runner_on_failed" for e in stopped)
    assert not any(
        e["event_data"].get("task") == "Choose this run's evidence of a verified fence" for e in stopped
    )
    assert evidence_from_events(broken) is None
    assert evidence_from_events(stopped) is None


def facts_event(reading: Mapping[str, Any], evidence: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "event": "runner_on_ok",
        "event_data": {
            "task": "t",
            "resolved_action": "ansible.builtin.set_fact",
            "res": {"ansible_facts": {READING_FACT: reading, EVIDENCE_FACT: evidence}, "changed": False},
        },
    }


def test_a_malformed_result_never_reads_as_a_fence() -> None:
    verified = {"verified": True, "method": "ipmi"}
    power = {"fenced": True, "kind": "power_off", "source": "i"}
    # claimed fenced, but the module evidence is not verified: not fenced, no evidence
    unproven = evidence_from_events([facts_event(power, {"verified": "yes"})])
    assert unproven == StepEvidence(False, "power_off", "i", {})
    assert evidence_from_events([facts_event({**power, "kind": "magic"}, verified)]) is None
    assert evidence_from_events([facts_event({**power, "source": ""}, verified)]) is None
    assert evidence_from_events([facts_event({**power, "fenced": "true"}, verified)]) == StepEvidence(
        False, "power_off", "i", {}
    )
    # other set_fact results are not the evidence; the last evidence result counts
    other = {"event": "runner_on_ok", "event_data": {"res": {"ansible_facts": {"x": 1}}}}
    assert evidence_from_events([other]) is None
    last = evidence_from_events([facts_event(power, verified), facts_event({}, {})])
    assert last is None


def test_fence_reading_from_the_outcome_evidence() -> None:
    ev = StepEvidence(True, "power_off", "ipmi-off", {"verified": True, "method": "ipmi", "verified_at": 3.0})
    reading, evidence = fence_reading("n1", RunOutcome("i", "successful", 0, evidence=ev), 10.0)
    assert reading is not None and reading.verifies("n1") and not reading.verifies("n2")
    assert (reading.kind, reading.source, reading.observed_at) == ("power_off", "ipmi-off", 10.0)
    assert evidence == {"verified": True, "method": "ipmi", "verified_at": 3.0}
    down = StepEvidence(False, "storage_isolated", "f1,f2", {})
    reading, evidence = fence_reading("n1", RunOutcome("i", "failed", 2, evidence=down), 10.0)
    assert reading is not None and not reading.fenced and evidence is None
    assert fence_reading("n1", RunOutcome("i", "failed", 2), 10.0) == (None, None)
    # a run read back from an earlier process's artifacts: its off may be stale, no reading
    assert fence_reading("n1", RunOutcome("i", "successful", 0, evidence=ev, recovered=True), 10.0) == (
        None,
        None,
    )


def test_the_executor_reads_the_evidence_of_its_run_and_of_recovered_artifacts(
    collections_path: Path, tmp_path: Path
) -> None:
    import yaml

    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "evidence.yml").write_text(yaml.safe_dump([{**PLAY[0], "hosts": "localhost"}]))
    results = [method("p", "pdu", "off", True)]
    act = Action(kind="run_step", playbook="evidence.yml", ident="ev-1", extravars={"node": "n1"})
    extra = {"fence_step_results": results}
    ex = Executor(tmp_path / "runs", playbooks, collections_path=collections_path, run_deadline=60)
    out = ex.run(act, kind="NodeFence", name="nf", extra_extravars=extra)
    assert out.succeeded, out.summary()
    assert out.evidence == StepEvidence(True, "power_off", "p", results[0]["fence"])
    reading, evidence = fence_reading("n1", out, 20.0)
    assert reading is not None and reading.verifies("n1") and evidence == results[0]["fence"]
    again = Executor(tmp_path / "runs", playbooks, collections_path=collections_path).run(
        act, kind="NodeFence", name="nf", extra_extravars=extra
    )
    assert again.recovered and again.evidence == out.evidence
    assert fence_reading("n1", again, 20.0) == (None, None)
