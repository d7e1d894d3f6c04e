"""The device groups of bench/fencing.py that are measured by a function of their own: Redfish
(the sushy-tools emulator), kdump (``fence_kdump_send`` on loopback) and EC2 status (moto). Each
runs its fence agent, our driver as a library and our module through ``ansible-playbook`` in
interleaved rounds and returns its rows of ``bench/results/fencing.json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fencing_runs import ROOT, Playbook, interleaved, run

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
