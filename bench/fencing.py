#!/usr/bin/env python3
"""Fencing speed, side by side with the fence agents, on the same real peers in one run.

Starts the lab's devices (``noderemedy_lab.lab.Lab``, ``kube=False``), then measures, for each
case, our driver called as a library, our module through a real ``ansible-playbook``, and the
ClusterLabs fence agent users would otherwise run:

* IPMI (ipmi_sim): ``fence_ipmilan --cipher=3`` with its default ``--power-wait`` (2 s) and with
  ``--power-wait=0``;
* APC rack PDU (snmpd): ``fence_apc_snmp``;
* FC switch, IF-MIB (snmpd): ``fence_ifmib``;

for "off, verified" (from on; the device is switched back on, untimed, between samples) and for
"status". Each figure is the median of ``--samples`` (>= 5) wall-clock runs after one untimed
warm-up round; ours and the anchor run in turn within each round, so both see the same load. Writes ``bench/results/fencing.json`` (one entry per case: ``case``, ``ours_s``,
``anchor``, ``anchor_s``, ``ratio`` = ours / anchor, plus ``target`` where one is set) and
prints a table. Targets, set on the off+verified cases: library <= 0.5 x the agent
(for IPMI ``fence_ipmilan --power-wait=0``); through ansible-playbook <= 1.0 x the agent with its
defaults. ansible-playbook's own start-up (about 1 s here, measured by the status cases) is more
than ``fence_apc_snmp`` / ``fence_ifmib`` need for a whole fence, so those two playbook targets
cannot be met by any module; the table shows it as it is.

* Redfish (sushy-tools emulator, HTTPS): ``fence_redfish --ssl-insecure``; its playbook rows are
  also given minus the same play with a ``meta: noop`` task (ansible-playbook's own start-up,
  measured in the same rounds), the figure the Redfish target applies to.

* kdump (no lab peer; fence-agents' ``fence_kdump_send`` sends one message to 127.0.0.1):
  ``fence_kdump -f ipv4 -o off`` (the listener) against ``kdump_wait``. Each run starts the
  listener, waits until its UDP port is bound (read from ``/proc/net/udp``, every 0.5 ms), then
  starts ``fence_kdump_send -c 1`` and stops the clock when the listener returns having received
  it. So each figure is listener start-up + bind + one message, never the sender's 1 s interval.
  The playbook rows are given minus the no-op play as for Redfish.
* EC2 (moto): ``fence_aws -o status`` only, run by ``bench/loopback_agent.py`` (this venv's
  boto3, pointed at moto with ``AWS_ENDPOINT_URL_EC2``; every address but 127.0.0.0/8 refused
  in-process); ``fence_aws -o off`` would ask 169.254.169.254 first and is never run (see
  ``NOT_MEASURED``, which the output and the JSON repeat).
* vSphere: no anchor can talk to the lab's simulator (``NOT_MEASURED``).

``--cases`` measures some device groups only; their rows replace the same groups' rows in
``--out`` (each row says when it was measured).

Usage: ``.venv/bin/python bench/fencing.py [--samples N] [--port-base P] [--out PATH] [--cases ipmi,redfish]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _collections_path(tmp: Path) -> Path:
    """``tmp/collections/ansible_collections/noderemedy/core`` -> this checkout; importable too."""
    base = tmp / "collections"
    ns = base / "ansible_collections" / "noderemedy"
    ns.mkdir(parents=True, exist_ok=True)
    link = ns / "core"
    if not link.exists():
        link.symlink_to(ROOT)
    sys.path.insert(0, str(base))
    return base


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(
    fns: dict[str, Callable[[], object]], reset: Callable[[], object] | None, samples: int
) -> dict[str, float]:
    """Median wall-clock seconds of each of ``fns`` over ``samples`` rounds, after one warm-up round.

    Each round runs every function once, in turn (``reset`` untimed before each), so ours and the
    anchor see the same machine load even when other work on the host comes and goes.
    """
    values: dict[str, list[float]] = {name: [] for name in fns}
    for round_no in range(samples + 1):
        for name, fn in fns.items():
            if reset:
                reset()
            seconds = timed(fn)
            if round_no:  # round 0 is the warm-up
                values[name].append(seconds)
    return {name: statistics.median(v) for name, v in values.items()}


def run(argv: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode not in ok:
        shown = " ".join(a if not a.startswith("-p") else "-p ***" for a in argv[:3])
        raise RuntimeError(f"{shown}... exited {proc.returncode}: {proc.stderr[-1500:]}{proc.stdout[-1500:]}")


class Playbook:
    """Run one module task with ``ansible-playbook`` (local connection, no facts) and check it passed."""

    def __init__(self, tmp: Path, collections: Path) -> None:
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env.update(
            {
                "ANSIBLE_COLLECTIONS_PATH": str(collections),
                "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
                "ANSIBLE_LOCALHOST_WARNING": "False",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
                "ANSIBLE_NOCOLOR": "1",
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        self.n = 0

    def argv(self, module: str, args: dict | None) -> list[str]:
        """The ``ansible-playbook`` command of a play with one ``module`` task; ``args`` None: the
        same play with a ``meta: noop`` task instead."""
        self.n += 1
        path = self.tmp / f"bench{self.n}.yml"
        task = {"ansible.builtin.meta": "noop"} if args is None else {module: args}
        play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [task]}]
        path.write_text(yaml.safe_dump(play, sort_keys=False))
        return [str(BIN / "ansible-playbook"), "-i", "localhost,", str(path)]

    def __call__(self, module: str, args: dict | None) -> Callable[[], None]:
        """A run of one ``module`` task; ``args`` None: the same play with a ``meta: noop`` task
        instead (ansible-playbook's own cost, subtracted in the rows that say "minus no-op")."""
        argv = self.argv(module, args)
        return lambda: run(argv, self.env)


#: Device groups, in the order they are measured (``--cases``).
CASES = ("ipmi", "pdu", "fc", "redfish", "kdump", "aws")

#: What has no row, and why (printed and written to the JSON as ``not_measured``).
NOT_MEASURED = {
    "aws off+verified": (
        "fence_aws 4.12 -o off first asks the instance metadata service 169.254.169.254 which "
        "instance it runs on (get_instance_id in set_power_status) and skips the stop when that "
        "fails; the lab may reach 127.0.0.0/8 only, so that path is never run (status is measured)"
    ),
    "vmware": (
        "fence_vmware_soap loads the vSphere WSDL from https://<host>/sdk/vimService.wsdl, which "
        "govmomi's simulator answers 404 (the agent reports 'Server side certificate verification "
        "failed: HTTP Error 404'); fence_vmware_rest lists VMs with GET /rest/vcenter/vm, which the "
        "simulator's REST side does not serve (only DELETE and data-sets under vcenter/vm)"
    ),
}
KDUMP_SENDER = "/usr/libexec/fence-agents/fence_kdump_send"


def udp_bound(port: int) -> bool:
    """Some socket of this machine is bound to UDP ``port`` (IPv4 or IPv6), from ``/proc/net/udp*``."""
    suffix = f":{port:04X}"
    for path in ("/proc/net/udp", "/proc/net/udp6"):
        with open(path) as table:
            next(table)
            if any(line.split()[1].endswith(suffix) for line in table):
                return True
    return False


def kdump_cases(port: int, playbook: Playbook, n: int) -> list[dict]:
    """kdump: ``fence_kdump`` (the listener) vs ``KdumpListener`` and ``kdump_wait``, each
    receiving one message from ``fence_kdump_send`` on 127.0.0.1:``port``.

    A run: start the listener, poll until ``port`` is bound, start the sender (``-c 1``), stop
    when the listener returns with the message. The sender is reaped, untimed, before the next run.
    """
    from ansible_collections.noderemedy.core.plugins.module_utils._kdump import KdumpListener

    senders: list[subprocess.Popen] = []

    def send_when_bound() -> None:
        deadline = time.monotonic() + 60
        while not udp_bound(port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no listener bound UDP {port} within 60 s")
            time.sleep(0.0005)
        sender = [KDUMP_SENDER, "-p", str(port), "-f", "ipv4", "-c", "1", "-i", "1", "127.0.0.1"]
        senders.append(subprocess.Popen(sender, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def reap() -> None:
        while senders:
            senders.pop().wait(30)
        if udp_bound(port):
            raise RuntimeError(f"UDP {port} still bound between runs")

    def process(argv: list[str], env: dict[str, str] | None = None) -> Callable[[], None]:
        def once() -> None:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
            send_when_bound()
            out = proc.communicate(timeout=120)[0]
            if proc.returncode != 0:
                raise RuntimeError(f"{Path(argv[0]).name} exited {proc.returncode}: {out[-1500:]}")

        return once

    def library() -> None:
        result: dict = {}

        def listen() -> None:
            listener = KdumpListener(["127.0.0.1"], ipport=port, listen_address="127.0.0.1", timeout=30)
            result.update(listener.wait())

        thread = threading.Thread(target=listen)
        thread.start()
        send_when_bound()
        thread.join(60)
        if result.get("received") is not True or result["fence"]["verified"] is not True:
            raise RuntimeError(f"kdump_wait as a library: no verified message: {result}")

    margs = {"nodename": ["127.0.0.1"], "ipport": port, "listen_address": "127.0.0.1", "timeout": 30}
    book = playbook.argv("noderemedy.core.kdump_wait", margs)
    agent = [
        "/usr/sbin/fence_kdump",
        "-n",
        "127.0.0.1",
        "-p",
        str(port),
        "-f",
        "ipv4",
        "-t",
        "30",
        "-o",
        "off",
    ]
    got = interleaved(
        {
            "anchor": process(agent),
            "lib": library,
            "book": process(book, playbook.env),
            "noop": playbook("", None),
        },
        reap,
        n,
    )
    reap()
    a = "fence_kdump -f ipv4 -o off, receiving fence_kdump_send -c 1"
    return [
        {"case": "kdump message received, library", "ours_s": got["lib"], "anchor": a, "anchor_s": got["anchor"],
         "target": 0.5},
        {"case": "kdump message received, playbook - no-op", "ours_s": got["book"] - got["noop"], "anchor": a,
         "anchor_s": got["anchor"], "target": 1.0, "noop_playbook_s": got["noop"]},
        {"case": "kdump message received, ansible-playbook", "ours_s": got["book"], "anchor": a,
         "anchor_s": got["anchor"]},
    ]  # fmt: skip


def aws_cases(ep: dict, playbook: Playbook, n: int) -> list[dict]:
    """EC2 (moto, ``POWER_DELAY`` s per transition) status: ``AwsInstanceDriver`` and
    ``aws_instance_power`` vs ``fence_aws -o status`` (through ``loopback_agent.py``, with this
    venv's boto3 and ``AWS_ENDPOINT_URL_EC2``). Off is not measured (``NOT_MEASURED``)."""
    from ansible_collections.noderemedy.core.plugins.module_utils._aws import AwsInstanceDriver

    c = ep["credentials"]["fencer"]
    instance = ep["instances"]["lab-node-1"]

    def status_lib() -> None:
        res = AwsInstanceDriver(
            instance, ep["region"], c["access_key"], c["secret_key"], ep["endpoint_url"]
        ).run("status")
        assert res.after == {instance: "on"}, res.after

    env = dict(os.environ)
    env.update(
        {
            "AWS_ENDPOINT_URL_EC2": ep["endpoint_url"],
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    agent = [sys.executable, str(ROOT / "bench" / "loopback_agent.py"), "/usr/sbin/fence_aws"]
    agent += [
        "--region",
        ep["region"],
        "-a",
        c["access_key"],
        "-s",
        c["secret_key"],
        "-n",
        instance,
        "-o",
        "status",
    ]
    margs = {
        "plug": instance, "region": ep["region"], "access_key": c["access_key"], "secret_key": c["secret_key"],
        "endpoint_url": ep["endpoint_url"], "state": "status",
    }  # fmt: skip
    got = interleaved(
        {
            "anchor": lambda: run(agent, env),
            "lib": status_lib,
            "book": playbook("noderemedy.core.aws_instance_power", margs),
            "noop": playbook("", None),
        },
        None,
        n,
    )
    a = "fence_aws -o status (venv boto3, AWS_ENDPOINT_URL_EC2)"
    return [
        {"case": "aws status, library", "ours_s": got["lib"], "anchor": a, "anchor_s": got["anchor"]},
        {"case": "aws status, playbook - no-op", "ours_s": got["book"] - got["noop"], "anchor": a,
         "anchor_s": got["anchor"], "noop_playbook_s": got["noop"]},
        {"case": "aws status, ansible-playbook", "ours_s": got["book"], "anchor": a, "anchor_s": got["anchor"]},
    ]  # fmt: skip


def redfish_cases(ep: dict, playbook: Playbook, n: int) -> list[dict]:
    """Redfish (sushy-tools emulator, ``POWER_DELAY`` s per transition) vs ``fence_redfish``.

    The agent has no CA option, so it runs with ``--ssl-insecure``; ours verifies the emulator's
    certificate with its CA (``ca_path``). The ansible-playbook rows subtract the same play with a
    ``meta: noop`` task, measured in the same rounds.
    """
    from ansible_collections.noderemedy.core.plugins.module_utils._redfish import RedfishDriver

    uri = ep["systems"]["lab-node-1"]["uri"]

    def driver(**kw: object) -> RedfishDriver:
        return RedfishDriver(
            ep["host"], ep["username"], ep["password"], ipport=ep["port"], ca_path=ep["ca_file"],
            systems_uri=uri, **kw,
        )  # fmt: skip

    def on() -> None:
        assert driver().run("on").after == {uri: "on"}

    def off_lib() -> None:
        assert driver(poll_interval=0.01).run("off").after == {uri: "off"}

    agent = ["/usr/sbin/fence_redfish", "-a", ep["host"], "-u", str(ep["port"]), "-l", ep["username"]]
    agent += ["-p", ep["password"], "--ssl-insecure", "--systems-uri", uri]
    margs = {
        "ipaddr": ep["host"], "ipport": ep["port"], "username": ep["username"], "password": ep["password"],
        "ca_path": ep["ca_file"], "systems_uri": uri, "poll_interval": 0.01,
    }  # fmt: skip
    noop = playbook("", None)
    off = interleaved(
        {
            "anchor": lambda: run([*agent, "-o", "off"]),
            "lib": off_lib,
            "book": playbook("noderemedy.core.redfish_power", {**margs, "state": "off"}),
            "noop": noop,
        },
        on,
        n,
    )
    on()
    status = interleaved(
        {
            "anchor": lambda: run([*agent, "-o", "status"]),
            "lib": lambda: driver().run("status"),
            "book": playbook("noderemedy.core.redfish_power", {**margs, "state": "status"}),
            "noop": noop,
        },
        None,
        n,
    )
    a_off, a_st = "fence_redfish --ssl-insecure -o off", "fence_redfish --ssl-insecure -o status"
    return [
        {"case": "redfish off+verified, library", "ours_s": off["lib"], "anchor": a_off,
         "anchor_s": off["anchor"], "target": 0.5},
        {"case": "redfish off+verified, playbook - no-op", "ours_s": off["book"] - off["noop"],
         "anchor": a_off, "anchor_s": off["anchor"], "target": 1.0, "noop_playbook_s": off["noop"]},
        {"case": "redfish off+verified, ansible-playbook", "ours_s": off["book"], "anchor": a_off,
         "anchor_s": off["anchor"]},
        {"case": "redfish status, library", "ours_s": status["lib"], "anchor": a_st, "anchor_s": status["anchor"]},
        {"case": "redfish status, playbook - no-op", "ours_s": status["book"] - status["noop"], "anchor": a_st,
         "anchor_s": status["anchor"], "noop_playbook_s": status["noop"]},
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--port-base", type=int, default=27000)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fencing.json")
    parser.add_argument(
        "--cases", default=",".join(CASES), help=f"comma-separated device groups (default {','.join(CASES)})"
    )
    opts = parser.parse_args()
    if opts.samples < 5:
        parser.error("--samples: at least 5")
    cases = [c for c in opts.cases.split(",") if c]
    if not cases or set(cases) - set(CASES):
        parser.error(f"--cases: expected some of {','.join(CASES)}, got {opts.cases!r}")

    sys.path.insert(0, str(ROOT / "lab"))
    from noderemedy_lab.config import LabConfig
    from noderemedy_lab.lab import Lab

    tmp = Path(tempfile.mkdtemp(prefix="nr-bench-fencing-"))
    os.chmod(tmp, 0o755)
    collections = _collections_path(tmp)
    from ansible_collections.noderemedy.core.plugins.module_utils._fc_switch import FcSwitchDriver
    from ansible_collections.noderemedy.core.plugins.module_utils._ipmi import IpmiDriver
    from ansible_collections.noderemedy.core.plugins.module_utils._pdu import PROFILES, PduDriver
    from ansible_collections.noderemedy.core.plugins.module_utils._snmp import SnmpClient

    load_before = os.getloadavg()
    lab = Lab(LabConfig(workdir=tmp / "lab", kube=False, port_base=opts.port_base))
    lab.start(progress=lambda line: print(f"[lab] {line}", file=sys.stderr))
    entries: list[dict] = []
    try:
        dev = lab.info["devices"]
        agent_env = dict(os.environ, SNMP_PERSISTENT_DIR=dev["snmp_persistent_dir"])
        playbook = Playbook(tmp, collections)
        n = opts.samples

        # ---------------------------------------------------------------- IPMI
        bmc = dev["bmcs"]["lab-node-0"]
        power_file = Path(bmc["power_file"])

        def ipmi(**kw: object) -> IpmiDriver:
            return IpmiDriver(bmc["host"], bmc["username"], bmc["password"], ipport=bmc["port"], **kw)

        def ipmi_on() -> None:
            ipmi().run("on")
            assert power_file.read_text().strip() == "1"

        if "ipmi" in cases:

            def ipmi_off_lib() -> None:
                res = ipmi(poll_interval=0.01).run("off")
                assert res.after == {"chassis": "off"} and power_file.read_text().strip() == "0"

            agent = [
                "/usr/sbin/fence_ipmilan",
                "-a",
                bmc["host"],
                "-u",
                str(bmc["port"]),
                "-l",
                bmc["username"],
            ]
            agent += ["-p", bmc["password"], "-P", "--cipher=3"]
            module_args = {
                "ipaddr": bmc["host"],
                "ipport": bmc["port"],
                "username": bmc["username"],
                "password": bmc["password"],
                "poll_interval": 0.01,
            }
            default = "fence_ipmilan --cipher=3 -o off (default power-wait 2 s)"
            pw0 = "fence_ipmilan --cipher=3 --power-wait=0 -o off"
            off = interleaved(
                {
                    default: lambda: run([*agent, "-o", "off"], agent_env),
                    pw0: lambda: run([*agent, "--power-wait=0", "-o", "off"], agent_env),
                    "lib": ipmi_off_lib,
                    "book": playbook("noderemedy.core.ipmi_power", {**module_args, "state": "off"}),
                },
                ipmi_on,
                n,
            )
            anchors = {default: off[default], pw0: off[pw0]}
            lib, book = off["lib"], off["book"]
            entries += [
                {
                    "case": "ipmi off+verified, library",
                    "ours_s": lib,
                    "anchor": pw0,
                    "anchor_s": anchors[pw0],
                    "target": 0.5,
                },
                {
                    "case": "ipmi off+verified, library",
                    "ours_s": lib,
                    "anchor": default,
                    "anchor_s": anchors[default],
                },
                {
                    "case": "ipmi off+verified, ansible-playbook",
                    "ours_s": book,
                    "anchor": default,
                    "anchor_s": anchors[default],
                    "target": 1.0,
                },
                {
                    "case": "ipmi off+verified, ansible-playbook",
                    "ours_s": book,
                    "anchor": pw0,
                    "anchor_s": anchors[pw0],
                },
            ]
            ipmi_on()
            status = interleaved(
                {
                    "anchor": lambda: run([*agent, "-o", "status"], agent_env),
                    "lib": lambda: ipmi().run("status"),
                    "book": playbook("noderemedy.core.ipmi_power", {**module_args, "state": "status"}),
                },
                None,
                n,
            )
            entries += [
                {
                    "case": "ipmi status, library",
                    "ours_s": status["lib"],
                    "anchor": "fence_ipmilan --cipher=3 -o status",
                    "anchor_s": status["anchor"],
                },
                {
                    "case": "ipmi status, ansible-playbook",
                    "ours_s": status["book"],
                    "anchor": "fence_ipmilan --cipher=3 -o status",
                    "anchor_s": status["anchor"],
                },
            ]

        # ---------------------------------------------------------------- SNMP devices
        def snmp_cases(
            kind: str, ep: dict, plug: str, driver, agent_argv: list[str], module: str, margs: dict
        ):
            def reset() -> None:
                driver().run("on")

            def off_lib() -> None:
                res = driver().run("off")
                assert set(res.after.values()) == {"off"}

            status_ok = (0, 2)  # fence agents exit 2 for status "off"
            off_state = "disabled" if kind == "fc" else "off"
            off = interleaved(
                {
                    "anchor": lambda: run([*agent_argv, "-o", "off"], agent_env),
                    "lib": off_lib,
                    "book": playbook(module, {**margs, "state": off_state}),
                },
                reset,
                n,
            )
            status = interleaved(
                {
                    "anchor": lambda: run([*agent_argv, "-o", "status"], agent_env, status_ok),
                    "lib": lambda: driver().run("status"),
                    "book": playbook(module, {**margs, "state": "status"}),
                },
                reset,
                n,
            )
            name = " ".join(Path(agent_argv[0]).name.split())
            return [
                {
                    "case": f"{kind} off+verified, library",
                    "ours_s": off["lib"],
                    "anchor": f"{name} -o off",
                    "anchor_s": off["anchor"],
                    "target": 0.5,
                },
                {
                    "case": f"{kind} off+verified, ansible-playbook",
                    "ours_s": off["book"],
                    "anchor": f"{name} -o off",
                    "anchor_s": off["anchor"],
                    "target": 1.0,
                },
                {
                    "case": f"{kind} status, library",
                    "ours_s": status["lib"],
                    "anchor": f"{name} -o status",
                    "anchor_s": status["anchor"],
                },
                {
                    "case": f"{kind} status, ansible-playbook",
                    "ours_s": status["book"],
                    "anchor": f"{name} -o status",
                    "anchor_s": status["anchor"],
                },
            ]

        if "pdu" in cases:
            rpdu = dev["snmp"]["apc-rpdu"]
            outlet = str(dev["outlets"]["lab-node-1"])

            def pdu_driver() -> PduDriver:
                client = SnmpClient(rpdu["host"], rpdu["port"], "2c", community=rpdu["community"])
                return PduDriver(client, [outlet], PROFILES["apc_rpdu"], poll_interval=0.01)

            pdu_agent = [
                "/usr/sbin/fence_apc_snmp",
                "-a",
                rpdu["host"],
                "-u",
                str(rpdu["port"]),
                "-c",
                rpdu["community"],
            ]
            pdu_agent += ["-d", "2c", "-n", outlet]
            pdu_args = {
                "ipaddr": rpdu["host"],
                "ipport": rpdu["port"],
                "community": rpdu["community"],
                "plug": [outlet],
                "profile": "apc_rpdu",
                "poll_interval": 0.01,
            }
            entries += snmp_cases(
                "pdu", rpdu, outlet, pdu_driver, pdu_agent, "noderemedy.core.pdu_outlet", pdu_args
            )

        if "fc" in cases:
            fc = dev["snmp"]["fc"]
            port = dev["fc_ports"]["lab-node-1"]
            index = port.split("/")[1]

            def fc_driver() -> FcSwitchDriver:
                client = SnmpClient(fc["host"], fc["port"], "2c", community=fc["community"])
                return FcSwitchDriver(client, [index], profile="ifmib", poll_interval=0.01)

            fc_agent = [
                "/usr/sbin/fence_ifmib",
                "-a",
                fc["host"],
                "-u",
                str(fc["port"]),
                "-c",
                fc["community"],
            ]
            fc_agent += ["-n", index]
            fc_args = {
                "ipaddr": fc["host"],
                "ipport": fc["port"],
                "community": fc["community"],
                "plug": [index],
                "poll_interval": 0.01,
            }
            entries += snmp_cases("fc", fc, index, fc_driver, fc_agent, "noderemedy.core.fc_port", fc_args)
        if "redfish" in cases:
            entries += redfish_cases(lab.ensure_peer("redfish"), playbook, n)
        if "kdump" in cases:
            entries += kdump_cases(lab.config.port("kdump"), playbook, n)
        if "aws" in cases:
            entries += aws_cases(lab.ensure_peer("ec2"), playbook, n)
        ipmi_on()
    finally:
        lab.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    for e in entries:
        e["ours_s"] = round(e["ours_s"], 4)
        e["anchor_s"] = round(e["anchor_s"], 4)
        e["ratio"] = round(e["ours_s"] / e["anchor_s"], 3)
        e["samples"] = opts.samples
        if "target" in e:
            e["meets_target"] = e["ratio"] <= e["target"]
        if "noop_playbook_s" in e:
            e["noop_playbook_s"] = round(e["noop_playbook_s"], 4)
        e["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        # ansible-playbook is CPU-bound (about 1 s unloaded) while fence_ipmilan mostly sleeps:
        # a busy host moves the playbook ratios far more than the library ones
        "load_average_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    statistic = f"median of {opts.samples} wall-clock runs after one warm-up, ours and anchor interleaved"
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {"benchmark": "fencing", "generated_at": now, "machine": machine, "statistic": statistic}
    printed = entries
    if set(cases) != set(CASES) and opts.out.exists():
        # a partial run replaces only its own device groups' rows; the file keeps the full run's
        # date and load, and lists the partial runs with theirs
        old = json.loads(opts.out.read_text())
        kept = [e for e in old.get("entries", []) if e["case"].split()[0] not in cases]
        partial = [p for p in old.get("partial_runs", []) if not set(p["cases"]) <= set(cases)]
        partial.append({"cases": cases, "generated_at": now, "machine": machine, "statistic": statistic})
        doc = {k: old[k] for k in ("benchmark", "generated_at", "machine", "statistic") if k in old}
        doc["partial_runs"] = partial
        entries = kept + entries
    doc["entries"] = entries
    doc["not_measured"] = NOT_MEASURED
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(doc, indent=1) + "\n")

    head = f"{'case':38} {'ours s':>8} {'anchor':52} {'anchor s':>9} {'ratio':>6} {'target':>6}"
    print(head)
    print("-" * len(head))
    for e in printed:
        target = f"<={e['target']}" if "target" in e else ""
        flag = "" if e.get("meets_target", True) else "  MISSED"
        print(
            f"{e['case']:38} {e['ours_s']:8.4f} {e['anchor']:52} {e['anchor_s']:9.4f} {e['ratio']:6.3f} {target:>6}{flag}"
        )
    print("\nnot measured:")
    for what, why in NOT_MEASURED.items():
        print(f"  {what}: {why}")
    print(f"\nwritten: {opts.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
