"""The demo (README command one): a node dies, the cluster heals itself, on the embedded lab.

1. Start the lab (building the control plane the first time: minutes, with progress).
2. Install the NodeFence CRD, the fence configuration of every node (ConfigMaps in the seed's
   format: isolation = the node's FC port off, power management = IPMI off then on, recovery =
   FC port on) with the credentials in Secrets, and a StatefulSet ``web`` with one replica.
3. Start the real ``noderemedy-runner`` (detector + reconcilers + ansible-runner) against the lab.
4. Cut the power of the node running ``web-0`` through its BMC.
5. Watch, live, each step happen, with its time since the power cut: NotReady, NodeFence
   created, FC port fenced, out-of-service taint, ``web-0`` Running on another node, power off
   verified and back on, node Ready, FC port restored, taint removed, NodeFence Final.

Exit status 0 only if every step happened (within ``--timeout`` seconds); the figures are written
to ``bench/results/e2e.json`` (``case``, ``seconds``). Nothing here fakes a step: each milestone is
read from the API server or from the device peer's own state.
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

from .config import LabConfig
from .lab import Lab
from .procs import ComponentError, Supervisor, tail

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "noderemedy"
APP_NAMESPACE = "demo"


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


def _secret(name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": data,
    }


def _configmap(name: str, data: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": data,
    }


def fence_configuration(lab: Lab) -> list[dict]:
    """Secrets and ConfigMaps (the seed's format, DESIGN.md "NodeFence") for every lab node."""
    dev = lab.info["devices"]
    fc = dev["snmp"]["fc"]
    docs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        _secret("fc-switch", {"community": fc["community"]}),
        _configmap(
            "fence-method-template-fc-switch",
            {
                "template.properties": f"type=fc\nmodel=ifmib\naddress={fc['host']}:{fc['port']}\nsecret=fc-switch\n"
            },
        ),
    ]
    for node in lab.info["nodes"]:
        bmc = dev["bmcs"][node]
        docs += [
            _secret(f"bmc-{node}", {"username": bmc["username"], "password": bmc["password"]}),
            _configmap(
                f"fence-method-template-bmc-{node}",
                {
                    "template.properties": f"type=ipmi\naddress={bmc['host']}:{bmc['port']}\n"
                    f"secret=bmc-{node}\ncipher={bmc['cipher']}\n"
                },
            ),
            _configmap(
                f"fence-config-{node}",
                {
                    "config.properties": f"node_name={node}\nisolation=fc-off\n"
                    "power_management=ipmi-off ipmi-on\nrecovery=fc-on\n",
                    "fence-method-fc-off": f"template=fence-method-template-fc-switch\nplug={dev['fc_ports'][node]}\naction=off\n",
                    "fence-method-fc-on": f"template=fence-method-template-fc-switch\nplug={dev['fc_ports'][node]}\naction=on\n",
                    "fence-method-ipmi-off": f"template=fence-method-template-bmc-{node}\naction=off\n",
                    "fence-method-ipmi-on": f"template=fence-method-template-bmc-{node}\naction=on\n",
                },
            ),
        ]
    return docs


def statefulset() -> list[dict]:
    """Namespace ``demo`` and a one-replica StatefulSet ``web`` (Kubernetes alone never moves its pod)."""
    labels = {"app": "web"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": APP_NAMESPACE}},
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": APP_NAMESPACE},
            "spec": {
                "serviceName": "web",
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]},
                },
            },
        },
    ]


def runner_configuration(period: int) -> str:
    """The remedy Configuration the demo's runner uses: Ready False/Unknown for ``period`` s."""
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
            "stormGuard": {"maxUnhealthy": 1, "cooldown": 30},
        }
    )


class Watch:
    """Reads the cluster and the peers; each milestone is a predicate on what it reads."""

    def __init__(self, lab: Lab, node: str) -> None:
        self.lab = lab
        self.node = node
        dev = lab.info["devices"]
        self.fc_state = Path(dev["snmp"]["fc"]["state_file"])
        self.fc_port = str(int(dev["fc_ports"][node].rsplit("/", 1)[1]))
        self.power_file = Path(dev["bmcs"][node]["power_file"])
        self.snapshot: dict = {}

    def _json(self, *args: str) -> dict | None:
        out = self.lab.kubectl(*args, "-o", "json", timeout=20)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def refresh(self) -> dict:
        node = self._json("get", "node", self.node) or {}
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        taints = [t["key"] for t in node.get("spec", {}).get("taints") or []]
        fence = self._json("get", "nodefences.remediation.noderemedy.io", self.node)
        pod = self._json("-n", APP_NAMESPACE, "get", "pod", "web-0") or {}
        try:
            fc = json.loads(self.fc_state.read_text())["ports"][self.fc_port]
        except (OSError, ValueError, KeyError):
            fc = None
        self.snapshot = {
            "ready": conds.get("Ready"),
            "taints": taints,
            "fence": (fence or {}).get("status", {}),
            "fence_exists": fence is not None,
            "pod_node": pod.get("spec", {}).get("nodeName"),
            "pod_phase": pod.get("status", {}).get("phase"),
            "pod_deleting": bool(pod.get("metadata", {}).get("deletionTimestamp")),
            "fc_admin": fc,
            "power": self.power_file.read_text().strip() if self.power_file.exists() else None,
        }
        return self.snapshot


def milestones(node: str) -> list[tuple[str, str, Callable[[dict, dict], bool]]]:
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
            lambda s, _: s["fc_admin"] == 2,
        ),
        (
            "out_of_service_taint",
            f"{OUT_OF_SERVICE}:NoExecute on {node} (fence verified)",
            lambda s, _: OUT_OF_SERVICE in s["taints"],
        ),
        (
            "pod_running_elsewhere",
            "web-0 Running on another node",
            lambda s, _: (
                s["pod_phase"] == "Running" and s["pod_node"] not in (None, node) and not s["pod_deleting"]
            ),
        ),
        (
            "power_management",
            "power management step: IPMI off verified, then on",
            lambda s, _: (
                s["fence"].get("step") in ("Recovery",) or s["fence"].get("status") in ("Done", "Final")
            ),
        ),
        ("power_on", "power back on (BMC read back)", lambda s, _: s["power"] == "1"),
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


def _runner_argv(lab: Lab, workdir: Path, config_file: Path, metrics_port: int) -> list[str]:
    exe = Path(sys.executable).parent / "noderemedy-runner"
    return [
        str(exe),
        "--kubeconfig", str(lab.kubeconfig),
        "--namespace", NAMESPACE,
        "--config", str(config_file),
        "--data-dir", str(workdir / "runner"),
        "--metrics-addr", f"127.0.0.1:{metrics_port}",
        "--max-concurrent-runs", "4",
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    t_start = time.monotonic()
    cfg = LabConfig(
        workdir=Path(args.workdir),
        nodes=3,
        port_base=args.port_base,
        node_monitor_grace_period=args.grace_period,
    )
    _say(f"== noderemedy demo: a node dies, the cluster heals (lab in {cfg.workdir})")
    lab = Lab(cfg)
    results: dict[str, float] = {}
    runner_sup: Supervisor | None = None
    try:
        t0 = time.monotonic()
        lab.start(progress=lambda line: _say(f"   {line}"))
        _say(
            f"-- lab up in {time.monotonic() - t0:.1f} s: {', '.join(lab.info['nodes'])}, BMCs, PDUs, FC switch"
        )
        crd = lab.kubectl(
            "apply", "-f", str(ROOT / "deploy" / "crds" / "remediation.noderemedy.io_nodefences.yaml")
        )
        if crd.returncode != 0:
            raise ComponentError("NodeFence CRD", crd.stderr.strip())
        lab.kubectl(
            "wait", "--for=condition=Established", "crd/nodefences.remediation.noderemedy.io", "--timeout=30s"
        )
        _apply(lab, fence_configuration(lab))
        _apply(lab, statefulset())
        _say("-- fence configuration (ConfigMaps + Secrets) and StatefulSet web installed")
        deadline = time.monotonic() + 120
        while True:
            got = lab.kubectl("-n", APP_NAMESPACE, "get", "pod", "web-0", "-o", "json")
            pod = json.loads(got.stdout) if got.returncode == 0 else {}
            if pod.get("status", {}).get("phase") == "Running":
                victim = pod["spec"]["nodeName"]
                break
            if time.monotonic() > deadline:
                raise ComponentError("StatefulSet web", "web-0 not Running after 120 s")
            time.sleep(0.3)
        watch = Watch(lab, victim)
        _say(f"-- web-0 Running on {victim}")

        config_file = cfg.workdir / "runner-config.yaml"
        config_file.write_text(runner_configuration(args.period))
        runner_sup = Supervisor(cfg.workdir / "logs")
        metrics_port = cfg.port_base + 50
        runner = runner_sup.start(
            "noderemedy-runner", _runner_argv(lab, cfg.workdir, config_file, metrics_port)
        )
        time.sleep(1.0)
        if not runner.alive():
            raise ComponentError(
                "noderemedy-runner", f"exited at start; log {runner.log}:\n{tail(runner.log)}"
            )
        _say(f"-- noderemedy-runner started (pid {runner.pid}, log {runner.log})")

        _say(f"== cutting the power of {victim} through its BMC (ipmitool -C 3 chassis power off)")
        t_cut = time.monotonic()
        lab.power_off(victim)
        todo = milestones(victim)
        seen: dict[str, float] = {}
        last_fence = None
        deadline = t_cut + args.timeout
        while todo and time.monotonic() < deadline:
            snap = watch.refresh()
            now = time.monotonic() - t_cut
            fence_state = (snap["fence"].get("step"), snap["fence"].get("status"))
            if snap["fence_exists"] and fence_state != (None, None) and fence_state != last_fence:
                last_fence = fence_state
                _say(f"   {now:6.1f} s   NodeFence step={fence_state[0]} status={fence_state[1]}")
            for case, text, pred in list(todo):
                if pred(snap, seen):
                    seen[case] = round(now, 2)
                    _say(f"   {now:6.1f} s   {text}")
                    todo.remove((case, text, pred))
            if not runner.alive():
                raise ComponentError(
                    "noderemedy-runner",
                    f"exited ({runner.popen.returncode}); log {runner.log}:\n{tail(runner.log)}",
                )
            time.sleep(0.2)
        results = dict(seen)
        results["total"] = round(time.monotonic() - t_cut, 2)
        if todo:
            _say(f"!! not seen within {args.timeout} s: {', '.join(c for c, _, _ in todo)}")
            _say(f"   runner log: {runner.log}")
            return 1
        _say(
            f"== healed: web-0 Running elsewhere {seen['pod_running_elsewhere']:.1f} s after the power cut; "
            f"node back and NodeFence Final at {seen['final']:.1f} s (demo total {time.monotonic() - t_start:.0f} s)"
        )
        return 0
    except ComponentError as exc:
        _say(f"!! {exc}")
        return 1
    finally:
        if results:
            out = ROOT / "bench" / "results" / "e2e.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            doc = {
                "description": "noderemedy demo: seconds from the power cut to each step (lab: node-monitor-grace-period "
                f"{cfg.node_monitor_grace_period} s, detection period {args.period} s)",
                "cases": [{"case": case, "seconds": secs} for case, secs in results.items()],
            }
            out.write_text(json.dumps(doc, indent=1) + "\n")
            _say(f"-- timings written to {out}")
        if runner_sup is not None:
            runner_sup.stop_all()
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
    p.add_argument(
        "--grace-period",
        type=int,
        default=20,
        help="node-monitor-grace-period, seconds (default %(default)s)",
    )
    p.add_argument(
        "--period",
        type=int,
        default=5,
        help="seconds a node stays NotReady before it is fenced (default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=240,
        help="seconds allowed from the power cut to Final (default %(default)s)",
    )
    p.add_argument("--keep", action="store_true", help="leave the lab running at the end")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
