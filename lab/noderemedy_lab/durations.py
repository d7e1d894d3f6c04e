"""The slowest test files of a pytest run, from its JUnit XML: ``python -m noderemedy_lab.durations
build/test-logs/junit.xml [N]`` prints the N (15) files whose tests took longest, seconds summed
over their tests (setup, call and teardown, as pytest's JUnit report counts them; a module-scoped
fixture's start-up goes to the file's first test). ``./dev test`` prints it after pytest: where the
run's time went, the figures for tests/integration/conftest.py's FILE_SECONDS."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def file_seconds(junit_path: str) -> dict[str, tuple[float, int]]:
    """``{file: (seconds, tests)}`` of the JUnit XML at ``junit_path`` (the file from each test's
    ``classname``, e.g. ``tests.integration.test_demo`` -> ``tests/integration/test_demo.py``)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        # a test class adds its name after the module's (CamelCase); the module is the rest
        while len(parts) > 1 and parts[-1][:1].isupper():
            parts.pop()
        entry = totals["/".join(parts) + ".py"]
        entry[0] += float(case.get("time", 0) or 0)
        entry[1] += 1
    return {name: (secs, int(n)) for name, (secs, n) in totals.items()}


def main(argv: list[str]) -> int:
    most = int(argv[2]) if len(argv) > 2 else 15
    times = file_seconds(argv[1])
    print(
        f"\nthe {most} slowest test files (seconds summed over their tests; all {sum(s for s, _ in times.values()):.0f} s)"
    )
    for name, (secs, n) in sorted(times.items(), key=lambda kv: -kv[1][0])[:most]:
        print(f"{secs:8.1f}  {n:4d} tests  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
