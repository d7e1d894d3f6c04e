"""The demo (README command one): a node dies, the cluster heals itself, on the embedded lab, with
the runner deployed as users deploy it.

1. Start the lab with three real nodes (kubelet + containerd + runc, each in its own network
   namespace) beside the kwok nodes, building the control plane the first time (minutes, with
   progress).
2. Import the remediation pod image (built by ``./dev image``) into the real nodes and deploy the
   runner with ``kubectl apply -k`` through the lab's overlay of deploy/, with a Configuration of
   a short detection period; three replicas, one per real node, one leader (deploy/'s layout:
   a failure of the leader's node right after another node's still finds a Ready follower).
3. Install the fence configuration of every node in the runner's namespace (ConfigMaps in the
   seed's format: isolation = the node's FC port off, power management = IPMI off then on,
   recovery = FC port on; credentials in Secrets). The runner pods reach the BMCs and the FC
   switch through the lab's relays on the real nodes' bridge.
4. Run a StatefulSet ``web``: its one pod, a real container, appends ``<pod uid> <seconds since
   boot>`` lines to storage shared by the real nodes (:mod:`noderemedy_lab.workload`).
5. Two scenarios, each on the real node that runs ``web-0`` and not the leader (the runner
   survives the failure it remediates): **power cut** through the node's BMC, then **network
   partition** (the node's link down: its kubelet and its writer keep running until the fence
   cuts the FC port, and its BMC's power cycle brings the link back as a reboot does). Each step is
   printed live with its time since the failure: NotReady, NodeFence created by the detector, FC
   port fenced, out-of-service taint, ``web-0`` Running on the other node, power off verified and
   back on, node Ready, FC port restored, taint removed, NodeFence Final.
6. Read the shared file: the old writer's last line must precede the new writer's first line
   (zero overlapping writes).

Exit status 0 only if every step of both scenarios happened (each within ``--timeout`` seconds)
and no write overlapped; the figures go to ``bench/results/e2e.json``: ``cases`` (the power cut's
timeline: ``case``, ``seconds``) and ``scenarios`` (``power_cut``, ``partition``: ``node``,
``pod_running_elsewhere_s``, ``overlapping_writes``, ``old_writer_last_s``,
``new_writer_first_s``, ``timeline``, and what the pictures are drawn from: ``trace``, every
change of the node's power, Ready, NodeFence step, FC port and taint, ``trace_end_s``, and
``writers``, the spans of the old and new writers' lines; :mod:`noderemedy_lab.timeline`); the
pictures go to ``build/demo/timeline-<scenario>.png`` and ``.svg`` (``--results``,
``--pictures``). Nothing here fakes a step: each milestone is read from the API server, the device
peers' own state or the shared file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from noderemedy_runner.machines.actions import OUT_OF_SERVICE_TAINT_KEY as OUT_OF_SERVICE

from .bmc import power_sets
from .config import LabConfig
from .demo_output import PICTURES, RESULTS, write_pictures, write_results
from .lab import Lab
from .procs import ComponentError
from .realnode import SHARED_MOUNT
from .timeline import Recorder, writer_spans
from .workload import failover_figures, prefer_node, uptime, writer_statefulset, writes

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "noderemedy-system"  # the runner's own (deploy/namespace.yaml)
APP_NAMESPACE = "demo"
#: The runner's replicas and the lab's real nodes, one replica each: deploy/'s own count (the lab's
#: overlay lowers it to the test lab's two real nodes; docs/operations.md "Availability of the
#: runner itself").
REPLICAS = next(
    int(d["spec"]["replicas"])
    for d in yaml.safe_load_all((ROOT / "deploy" / "runner" / "deployment.yaml").read_text())
    if d and d["kind"] == "Deployment"
)
OVERLAY = ROOT / "lab" / "deploy"
IMAGE_INFO = ROOT / "build" / "image" / "image.json"
LOG_NAME = "demo.log"


def _say(line: str) -> None:
    print(line, flush=True)


def _apply(lab: Lab, docs: list[dict]) -> None:
    path = lab.config.workdir / f"apply-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    os.chmod(path, 0o600)
    out = lab.kubectl("apply", "-f", str(path))
    path.unlink()
    if out.returncode != 0:
        raise ComponentError("kubectl apply", out.stderr.strip())


def _json(lab: Lab, *args: str) -> dict | None:
    out = lab.kubectl(*args, "-o", "json", timeout=20)
    return json.loads(out.stdout) if out.returncode == 0 else None


def _wait(what: str, timeout: float, probe: Callable[[], object]) -> object:
    """Poll ``probe`` every 0.3 s until it returns something truthy (returned); ComponentError
    naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise ComponentError(what, f"not reached within {timeout:.0f} s")
        time.sleep(0.3)


def _namespaced(kind: str, name: str, **content: dict[str, str]) -> dict:
    """A core v1 object of ``kind`` named ``name`` in the runner's namespace, with ``content``."""
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE}, **content}


def _secret(name: str, data: dict[str, str]) -> dict:
    return _namespaced("Secret", name, stringData=data)


def _configmap(name: str, data: dict[str, str]) -> dict:
    return _namespaced("ConfigMap", name, data=data)


def fence_configuration(lab: Lab, host: str) -> list[dict]:
    """Secrets and ConfigMaps (the seed's format, DESIGN.md "NodeFence") for every lab node, in
    the runner's namespace; the devices are addressed at ``host`` (the relay host for a runner
    in a pod, their own ports)."""
    dev = lab.info["devices"]
    fc = dev["snmp"]["fc"]
    docs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        _secret("fc-switch", {"community": fc["community"]}),
        _configmap(
            "fence-method-template-fc-switch",
            {"template.properties": f"type=fc\nmodel=ifmib\naddress={host}:{fc['port']}\nsecret=fc-switch\n"},
        ),
    ]
    real = set(lab.info.get("real_node_names", []))
    for node in lab.info["nodes"] + lab.info.get("real_node_names", []):
        bmc = dev["bmcs"][node]
        docs += [
            _secret(f"bmc-{node}", {"username": bmc["username"], "password": bmc["password"]}),
            _configmap(
                f"fence-method-template-bmc-{node}",
                {
                    "template.properties": f"type=ipmi\naddress={host}:{bmc['port']}\n"
                    f"secret=bmc-{node}\ncipher={bmc['cipher']}\n"
                },
            ),
            _configmap(
                f"fence-config-{node}",
                {
                    "config.properties": f"node_name={node}\nisolation=fc-off\n"
                    "power_management=ipmi-off ipmi-on\nrecovery=fc-on\n"
                    # the writer's storage is behind the real nodes' FC ports: the FC fence
                    # releases web-0 at once, the power fence everything else
                    + (f"fenced_storage=hostpath:{SHARED_MOUNT}\n" if node in real else ""),
                    "fence-method-fc-off": f"template=fence-method-template-fc-switch\nplug={dev['fc_ports'][node]}\naction=off\n",
                    "fence-method-fc-on": f"template=fence-method-template-fc-switch\nplug={dev['fc_ports'][node]}\naction=on\n",
                    "fence-method-ipmi-off": f"template=fence-method-template-bmc-{node}\naction=off\n",
                    "fence-method-ipmi-on": f"template=fence-method-template-bmc-{node}\naction=on\n",
                },
            ),
        ]
    return docs


def runner_configuration(period: int) -> str:
    """The remedy Configuration of the demo's runner: Ready False/Unknown for ``period`` s; the
    storm guard lets one node at a time be fenced."""
    return yaml.safe_dump(
        {
            "apiVersion": "remediation.noderemedy.io/v1alpha1",
            "kind": "Configuration",
            "metadata": {"name": "demo"},
            "thresholdConfigs": [
                {
                    "nodeConditionType": "Ready",
                    "nodeConditionStatus": ["False", "Unknown"],
                    "nodeConditionPeriod": period,
                }
            ],
            "stormGuard": {"maxUnhealthy": 1, "cooldown": 5},
        }
    )


def overlay(workdir: Path, period: int) -> Path:
    """A kustomization over the lab's overlay (``lab/deploy``) that replaces the runner's
    Configuration (``noderemedy-config``) with :func:`runner_configuration` and runs deploy/'s
    :data:`REPLICAS` replicas again (the lab's overlay has two, for the test lab's two real nodes);
    returns its dir."""
    out = workdir / "demo-deploy"
    out.mkdir(parents=True, exist_ok=True)
    patch = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "noderemedy-config", "namespace": NAMESPACE},
        "data": {"config.yaml": runner_configuration(period)},
    }
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAY, out)],
        "patches": [
            {"patch": yaml.safe_dump(patch)},
            {
                "target": {"kind": "Deployment", "name": "noderemedy-runner"},
                "patch": yaml.safe_dump([{"op": "replace", "path": "/spec/replicas", "value": REPLICAS}]),
            },
        ],
    }
    (out / "kustomization.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def deploy_runner(lab: Lab, image: Path, period: int) -> None:
    """Import the image into the real nodes, install the CRDs and deploy the runner; returns when
    its :data:`REPLICAS` replicas are Ready and one holds the leader Lease."""
    lab.import_image(image)
    crds = lab.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy" / "crds"))
    if crds.returncode != 0:
        raise ComponentError("CRDs", crds.stderr.strip())
    out = lab.kubectl("apply", "--server-side", "-k", str(overlay(lab.config.workdir, period)))
    if out.returncode != 0:
        raise ComponentError("kubectl apply -k (the runner)", out.stderr.strip())
    _wait(f"{REPLICAS} Ready runner pods", 240, lambda: len(runner_pods(lab, ready_only=True)) == REPLICAS)
    _wait("the runner's leader Lease", 60, lambda: leader_node(lab))


def runner_pods(lab: Lab, ready_only: bool = False) -> list[dict]:
    items = (
        _json(lab, "-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=noderemedy-runner") or {}
    ).get("items", [])
    if not ready_only:
        return items
    return [
        p
        for p in items
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    ]


def leader_node(lab: Lab) -> str | None:
    """The node of the runner pod holding the leader Lease (its identity starts with its name)."""
    lease = _json(lab, "-n", NAMESPACE, "get", "lease", "noderemedy-runner") or {}
    holder = (lease.get("spec") or {}).get("holderIdentity") or ""
    for pod in runner_pods(lab):
        if holder and holder.startswith(pod["metadata"]["name"]):
            return pod["spec"].get("nodeName")
    return None


def web0(lab: Lab) -> dict:
    return _json(lab, "-n", APP_NAMESPACE, "get", "pod", "web-0") or {}


def place_web0(lab: Lab, node: str, allowed: list[str]) -> dict:
    """``web-0`` Running on ``node`` (its preference set there; moved by a plain delete if it runs
    elsewhere), with its first lines written; returns the pod."""
    patch = [{"op": "replace", "path": "/spec/template/spec/affinity", "value": prefer_node(node, allowed)}]
    out = lab.kubectl(
        "-n", APP_NAMESPACE, "patch", "statefulset", "web", "--type=json", "-p", json.dumps(patch)
    )
    if out.returncode != 0:
        raise ComponentError("StatefulSet web", out.stderr.strip())
    pod = web0(lab)
    if pod and pod["spec"].get("nodeName") not in (None, node):
        lab.kubectl("-n", APP_NAMESPACE, "delete", "pod", "web-0", "--wait=true", timeout=60)

    def running_there() -> dict | None:
        p = web0(lab)
        ok = p and p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == node
        return p if ok and not p["metadata"].get("deletionTimestamp") else None

    return _wait(f"web-0 Running on {node}", 120, running_there)  # type: ignore[return-value]


class Watch:
    """Reads the cluster and the peers for one failing node; each milestone is a predicate on what
    it reads. A NodeFence of an earlier scenario (``old_fence_uid``) does not count."""

    def __init__(self, lab: Lab, node: str, old_fence_uid: str | None) -> None:
        self.lab = lab
        self.node = node
        self.old_fence_uid = old_fence_uid
        dev = lab.info["devices"]
        self.fc_state = Path(dev["snmp"]["fc"]["state_file"])
        self.fc_port = str(int(dev["fc_ports"][node].rsplit("/", 1)[1]))
        self.power_file = Path(dev["bmcs"][node]["power_file"])
        # off since the watch began, from the BMC's log of power sets: the fence's ipmi-on segment
        # starts as soon as its ipmi-off segment ends, and a look at the power file every few
        # seconds (three kubectl runs per refresh) can miss the few seconds the power is off
        self.power_log = dev["bmcs"][node]["power_log"]
        self.sets_before = len(power_sets(self.power_log))
        self.power_was_off = False

    def refresh(self) -> dict:
        node = _json(self.lab, "get", "node", self.node) or {}
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        taints = [t["key"] for t in node.get("spec", {}).get("taints") or []]
        fence = _json(self.lab, "get", "nodefences.remediation.noderemedy.io", self.node)
        if fence is not None and fence["metadata"].get("uid") == self.old_fence_uid:
            fence = None
        pod = web0(self.lab)
        try:
            fc = json.loads(self.fc_state.read_text())["ports"][self.fc_port]
        except (OSError, ValueError, KeyError):
            fc = None
        power = self.power_file.read_text().strip() if self.power_file.exists() else None
        self.power_was_off |= power == "0" or any(
            v == 0 for _, v in power_sets(self.power_log)[self.sets_before :]
        )
        return {
            "ready": conds.get("Ready"),
            "taints": taints,
            "fence": (fence or {}).get("status", {}),
            "fence_exists": fence is not None,
            "pod_uid": pod.get("metadata", {}).get("uid"),
            "pod_node": pod.get("spec", {}).get("nodeName"),
            "pod_phase": pod.get("status", {}).get("phase"),
            "pod_deleting": bool(pod.get("metadata", {}).get("deletionTimestamp")),
            "fc_admin": fc,
            "power": power,
            "power_was_off": self.power_was_off,
        }


def lanes(snap: dict) -> dict:
    """One :meth:`Watch.refresh` snapshot as the timeline's lanes (:data:`~.timeline.LANES`)."""
    fence = snap["fence"]
    step = " ".join(str(x) for x in (fence.get("step"), fence.get("status")) if x)
    return {
        "power": {"0": "off", "1": "on"}.get(snap["power"] or ""),
        "ready": snap["ready"],
        "nodefence": (step or "New") if snap["fence_exists"] else None,
        "fc_port": {1: "up", 2: "down"}.get(snap["fc_admin"]),
        "taint": OUT_OF_SERVICE in snap["taints"],
    }


def milestones(node: str, old_uid: str) -> list[tuple[str, str, Callable[[dict, dict], bool]]]:
    """(case, what is printed, predicate(snapshot, seen)) in the order the story is told."""
    return [
        (
            "node_notready",
            f"{node} NotReady (the real node lifecycle controller)",
            lambda s, _: s["ready"] in ("False", "Unknown"),
        ),
        ("nodefence_created", f"NodeFence {node} created by the detector", lambda s, _: s["fence_exists"]),
        (
            "fc_port_fenced",
            "FC port fenced: ifAdminStatus down, read back from the switch",
            lambda s, _: s["fence_exists"] and s["fc_admin"] == 2,
        ),
        (
            "out_of_service_taint",
            f"{OUT_OF_SERVICE}:NoExecute on {node} (fence verified)",
            lambda s, _: OUT_OF_SERVICE in s["taints"],
        ),
        (
            "pod_running_elsewhere",
            "web-0 Running on another node (a new pod)",
            lambda s, _: (
                s["pod_phase"] == "Running"
                and s["pod_node"] not in (None, node)
                and s["pod_uid"] != old_uid
                and not s["pod_deleting"]
            ),
        ),
        (
            "power_management",
            "power management step: IPMI off verified, then on",
            lambda s, _: (
                s["fence"].get("step") == "Recovery" or s["fence"].get("status") in ("Done", "Final")
            ),
        ),
        (
            "power_on",
            "power back on (BMC read back)",
            lambda s, _: s["power_was_off"] and s["power"] == "1",
        ),
        (
            "node_ready",
            f"{node} Ready again",
            lambda s, seen: "node_notready" in seen and s["ready"] == "True",
        ),
        (
            "fc_port_restored",
            "FC port restored (recovery)",
            lambda s, seen: "fc_port_fenced" in seen and s["fc_admin"] == 1,
        ),
        (
            "taint_removed",
            "out-of-service taint removed",
            lambda s, seen: "out_of_service_taint" in seen and OUT_OF_SERVICE not in s["taints"],
        ),
        ("final", "NodeFence Final", lambda s, _: s["fence"].get("status") == "Final"),
    ]


def scenario(lab: Lab, kind: str, timeout: float) -> dict:
    """One failover: ``kind`` ``"power_cut"`` or ``"partition"`` of the real node that runs
    ``web-0`` and not the runner's leader. Returns the figures (:func:`failover_figures` plus
    ``timeline``: case -> seconds since the failure); ComponentError if a step is missing."""
    real = lab.info["real_node_names"]
    leader = _wait("the runner's leader", 60, lambda: leader_node(lab))
    victim = next(n for n in real if n != leader)
    first = place_web0(lab, victim, real)
    old = first["metadata"]["uid"]
    shared = Path(lab.info["real_nodes"][victim]["shared_dir"]) / LOG_NAME
    _wait("the writer's first lines", 30, lambda: len(writes(shared).get(old, [])) >= 5)
    # the replacement goes to the leader's node: the victim may be Ready again by then
    place = [
        {"op": "replace", "path": "/spec/template/spec/affinity", "value": prefer_node(str(leader), real)}
    ]
    lab.kubectl("-n", APP_NAMESPACE, "patch", "statefulset", "web", "--type=json", "-p", json.dumps(place))
    old_fence = _json(lab, "get", "nodefences.remediation.noderemedy.io", victim)
    watch = Watch(lab, victim, (old_fence or {}).get("metadata", {}).get("uid"))
    _say(f"-- web-0 ({old[:8]}) writing on {victim}; the runner's leader is on {leader}")
    recorder = Recorder()
    before, t_before = watch.refresh(), time.monotonic()
    # the failure's time is when it is issued: the BMC answers "chassis power off" only once its power
    # hook has stopped the node, seconds later on a busy host (ipmitool retransmits meanwhile), and
    # by then the old writer's last line lies before a clock read after the answer
    t_fail, t0 = uptime(), time.monotonic()
    if kind == "power_cut":
        _say(f"== power cut: {victim} powered off through its BMC (ipmitool -C 3 chassis power off)")
        lab.power_off(victim)
        heal = None
    else:
        _say(f"== network partition: {victim}'s link down (kubelet and web-0 keep running)")
        lab.partition(victim)
        heal = victim
    recorder.observe(t_before - t0, lanes(before))
    todo = milestones(victim, old)
    seen: dict[str, float] = {}
    last_fence = None
    running_elsewhere = None
    while todo and time.monotonic() < t0 + timeout:
        snap = watch.refresh()
        now = time.monotonic() - t0
        recorder.observe(now, lanes(snap))
        if heal and snap["power_was_off"]:
            lab.heal(heal)  # the fence's power cycle brings the link back, as a reboot does
            heal = None
        fence_state = (snap["fence"].get("step"), snap["fence"].get("status"))
        if snap["fence_exists"] and fence_state != (None, None) and fence_state != last_fence:
            last_fence = fence_state
            _say(f"   {now:6.1f} s   NodeFence step={fence_state[0]} status={fence_state[1]}")
        for case, text, pred in list(todo):
            if pred(snap, seen):
                seen[case] = round(now, 2)
                if case == "pod_running_elsewhere":
                    running_elsewhere = uptime()
                _say(f"   {now:6.1f} s   {text}")
                todo.remove((case, text, pred))
        time.sleep(0.2)
    if heal:
        lab.heal(heal)
    if todo:
        raise ComponentError(
            f"{kind} scenario", f"not seen within {timeout:.0f} s: {', '.join(c for c, _, _ in todo)}"
        )
    new = web0(lab)["metadata"]["uid"]
    _wait("the new writer's lines", 30, lambda: len(writes(shared).get(new, [])) >= 3)
    lines = writes(shared)
    fig = failover_figures(lines, old, new, t_fail, victim, running_elsewhere or uptime())
    fig["timeline"] = seen
    fig["trace"] = recorder.to_dict()
    fig["trace_end_s"] = round(time.monotonic() - t0, 2)
    fig["writers"] = {"old": writer_spans(lines[old], t_fail), "new": writer_spans(lines[new], t_fail)}
    _say(
        f"-- shared storage: old writer's last line {fig['old_writer_last_s']:.1f} s, new writer's first "
        f"{fig['new_writer_first_s']:.1f} s after the failure; {fig['overlapping_writes']} overlapping writes"
    )
    return fig


def run(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    cfg = LabConfig(
        workdir=Path(args.workdir),
        nodes=3,
        real_nodes=REPLICAS,
        port_base=args.port_base,
        node_monitor_grace_period=args.grace_period,
    )
    _say(f"== noderemedy demo: a node dies, the cluster heals (lab in {cfg.workdir})")
    image = Path(args.image)
    if not image.exists():
        _say(f"!! no {image}: build the remediation pod image first (./dev image; ./dev demo does)")
        return 1
    archive = ROOT / json.loads(image.read_text())["archive"]
    lab = Lab(cfg)
    figures: dict[str, dict] = {}
    try:
        t0 = time.monotonic()
        lab.start(progress=lambda line: _say(f"   {line}"))
        _say(
            f"-- lab up in {time.monotonic() - t0:.1f} s: real nodes {', '.join(lab.info['real_node_names'])}, "
            f"kwok nodes {', '.join(lab.info['nodes'])}, BMCs, PDUs, FC switch"
        )
        _apply(lab, fence_configuration(lab, lab.info["devices"]["relay_host"]))
        t0 = time.monotonic()
        deploy_runner(lab, archive, args.period)
        _say(
            f"-- runner deployed (kubectl apply -k, {REPLICAS} replicas, leader on {leader_node(lab)}) in {time.monotonic() - t0:.1f} s"
        )
        real = lab.info["real_node_names"]
        _apply(
            lab,
            [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NAMESPACE}},
                writer_statefulset(APP_NAMESPACE, real[0], real, LOG_NAME),
            ],
        )
        for kind in ("power_cut", "partition"):
            figures[kind] = scenario(lab, kind, args.timeout)
        bad = {k: f["overlapping_writes"] for k, f in figures.items() if f["overlapping_writes"]}
        if bad:
            _say(f"!! overlapping writes: {bad}")
            return 1
        _say(
            "== healed: web-0 Running elsewhere "
            + ", ".join(
                f"{k.replace('_', ' ')} {f['pod_running_elsewhere_s']:.1f} s" for k, f in figures.items()
            )
            + f" after the failure; no overlapping write (demo total {time.monotonic() - t_start:.0f} s)"
        )
        return 0
    except ComponentError as exc:
        _say(f"!! {exc}")
        return 1
    finally:
        if figures:
            write_results(figures, cfg, args.period, Path(args.results))
            write_pictures(figures, Path(args.pictures))
        if args.keep:
            _say(f"-- lab left running (--keep); stop it with: noderemedy-lab --workdir {cfg.workdir} down")
        else:
            lab.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="noderemedy-demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--workdir", default=str(Path.home() / ".local" / "state" / "noderemedy" / "demo"))
    p.add_argument("--port-base", type=int, default=20500)
    p.add_argument("--image", default=str(IMAGE_INFO), help="the image's image.json (./dev image)")
    p.add_argument(
        "--grace-period",
        type=int,
        default=20,
        help="node-monitor-grace-period, seconds (default %(default)s)",
    )
    p.add_argument(
        "--period",
        type=int,
        default=2,
        help="seconds a node stays NotReady before it is fenced (default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=240,
        help="seconds allowed from a failure to its NodeFence Final (default %(default)s)",
    )
    p.add_argument("--keep", action="store_true", help="leave the lab running at the end")
    p.add_argument("--results", default=str(RESULTS), help="the figures' JSON (default %(default)s)")
    p.add_argument(
        "--pictures", default=str(PICTURES), help="where the timeline pictures go (default %(default)s)"
    )
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
