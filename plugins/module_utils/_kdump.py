# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The listening side of fence-agents' kdump protocol (``fence_kdump``).

A node that panics boots its kdump crash kernel, whose ``fence_kdump_send`` sends, every
``--interval`` seconds, one UDP datagram to port 7410 of each cluster member: 8 bytes, the magic
number ``0x1B302A40`` and the message version ``1``, each a 32-bit integer in the sender's byte
order (fence-agents ``agents/kdump/fence_kdump.h``: ``fence_kdump_msg_t``; x86 and arm64 send
little endian, both orders are accepted here). ``fence_kdump`` treats the node as fenced once a
valid message arrives *from one of the node's addresses*: the node is running its crash kernel,
so nothing of its workloads runs. Datagrams from other addresses, with another magic number or
version, or of another size are ignored, as ``fence_kdump`` does.

:class:`KdumpListener` waits up to ``timeout`` seconds (``fence_kdump --timeout``, default 60) and
returns the same ``fence`` evidence shape as the power drivers (``_fence.FenceDriver.evidence``)
with method ``kdump`` and state ``kdump``.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    FenceConfigError,
    UnreachableError,
)

#: fence_kdump.h ``FENCE_KDUMP_MAGIC_NUMBER`` and ``FENCE_KDUMP_MSGV1``.
MAGIC = 0x1B302A40
VERSION_1 = 0x1
#: fence_kdump's default port.
DEFAULT_PORT = 7410
#: The state a kdump fence proves (the node runs its crash kernel).
KDUMP_STATE = "kdump"

#: kdump listener options; documented 1:1 by ``doc_fragments/fence.py`` ``KDUMP`` (fence_kdump names).
KDUMP_ARG_SPEC: dict[str, dict[str, Any]] = {
    "nodename": {"type": "list", "elements": "str", "required": True},
    "ipport": {"type": "int", "default": DEFAULT_PORT},
    "family": {"type": "str", "default": "auto", "choices": ["auto", "ipv4", "ipv6"]},
    "listen_address": {"type": "str"},
    "timeout": {"type": "float", "default": 60.0},
}


def is_kdump_message(data: bytes) -> bool:
    """True for a ``fence_kdump_send`` message: 8 bytes, magic and version 1 (either byte order)."""
    if len(data) != 8:
        return False
    return any(struct.unpack(f"{order}II", data) == (MAGIC, VERSION_1) for order in "<>")


def resolve_addresses(names: list[str], family: str = "auto") -> set[str]:
    """Every address of ``names`` (host names or addresses), as ``fence_kdump`` resolves
    ``--nodename``. Raises FenceConfigError naming ``nodename`` for a name that does not resolve."""
    fam = {"auto": socket.AF_UNSPEC, "ipv4": socket.AF_INET, "ipv6": socket.AF_INET6}[family]
    out: set[str] = set()
    for name in names:
        try:
            infos = socket.getaddrinfo(name, None, fam, socket.SOCK_DGRAM)
        except socket.gaierror as exc:
            raise FenceConfigError(f"nodename: {name!r} does not resolve ({exc.strerror})") from None
        out.update(str(ipaddress.ip_address(info[4][0].split("%")[0])) for info in infos)
    return out


class KdumpListener:
    """Wait for the kdump message of one node.

    Args:
        nodename: the node's host names or addresses; messages from any of their addresses count.
        ipport: UDP port to listen on (fence_kdump ``--ipport``, 7410).
        family: ``auto``, ``ipv4`` or ``ipv6`` (fence_kdump ``--family``).
        listen_address: address to bind (default: every address of the family).
        timeout: seconds to wait for the message (> 0).
        clock: monotonic seconds (injectable); wall: epoch seconds (injectable).
    Raises:
        FenceConfigError: an empty nodename, a bad port or timeout, a name that does not resolve.
    """

    method = "kdump"

    def __init__(
        self,
        nodename: list[str],
        ipport: int = DEFAULT_PORT,
        family: str = "auto",
        listen_address: str | None = None,
        timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not nodename:
            raise FenceConfigError("nodename: at least one host name or address of the node is required")
        if not 1 <= ipport <= 65535:
            raise FenceConfigError(f"ipport: {ipport} is not a UDP port (1-65535)")
        if timeout is None or timeout <= 0:
            raise FenceConfigError(f"timeout: must be > 0 seconds, got {timeout!r}")
        self.nodename = list(nodename)
        self.addresses = resolve_addresses(self.nodename, family)
        if family == "auto":
            v6 = any(":" in a for a in self.addresses) and not any("." in a for a in self.addresses)
            family = "ipv6" if v6 else "ipv4"
        self.family = family
        self.ipport = ipport
        self.listen_address = listen_address or ("::" if family == "ipv6" else "0.0.0.0")
        self.timeout = float(timeout)
        self.target = f"{self.listen_address}:{ipport}"
        self._clock = clock
        self._wall = wall
        #: (source address, reason) of every datagram ignored while waiting.
        self.ignored: list[tuple[str, str]] = []

    def wait(self) -> dict[str, Any]:
        """Listen until a valid message from the node arrives or ``timeout`` seconds pass.

        Returns ``{"received": bool, "source": address | None, "waited": seconds, "fence":
        evidence}``; a timeout is not an error (the power step runs next). Raises
        UnreachableError when the port cannot be bound (in use, no such address).
        """
        fam = socket.AF_INET6 if self.family == "ipv6" else socket.AF_INET
        sock = socket.socket(fam, socket.SOCK_DGRAM)
        try:
            try:
                sock.bind((self.listen_address, self.ipport))
            except OSError as exc:
                raise UnreachableError(
                    f"cannot listen on UDP {self.target}: {exc.strerror}", self.target
                ) from None
            start = self._clock()
            deadline = start + self.timeout
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    return {
                        "received": False,
                        "source": None,
                        "waited": self._clock() - start,
                        "fence": self.evidence(None),
                    }
                readable = select.select([sock], [], [], left)[0]
                if not readable:
                    continue
                data, peer = sock.recvfrom(64)
                source = str(ipaddress.ip_address(peer[0].split("%")[0]))
                if source.startswith("::ffff:"):
                    source = source[7:]
                if source not in self.addresses:
                    self.ignored.append((source, "not an address of the node"))
                elif not is_kdump_message(data):
                    self.ignored.append((source, "not a fence_kdump message"))
                else:
                    return {
                        "received": True,
                        "source": source,
                        "waited": self._clock() - start,
                        "fence": self.evidence(self._wall()),
                    }
        finally:
            sock.close()

    def evidence(self, verified_at: float | None) -> dict[str, Any]:
        """The ``fence`` evidence (shape of ``_fence.FenceDriver.evidence``); plugs: the node's names."""
        return {
            "verified": verified_at is not None,
            "method": self.method,
            "target": self.target,
            "plugs": list(self.nodename),
            "state": KDUMP_STATE if verified_at is not None else None,
            "verified_at": verified_at,
        }
