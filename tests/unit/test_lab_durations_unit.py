"""Unit test of the per-file test times ``./dev test`` prints (noderemedy_lab.durations) on a
JUnit XML written here: a file's tests are summed, a test class's cases count for their module."""

from __future__ import annotations

from pathlib import Path

from noderemedy_lab import durations

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_demo" name="test_the_demo" time="160.5"/>
<testcase classname="tests.unit.runner.test_batches" name="test_a" time="0.25"/>
<testcase classname="tests.unit.runner.test_batches.TestGather" name="test_b" time="0.5"/>
<testcase classname="tests.unit.runner.test_batches" name="test_c" time="1.25"/>
</testsuite></testsuites>
"""


def test_the_times_of_a_files_tests_are_summed_and_a_class_counts_for_its_module(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert durations.file_seconds(str(junit)) == {
        "tests/integration/test_demo.py": (160.5, 1),
        "tests/unit/runner/test_batches.py": (2.0, 3),
    }
