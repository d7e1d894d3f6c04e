"""``noderemedy.core.kdump_wait`` and the kdump listener against fence-agents' real sender.

The peer is ``fence_kdump_send`` (fence-agents), the program a crashed node's kdump kernel runs;
here it runs on this machine and sends to 127.0.0.1. No lab processes are needed. The port is
``NODEREMEDY_LAB_PORT_BASE`` + 17 (the lab's port layout).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from kube_helpers import wait_for

from ansible_collections.noderemedy.core.plugins.module_utils._fence import FenceConfigError, UnreachableError
from ansible_collections.noderemedy.core.plugins.module_utils._kdump import KdumpListener, is_kdump_message
from ansible_collections.noderemedy.core.plugins.module_utils._taint import validate_fence_evidence
from noderemedy_lab.procs import udp_listening

SENDER = "/usr/libexec/fence-agents/fence_kdump_send"
MODULE = "noderemedy.core.kdump_wait"
PORT = int(os.environ.get("NODEREMEDY_LAB_PORT_BASE", "24000")) + 17


@pytest.fixture()
def sender() -> Iterator[subprocess.Popen]:
    """fence_kdump_send to 127.0.0.1, one message a second for at most 30 s (as a kdump kernel does)."""
    proc = subprocess.Popen(
        [SENDER, "-p", str(PORT), "-f", "ipv4", "-i", "1", "-c", "30", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield proc
    proc.terminate()
    proc.wait(10)


def test_the_sender_message_is_the_protocol_we_read() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", PORT))
        s.settimeout(10)
        subprocess.run([SENDER, "-p", str(PORT), "-c", "1", "-i", "1", "127.0.0.1"], check=True, timeout=10)
        data, _ = s.recvfrom(64)
    assert is_kdump_message(data) and struct.unpack("<II", data) == (0x1B302A40, 1)


def test_a_kdump_message_from_the_node_is_a_verified_fence(sender) -> None:
    out = KdumpListener(["127.0.0.1"], ipport=PORT, listen_address="127.0.0.1", timeout=15).wait()
    assert out["received"] is True and out["source"] == "127.0.0.1" and out["waited"] < 15
    fence = out["fence"]
    assert fence["verified"] is True and fence["method"] == "kdump" and fence["state"] == "kdump"
    checked = validate_fence_evidence(fence, 300, time.time())
    assert checked["age"] < 15, "node_taint accepts the kdump evidence for workload release"


def test_module_in_a_playbook(sender, run_playbook) -> None:
    res = run_playbook(
        [
            {
                "name": "wait",
                MODULE: {
                    "nodename": ["localhost"],
                    "ipport": PORT,
                    "listen_address": "127.0.0.1",
                    "timeout": 15,
                },
            }
        ]
    )
    out = res.task("wait")
    assert out.get("failed") is not True, out
    assert out["changed"] is False and out["received"] is True and out["fence"]["verified"] is True
    assert out["fence"]["plugs"] == ["localhost"]


def test_no_message_within_timeout_is_not_a_failure_and_no_fence(run_playbook) -> None:
    t0 = time.monotonic()
    res = run_playbook([{"name": "wait", MODULE: {"nodename": ["127.0.0.1"], "ipport": PORT, "timeout": 1}}])
    out = res.task("wait")
    assert out.get("failed") is not True and out["received"] is False
    assert out["fence"]["verified"] is False and out["fence"]["verified_at"] is None
    assert any("no kdump message" in w for w in out.get("warnings", []))
    assert time.monotonic() - t0 < 60


def test_messages_from_other_addresses_or_with_another_magic_are_ignored(sender) -> None:
    listener = KdumpListener(["127.0.0.2"], ipport=PORT, listen_address="127.0.0.1", timeout=2.5)
    out = listener.wait()  # the sender's messages come from 127.0.0.1, not the node's address
    assert out["received"] is False and out["fence"]["verified"] is False
    assert listener.ignored and all(reason == "not an address of the node" for _, reason in listener.ignored)
    listener = KdumpListener(["127.0.0.1"], ipport=PORT + 1, listen_address="127.0.0.1", timeout=5)

    def send_once_bound(bogus: socket.socket) -> None:
        # the listener binds its port in wait(): a datagram sent before that is lost
        wait_for(lambda: udp_listening(PORT + 1), 30, "the listener's port bound", interval=0.01)
        bogus.sendto(struct.pack("<II", 0xDEADBEEF, 1), ("127.0.0.1", PORT + 1))

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as bogus:
        bogus.bind(("127.0.0.1", 0))
        timer = threading.Thread(target=send_once_bound, args=(bogus,), daemon=True)
        timer.start()
        out = listener.wait()
        timer.join()
    assert out["received"] is False and listener.ignored == [("127.0.0.1", "not a fence_kdump message")]


def test_bad_input_and_a_busy_port() -> None:
    with pytest.raises(FenceConfigError, match="^nodename:"):
        KdumpListener([], ipport=PORT)
    with pytest.raises(FenceConfigError, match="does not resolve"):
        KdumpListener(["no-such-host.invalid"], ipport=PORT)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", PORT))
        with pytest.raises(UnreachableError, match="cannot listen"):
            KdumpListener(["127.0.0.1"], ipport=PORT, listen_address="127.0.0.1", timeout=1).wait()
