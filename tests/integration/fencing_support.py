"""Support for the fencing integration tests (no tests here): quartet tasks, secrets check."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def quartet_tasks(module: str, module_args: dict, probe) -> list[dict]:
    """check -> probe -> apply -> probe -> check -> apply -> probe (community.crypto's quartet).

    ``probe(name)`` returns a task reading the peer's own state, registered under ``name``.
    """
    return [
        {"name": "check1", module: module_args, "check_mode": True, "diff": True},
        probe("probe1"),
        {"name": "apply1", module: module_args, "diff": True},
        probe("probe2"),
        {"name": "check2", module: module_args, "check_mode": True},
        {"name": "apply2", module: module_args},
        probe("probe3"),
    ]


def assert_quartet(res, probes: list[str]) -> None:
    """The quartet's changed flags, and the peer's state after each step (``probes``: stdout of probe1..3)."""
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-2000:]
    flags = [res.task(n)["changed"] for n in ("check1", "apply1", "check2", "apply2")]
    assert flags == [True, True, False, False]
    assert [res.task(n)["stdout"].strip() for n in ("probe1", "probe2", "probe3")] == probes


def assert_no_secrets(result: dict, *secrets: str) -> None:
    """None of ``secrets`` appears anywhere in a module result."""
    text = json.dumps(result)
    for secret in secrets:
        assert secret and secret not in text


def assert_failed_unfenced(res, name: str) -> dict:
    """Task ``name`` failed and its ``fence`` evidence does not claim a fence; returns its result."""
    out = res.task(name)
    assert out.get("failed") is True, out
    assert out["fence"]["verified"] is False, "a failure is never reported as fenced"
    return out
