"""One host's part of a batch (:mod:`noderemedy_runner.batches`): its outcome, counted from its
own job events as a run of its own would have given it, and its artifacts, written into its custom
resource's own private data dir under the run's ident, so that a restart finds them where it finds
those of a run of its own (docs/runner.md "What a restart repeats"). Pure, apart from the
functions that write or remove files."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from noderemedy_runner.outcomes import RunOutcome, outcome_from_events

log = logging.getLogger(__name__)
#: ansible-playbook's exit codes: a host failed, a host was unreachable.
RC_FAILED, RC_UNREACHABLE = 2, 4


def host_stats(host: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A ``playbook_on_stats`` event for ``host`` alone, counted from its own task events (what
    Ansible's recap says of that host: ``ok`` includes ``changed``; ``failures`` leaves out
    ignored errors; ``dark`` the unreachable tasks). Pure."""
    ok = changed = failures = dark = skipped = 0
    for ev in events:
        kind, data = ev.get("event"), ev.get("event_data") or {}
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            ok += 1
            changed += 1 if isinstance(res, Mapping) and res.get("changed") else 0
        elif kind == "runner_on_failed":
            if data.get("ignore_errors"):
                ok += 1
            else:
                failures += 1
        elif kind == "runner_on_unreachable":
            dark += 1
        elif kind == "runner_on_skipped":
            skipped += 1
    counts = {"ok": ok, "changed": changed, "failures": failures, "dark": dark, "skipped": skipped}
    return {"event": "playbook_on_stats", "event_data": {k: {host: v} for k, v in counts.items()}}


def host_outcome(
    ident: str,
    host: str,
    events: Sequence[Mapping[str, Any]],
    end: str | None,
    batch_status: str | None,
    seconds: float,
    artifact_dir: str = "",
) -> RunOutcome:
    """The :class:`~noderemedy_runner.outcomes.RunOutcome` of one host of a batch, as a run of its
    own would have given it: ``events`` are the host's task events (a stats event of its own is
    added, :func:`host_stats`), ``end`` how they ended
    (:func:`~noderemedy_runner.batches.ends_host`; None: they did not, the run ended first with
    ``batch_status``: ``timeout``, ``canceled``, ``error``, ...). Pure."""
    all_events = [*events, host_stats(host, events)]
    notes: tuple[str, ...] = ()
    if end == "done":
        status, rc = "successful", 0  # unless a task failed (ignored errors do not count), below
    elif end == "failed":
        status, rc = "failed", RC_FAILED
    elif end == "unreachable":
        status, rc = "failed", RC_UNREACHABLE
    else:
        status, rc = batch_status or "error", None
        if status == "successful":  # the run ended without this host going through the play
            status = "failed"
            notes = ("the batch ended before this host's last task",)
    outcome = outcome_from_events(
        ident, status, rc, all_events, seconds=seconds, artifact_dir=artifact_dir, notes=notes
    )
    if end == "done" and outcome.failed:
        return replace(outcome, status="failed", rc=RC_FAILED)
    return outcome


def start_host_artifacts(art: Path) -> None:
    """Begin one host's artifacts (``<private data dir>/artifacts/<ident>/job_events/``, emptied):
    the run is under way, as ansible-runner's own artifacts say at a run's start."""
    try:
        if art.exists():
            shutil.rmtree(art, ignore_errors=True)
        (art / "job_events").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("artifacts %s: %s", art, exc)


def write_host_event(art: Path, event: Mapping[str, Any], n: int) -> None:
    """One of the host's job events, as ``job_events/<n>-<uuid>.json`` (n: its place among the
    host's events)."""
    try:
        (art / "job_events" / f"{n}-{event.get('uuid') or n}.json").write_text(json.dumps(event))
    except OSError as exc:
        log.warning("artifacts %s: %s", art, exc)


def finish_host_artifacts(
    art: Path, host: str, events: Sequence[Mapping[str, Any]], outcome: RunOutcome
) -> None:
    """End one host's artifacts in ``art`` (``<private data dir>/artifacts/<ident>``) as those of a
    run of its own: its task events (written as they came, rewritten here when missing), a
    ``playbook_on_stats`` of its own (:func:`host_stats`), ``rc``, then ``status`` last, so a
    process killed while writing leaves artifacts :meth:`~noderemedy_runner.executor.Executor.recover`
    discards (as it does those of a ``canceled`` run). Raises OSError."""
    jobs = art / "job_events"
    jobs.mkdir(parents=True, exist_ok=True)
    for n, ev in enumerate(events, 1):
        path = jobs / f"{n}-{ev.get('uuid') or n}.json"
        if not path.exists():
            path.write_text(json.dumps(ev))
    (jobs / f"{len(events) + 1}-stats.json").write_text(json.dumps(host_stats(host, events)))
    (art / "rc").write_text(str(outcome.rc if outcome.rc is not None else -1))
    (art / "status").write_text(outcome.status)


def rotate_batches(batches_dir: Path, keep: int) -> None:
    """Remove all but the ``keep`` newest batch data dirs under ``batches_dir`` (by mtime; a
    batch in flight is among the newest). Each host's own artifacts live in its custom resource's
    data dir and are rotated there."""
    try:
        dirs = sorted((d for d in batches_dir.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    except OSError:
        return
    for old in dirs[: max(0, len(dirs) - max(1, keep))]:
        shutil.rmtree(old, ignore_errors=True)


__all__ = [
    "RC_FAILED", "RC_UNREACHABLE", "finish_host_artifacts", "host_outcome", "host_stats",
    "rotate_batches", "start_host_artifacts", "write_host_event",
]  # fmt: skip
