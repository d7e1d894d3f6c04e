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

This file holds the IPMI and SNMP (PDU, FC switch) cases and the result document;
``bench/fencing_runs.py`` the timed rounds and the playbook runs; ``bench/fencing_peers.py`` the
Redfish, kdump and EC2 cases.

Usage: ``.venv/bin/python bench/fencing.py [--samples N] [--port-base P] [--out PATH] [--cases ipmi,redfish]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from fencing_peers import aws_cases, kdump_cases, redfish_cases  # noqa: E402
from fencing_runs import Playbook, collections_path, interleaved, run  # noqa: E402

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
    collections = collections_path(tmp)
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
