#!/usr/bin/env python3
"""Run a Python fence agent from fence-agents with this interpreter, able to reach 127.0.0.0/8 only.

Usage: ``python bench/loopback_agent.py /usr/sbin/fence_aws [agent options...]``

Why: the benchmark runs ``fence_aws -o status`` against the lab's moto. Debian's ``fence_aws``
4.12 runs under Debian's boto3 1.26, which has no way to point EC2 at another endpoint; this
interpreter's boto3 honours ``AWS_ENDPOINT_URL_EC2``. fence-agents' ``fencing.py`` imports
``pycurl``, which is loaded from Debian's build (``python3-pycurl``, a fence-agents dependency;
same CPython ABI) rather than installed a second time.

The lab may send to 127.0.0.0/8 only. Before the agent runs, every name lookup other than
``localhost`` or a loopback address, and every TCP connect or UDP send to another address, is
refused with ``OSError`` in this process, before any packet leaves it (``fence_aws -o off`` would
ask the instance metadata service 169.254.169.254; the benchmark never runs ``off``, and this
guard makes a mistake fail here instead of on the network). Exit status: the agent's.
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import ipaddress
import os
import runpy
import socket
import sys
from typing import Any


def check_address(address: Any) -> None:
    """OSError unless ``address`` (a socket address tuple; others, such as Unix paths, pass) is a
    loopback IP address."""
    if not isinstance(address, tuple) or not address:
        return
    try:
        loopback = ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise OSError(f"loopback-only: refused to reach {address[0]!r} (the lab may use 127.0.0.0/8 only)")


def check_host(host: Any) -> None:
    """OSError unless ``host`` (a getaddrinfo host) is ``localhost``, a loopback address or None."""
    if host is None or (isinstance(host, (str, bytes)) and (host in ("localhost", b"localhost"))):
        return
    name = host.decode() if isinstance(host, bytes) else str(host)
    check_address((name, 0))


def install_guard() -> None:
    """Wrap ``socket.getaddrinfo``, ``socket.socket.connect``/``connect_ex``/``sendto`` with the checks."""
    getaddrinfo, connect, connect_ex, sendto = (
        socket.getaddrinfo,
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.socket.sendto,
    )

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        check_host(host)
        return getaddrinfo(host, *args, **kwargs)

    def guarded_connect(self: socket.socket, address: Any) -> None:
        check_address(address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        check_address(address)
        return connect_ex(self, address)

    def guarded_sendto(self: socket.socket, data: Any, *args: Any) -> int:
        check_address(args[-1])
        return sendto(self, data, *args)

    socket.getaddrinfo = guarded_getaddrinfo  # type: ignore[assignment]
    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.socket.sendto = guarded_sendto  # type: ignore[method-assign,assignment]


def load_debian_pycurl() -> None:
    """Make ``import pycurl`` load Debian's ``python3-pycurl`` extension when this interpreter lacks one."""
    try:
        import pycurl  # noqa: F401
    except ImportError:
        found = glob.glob(
            f"/usr/lib/python3/dist-packages/pycurl.cpython-{sys.version_info[0]}{sys.version_info[1]}-*.so"
        )
        if not found:
            sys.exit("loopback_agent: no pycurl for this Python (Debian package python3-pycurl)")
        loader = importlib.machinery.ExtensionFileLoader("pycurl", found[0])
        spec = importlib.util.spec_from_file_location("pycurl", found[0], loader=loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        sys.modules["pycurl"] = module


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__.split("\n\n")[1])
    install_guard()
    load_debian_pycurl()
    agent = sys.argv[1]
    sys.argv = sys.argv[1:]
    # as if the agent were run itself: its own directory first, not this one (bench/fencing.py
    # would shadow fence-agents' fencing module)
    sys.path[0] = os.path.dirname(os.path.abspath(agent))
    runpy.run_path(agent, run_name="__main__")


if __name__ == "__main__":
    main()
