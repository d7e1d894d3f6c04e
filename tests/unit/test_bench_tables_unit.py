"""Unit tests of bench/tables.py's per-node release plot (``release_series``, ``release_plot``) on
small results documents shaped as bench/rack.py writes them. No lab."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "bench" / "tables.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _per_node(n: int, taint: float) -> dict[str, dict[str, float]]:
    return {
        f"lab-node-{i}": {"verified_s": taint - 1, "taint_s": taint + i, "final_s": taint + 10 + i}
        for i in range(n)
    }


def _docs(ours: dict[str, Any] | None, far: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    phase = {"taint_s": {"p50": 1}, **({"per_node": ours} if ours else {})}
    rack = {"racks": {"power_loss_4": {"executors": {"inprocess": phase}}}}
    peers = {"far": {"rack_power_loss_4": {"taint_s": {"p50": 1}, **({"per_node": far} if far else {})}}}
    return rack, peers


def test_no_plot_unless_both_sides_recorded_each_nodes_times(tables: ModuleType, tmp_path: Path) -> None:
    for ours, far in ((None, _per_node(4, 2)), (_per_node(4, 9), None), (None, None)):
        rack, peers = _docs(ours, far)
        assert tables.release_series(rack, peers) is None
        assert tables.release_plot(rack, peers, tmp_path / "plot") == []
    assert tables.release_series({}, {"far": {"not_measured": "no --far-src"}}) is None
    assert list(tmp_path.iterdir()) == []


def test_the_plot_is_drawn_as_png_and_svg_from_both_sides_per_node_times(
    tables: ModuleType, tmp_path: Path
) -> None:
    rack, peers = _docs(_per_node(4, 9), _per_node(3, 2))
    key, found_rack, far_phase = tables.release_series(rack, peers)
    assert key == "power_loss_4" and far_phase["per_node"]["lab-node-2"]["taint_s"] == 4
    assert found_rack["executors"]["inprocess"]["per_node"]["lab-node-3"]["taint_s"] == 12
    paths = tables.release_plot(rack, peers, tmp_path / "sub" / "plot")
    assert sorted(p.name for p in paths) == ["plot.png", "plot.svg"]
    assert (tmp_path / "sub" / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "sub" / "plot.svg").read_text()
    assert "<svg" in svg and "lab-node-3" in svg


def test_a_racks_note_is_shown_under_its_heading_and_a_rack_without_one_has_none(tables: ModuleType) -> None:
    rack, _ = _docs(_per_node(2, 3), None)
    noted = {"racks": {"fail_2_of_4": {**rack["racks"]["power_loss_4"], "note": "the lab flapped"}}}
    assert "`fail_2_of_4`: the lab flapped" in tables.rack(noted, "rack.json")
    assert not any(line.startswith("`power_loss_4`: ") for line in tables.rack(rack, "rack.json"))


def test_the_power_only_phase_is_a_row_of_its_own_naming_its_fence_configuration(tables: ModuleType) -> None:
    """bench/rack.py --executors inprocess-power: the rack fenced by power management alone, as FAR
    fences; its row in the rack table and in the table against FAR names that configuration."""
    config = "power_management=pdu-off pdu-on (no isolation or recovery step)"
    full = {"last_taint_after_last_not_ready_s": 7.5, "max_power_fencing": "default"}
    power = {"last_taint_after_last_not_ready_s": 3.25, "max_power_fencing": "default"}
    rack = {
        "racks": {
            "power_loss_4": {
                "executors": {
                    "inprocess": {**full, "by_max_power_fencing": {"default": full}},
                    "inprocess-power": {
                        **power,
                        "by_max_power_fencing": {"default": power},
                        "fence_configuration": config,
                    },
                }
            }
        }
    }
    rows = [line for line in tables.rack(rack, "rack.json") if line.startswith("| power_loss_4")]
    assert len(rows) == 2
    assert "inprocess-power (" + config + ")" in rows[1] and "3.25 s" in rows[1]
    assert config not in rows[0] and "7.5 s" in rows[0]
    ours = rack["racks"]["power_loss_4"]["executors"]
    peers = {
        "far": {
            "rack_power_loss_4": {"last_taint_after_last_not_ready_s": 4.5},
            "ours_inprocess": {
                "power_loss_4": ours["inprocess"],
                "power_loss_4_power_only": ours["inprocess-power"],
            },
        }
    }
    lines = [line for line in tables.peers(peers, "peers.json") if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in lines[1:]] == [
        "FAR, rack_power_loss_4",
        "ours, in-process, --max-power-fencing default",
        f"ours, in-process, {config}, --max-power-fencing default",
    ]
    assert "3.25 s" in lines[-1] and "4.5 s" in lines[1]
