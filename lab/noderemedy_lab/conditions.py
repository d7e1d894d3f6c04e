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


def _heartbeat(lab: Any, node: str) -> str:
    out = lab.kubectl("get", "node", node, "-o", "json", check=True)
    for cond in json.loads(out.stdout).get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("lastHeartbeatTime"))
    return ""


def hold(lab: Any, node: str) -> None:
    """Stop kwok's status heartbeat of kwok node ``node`` (it stays Ready on its Lease). Returns
    once the heartbeat kwok had already scheduled has played (it checks the Stage's selector when
    it schedules, not when it plays), or the longest heartbeat delay
    (``node_heartbeat_seconds`` times 2.25) has passed without one. Raises ComponentError when
    kubectl fails."""
    before = _heartbeat(lab, node)
    out = lab.kubectl("annotate", "node", node, f"{HOLD_CONDITIONS_ANNOTATION}=true", "--overwrite")
    if out.returncode != 0:
        raise ComponentError("kubectl", f"annotate node {node}: {out.stderr.strip()}")
    deadline = time.monotonic() + lab.config.node_heartbeat_seconds * 2.25 + 1.0
    while time.monotonic() < deadline and _heartbeat(lab, node) == before:
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
