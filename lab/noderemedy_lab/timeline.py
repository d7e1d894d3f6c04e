"""The demo's timeline of one failover, recorded and drawn: what each reading of the cluster and
the peers said, on one time axis that starts at the failure.

Recording (:class:`Recorder`) keeps only changes: for each lane a list of ``[seconds, value]``
pairs, ``seconds`` since the failure (negative: read before it), ``value`` what that reading said
until the next pair. The lanes (:data:`LANES`):

* ``power``: the node's power as its BMC has it, what a fence's read-back sees (``"on"``,
  ``"off"``);
* ``ready``: the Node's Ready condition (``"True"``, ``"False"``, ``"Unknown"``);
* ``nodefence``: the NodeFence's ``step status`` (``None`` while there is no NodeFence);
* ``fc_port``: the node's FC switch port as the switch has it, what a fence's read-back sees
  (IF-MIB ifAdminStatus: ``"up"``, ``"down"``);
* ``taint``: whether the Node carries ``node.kubernetes.io/out-of-service`` (``True``/``False``).

The writers' lines on the shared storage come from the shared file itself
(:func:`writer_spans`): the old writer (``web-0`` on the failed node) and the new one (``web-0``
on another node), as ``[start, end]`` spans of lines at most :data:`WRITE_GAP_S` apart.

:func:`render` draws a recorded timeline (the ``scenarios`` entries of ``bench/results/e2e.json``)
to PNG and SVG with matplotlib. It only reads what was recorded: nothing is interpolated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Lanes of a recorded timeline, top to bottom in the picture, with their labels.
LANES: dict[str, str] = {
    "power": "power (BMC state)",
    "ready": "Node Ready",
    "nodefence": "NodeFence step",
    "fc_port": "FC port (switch state)",
    "taint": "out-of-service taint",
}
#: The writers' lanes (from the shared file), below the others.
WRITER_LANES: dict[str, str] = {
    "old": "old writer (failed node)",
    "new": "new writer (other node)",
}
#: Lines of one writer at most this many seconds apart are drawn as one span (it writes every 0.1 s).
WRITE_GAP_S = 1.0
#: Seconds of the writers' lines kept before the failure.
BEFORE_S = 5.0

#: Milestones marked on the time axis (case names of the demo's timeline), with their labels.
MARKS: dict[str, str] = {
    "node_notready": "NotReady",
    "nodefence_created": "NodeFence",
    "fc_port_fenced": "FC fenced",
    "pod_running_elsewhere": "web-0 Running elsewhere",
    "out_of_service_taint": "taint",
    "node_ready": "Ready",
    "final": "Final",
}

_GREEN, _RED, _GREY, _ORANGE = "#4caf50", "#d32f2f", "#bdbdbd", "#ff9800"
_COLOURS: dict[str, dict[Any, str]] = {
    "power": {"on": _GREEN, "off": _RED},
    "ready": {"True": _GREEN, "False": _RED, "Unknown": _ORANGE},
    "fc_port": {"up": _GREEN, "down": _RED},
    "taint": {True: "#7b1fa2"},
}
_STEP_COLOURS = {
    "Isolation": "#1976d2",
    "PowerManagement": "#ef6c00",
    "Recovery": "#00897b",
    "Done": "#5e35b1",
    "Final": "#757575",
}
_WRITER_COLOURS = {"old": "#455a64", "new": "#0288d1"}


class Recorder:
    """Changes of each lane, in seconds since the failure.

    ``observe(t, {lane: value})`` appends ``[t, value]`` to a lane only when the value differs from
    the lane's last one; :meth:`to_dict` returns ``{lane: [[seconds, value], ...]}`` (JSON-able;
    seconds rounded to 0.01)."""

    def __init__(self) -> None:
        self.lanes: dict[str, list[list[Any]]] = {lane: [] for lane in LANES}

    def observe(self, t: float, values: Mapping[str, Any]) -> None:
        """Record the reading at ``t`` seconds since the failure. ValueError for a lane not in
        :data:`LANES`."""
        for lane, value in values.items():
            if lane not in self.lanes:
                raise ValueError(f"timeline lane {lane!r}: not one of {', '.join(LANES)}")
            series = self.lanes[lane]
            if not series or series[-1][1] != value:
                series.append([round(t, 2), value])

    def to_dict(self) -> dict[str, list[list[Any]]]:
        return {lane: [list(p) for p in series] for lane, series in self.lanes.items()}


def writer_spans(times: Iterable[float], t_fail: float, since: float = -BEFORE_S) -> list[list[float]]:
    """A writer's lines (uptime-clock seconds, in file order) as ``[[start, end], ...]`` in seconds
    since ``t_fail``: consecutive lines at most :data:`WRITE_GAP_S` apart form one span; lines
    before ``since`` seconds are left out."""
    spans: list[list[float]] = []
    for ts in times:
        t = round(ts - t_fail, 2)
        if t < since:
            continue
        if spans and t - spans[-1][1] <= WRITE_GAP_S:
            spans[-1][1] = max(spans[-1][1], t)
        else:
            spans.append([t, t])
    return spans


def intervals(series: list[list[Any]], end: float) -> list[tuple[float, float, Any]]:
    """A lane's changes as ``(start, end, value)``: each value holds until the next change, the
    last one until ``end`` (seconds since the failure)."""
    out = []
    for i, (t, value) in enumerate(series):
        stop = series[i + 1][0] if i + 1 < len(series) else end
        if stop > t:
            out.append((float(t), float(stop), value))
    return out


def _label(lane: str, value: Any) -> str:
    """The text drawn in a lane's bar: the NodeFence's step (or its resting status), the taint's
    effect, or the value itself."""
    if lane == "taint":
        return "NoExecute"
    if lane == "nodefence":
        step, _, status = str(value).partition(" ")
        shown = status if status in ("Done", "Final", "Error") else step
        return shown.replace("PowerManagement", "PowerMgmt")
    return str(value)


def _step_colour(value: str | None) -> str | None:
    if not value:
        return None
    step, _, status = value.partition(" ")
    return _STEP_COLOURS.get(status) or _STEP_COLOURS.get(step, _GREY)


def render(scenario: Mapping[str, Any], title: str, out: Path) -> list[Path]:
    """Draw one recorded failover to ``out.png`` and ``out.svg`` (``out`` without a suffix; its
    directory is created); returns the two paths.

    ``scenario``: one entry of e2e.json's ``scenarios``: ``trace`` (:meth:`Recorder.to_dict`),
    ``writers`` (``{"old": spans, "new": spans}`` from :func:`writer_spans`), ``timeline``
    (milestone -> seconds), ``trace_end_s``, and the figures ``pod_running_elsewhere_s``,
    ``overlapping_writes``. KeyError naming the field when ``trace`` or ``writers`` is missing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    for field in ("trace", "writers"):
        if field not in scenario:
            raise KeyError(f"timeline: the scenario has no {field!r} (recorded by the demo)")
    trace: Mapping[str, list[list[Any]]] = scenario["trace"]
    writers: Mapping[str, list[list[float]]] = scenario["writers"]
    marks: Mapping[str, float] = scenario.get("timeline") or {}
    starts = [s[0][0] for s in trace.values() if s] + [w[0][0] for w in writers.values() if w]
    ends = [*marks.values(), *(sp[1] for w in writers.values() for sp in w)]
    end = float(scenario.get("trace_end_s") or max(ends, default=1.0))
    lo = min([0.0, *starts]) - 0.5
    hi = max(end, *ends) + 1.0 if ends else end + 1.0

    rows = [*LANES.items(), *WRITER_LANES.items()]
    fig = Figure(figsize=(11, 5.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    n = len(rows)
    for i, (lane, _name) in enumerate(rows):
        y = n - 1 - i
        if lane in WRITER_LANES:
            spans = writers.get(lane) or []
            bars = [(s, max(e - s, 0.15)) for s, e in spans]
            ax.broken_barh(bars, (y - 0.3, 0.6), facecolors=_WRITER_COLOURS[lane])
            continue
        for start, stop, value in intervals(list(trace.get(lane) or []), hi):
            colour = _step_colour(value) if lane == "nodefence" else _COLOURS[lane].get(value)
            if colour is None:
                continue
            ax.broken_barh([(start, stop - start)], (y - 0.3, 0.6), facecolors=colour, edgecolor="white")
            text = _label(lane, value)
            # about 6 px a character at 7 pt, on an axis about 880 px wide
            if (stop - start) * 880 / (hi - lo) >= 6 * len(text) + 4:
                ax.text((start + stop) / 2, y, text, ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(n), [label for _lane, label in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("seconds since the failure", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.axvline(0, color="black", linewidth=1.2)
    ticks, names = [0.0], ["failure"]
    for case, label in MARKS.items():
        if case not in marks:
            continue
        t = float(marks[case])
        strong = case == "pod_running_elsewhere"
        ax.axvline(t, color="#c62828" if strong else "#9e9e9e", linestyle="-" if strong else ":", linewidth=1)
        ticks.append(t)
        names.append(f"{label} {t:.1f} s")
    top = ax.secondary_xaxis("top")
    top.set_xticks(ticks, names, rotation=35, ha="left", fontsize=7, rotation_mode="anchor")
    for tick in top.get_xticklabels():
        if tick.get_text().startswith("web-0"):
            tick.set_color("#c62828")
    running = scenario.get("pod_running_elsewhere_s")
    overlap = scenario.get("overlapping_writes")
    sub = []
    if running is not None:
        sub.append(f"web-0 Running elsewhere {float(running):.1f} s after the failure")
    if overlap is not None:
        sub.append(f"{overlap} overlapping writes")
    fig.suptitle(title + (": " + ", ".join(sub) if sub else ""), fontsize=10, x=0.01, ha="left")
    ax.grid(axis="x", color="#eeeeee")
    ax.set_axisbelow(True)
    fig.tight_layout()
    return save_figure(fig, out)


def save_figure(fig: Any, out: Path) -> list[Path]:
    """Write the matplotlib figure ``fig`` as ``out`` with the suffixes ``.png`` and ``.svg``
    (folder created) and return those two paths. The SVG keeps its text as text (searchable,
    smaller) and carries no date, so the same data gives the same file."""
    from matplotlib import rc_context

    out.parent.mkdir(parents=True, exist_ok=True)
    paths = [out.with_suffix(".png"), out.with_suffix(".svg")]
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "noderemedy"}):
        for path in paths:
            fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    return paths
