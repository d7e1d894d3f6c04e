"""The noderemedy-runner command line: help a newcomer understands, bad flags and bad
Configurations refused with the flag or field named (exit 2), --check-config without a cluster."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from noderemedy_runner.arguments import POLICY_FIELDS, build_parser, parse_args, policy, run_env
from noderemedy_runner.cli import main


def test_help_explains_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["--help"])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    for needle in (
        "Fence and remediate failed Kubernetes nodes",
        "NodeFence named after the node",
        "storm guard",
        "--kubeconfig",
        "--config",
        "--metrics-addr",
        "--max-concurrent-runs",
        "--leader-elect",
        "--dry-run",
        "act on nothing",
        "examples:",
        "--check-config",
        "docs/operations.md",
    ):
        assert needle in out, needle


def test_installed_entry_point() -> None:
    exe = shutil.which("noderemedy-runner") or str(
        Path(__file__).resolve().parents[3] / ".venv/bin/noderemedy-runner"
    )
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("usage: noderemedy-runner")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-concurrent-runs", "0"], "--max-concurrent-runs: 0 must be at least 1"),
        (["--max-concurrent-runs", "many"], "argument --max-concurrent-runs: invalid int value: 'many'"),
        (["--metrics-addr", "8080"], "--metrics-addr '8080': expected host:port"),
        (["--run-deadline", "-1"], "--run-deadline: -1.0 must be positive"),
        (["--run-nice", "20"], "--run-nice: 20 must be 0..19"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (
            ["--playbook-dir", "/nonexistent"],
            "--playbook-dir '/nonexistent': missing bmh_power.yml, fence_step.yml, fence_verify.yml, "
            "out_of_service_taint.yml",
        ),
        (["--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
        (["--step-retries", "-1"], "--step-retries: -1 must not be negative"),
        (["--restart-delay", "-2"], "--restart-delay: -2.0 must not be negative"),
        (["--max-pods-released-per-minute", "-1"], "--max-pods-released-per-minute: -1 must not be negative"),
        (["--recovery-timeout", "0"], "--recovery-timeout: 0.0 must be positive"),
        (["--poll-interval", "0"], "--poll-interval: 0.0 must be positive"),
        (["--run-env", "NOEQUALS"], "--run-env: 'NOEQUALS' is not NAME=VALUE"),
        (["--detect-only", "--reconcile-only"], "not allowed with argument --detect-only"),
        (["--metal3-selector", "{"], "argument --metal3-selector: Expecting property name"),
        (
            ["--metal3-selector", '{"matchExpressions": [{"key": "a", "operator": "Near"}]}'],
            "argument --metal3-selector: --metal3-selector",
        ),
    ],
)
def test_bad_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ex:
        main(argv)
    assert ex.value.code == 2
    assert message in capsys.readouterr().err


def test_check_config_good(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "remedy.yaml"
    f.write_text(
        "apiVersion: node-remedy/v1alpha\nkind: Configuration\nmetadata: {name: workers}\nnodeSelector: type=compute\n"
        "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionStatus: [False, Unknown], nodeConditionPeriod: 40s}\n"
        "stormGuard: {maxUnhealthy: 40%, cooldown: 2m}\n"
    )
    assert main(["--config", str(f), "--check-config", "--metrics-addr", "0"]) == 0
    out = capsys.readouterr().out
    assert "Configuration workers" in out
    assert "unhealthy when Ready in {False,Unknown} for 40s -> fence" in out
    assert "storm guard: maxUnhealthy=40%, cooldown 120s" in out


def test_check_config_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "remedy.yaml"
    f.write_text("apiVersion: node-remedy/v1alpha\nkind: Configuration\nstormGuard: {maxUnhealthy: 140%}\n")
    assert main(["--config", str(f), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert "stormGuard.maxUnhealthy: '140%' is over 100%" in err and str(f) in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--leader-elect-lease-duration", "5"],
            "--leader-elect-lease-duration: 5 must exceed --leader-elect-renew-deadline (10)",
        ),
        (
            ["--leader-elect-renew-deadline", "2"],
            "--leader-elect-renew-deadline: 2 must exceed 1.2 x --leader-elect-retry-period (2)",
        ),
        (["--leader-elect-retry-period", "0"], "--leader-elect-retry-period: 0 must be at least 1"),
    ],
)
def test_leader_election_timings_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ex:
        main(["--leader-elect", *argv])
    assert ex.value.code == 2
    assert message in capsys.readouterr().err


def test_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.max_concurrent_runs, args.leader_elect, args.dry_run, args.metrics_addr) == (
        4,
        False,
        False,
        ":8080",
    )


def test_metal3_selector_parses_a_label_selector() -> None:
    args = build_parser().parse_args(
        ["--metal3-selector", '{"matchLabels": {"cluster.x-k8s.io/cluster-name": "lab"}}']
    )
    assert args.metal3_selector.matches({"cluster.x-k8s.io/cluster-name": "lab"})
    assert not args.metal3_selector.matches({"cluster.x-k8s.io/cluster-name": "prod"})


def test_policy_flags_default_to_the_machine_defaults() -> None:
    """One entry point: every NodeFencePolicy setting has a flag, defaulting to the machine's own
    default (docs/state-machines.md), except the grace period, which the Configuration's period
    already applies."""
    from noderemedy_runner.machines.nodefence import NodeFencePolicy

    args = build_parser().parse_args([])
    policy = NodeFencePolicy()
    assert (args.step_retries, args.retry_delay, args.max_restarts, args.restart_delay) == (
        policy.step_retries,
        policy.retry_delay_seconds,
        policy.max_restarts,
        policy.restart_delay_seconds,
    )
    assert args.recovery_timeout == policy.recovery_timeout_seconds
    assert args.max_pods_released_per_minute == policy.max_pods_released_per_minute == 0
    assert (args.grace_seconds, args.poll_interval, args.run_env) == (0.0, 0.5, [])
    args = build_parser().parse_args(["--run-env", "A=1", "--run-env", "B=x=y", "--reconcile-only"])
    assert args.run_env == ["A=1", "B=x=y"] and args.reconcile_only and not args.detect_only
    assert run_env(args) == {"A": "1", "B": "x=y"}


def test_every_policy_flag_reaches_the_machine() -> None:
    """Each NodeFencePolicy flag sets its own field (a flag wired to the wrong field, or to none,
    would leave a default here)."""
    from dataclasses import asdict, fields

    from noderemedy_runner.machines.nodefence import NodeFencePolicy

    flags = {
        "--grace-seconds": "1.5",
        "--step-retries": "7",
        "--retry-delay": "2.5",
        "--recovery-timeout": "33",
        "--max-restarts": "4",
        "--restart-delay": "9",
        "--max-power-fencing": "3",
        "--max-pods-released-per-minute": "11",
    }
    got = policy(parse_args([word for flag, value in flags.items() for word in (flag, value)]))
    assert asdict(got) == {
        "grace_seconds": 1.5,
        "step_retries": 7,
        "retry_delay_seconds": 2.5,
        "recovery_timeout_seconds": 33.0,
        "max_restarts": 4,
        "restart_delay_seconds": 9.0,
        "max_power_fencing": 3,
        "max_pods_released_per_minute": 11,
    }
    assert {f.name for f in fields(NodeFencePolicy)} == set(POLICY_FIELDS.values())
    # each value differs from the machine's default, so none of them passed by being one
    assert all(getattr(got, f) != getattr(NodeFencePolicy(), f) for f in POLICY_FIELDS.values())


REMEDY_CHAIN = (
    "apiVersion: node-remedy/v1alpha\nkind: Configuration\nmetadata: {name: workers}\n"
    "thresholdConfigs:\n- nodeConditionType: Ready\n  nodeConditionStatus: [False, Unknown]\n"
    "  nodeConditionPeriod: 40s\n  remedy1: [{name: repair, period: 20s}]\n  remedy2: [{name: fence}]\n"
    "remedyConfigs:\n- {name: repair, podTemplate: {spec: {containers: [{name: r, image: 'repair:1'}]}}}\n"
    "- {name: fence, executor: job}\n"
)


def test_check_config_shows_the_remedy_chain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "remedy.yaml"
    f.write_text(REMEDY_CHAIN)
    assert main(["--config", str(f), "--check-config", "--metrics-addr", "0"]) == 0
    out = capsys.readouterr().out
    assert "-> repair (pod, 20s) then fence (fence flow, job);" in out, out


def test_a_remedy_asking_for_the_job_executor_outside_a_pod_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    f = tmp_path / "remedy.yaml"
    f.write_text(REMEDY_CHAIN)
    kubeconfig = tmp_path / "kubeconfig"  # never contacted: the refusal comes first
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    argv = ["--config", str(f), "--kubeconfig", str(kubeconfig), "--metrics-addr", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "remedyConfigs executor: job (workers/fence)" in err and "POD_NAME" in err, err


def test_leave_flushes_the_log_and_ends_the_process_with_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the service stopped, the process ends through ``os._exit`` (no interpreter
    finalization), the log handlers flushed first so the last line (``stopped``) is not lost."""
    import logging
    import os

    from noderemedy_runner import cli

    flushed: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            pass

        def flush(self) -> None:
            flushed.append("log")

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        raise Exited(code)

    handler = Handler()
    logging.getLogger().addHandler(handler)
    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(logging, "shutdown", lambda: handler.flush())
    try:
        with pytest.raises(Exited) as ex:
            cli.leave(3)
    finally:
        logging.getLogger().removeHandler(handler)
    assert ex.value.args == (3,)
    assert flushed == ["log"]
