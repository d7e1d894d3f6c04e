"""Unit tests of the demo's timeline (noderemedy_lab.timeline): recording keeps only changes, the
writers' lines become spans, and a small recorded failover is drawn to PNG and SVG. No lab, no
network."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from noderemedy_lab.timeline import LANES, WRITER_LANES, Recorder, intervals, render, writer_spans

#: A power cut as the demo records it (the shape of e2e.json's ``scenarios.power_cut``), cut down:
#: readings every few seconds instead of every 0.2 s, the writers' spans as the shared file gave them.
SAMPLE: dict[str, Any] = {
    "node": "lab-real-1",
    "pod_running_elsewhere_s": 23.8,
    "overlapping_writes": 0,
    "old_writer_last_s": -0.26,
    "new_writer_first_s": 22.56,
    "timeline": {
        "node_notready": 18.35,
        "nodefence_created": 19.72,
        "fc_port_fenced": 21.16,
        "pod_running_elsewhere": 23.8,
        "out_of_service_taint": 24.96,
        "power_on": 26.91,
        "power_management": 27.34,
        "node_ready": 27.69,
        "fc_port_restored": 31.72,
        "taint_removed": 34.22,
        "final": 34.6,
    },
    "trace": {
        "power": [[-0.4, "on"], [0.2, "off"], [26.91, "on"]],
        "ready": [[-0.4, "True"], [18.35, "Unknown"], [27.69, "True"]],
        "nodefence": [
            [-0.4, None],
            [19.72, "New"],
            [20.1, "Isolation Running"],
            [21.5, "PowerManagement Running"],
            [27.34, "Recovery Running"],
            [32.0, "Done"],
            [34.6, "Final"],
        ],
        "fc_port": [[-0.4, "up"], [21.16, "down"], [31.72, "up"]],
        "taint": [[-0.4, False], [24.96, True], [34.22, False]],
    },
    "trace_end_s": 34.6,
    "writers": {"old": [[-5.0, -0.26]], "new": [[22.56, 36.1]]},
}


def test_recorder_keeps_only_changes_in_seconds_since_the_failure() -> None:
    rec = Recorder()
    rec.observe(-0.413, {"power": "on", "taint": False})
    rec.observe(0.2, {"power": "on", "taint": False})
    rec.observe(0.4, {"power": "off", "taint": False})
    rec.observe(25.0, {"power": "off", "taint": True})
    got = rec.to_dict()
    assert got["power"] == [[-0.41, "on"], [0.4, "off"]]
    assert got["taint"] == [[-0.41, False], [25.0, True]]
    assert set(got) == set(LANES) and got["ready"] == []
    json.dumps(got)  # what e2e.json stores


def test_recorder_refuses_a_lane_it_does_not_draw() -> None:
    with pytest.raises(ValueError, match="'pod'"):
        Recorder().observe(1.0, {"pod": "Running"})


def test_writer_lines_become_spans_split_where_the_writer_stopped() -> None:
    t_fail = 1000.0
    lines = [990.0, 996.0, 996.1, 996.2, 999.74, 1022.56, 1022.66, 1022.76]
    # before the window (-5 s) left out; 996.2 -> 999.74 is a gap of 3.5 s: two spans
    assert writer_spans(lines, t_fail) == [[-4.0, -3.8], [-0.26, -0.26], [22.56, 22.76]]
    assert writer_spans([], t_fail) == []


def test_intervals_hold_each_value_until_the_next_change() -> None:
    assert intervals([[0.0, "on"], [2.0, "off"], [2.0, "on"]], 5.0) == [(0.0, 2.0, "on"), (2.0, 5.0, "on")]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_render_draws_a_recorded_failover_to_png_and_svg(tmp_path: Path) -> None:
    paths = render(SAMPLE, "Power cut of lab-real-1", tmp_path / "pictures" / "timeline-power_cut")
    png, svg = paths
    assert [p.name for p in paths] == ["timeline-power_cut.png", "timeline-power_cut.svg"]
    width, height = _png_size(png)
    assert width >= 800 and 300 <= height < width
    text = svg.read_text()
    for label in [*LANES.values(), *WRITER_LANES.values(), "seconds since the failure"]:
        assert f">{label}<" in text, label
    assert "Power cut of lab-real-1: web-0 Running elsewhere 23.8 s after the failure" in text
    assert "0 overlapping writes" in text
    assert "web-0 Running elsewhere 23.8 s" in text and "NotReady 18.4 s" in text
    # the same recording gives the same SVG (no date, fixed ids): a committed copy diffs cleanly
    again = render(SAMPLE, "Power cut of lab-real-1", tmp_path / "again")
    assert again[1].read_text() == text


def test_render_names_the_missing_recording(tmp_path: Path) -> None:
    old = {k: v for k, v in SAMPLE.items() if k != "trace"}
    with pytest.raises(KeyError, match="'trace'"):
        render(old, "an e2e.json from before the timeline", tmp_path / "x")
