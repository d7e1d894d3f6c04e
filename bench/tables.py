#!/usr/bin/env python3
"""Markdown tables of the benchmark results in ``bench/results/*.json`` (docs/benchmarks.md).

Every figure printed is copied from a JSON file, unrounded; each table names its file, and the
date and load fields the file holds (or says that it holds none). Files this script does not know
are listed, not guessed at.

Usage::

    .venv/bin/python bench/tables.py                          # print the tables
    .venv/bin/python bench/tables.py --update docs/benchmarks.md

``--update`` replaces the text between the markers ``<!-- bench-tables:begin -->`` and
``<!-- bench-tables:end -->`` in that file (exit 2 if they are missing) and leaves the rest alone.
It also draws the rack's per-node release times, ours against FAR's (:func:`release_plot`), to
``docs/img/rack-release.{png,svg}`` (``--plot PATH``) when ``rack.json`` and ``peers.json`` both
hold them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BEGIN = "<!-- bench-tables:begin -->"
END = "<!-- bench-tables:end -->"
DASH = "—"


def _v(value: Any, unit: str = "") -> str:
    """A JSON value as written in the file (no rounding); None/absent as a dash."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_v(x, unit) for x in value)
    return f"{value}{unit}"


def _met(ratio: Any, target: Any) -> str:
    """``ratio <= target`` for files that record both but no verdict; a dash if either is absent."""
    if isinstance(ratio, int | float) and isinstance(target, int | float):
        return "yes" if ratio <= target else "no"
    return DASH


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return out


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def fencing(doc: Any, name: str) -> list[str]:
    """``bench/fencing.py``: one row per entry."""
    m = doc.get("machine") or {}
    load = m.get("load_average_1m_before_after")
    lines = [
        f"Measured `{_v(doc.get('generated_at'))}`; {_v(m.get('cpus'))} CPUs, Python "
        f"{_v(m.get('python'))}; 1-min load average before/after: {_v(load)}. "
        f"Statistic: {_v(doc.get('statistic'))}.",
        "",
    ]
    for part in doc.get("partial_runs") or []:
        pm = part.get("machine") or {}
        lines[-1:-1] = [
            f"Rows of {', '.join(part.get('cases') or [])} measured `{_v(part.get('generated_at'))}`; "
            f"1-min load average before/after: {_v(pm.get('load_average_1m_before_after'))}. "
            f"Statistic: {_v(part.get('statistic'))}.",
        ]
    rows = [
        [
            _v(e.get("case")),
            _v(e.get("ours_s"), " s"),
            f"`{_v(e.get('anchor'))}`",
            _v(e.get("anchor_s"), " s"),
            _v(e.get("ratio")),
            f"≤ {_v(e.get('target'))}" if "target" in e else DASH,
            _v(e.get("meets_target")) if "meets_target" in e else DASH,
        ]
        for e in doc.get("entries") or []
    ]
    table = _table(["case", "ours", "anchor", "anchor time", "ratio", "target ratio", "met"], rows)
    missing = doc.get("not_measured") or {}
    if missing:
        table += ["", "Not measured:", ""] + [f"* {what}: {why}" for what, why in missing.items()]
    return lines + table


def drain(doc: Any, name: str) -> list[str]:
    """``bench/drain.py``: a list of records sharing date, load and the no-op start-up."""
    records = doc if isinstance(doc, list) else [doc]
    first = records[0] if records else {}
    lines = [
        f"Measured `{_v(first.get('date'))}`; {_v(first.get('cpus'))} CPUs; 1-min load average before each "
        f"run: {_v(first.get('load_average_1m_before_each_run', first.get('load_average_1m')))}. Statistic: {_v(first.get('statistic'))} of "
        f"{_v(first.get('rounds'))} interleaved rounds. Ours: {_v(first.get('ours_command'))}; a no-op "
        f"`ansible-playbook` run took {_v(first.get('ansible_playbook_noop_s'), ' s')} (median); "
        f"`node_drain`'s own `elapsed` per round: {_v(first.get('ours_module_elapsed_s'), ' s')}.",
        "",
    ]
    rows = [
        [
            _v(r.get("case")),
            _v(r.get("ours_s"), " s"),
            f"`{_v(r.get('anchor'))}`",
            _v(r.get("anchor_s"), " s"),
            _v(r.get("ratio")),
            f"≤ {_v(r.get('target_ratio'))}" if r.get("target_ratio") is not None else DASH,
            _met(r.get("ratio"), r.get("target_ratio")),
        ]
        for r in records
    ]
    return lines + _table(["case", "ours", "anchor", "anchor time", "ratio", "target ratio", "met"], rows)


def watcher(doc: Any, name: str) -> list[str]:
    """``bench/watcher.py``: detection latency and memory (absolute targets, no anchor)."""
    m = doc.get("machine") or {}
    r = doc.get("reaction_s") or {}
    f = doc.get("reaction_from_first_not_ready_s") or {}
    rss = doc.get("runner_rss_mb") or {}
    lines = [
        f"Measured `{_v(doc.get('generated_at'))}`; {_v(m.get('cpus'))} CPUs, Python "
        f"{_v(m.get('python'))}; {_v(doc.get('nodes'))} nodes, {_v(doc.get('failed_nodes'))} failing at "
        f"once; 1-min load average at start / end: {_v(doc.get('load_average'), '') if doc.get('load_average') else 'not recorded'}. "
        "No anchor: the targets are absolute.",
        "",
    ]
    rows = [
        ["NotReady seen → NodeFence seen, p50", _v(r.get("p50"), " s"), DASH, DASH],
        [
            "same, p99",
            _v(r.get("p99"), " s"),
            f"≤ {_v(r.get('target_p99'), ' s')}" if "target_p99" in r else DASH,
            _v(r.get("meets_target")) if "meets_target" in r else DASH,
        ],
        ["same, min / max", f"{_v(r.get('min'), ' s')} / {_v(r.get('max'), ' s')}", DASH, DASH],
        [
            "samples (NodeFence seen before its NotReady: left out)",
            f"{_v(r.get('samples'))} "
            + (
                f"({len(r['left_out_nodefence_seen_before_not_ready'])} left out)"
                if "left_out_nodefence_seen_before_not_ready" in r
                else "(not recorded)"
            ),
            DASH,
            DASH,
        ],
        [
            "from the *first* NotReady, p50 / p99 / max",
            f"{_v(f.get('p50'), ' s')} / {_v(f.get('p99'), ' s')} / {_v(f.get('max'), ' s')}",
            DASH,
            DASH,
        ],
        [
            "failed nodes with a NodeFence",
            f"{_v(doc.get('victims_with_nodefence_in_api'))} of {_v(doc.get('failed_nodes'))}",
            DASH,
            DASH,
        ],
        ["NodeFences for other nodes", _v(len(doc.get("nodefences_for_other_nodes") or [])), DASH, DASH],
        [
            "runner peak RSS (VmHWM)",
            _v(rss.get("vm_hwm"), " MB"),
            f"≤ {_v(rss.get('target'), ' MB')}" if "target" in rss else DASH,
            _v(rss.get("meets_target")) if "meets_target" in rss else DASH,
        ],
        ["first to last of the nodes turning NotReady", _v(doc.get("not_ready_spread_s"), " s"), DASH, DASH],
    ]
    run = doc.get("run_started_s")
    fl = doc.get("runs_in_flight")
    if run and fl:
        first = next((v for k, v in run.items() if k.startswith("first_")), [])
        rows += [
            [
                f"NotReady seen → first run started (stub playbooks; queue for {_v(fl.get('bound'))} slots"
                + (f"; runs at nice {fl['run_nice']}" if "run_nice" in fl else "")
                + "), "
                "p50 / p99 / max",
                f"{_v(run.get('p50'), ' s')} / {_v(run.get('p99'), ' s')} / {_v(run.get('max'), ' s')}",
                DASH,
                DASH,
            ],
            ["same, the first runs (a slot free)", " / ".join(_v(x, " s") for x in first), DASH, DASH],
            [
                "runs in flight: most at any run start / gauge max",
                f"{_v(fl.get('max_at_run_start'))} / {_v(fl.get('gauge_max'))} "
                f"({_v(fl.get('runs_started'))} runs)",
                f"≤ {_v(fl.get('bound'))}",
                _v(fl.get("never_above_bound")),
            ],
        ]
    return lines + _table(["figure", "value", "target", "met"], rows)


def e2e(doc: Any, name: str) -> list[str]:
    """The demo (``./dev demo``): seconds from the power cut to each step, and each scenario's
    figures from the shared storage (``scenarios``)."""
    load = doc.get("load_average")
    lines = [
        f"{_v(doc.get('description'))}. Measured `{_v(doc.get('date'))}`; load average (1, 5, 15 min) "
        f"at the end: {', '.join(map(str, load)) if load else 'not recorded'}.",
        "",
    ]
    rows = [[f"`{_v(c.get('case'))}`", _v(c.get("seconds"), " s")] for c in doc.get("cases") or []]
    lines += _table(["step", "since the power cut"], rows)
    scenarios = doc.get("scenarios") or {}
    if scenarios:
        keys = [
            "node",
            "pod_running_elsewhere_s",
            "old_writer_last_s",
            "new_writer_first_s",
            "overlapping_writes",
        ]
        lines += [
            "",
            "Each scenario, in seconds since the failure, from the shared file and the API server:",
            "",
        ]
        lines += _table(
            ["scenario", *[f"`{k}`" for k in keys]],
            [[f"`{n}`", *[_v(f.get(k)) for k in keys]] for n, f in scenarios.items()],
        )
    return lines


def remedy_pods(doc: Any, name: str) -> list[str]:
    """The Job executor against the in-process executor (``bench/remedy_pods.py``): per executor
    the NotReady → run started percentiles, the run rate, the runner's VmHWM and the most runs in
    flight against the bound, with the Job / in-process ratios the file records."""
    ex = doc.get("executors") or {}
    inp, job = ex.get("inprocess") or {}, ex.get("job") or {}
    ratios = doc.get("ratios_job_over_inprocess") or {}
    nodes = doc.get("nodes") or {}
    lines = [
        f"Measured `{_v(doc.get('generated_at'))}`; {_v((doc.get('machine') or {}).get('cpus'))} CPUs; "
        f"{_v(nodes.get('kwok'))} kwok nodes and {_v(nodes.get('real'))} real nodes; "
        f"{_v(doc.get('failed_nodes_per_executor'))} kwok nodes failing per executor (disjoint sets, "
        "one after the other). Load average: not recorded.",
        "",
    ]

    def row(label: str, key: str, unit: str = "") -> list[str]:
        return [label, _v(inp.get(key), unit), _v(job.get(key), unit), _v(ratios.get(key))]

    def bound(e: Any) -> str:
        return (
            f"{_v(e.get('max_in_flight'))} / {_v(e.get('max_in_flight_independent'))} ≤ {_v(e.get('bound'))}"
        )

    rows = [
        row("NotReady seen → first run started, p50", "run_started_p50_s", " s"),
        row("same, p99", "run_started_p99_s", " s"),
        row("same, the first 4 (a slot free)", "first_4_no_queue_s", " s"),
        row("runs completed per minute (every slot busy)", "runs_per_min"),
        row("runner VmHWM", "rss_mb", " MB"),
        [
            "most runs in flight (gauge / independent) against the bound",
            bound(inp),
            bound(job),
            f"honoured: {_v(inp.get('bound_honoured'))} / {_v(job.get('bound_honoured'))}",
        ],
    ]
    return lines + _table(["figure", "in-process", "Job", "Job / in-process"], rows)


def _rack_row(label: str, e: Any) -> list[str]:
    t = e.get("taint_s") or {}
    return [
        label,
        f"{_v(t.get('p50'))} / {_v(t.get('p99'))} / {_v(t.get('max'))} s",
        _v(e.get("last_taint_after_last_not_ready_s"), " s"),
        _v(e.get("final_max_s"), " s"),
        _v(e.get("last_final_after_last_not_ready_s"), " s"),
        f"{_v(e.get('tainted'))} / {_v(e.get('final'))} of {_v(e.get('nodes'))}",
        _v(e.get("runs_started", e.get("agent_processes"))),
        _v(e.get("ansible_playbook_processes")),
        _v(e.get("cpu_s"), " s"),
        _v(e.get("rss_mb"), " MB"),
        _v(e.get("released_without_evidence")),
    ]


_RACK_HEAD = [
    "rack / setting", "taint p50 / p99 / max", "last taint after last NotReady", "Final, max",
    "last Final after last NotReady", "tainted / Final", "runs started", "ansible-playbook processes",
    "CPU", "peak RSS", "released without evidence",
]  # fmt: skip


def rack(doc: Any, name: str) -> list[str]:
    """A rack fails (``bench/rack.py``): per rack, executor and ``--max-power-fencing`` setting the
    per-node seconds from NotReady and the run costs; a rack not measured says why."""
    lines: list[str] = []
    rows = []
    for key, r in (doc.get("racks") or {}).items():
        if "not_measured" in r:
            lines += [f"`{key}`: not measured: {_v(r['not_measured'])}", ""]
            continue
        m = r.get("machine") or {}
        lines += [
            f"`{key}` measured `{_v(r.get('generated_at'))}` ({_v(r.get('command'))}); {_v(m.get('cpus'))} "
            f"CPUs, 1-min load average before/after: {_v(m.get('load_average_1m_before_after'))}; "
            f"{_v(r.get('failure'))}; {_v(r.get('fence_configuration'))}; the runner's default "
            f"`--max-power-fencing`: {_v(r.get('runner_default_max_power_fencing'))}.",
            "",
        ]
        if r.get("note"):
            lines += [f"`{key}`: {_v(r['note'])}", ""]
        for ex, settings in (r.get("executors") or {}).items():
            if "not_measured" in settings:
                lines += [f"`{key}` {ex}: not measured: {_v(settings['not_measured'])}", ""]
                continue
            own = f" ({_v(settings['fence_configuration'])})" if settings.get("fence_configuration") else ""
            for setting, e in (settings.get("by_max_power_fencing") or {"": settings}).items():
                rows.append(
                    _rack_row(
                        f"{key}, {ex}{own}, --max-power-fencing {setting} ({_v(e.get('max_power_fencing'))})",
                        e,
                    )
                )
    single = doc.get("single_node_power_cut") or {}
    if single.get("inprocess"):
        rows.append(
            _rack_row(
                f"one node's power cut, in-process ({_v(single.get('fence_configuration'))})",
                single["inprocess"],
            )
        )
    return lines + _table(_RACK_HEAD, rows)


def peers(doc: Any, name: str) -> list[str]:
    """Ours against medik8s fence-agents-remediation in the same run (``bench/rack.py --far-src``)."""
    f = doc.get("far") or {}
    if "not_measured" in f:
        return [f"FAR: not measured: {_v(f['not_measured'])}"]
    m = f.get("machine") or {}
    lines = [
        f"Measured `{_v(f.get('generated_at'))}` ({_v(f.get('command'))}), FAR tree `{_v(f.get('far_commit'))}`; "
        f'1-min load average before/after: {_v(m.get("load_average_1m_before_after"))}. FAR\'s "Final" is its '
        '`Succeeded` condition; its "runs started" column counts `fence_ipmilan` processes.',
        "",
    ]
    rows = []
    ours = f.get("ours_inprocess") or {}
    for key, val in f.items():
        if key.startswith("rack_power_loss") and val:
            rows.append(_rack_row(f"FAR, {key}", val))
            mine = ours.get(key.replace("rack_", "")) or {}
            for setting, e in (mine.get("by_max_power_fencing") or {}).items():
                rows.append(_rack_row(f"ours, in-process, --max-power-fencing {setting}", e))
            power = ours.get(key.replace("rack_", "") + "_power_only") or {}
            for setting, e in (power.get("by_max_power_fencing") or {}).items():
                rows.append(
                    _rack_row(
                        f"ours, in-process, {power.get('fence_configuration')}, --max-power-fencing {setting}",
                        e,
                    )
                )
    if f.get("single_node_power_cut"):
        rows.append(_rack_row("FAR, one node's power cut", f["single_node_power_cut"]))
    if ours.get("single_node_power_cut"):
        rows.append(_rack_row("ours, one node's power cut", ours["single_node_power_cut"]))
    return lines + _table(_RACK_HEAD, rows)


#: Where :func:`release_plot` draws (``.png`` and ``.svg`` beside each other), shown in docs/benchmarks.md.
RELEASE_PLOT = ROOT / "docs" / "img" / "rack-release"


def _node_order(name: str) -> tuple[str, int]:
    """``lab-node-12`` sorts after ``lab-node-2``."""
    stem, _, num = name.rpartition("-")
    return (stem, int(num)) if num.isdigit() else (name, -1)


def release_series(rack_doc: Any, peers_doc: Any) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """The rack (its key, ``power_loss_<N>``), our in-process phase and FAR's phase of that rack,
    when both recorded ``per_node`` times (``bench/rack.py``); else None."""
    far = (peers_doc or {}).get("far") or {}
    for key, r in ((rack_doc or {}).get("racks") or {}).items():
        ours = ((r.get("executors") or {}).get("inprocess")) or {}
        theirs = far.get(f"rack_{key}") or {}
        if ours.get("per_node") and theirs.get("per_node"):
            return key, r, theirs
    return None


def release_plot(rack_doc: Any, peers_doc: Any, out: Path = RELEASE_PLOT) -> list[Path]:
    """Draw each node's release, ours against FAR's, to ``out.png`` and ``out.svg`` (``out`` without a
    suffix; its directory is created) with matplotlib, as ``noderemedy_lab.timeline`` draws the demo's
    timelines; returns the paths written, none when :func:`release_series` finds no rack measured
    by both. One row per node (``lab-node-0`` at the top), seconds from that node's NotReady: ours
    out-of-service taint (the release) and Final, FAR's taint and Final (its ``Succeeded``), with
    each side's median taint as a dashed line. Only recorded values are drawn."""
    found = release_series(rack_doc, peers_doc)
    if found is None:
        return []
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from noderemedy_lab.timeline import save_figure

    key, rack, far_phase = found
    ours = rack["executors"]["inprocess"]
    nodes = sorted(set(ours["per_node"]) | set(far_phase["per_node"]), key=_node_order)
    fig = Figure(figsize=(11, 2.2 + 0.16 * len(nodes)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ys = {n: len(nodes) - 1 - i for i, n in enumerate(nodes)}
    blue, pale, orange = "#1565c0", "#90caf9", "#ef6c00"

    def series(phase: dict[str, Any], field: str) -> tuple[list[float], list[int]]:
        pts = [
            (t, ys[n]) for n, v in phase["per_node"].items() if n in ys and (t := v.get(field)) is not None
        ]
        return [float(t) for t, _ in pts], [y for _, y in pts]

    for n, v in ours["per_node"].items():
        if n in ys and v.get("taint_s") is not None and v.get("final_s") is not None:
            ax.plot([v["taint_s"], v["final_s"]], [ys[n]] * 2, color=pale, linewidth=1.2, zorder=1)
    for phase, field, label, style in (
        (ours, "taint_s", "ours: out-of-service taint (release)", {"marker": "o", "color": blue, "s": 22}),
        (ours, "final_s", "ours: Final (after recovery: outlet and FC port on)",
         {"marker": "o", "facecolors": "white", "edgecolors": blue, "s": 22}),
        (far_phase, "taint_s", "FAR: out-of-service taint (release)", {"marker": "^", "color": orange, "s": 26}),
        (far_phase, "final_s", "FAR: Succeeded (set with its taint; no recovery)",
         {"marker": "|", "color": "#5d4037", "s": 60}),
    ):  # fmt: skip
        xs, yy = series(phase, field)
        label += f" ({len(xs)} of {len(nodes)} nodes)"
        ax.scatter(xs, yy, label=label, zorder=3, linewidths=1, **style)
    medians = {
        who: (phase.get("taint_s") or {}).get("p50") for phase, who in ((ours, "ours"), (far_phase, "FAR"))
    }
    first = (
        min((float(v), who) for who, v in medians.items() if v is not None)[1]
        if any(medians.values())
        else ""
    )
    for colour, who in ((blue, "ours"), (orange, "FAR")):
        p50 = medians[who]
        if p50 is not None:  # the earlier median's label left of its line, so the two never overlap
            ax.axvline(float(p50), color=colour, linestyle="--", linewidth=0.9, zorder=0)
            text = f"{who} taint p50 {p50} s " if who == first else f" {who} taint p50 {p50} s"
            ax.text(float(p50), len(nodes) - 0.3, text, color=colour, fontsize=7, va="bottom",
                    ha="right" if who == first else "left")  # fmt: skip
    ax.set_yticks([ys[n] for n in nodes], nodes, fontsize=6)
    ax.set_ylim(-0.8, len(nodes) + 0.6)
    ax.set_xlim(left=0)
    ax.set_xlabel(
        "seconds from the node's NotReady (first seen by the bench); no mark: not seen within the bench's --timeout",
        fontsize=9,
    )
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#eeeeee")
    ax.set_axisbelow(True)
    fig.legend(fontsize=7, loc="lower center", ncol=2, frameon=False)
    load = (rack.get("machine") or {}).get("load_average_1m_before_after")
    fig.suptitle(
        f"A rack of {len(nodes)} nodes loses power ({key}): each node's release, ours (in-process, batched) "
        f"against medik8s fence-agents-remediation (FAR)\nmeasured {rack.get('generated_at')}, 1-min load "
        f"average before/after {load}\nours: {rack.get('fence_configuration')}; FAR: fence_ipmilan reboot",
        fontsize=9, x=0.01, ha="left",
    )  # fmt: skip
    fig.tight_layout(rect=(0, 0.45 / fig.get_figheight(), 1, 1))  # room for the legend below
    return save_figure(fig, out)  # as the demo's timelines


def release_plot_files(results: Path, out: Path = RELEASE_PLOT) -> list[Path]:
    """:func:`release_plot` from ``results``' ``rack.json`` and ``peers.json`` (absent: none drawn)."""
    docs = [
        json.loads(p.read_text()) if p.exists() else {}
        for p in (results / "rack.json", results / "peers.json")
    ]
    return release_plot(docs[0], docs[1], out)


#: file name → (title, renderer). Order of the page.
KNOWN: dict[str, tuple[str, Callable[[Any, str], list[str]]]] = {
    "e2e.json": ("End to end: the demo", e2e),
    "fencing.json": ("Fencing modules vs the fence agents", fencing),
    "drain.json": ("Drain vs `kubectl drain` and `kubernetes.core.k8s_drain`", drain),
    "watcher.json": ("Detection at 1,000 nodes", watcher),
    "watcher-detect-only.json": ("Detection at 1,000 nodes, no playbook runs (`--detect-only`)", watcher),
    "remedy-pods.json": ("The Job executor against the in-process executor", remedy_pods),
    "rack.json": ("A rack fails", rack),
    "peers.json": ("Against medik8s fence-agents-remediation", peers),
}


def render(results: Path) -> str:
    """The markdown for every ``*.json`` in ``results``."""
    files = {p.name: p for p in sorted(results.glob("*.json"))}
    out: list[str] = []
    for fname, (title, fn) in KNOWN.items():
        path = files.pop(fname, None)
        out += [f"### {title}", ""]
        if path is None:
            out += [f"`{_rel(results / fname)}`: not present.", ""]
            continue
        out += [f"From `{_rel(path)}`.", ""]
        out += fn(json.loads(path.read_text()), fname)
        out.append("")
    for fname, path in files.items():
        out += [f"### `{fname}`", "", f"`{_rel(path)}`: no table for this file in bench/tables.py.", ""]
    return "\n".join(out).rstrip() + "\n"


def update(doc_path: Path, tables: str) -> None:
    """Replace the marked block of ``doc_path`` with ``tables``; SystemExit(2) without markers."""
    text = doc_path.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        print(f"{doc_path}: markers {BEGIN} ... {END} not found", file=sys.stderr)
        raise SystemExit(2)
    new = text[: start + len(BEGIN)] + "\n" + tables + text[end:]
    doc_path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="directory of the JSON files")
    p.add_argument("--update", type=Path, metavar="FILE", help="rewrite the marked block of FILE")
    p.add_argument("--plot", type=Path, default=RELEASE_PLOT, metavar="PATH",
                   help="with --update: where the per-node release plot goes (.png and .svg)")  # fmt: skip
    args = p.parse_args(argv)
    tables = render(args.results)
    if args.update:
        update(args.update, tables)
        for path in release_plot_files(args.results, args.plot):
            print(f"wrote {_rel(path)}")
    else:
        sys.stdout.write(tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
