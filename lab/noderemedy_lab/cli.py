"""``noderemedy-lab``: start, inspect and stop the embedded lab.

    noderemedy-lab build [--demo]        build/cache the control plane binaries and the snmpsim venv
                                         (--demo: only what the demo needs, no vCenter simulator
                                         nor cluster-api)
    noderemedy-lab up [--nodes N] [--real-nodes N] ...
                                         start the lab in the background; prints where it is
    noderemedy-lab power NODE on|off     power a node on/off through its BMC (ipmitool)
    noderemedy-lab link NODE up|down     reconnect / partition a real node (its veth on the lab bridge)
    noderemedy-lab rack power-loss|power-restore|switch-loss|switch-restore|status
                                         fail / restore the rack of a lab started with 'up --rack'
    noderemedy-lab import-image FILE     import an image archive into every real node's containerd
    noderemedy-lab status                health of every component (exit 1 if any is unhealthy)
    noderemedy-lab env                   shell exports: KUBECONFIG, NODEREMEDY_LAB_DIR, SNMP_PERSISTENT_DIR
    noderemedy-lab down                  stop every lab process (by PID and start time), leave nothing behind

``up`` starts a supervisor process (``noderemedy-lab _serve``) in its own session; the supervisor
starts every peer as its own child and ``wait()``s on them, so peers are reaped even where PID 1
does not reap orphans. ``down`` asks the supervisor to stop (SIGTERM) and waits; if the supervisor
is gone, it stops the recorded peers itself, each by PID and start time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from .config import LabConfig, default_workdir
from .procs import ComponentError, proc_start_time, stop_recorded, tail


def _config(args: argparse.Namespace) -> LabConfig:
    return LabConfig(
        workdir=Path(args.workdir),
        nodes=args.nodes if args.nodes is not None else (40 if args.rack else 3),
        port_base=args.port_base,
        kube=not args.no_kube,
        rack=args.rack,
        node_monitor_grace_period=args.grace_period,
        peers=list(args.peers),
        real_nodes=args.real_nodes,
    )


def _peers(text: str) -> list[str]:
    """argparse type of ``--peers``: names of ``lab.OPTIONAL_PEERS``, comma-separated."""
    from .lab import OPTIONAL_PEERS

    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = sorted(set(names) - set(OPTIONAL_PEERS))
    if bad:
        raise argparse.ArgumentTypeError(f"unknown peers {bad}; known: {sorted(OPTIONAL_PEERS)}")
    return names


def _read_state(workdir: Path) -> dict:
    path = workdir / "lab.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def _lab_state(args: argparse.Namespace, file: TextIO | None = None) -> tuple[Path, dict]:
    """The lab directory ``--workdir`` and its recorded state (``lab.json``); an empty state, after
    printing ``no lab in WORKDIR`` on ``file`` (stdout when None), when there is no lab."""
    workdir = Path(args.workdir)
    state = _read_state(workdir)
    if not state:
        print(f"no lab in {workdir}", file=file or sys.stdout)
    return workdir, state


def _running(row: dict) -> bool:
    """Whether the process of a ``lab.json`` row still runs: same PID, same recorded start time."""
    return row.get("start_time") is not None and proc_start_time(row["pid"]) == row["start_time"]


def cmd_build(args: argparse.Namespace) -> int:
    from .build import ensure_binaries
    from .devices import ensure_simvenv
    from .images import ensure_node_images

    t0 = time.monotonic()
    paths = ensure_binaries(vcsim=not args.demo, capi=not args.demo)
    venv = ensure_simvenv()
    images = ensure_node_images(print)
    for name, path in sorted(paths.items()):
        print(f"{name:25s} {path}")
    print(f"{'snmpsim venv':25s} {venv}")
    for name, path in sorted(images.items()):
        print(f"{name:25s} {path}")
    print(f"ready in {time.monotonic() - t0:.0f} s")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The detached supervisor: start the lab, then wait for SIGTERM and stop it."""
    from .lab import Lab

    cfg = _config(args)
    lab = Lab(cfg)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        lab.start(progress=lambda line: print(line, flush=True))
    except ComponentError as exc:
        print(f"ERROR {exc}", flush=True)
        (cfg.workdir / "error.txt").write_text(str(exc))
        return 1
    lab.info["supervisor"] = {"pid": os.getpid(), "start_time": proc_start_time(os.getpid())}
    lab.write_state()
    print("READY", flush=True)
    told: set[tuple[str, int]] = set()
    while not stop.wait(1.0):
        for proc in lab.supervisor.dead() if lab.supervisor else []:
            if (proc.name, proc.pid) not in told:
                told.add((proc.name, proc.pid))
                print(f"component {proc.name} exited with {proc.popen.returncode}", flush=True)
    lab.stop()
    print("STOPPED", flush=True)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    cfg = _config(args)
    state = _read_state(cfg.workdir)
    sup = state.get("supervisor", {})
    if state.get("state") == "running" and sup and proc_start_time(sup["pid"]) == sup.get("start_time"):
        print(f"a lab is already running in {cfg.workdir}; 'noderemedy-lab down' first", file=sys.stderr)
        return 1
    # build in the foreground so the user sees the progress of a long first build
    if cfg.kube:
        from .build import ensure_binaries

        try:
            ensure_binaries(node=cfg.real_nodes > 0, vcsim="vsphere" in cfg.peers)
        except ComponentError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    cfg.workdir.parent.mkdir(parents=True, exist_ok=True)
    log = cfg.workdir.parent / f"{cfg.workdir.name}-supervisor.log"
    argv = [
        sys.executable, "-m", "noderemedy_lab.cli", "--workdir", str(cfg.workdir), "_serve",
        "--nodes", str(cfg.nodes), "--port-base", str(cfg.port_base),
        "--grace-period", str(cfg.node_monitor_grace_period), "--real-nodes", str(cfg.real_nodes),
    ] + (["--rack"] if cfg.rack else []) + (["--no-kube"] if not cfg.kube else []) + (["--peers", ",".join(cfg.peers)] if cfg.peers else [])  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    t0 = time.monotonic()
    seen = 0
    while True:
        text = log.read_text(errors="replace")
        lines = text.splitlines()
        for line in lines[seen:]:
            if line not in ("READY",):
                print(line)
        seen = len(lines)
        if "READY" in lines:
            print(f"lab up in {time.monotonic() - t0:.1f} s: {cfg.workdir}")
            print('next: eval "$(noderemedy-lab env)"; noderemedy-lab status')
            return 0
        if proc.poll() is not None:
            print(f"error: the lab did not start; supervisor log {log}:\n{tail(log, 20)}", file=sys.stderr)
            return 1
        time.sleep(0.2)


def cmd_down(args: argparse.Namespace) -> int:
    workdir, state = _lab_state(args)
    if not state:
        return 0
    sup = state.get("supervisor", {})
    if sup and proc_start_time(sup["pid"]) == sup.get("start_time"):
        os.kill(sup["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 60
        while proc_start_time(sup["pid"]) == sup.get("start_time") and time.monotonic() < deadline:
            time.sleep(0.1)
    left = []
    for name, row in state.get("processes", {}).items():
        if stop_recorded(row["pid"], row.get("start_time")):
            left.append(name)
    if state.get("real_node_names"):
        # the supervisor died without cleaning up: undo the real nodes from what lab.json says
        from .realnode import cleanup_recorded

        cleanup_recorded(state)
    if left:
        print(f"stopped leftover processes: {', '.join(left)}")
    still = [name for name, row in state.get("processes", {}).items() if _running(row)]
    if still:
        print(f"error: still running: {', '.join(still)}", file=sys.stderr)
        return 1
    print(f"lab in {workdir} is down; no lab process is running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    workdir, state = _lab_state(args)
    if not state:
        return 1
    bad = 0
    for name, row in state.get("processes", {}).items():
        ok = _running(row)
        bad += not ok
        print(f"{name:28s} {'running' if ok else 'DOWN'} (pid {row['pid']})")
    if "kube" in state:
        from .kube import _client, node_ready, probe_components

        cfg = LabConfig(workdir=workdir, nodes=len(state["nodes"]), port_base=state["port_base"])
        for name, health in probe_components(cfg, state["kube"]).items():
            bad += health != "ok"
            print(f"{name + ' health':28s} {health}")
        try:
            names = state["nodes"] + state.get("real_node_names", [])
            for node, ready in node_ready(_client(Path(state["kube"]["kubeconfig"])), names).items():
                print(f"{'node ' + node:28s} Ready={ready}")
        except Exception as exc:  # report, do not crash, when the apiserver is down
            bad += 1
            print(f"{'nodes':28s} cannot list: {exc.__class__.__name__}")
    return 1 if bad else 0


def cmd_env(args: argparse.Namespace) -> int:
    workdir, state = _lab_state(args, file=sys.stderr)
    if not state:
        return 1
    print(f"export NODEREMEDY_LAB_DIR='{workdir}'")
    print(f"export NODEREMEDY_LAB_INFO='{workdir / 'lab.json'}'")
    if "kube" in state:
        print(f"export KUBECONFIG='{state['kube']['kubeconfig']}'")
        print(f"export PATH='{Path(state['kube']['binaries']['kubectl']).parent}':\"$PATH\"")
    if "devices" in state:
        print(f"export SNMP_PERSISTENT_DIR='{state['devices']['snmp_persistent_dir']}'")
    return 0


def cmd_power(args: argparse.Namespace) -> int:
    lab = _attached(Path(args.workdir))
    if args.state == "off":
        lab.power_off(args.node)
    else:
        lab.power_on(args.node)
    print(f"{args.node}: power {args.state}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    state = _read_state(Path(args.workdir))
    from .realnode import import_image

    nodes = state.get("real_nodes", {})
    if not nodes:
        print(f"error: the lab in {args.workdir} has no running real node", file=sys.stderr)
        return 1
    for name, node in nodes.items():
        import_image(node["containerd_socket"], Path(args.archive), f"containerd {name}")
        print(f"{name}: imported {args.archive}")
    return 0


def cmd_link(args: argparse.Namespace) -> int:
    state = _read_state(Path(args.workdir))
    node = state.get("real_nodes", {}).get(args.node)
    if node is None:
        print(f"error: node: {args.node!r} is not a real node of the lab in {args.workdir}", file=sys.stderr)
        return 1
    out = subprocess.run(["ip", "link", "set", node["veth"], args.state], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"error: link {node['veth']} {args.state}: {out.stderr.strip()}", file=sys.stderr)
        return 1
    print(f"{args.node}: link {args.state}")
    return 0


def cmd_rack(args: argparse.Namespace) -> int:
    from .rack import Rack

    lab = _attached(Path(args.workdir))
    if "rack" not in lab.info:
        print(f"error: the lab in {args.workdir} was not started with --rack", file=sys.stderr)
        return 1
    rack = Rack(lab, lab.info["rack"]["nodes"])  # the lab's supervisor runs its watcher
    if args.action == "status":
        outlets = rack.outlet_states()
        switch = "down" if (rack.dir / "switch-down").exists() else "up"
        for node in rack.nodes:
            print(f"{node}: outlet {outlets[node]}, bmc {rack.bmc_power(node)}, switch {switch}")
        return 0
    {
        "power-loss": rack.power_loss,
        "power-restore": rack.power_restore,
        "switch-loss": rack.switch_loss,
        "switch-restore": rack.switch_restore,
    }[args.action]()
    print(f"rack of {len(rack.nodes)} nodes: {args.action}")
    return 0


def _attached(workdir: Path):
    """A Lab object describing the running lab in ``workdir`` (for commands that drive it)."""
    from .lab import Lab

    state = _read_state(workdir)
    if state.get("state") != "running":
        raise ComponentError("lab", f"no running lab in {workdir}")
    lab = Lab(LabConfig(workdir=workdir, nodes=len(state["nodes"]), port_base=state["port_base"]))
    lab.info = state
    if "kube" in state:
        lab.kubeconfig = Path(state["kube"]["kubeconfig"])
    return lab


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="noderemedy-lab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workdir", default=str(default_workdir()), help="lab state directory (env NODEREMEDY_LAB_DIR)"
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    def lab_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--nodes",
            type=int,
            default=None,
            help="kwok nodes, each with a BMC (1..1000; 3, or 40 with --rack)",
        )
        sp.add_argument(
            "--rack",
            action="store_true",
            help="wire the kwok nodes as a rack: one PDU outlet, one switch port and a BMC each "
            "(a node runs only while its BMC and outlet are on and the switch is up)",
        )
        sp.add_argument("--port-base", type=int, default=20000, help="first port of the lab's port layout")
        sp.add_argument("--no-kube", action="store_true", help="devices only (no control plane)")
        sp.add_argument("--grace-period", type=int, default=20, help="node-monitor-grace-period in seconds")
        sp.add_argument(
            "--peers",
            type=_peers,
            default=[],
            help="also start these peers, comma-separated: redfish (sushy-tools), ec2 (moto), vsphere "
            "(govmomi's vCenter simulator); their endpoints and credentials are in lab.json 'peers'",
        )
        sp.add_argument(
            "--real-nodes",
            type=int,
            default=0,
            help="real nodes (kubelet + containerd), each with a BMC (0..20)",
        )

    build = sub.add_parser("build", help="build/cache the control plane binaries")
    build.add_argument(
        "--demo", action="store_true", help="only what the demo needs (no vCenter simulator, no cluster-api)"
    )
    build.set_defaults(func=cmd_build)
    up = sub.add_parser("up", help="start the lab in the background")
    lab_opts(up)
    up.set_defaults(func=cmd_up)
    serve = sub.add_parser("_serve", help=argparse.SUPPRESS)
    lab_opts(serve)
    serve.set_defaults(func=cmd_serve)
    sub.add_parser("down", help="stop the lab").set_defaults(func=cmd_down)
    sub.add_parser("status", help="health of every component").set_defaults(func=cmd_status)
    sub.add_parser("env", help="shell exports for the running lab").set_defaults(func=cmd_env)
    pw = sub.add_parser("power", help="power a node on or off through its BMC")
    pw.add_argument("node")
    pw.add_argument("state", choices=("on", "off"))
    pw.set_defaults(func=cmd_power)
    im = sub.add_parser("import-image", help="import an image archive into every real node's containerd")
    im.add_argument("archive")
    im.set_defaults(func=cmd_import)
    ln = sub.add_parser("link", help="partition (down) or reconnect (up) a real node")
    ln.add_argument("node")
    ln.add_argument("state", choices=("up", "down"))
    ln.set_defaults(func=cmd_link)
    rk = sub.add_parser("rack", help="fail or restore the rack (lab started with --rack)")
    rk.add_argument(
        "action", choices=("power-loss", "power-restore", "switch-loss", "switch-restore", "status")
    )
    rk.set_defaults(func=cmd_rack)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (ComponentError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
