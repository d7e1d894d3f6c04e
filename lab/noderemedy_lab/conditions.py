"""Node conditions other than Ready on the lab's kwok nodes, held as a test sets them.

kwok's node-heartbeat Stage rewrites every condition kwok knows (Ready, MemoryPressure,
DiskPressure, PIDPressure, NetworkUnavailable) to its healthy default on each heartbeat (every
``node_heartbeat_seconds`` plus jitter), so a ``DiskPressure=True`` written by a test would last a
few seconds (and node-initialize turns a Ready=False back to True). :func:`hold` annotates the
node with :data:`~noderemedy_lab.config.HOLD_CONDITIONS_ANNOTATION`, which the lab's node Stages
exclude (:func:`noderemedy_lab.kube.node_stages`): the status heartbeat stops, kwok's node Lease
renewals go on, and the node lifecycle controller keeps the node Ready on those (the Lease is the
heartbeat it reads). The conditions then stay as :func:`set_conditions` writes them, as a kubelet's
eviction manager or node-problem-detector would write them. :func:`release` removes the
annotation; kwok's heartbeat then resumes and resets kwok's own conditions (not the others).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from .config import HOLD_CONDITIONS_ANNOTATION
from .procs import ComponentError

#: Seconds :func:`hold` waits at most for kwok's heartbeats to stop (it returns as soon as they
#: have): on an idle machine the one kwok had scheduled plays within ``node_heartbeat_seconds``
#: times 2.25, later when kwok is starved of CPU (a test suite's parallel labs).
HOLD_WAIT_SECONDS = 60.0


def _node(lab: Any, node: str) -> dict[str, Any]:
    out = lab.kubectl("get", "node", node, "-o", "json", check=True)
    return dict(json.loads(out.stdout))


def _heartbeat(obj: dict[str, Any]) -> str:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("lastHeartbeatTime"))
    return ""


def hold(lab: Any, node: str) -> None:
    """Stop kwok's status heartbeat of kwok node ``node`` (it stays Ready on its Lease). kwok checks
    the Stage's selector when it schedules a heartbeat, not when it plays it, and reads the node
    from its own watch, which lags under load: a heartbeat scheduled before kwok saw the annotation
    would reset the conditions a test writes next. So this returns once a heartbeat has played
    after the annotation and none followed it within the longest heartbeat delay
    (``node_heartbeat_seconds`` times 2.25 plus 1 s); at once when the node is held already; after
    :data:`HOLD_WAIT_SECONDS` at the most (a node kwok does not heartbeat: powered off). Raises
    ComponentError when kubectl fails."""
    obj = _node(lab, node)
    if (obj.get("metadata", {}).get("annotations") or {}).get(HOLD_CONDITIONS_ANNOTATION) == "true":
        return
    last = _heartbeat(obj)
    out = lab.kubectl("annotate", "node", node, f"{HOLD_CONDITIONS_ANNOTATION}=true", "--overwrite")
    if out.returncode != 0:
        raise ComponentError("kubectl", f"annotate node {node}: {out.stderr.strip()}")
    longest = lab.config.node_heartbeat_seconds * 2.25 + 1.0
    deadline = time.monotonic() + HOLD_WAIT_SECONDS
    quiet_from: float | None = None
    while time.monotonic() < deadline:
        beat = _heartbeat(_node(lab, node))
        if beat != last:
            last, quiet_from = beat, time.monotonic()
        elif quiet_from is not None and time.monotonic() - quiet_from >= longest:
            return
        time.sleep(0.2)


def set_conditions(lab: Any, node: str, conditions: dict[str, str], reason: str = "LabCondition") -> None:
    """Write node conditions ``conditions`` (type → ``True``/``False``/``Unknown``) on ``node``'s
    status (a strategic merge patch: the other conditions stay), each with ``reason`` and the
    transition time now. Hold the node first (:func:`hold`) for kwok's own condition types.
    Raises ComponentError when the API refuses the patch."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {
        "status": {
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": reason,
                    "message": f"set by the lab: {t}={s}",
                    "lastTransitionTime": now,
                    "lastHeartbeatTime": now,
                }
                for t, s in conditions.items()
            ]
        }
    }
    out = lab.kubectl(
        "patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(patch)
    )
    if out.returncode != 0:
        raise ComponentError("kubectl", f"patch node {node} conditions: {out.stderr.strip()}")


def release(lab: Any, node: str) -> None:
    """Remove the hold of :func:`hold`: kwok heartbeats ``node`` again (resetting its own
    condition types to their defaults). Raises ComponentError when kubectl fails."""
    out = lab.kubectl("annotate", "node", node, f"{HOLD_CONDITIONS_ANNOTATION}-")
    if out.returncode != 0:
        raise ComponentError("kubectl", f"annotate node {node}: {out.stderr.strip()}")


__all__ = ["hold", "release", "set_conditions"]
