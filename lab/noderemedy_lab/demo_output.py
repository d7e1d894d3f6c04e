"""What the demo (:mod:`noderemedy_lab.demo`) leaves behind: its figures (``bench/results/e2e.json``)
and a timeline picture of each scenario (``build/demo/timeline-<scenario>.png`` and ``.svg``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .config import LabConfig
from .timeline import render

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "e2e.json"
PICTURES = ROOT / "build" / "demo"
TITLES = {"power_cut": "Power cut", "partition": "Network partition"}


def _say(line: str) -> None:
    print(line, flush=True)


def write_pictures(figures: dict[str, dict], out_dir: Path) -> list[Path]:
    """``<out_dir>/timeline-<scenario>.png`` and ``.svg`` of every scenario recorded
    (:func:`~.timeline.render`); returns the paths written."""
    paths = []
    for kind, fig in figures.items():
        title = f"{TITLES.get(kind, kind)} of {fig['node']}"
        paths += render(fig, title, out_dir / f"timeline-{kind}")
    _say(f"-- timeline pictures: {', '.join(str(p) for p in paths)}")
    return paths


def write_results(figures: dict[str, dict], cfg: LabConfig, period: int, out: Path = RESULTS) -> None:
    """``out`` (``bench/results/e2e.json``): the power cut's timeline as ``cases`` and every
    scenario's figures under ``scenarios`` (with the recorded ``trace`` and ``writers`` the
    timeline pictures are drawn from)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    timeline = figures.get("power_cut", {}).get("timeline", {})
    doc = {
        "description": "noderemedy demo on real nodes, the runner deployed in the cluster: seconds from the "
        f"power cut to each step (lab: node-monitor-grace-period {cfg.node_monitor_grace_period} s, "
        f"detection period {period} s); scenarios: power cut and network partition of web-0's real node",
        "cases": [{"case": case, "seconds": secs} for case, secs in timeline.items()],
        "scenarios": figures,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    _say(f"-- figures written to {out}")
