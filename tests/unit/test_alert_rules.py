"""The shipped alert rules (deploy/monitoring/prometheusrule.yaml) against promtool: the rule file
is valid (``promtool check rules``) and every alert fires when it should and only then
(``promtool test rules tests/promtool/rules_test.yaml``). promtool comes from Debian's
``prometheus`` package, which ``./dev setup`` installs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"
TESTS = ROOT / "tests" / "promtool" / "rules_test.yaml"


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The PrometheusRule's spec as a plain rule file ``rules.yaml``, next to a copy of the tests."""
    doc = yaml.safe_load(RULE.read_text())
    assert doc["kind"] == "PrometheusRule" and doc["apiVersion"] == "monitoring.coreos.com/v1"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(doc["spec"], sort_keys=False))
    shutil.copy(TESTS, tmp_path / "rules_test.yaml")
    return tmp_path


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: ./dev setup installs Debian's prometheus package"
    return path


def test_rules_are_valid(rules_dir: Path) -> None:
    out = subprocess.run(
        [promtool(), "check", "rules", str(rules_dir / "rules.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 5 rules found" in out.stdout + out.stderr


def test_promtool_rule_tests_pass(rules_dir: Path) -> None:
    out = subprocess.run(
        [promtool(), "test", "rules", str(rules_dir / "rules_test.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_every_alert_has_a_promtool_test() -> None:
    rules = yaml.safe_load(RULE.read_text())["spec"]["groups"]
    alerts = {r["alert"] for g in rules for r in g["rules"]}
    tested = {
        t["alertname"]
        for case in yaml.safe_load(TESTS.read_text())["tests"]
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    assert alerts == tested
