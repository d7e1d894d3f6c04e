"""The lab's observable workload: a StatefulSet whose one pod, a real container on a real node,
appends ``<pod uid> <seconds since boot>`` lines to storage shared by every real node, and the
reading of that file afterwards. It proves the promise by observation: when every line of the old
writer precedes the new writer's first line, the two never ran against the storage at once.

The writer opens the file for each line (``>>``), so a fenced storage path (the FC port's hook
unmounts the node's shared mount, realnode.py) fails its next write instead of going on through a
descriptor it already holds. Used by the demo (``noderemedy_lab.demo``) and the real-node tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .images import BUSYBOX_IMAGE
from .realnode import REAL_TAINT, SHARED_MOUNT

#: one line per 0.1 s to /shared/data/$LOG: "<pod uid> <seconds since boot>"
WRITER = (
    "while true; do read up _ < /proc/uptime; "
    'echo "$POD_UID $up" >> /shared/data/$LOG || echo "write failed $up"; sleep 0.1; done'
)


def prefer_node(preferred: str, allowed: list[str]) -> dict:
    """A pod ``affinity`` that allows only the nodes ``allowed`` and prefers ``preferred``: the pod
    starts on ``preferred`` and, once that node is gone, can only move to the others."""

    def hostname_in(nodes: list[str]) -> dict:
        return {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}

    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [hostname_in(allowed)]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": hostname_in([preferred])}
            ],
        }
    }


def writer_statefulset(
    namespace: str, preferred: str, allowed: list[str], log: str, name: str = "web"
) -> dict:
    """A one-replica StatefulSet ``namespace/name`` (label ``app: <name>``) of the writer on the real
    nodes ``allowed``, preferring ``preferred``; it writes to ``<shared dir>/<log>``. Update
    strategy OnDelete: a change of the preference never replaces the running pod itself."""
    pod = {
        "affinity": prefer_node(preferred, allowed),
        "tolerations": [{**REAL_TAINT, "operator": "Equal"}],
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": name,
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", WRITER],
                "env": [
                    {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                    {"name": "LOG", "value": log},
                ],
                "volumeMounts": [
                    {"name": "shared", "mountPath": "/shared", "mountPropagation": "HostToContainer"}
                ],
            }
        ],
        "volumes": [{"name": "shared", "hostPath": {"path": SHARED_MOUNT, "type": "Directory"}}],
    }
    return statefulset(namespace, name, pod, updateStrategy={"type": "OnDelete"})


def statefulset(namespace: str, name: str, pod_spec: dict, **spec: Any) -> dict:
    """A one-replica StatefulSet manifest ``namespace/name`` (label ``app: <name>``) running
    ``pod_spec``; ``spec`` adds fields such as ``volumeClaimTemplates``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
            **spec,
        },
    }


def writes(path: Path) -> dict[str, list[float]]:
    """The shared file read back: pod uid -> the timestamps (seconds since boot) of its lines, in
    file order; {} when the file does not exist yet."""
    out: dict[str, list[float]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        uid, _, ts = line.partition(" ")
        try:
            out.setdefault(uid, []).append(float(ts))
        except ValueError:
            continue  # a line cut short by the fence itself
    return out


def uptime() -> float:
    """Seconds since boot (``/proc/uptime``), the clock the writers stamp their lines with."""
    return float(Path("/proc/uptime").read_text().split()[0])


def failover_figures(
    lines: dict[str, list[float]], old: str, new: str, t_fail: float, node: str, running_elsewhere: float
) -> dict[str, Any]:
    """The figures of one failover, in seconds since the failure ``t_fail`` (uptime clock):
    ``node``, ``pod_running_elsewhere_s``, ``overlapping_writes`` (the old writer's lines at or
    after the new writer's first), ``old_writer_last_s``, ``new_writer_first_s``. KeyError if
    either writer has no line."""
    overlapping = [t for t in lines[old] if t >= lines[new][0]]
    return {
        "node": node,
        "pod_running_elsewhere_s": round(running_elsewhere - t_fail, 2),
        "overlapping_writes": len(overlapping),
        "old_writer_last_s": round(lines[old][-1] - t_fail, 2),
        "new_writer_first_s": round(lines[new][0] - t_fail, 2),
    }
