"""The lab's fencing devices on 127.0.0.1: BMCs (OpenIPMI ipmi_sim), PDUs and FC switches (SNMP).

Entry point for :mod:`noderemedy_lab.lab`: :func:`start_devices` starts them all through the lab's
:class:`~noderemedy_lab.procs.Supervisor` and returns their endpoints and per-run credentials;
:func:`set_status_delay` makes an snmpd peer slow; :func:`set_bmc_mode` makes a BMC lie (accept power
commands and change nothing) or fall silent; :func:`ensure_simvenv` builds snmpsim's venv.
Details of each peer: :mod:`noderemedy_lab.bmc`, :mod:`noderemedy_lab.snmp`.
"""

from __future__ import annotations

import re
import shutil

from .bmc import BMC_MODES, Pending, set_bmc_mode, set_ignore_power, start_bmcs, validate_power_hook
from .config import LabConfig
from .procs import ComponentError, Supervisor
from .snmp import PEERS, ensure_simvenv, set_status_delay, start_snmpd, start_snmpsim

__all__ = [
    "BMC_MODES",
    "start_devices",
    "ensure_simvenv",
    "set_status_delay",
    "set_bmc_mode",
    "set_ignore_power",
]

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


def start_devices(
    sup: Supervisor, cfg: LabConfig, node_names: list[str], power_hook: list[str] | None
) -> dict:
    """Start every device peer under ``cfg.workdir / "devices"`` and return their endpoints.

    Started, in order, each after checking its UDP port is free, then each waited on until it
    listens (they boot in parallel): one ``ipmi_sim`` per node (``cfg.bmc_port(i)``), snmpd ``apc-rpdu`` and ``fc``
    (``cfg.port("snmpd-pdu"|"snmpd-fc")``), snmpsim ``apc-ms``, ``eaton``, ``fc-sim``
    (``cfg.port("snmpsim-apc"|"snmpsim-eaton"|"snmpsim-fc")``). Everything is started through
    ``sup``: on error the caller stops what was started with ``sup.stop_all()``.

    Args:
        sup: the lab's supervisor (process names ``bmc <node>``, ``snmpd-pdu``, ``snmpd-fc``,
            ``snmpsim-apc``, ``snmpsim-eaton``, ``snmpsim-fc``).
        cfg: ports and working directory.
        node_names: the nodes, in index order (unique RFC 1123 names, e.g. ``lab-node-0``); node i
            gets BMC port ``cfg.bmc_port(i)``, PDU outlet i+1 and FC port ``fc1/<i+1>``. PDUs and
            switches have max(8, len(node_names)) outlets / ports; the spare ones are named
            ``outlet<N>`` / ``fc1/<N>``.
        power_hook: argv the BMC runs as ``power_hook + [node, "0"|"1"]`` after recording every power
            set (synchronously, bounded to 10 s; failures logged to ``events.log`` next to the power
            file), or None.

    Returns:
        A JSON-able dict::

            {"bmcs": {node: {"host": "127.0.0.1", "port": int, "username": "admin", "password": str,
                             "operator": {"username": "oper", "password": str},
                             "user": {"username": "viewer", "password": str},
                             "cipher": 3, "power_file": str (1 on, 0 off), "power_log": str,
                             "events_log": str}},
             "snmp": {"apc-rpdu" | "fc" | "apc-ms" | "eaton" | "fc-sim":
                         {"kind": "snmpd" | "snmpsim", "host": "127.0.0.1", "port": int,
                          "community": rw community, "ro_community": ro community (snmpsim: the same),
                          "v3": {"user", "auth_key", "auth_proto": "SHA", "priv_key", "priv_proto": "AES"},
                          "sys_object_id": str, "state_file": str (snmpd peers only)}},
             "outlets": {node: int}, "fc_ports": {node: "fc1/<n>"},
             "snmp_persistent_dir": str}

        ``power_log`` has one line ``<epoch seconds> <0|1>`` per power set. Export
        ``snmp_persistent_dir`` as ``SNMP_PERSISTENT_DIR`` for net-snmp tools and fence agents
        (else they write under /var/lib/snmp). The ``viewer`` account is refused power control only in a
        session opened at USER level (see :mod:`noderemedy_lab.bmc`).

    Raises:
        ComponentError: naming the component (``devices`` for bad arguments, ``bmc <node>``,
            ``snmpd-pdu``, ``snmpsim-eaton``...): bad node names or power hook, a port in use, a
            missing binary (with its Debian package), a peer that exits or does not listen.
    """
    if not isinstance(node_names, list) or not node_names:
        raise ComponentError("devices", f"node_names: expected a non-empty list, got {node_names!r}")
    bad = [n for n in node_names if not isinstance(n, str) or not _NODE_NAME.match(n)]
    if bad:
        raise ComponentError("devices", f"node_names: not valid node names (RFC 1123 labels): {bad!r}")
    if len(set(node_names)) != len(node_names):
        raise ComponentError("devices", f"node_names: duplicates in {node_names!r}")
    if cfg.bmc_port(len(node_names) - 1) > 65535:
        raise ComponentError(
            "devices", f"node_names: {len(node_names)} BMCs do not fit above port {cfg.bmc_port(0)}"
        )
    validate_power_hook(power_hook)
    venv = ensure_simvenv()
    base = cfg.workdir / "devices"
    base.mkdir(parents=True, exist_ok=True)
    clients = base / "snmp-clients"
    if clients.exists():
        shutil.rmtree(clients)
    clients.mkdir()

    # start every peer, then wait for each to listen: they boot in parallel
    pending: Pending = []
    bmcs = start_bmcs(sup, cfg, base, node_names, power_hook, pending)
    snmp: dict[str, dict] = {}
    for device, (_, _, kind) in PEERS.items():
        if kind == "snmpd":
            snmp[device] = start_snmpd(sup, cfg, base, device, node_names, pending)
        else:
            snmp[device] = start_snmpsim(sup, cfg, base, device, node_names, venv, pending)
    for proc, ready, timeout in pending:
        sup.wait_ready(proc, ready, timeout)
    return {
        "bmcs": bmcs,
        "snmp": snmp,
        "outlets": {node: i + 1 for i, node in enumerate(node_names)},
        "fc_ports": {node: f"fc1/{i + 1}" for i, node in enumerate(node_names)},
        "snmp_persistent_dir": str(clients),
    }
