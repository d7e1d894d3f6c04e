"""What the kwok-lab benchmarks (bench/watcher.py, bench/rack.py, bench/remedy_pods.py) share: the
bench's own watches of Nodes and NodeFences on one monotonic clock (:class:`Observer`), the
runner's probes (resident memory from ``/proc``, one sample of its ``/metrics``, the most
``ansible-playbook`` processes at once from ansible-runner's job events), the fence ConfigMaps of
a lab without devices, the nearest-rank percentile and Kubernetes' default node timing.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, watch

ROOT = Path(__file__).resolve().parent.parent
CRD = ROOT / "deploy" / "crds" / "remediation.noderemedy.io_nodefences.yaml"
#: Kubernetes' defaults (kubelet nodeLeaseDurationSeconds 40, controller-manager
#: --node-monitor-grace-period 40s), not the lab's fast 10/20 s: 1,000 kwok nodes and the runner's
#: playbook runs share 2 cores, and with 20 s of grace a late heartbeat turned hundreds of healthy
#: nodes NotReady (run of 2026-11-23: 580 unhealthy, the storm guard rightly stopped fencing)
UPSTREAM_TIMING: dict[str, int] = {"node_monitor_grace_period": 40, "node_lease_seconds": 40}
RUNNER = Path(sys.executable).parent / "noderemedy-runner"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))
    return ordered[rank - 1]


#: Niceness of the bench's watches (the measuring clock), above the lab's -5.
OBSERVER_NICE = -10


class Observer:
    """This script's own watches: when each node was first seen not Ready, and when each
    NodeFence was first seen (monotonic seconds)."""

    def __init__(self, api: client.ApiClient, watched: set[str]) -> None:
        self.api = api
        self.watched = watched
        self.not_ready: dict[str, float] = {}  # first Ready -> not Ready seen
        self.last_not_ready: dict[str, float] = {}  # latest Ready -> not Ready seen before its NodeFence
        self.transitions: dict[str, int] = {}  # Ready -> not Ready transitions seen
        self.down: dict[str, bool] = {}
        self.fenced: dict[str, float] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def _run(self, list_call: Any, on_event: Any) -> None:
        while not self.stop.is_set():
            try:
                doc = json.loads(list_call(_preload_content=False).data)
                for obj in doc.get("items") or []:
                    on_event(obj)
                rv = doc["metadata"]["resourceVersion"]
                w = watch.Watch()
                for ev in w.stream(list_call, resource_version=rv, timeout_seconds=20, deserialize=False):
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        on_event(ev["object"])
                    if self.stop.is_set():
                        return
            except Exception as exc:  # relist
                print(f"bench watch: {exc}; relisting", file=sys.stderr)
                time.sleep(0.5)

    def _node(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name not in self.watched:
            return
        ready = next(
            (c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), None
        )
        if ready is None:
            return
        now = time.monotonic()
        with self.lock:
            was_down = self.down.get(name, False)
            is_down = ready["status"] != "True"
            self.down[name] = is_down
            if is_down and not was_down:
                self.not_ready.setdefault(name, now)
                self.transitions[name] = self.transitions.get(name, 0) + 1
                if name not in self.fenced:
                    self.last_not_ready[name] = now

    def _fence(self, obj: dict[str, Any]) -> None:
        node = obj["spec"]["node"]
        with self.lock:
            self.fenced.setdefault(node, time.monotonic())

    def start(self) -> None:
        core = client.CoreV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        threading.Thread(target=self._run, args=(core.list_node, self._node), daemon=True).start()
        threading.Thread(
            target=self._run,
            args=(
                lambda **kw: custom.list_cluster_custom_object(
                    "remediation.noderemedy.io", "v1alpha1", "nodefences", **kw
                ),
                self._fence,
            ),
            daemon=True,
        ).start()


def fence_objects(nodes: list[str], secret: bool = True) -> dict[str, Any]:
    """A kubectl List: one fence ConfigMap per node in the seed's format (isolation ipmi-off, power
    management ipmi-off, recovery ipmi-on) and the template and Secret they name. The template
    points at a closed port: the stub playbooks never reach it. ``secret`` False: the template
    names a Secret that does not exist (a real run fails in its first fencing module)."""
    name = "bench-bmc" if secret else "bench-no-such-secret"
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fence-method-template-bench"},
         "data": {"template.properties": f"type=ipmi\naddress=127.0.0.1:9\nsecret={name}\ncipher=3\n"}},
    ]  # fmt: skip
    if secret:
        items.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                      "stringData": {"username": "bench", "password": "bench-stub"}})  # fmt: skip
    for node in nodes:
        items.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"fence-config-{node}"},
                "data": {
                    "config.properties": f"node_name={node}\nisolation=ipmi-off\npower_management=ipmi-off\nrecovery=ipmi-on\n",
                    "fence-method-ipmi-off": "template=fence-method-template-bench\naction=off",
                    "fence-method-ipmi-on": "template=fence-method-template-bench\naction=on",
                },
            }
        )
    return {"apiVersion": "v1", "kind": "List", "items": items}


def overlap_from_artifacts(runs_dir: Path) -> int:
    """The most ``ansible-playbook`` processes that ran at once, from ansible-runner's own job
    events (each run: its first to its last event's ``created`` time), independent of the
    executor's count."""
    edges: list[tuple[float, int]] = []
    for events in runs_dir.glob("*/*/artifacts/*/job_events"):
        times = [
            datetime.fromisoformat(json.loads(f.read_text())["created"]).timestamp()
            for f in events.glob("*.json")
        ]
        if times:
            edges += [(min(times), 1), (max(times), -1)]
    most = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same time
        now += step
        most = max(most, now)
    return most


def scrape(url: str, name: str) -> float:
    """One sample's value from the runner's /metrics (NaN when absent or unreachable)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in kB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)
