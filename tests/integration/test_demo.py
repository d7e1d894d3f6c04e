"""The demo (README command one, ``noderemedy_lab.demo``) as a user runs it, on a lab of its own:
both scenarios (power cut, network partition) heal, and its output has no line a user would read
as a failure. A healthy demo prints no ``Errno``, no ``Traceback`` and no ``!!`` (the demo's own
mark of a failure), on stdout or stderr, from the demo or from the lab under it.

The demo's lab takes this worker's port base + :data:`PORT_OFFSET` (see
:mod:`noderemedy_lab.pytest_plugin` for the layout of a worker's range); its figures and pictures go
to the test's tmp dir, not to bench/results and build/demo.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from noderemedy_lab.pytest_plugin import worker_port_base

pytestmark = [pytest.mark.lab]

ROOT = Path(__file__).resolve().parents[2]
#: The demo lab's ports: this worker's base + 20 .. +34 and +120 .. +125 (3 kwok + 3 real BMCs).
PORT_OFFSET = 20
#: What a user reads as a failure.
ERROR_LINE = re.compile(r"Errno|Traceback|!!")
#: Seconds each scenario may take from the failure to its NodeFence Final (the demo's --timeout).
SCENARIO_TIMEOUT = 600


@pytest.mark.timeout(2 * SCENARIO_TIMEOUT + 600)
def test_the_demo_heals_both_failures_and_prints_no_error_line(
    remediation_image: dict[str, Any], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    results, pictures = tmp_path / "e2e.json", tmp_path / "pictures"
    # a short workdir: the kubelet's unix sockets under it must fit in 108 bytes (sun_path)
    workdir = tmp_path_factory.mktemp("demo", numbered=True)
    argv = [
        sys.executable, "-m", "noderemedy_lab.demo",
        "--workdir", str(workdir),
        "--port-base", str(worker_port_base() + PORT_OFFSET),
        "--image", str(ROOT / "build" / "image" / "image.json"),
        "--results", str(results),
        "--pictures", str(pictures),
        # the test asserts what heals, not how fast: on a host busy with the rest of the suite the
        # in-cluster runner's playbooks take minutes (the figures are the demo's on an idle host)
        "--timeout", str(SCENARIO_TIMEOUT),
    ]  # fmt: skip
    t0 = time.monotonic()
    out = subprocess.run(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=2 * SCENARIO_TIMEOUT + 500,
        cwd=ROOT,
        check=False,
    )
    elapsed = time.monotonic() - t0
    print(out.stdout)
    bad = [line for line in out.stdout.splitlines() if ERROR_LINE.search(line)]
    assert out.returncode == 0, f"the demo exited {out.returncode}; its error lines: {bad}"
    assert bad == [], f"{len(bad)} error line(s) in a healthy demo: {bad}"
    doc = json.loads(results.read_text())
    scenarios = doc["scenarios"]
    assert set(scenarios) == {"power_cut", "partition"}
    for kind, fig in scenarios.items():
        assert fig["overlapping_writes"] == 0, (kind, fig)
        steps = fig["trace"]["nodefence"]  # "<step> <status>" changes, the last one "Recovery Final"
        assert fig["trace"]["power"] and steps[-1][1].endswith(" Final"), (kind, fig["trace"])
        assert fig["writers"]["old"] and fig["writers"]["new"], (kind, fig["writers"])
        for suffix in ("png", "svg"):
            assert (pictures / f"timeline-{kind}.{suffix}").stat().st_size > 10_000, (kind, suffix)
        print(
            f"FIGURE demo {kind}: web-0 Running elsewhere {fig['pod_running_elsewhere_s']:.1f} s after the "
            f"failure, NodeFence Final {fig['timeline']['final']:.1f} s, "
            f"{fig['overlapping_writes']} overlapping writes"
        )
    print(f"FIGURE demo: both scenarios and the lab in {elapsed:.0f} s, 0 error lines")
