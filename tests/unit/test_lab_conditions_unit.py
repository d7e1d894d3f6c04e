"""noderemedy_lab.conditions.hold against a scripted stand-in for kubectl (no cluster): the hold
returns only once kwok's heartbeats have stopped, counting one kwok scheduled before it saw the
annotation, and at once on a node held already."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from noderemedy_lab import conditions
from noderemedy_lab.config import HOLD_CONDITIONS_ANNOTATION


class FakeKubectl:
    """``kubectl get node`` answers the heartbeat ``beats(reads)`` gives for its n-th read and the
    annotation once ``annotate`` ran; every call is recorded."""

    def __init__(self, beats: Callable[[int], str], held: bool = False) -> None:
        self.beats, self.held, self.reads, self.calls = beats, held, 0, []
        self.config = SimpleNamespace(node_heartbeat_seconds=0.1)  # the longest delay: 1.225 s

    def kubectl(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        self.calls.append(args[0])
        if args[0] == "annotate":
            self.held = True
            return subprocess.CompletedProcess(list(args), 0, "", "")
        beat = self.beats(self.reads)
        self.reads += 1
        meta: dict[str, Any] = {"annotations": {HOLD_CONDITIONS_ANNOTATION: "true"}} if self.held else {}
        node = {"metadata": meta, "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": beat}]}}
        return subprocess.CompletedProcess(list(args), 0, json.dumps(node), "")


def test_the_hold_waits_out_a_heartbeat_scheduled_before_kwok_saw_it() -> None:
    # read 0 before the annotation; the scheduled heartbeat plays at read 3, and one more that kwok
    # scheduled from its stale cache at read 6; then none
    lab = FakeKubectl(lambda n: "t0" if n < 3 else "t1" if n < 6 else "t2")
    conditions.hold(lab, "lab-node-1")
    assert lab.calls[:2] == ["get", "annotate"]
    # it returned only after the quiet period that followed the second heartbeat (0.2 s polls)
    assert lab.reads >= 6 + 5, lab.reads


def test_a_node_held_already_is_not_annotated_or_waited_for() -> None:
    lab = FakeKubectl(lambda n: "t0", held=True)
    conditions.hold(lab, "lab-node-1")
    assert lab.calls == ["get"]
