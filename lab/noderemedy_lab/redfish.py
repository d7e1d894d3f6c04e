"""The lab's Redfish BMC: one sushy-tools emulator on 127.0.0.1 (HTTPS), one system per node.

The emulator (``sushy-emulator``, run through :mod:`noderemedy_lab.sushy_lab` with the lab's fake
systems driver, no libvirt) serves ``/redfish/v1`` over TLS with a certificate from its own CA
(``ca.crt`` in its directory) and HTTP basic authentication from an htpasswd file (bcrypt, the
only digest sushy-tools accepts). Systems: one per node, named after it (``Id`` is a random UUID),
powered on; their power changes run the lab's power hook like the IPMI BMCs'; and the system
``stuck-0`` (no node) accepts every reset and never changes power, for "device says yes, does
nothing" tests. Power transitions take ``POWER_DELAY`` seconds, reported as ``PoweringOff`` /
``PoweringOn`` meanwhile.
"""

from __future__ import annotations

import secrets
import sys
import uuid
from pathlib import Path

from .config import LabConfig
from .pki import device_endpoint, issue_device_pki
from .procs import ComponentError, Proc, Supervisor, prepare_peer, tcp_listening

#: Seconds a Redfish power transition takes in the lab (sushy-tools' fake driver: random 1-11 s).
POWER_DELAY = 0.5
#: Seconds to wait for the emulator to listen.
READY_TIMEOUT = 30.0
#: The system that accepts resets and ignores them.
STUCK_SYSTEM = "stuck-0"


def _htpasswd_line(username: str, password: str) -> str:
    try:
        import bcrypt
    except ImportError as exc:  # pragma: no cover - installed with sushy-tools
        raise ComponentError(
            "redfish", "bcrypt (a sushy-tools dependency) is missing: pip install sushy-tools"
        ) from exc
    # cost 4: the emulator checks the password on every request
    return f"{username}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}\n"


def start_peer(
    sup: Supervisor, cfg: LabConfig, base: Path, node_names: list[str], power_hook: list[str] | None
) -> tuple[dict, Proc]:
    """Start the Redfish emulator under ``base/redfish``; the caller waits for it (see ``ready``).

    Args:
        sup: owns the process (named ``redfish``).
        cfg: the port is ``cfg.port("redfish")``.
        base: the devices directory.
        node_names: one system per node, named after it.
        power_hook: argv run as ``power_hook + [node, "0"|"1"]`` on every power change, or None.

    Returns:
        (endpoint, process). Endpoint::

            {"host": "127.0.0.1", "port": int, "username": "admin", "password": str,
             "ca_file": str (the emulator's CA), "power_delay": seconds,
             "systems": {node: {"id": uuid, "uri": "/redfish/v1/Systems/<uuid>"}},
             "stuck": {"name": "stuck-0", "id": uuid, "uri": ...}}

    Raises:
        ComponentError: ``redfish`` for a taken port or missing sushy-tools.
    """
    try:
        import sushy_tools  # noqa: F401
    except ImportError as exc:
        raise ComponentError("redfish", "sushy-tools is not installed: pip install sushy-tools") from exc
    port = cfg.port("redfish")
    run_dir = prepare_peer(port, "redfish", base / "redfish")
    tls = issue_device_pki(run_dir / "tls", "lab-redfish")
    password = secrets.token_hex(8)
    auth = run_dir / "htpasswd"
    auth.write_text(_htpasswd_line("admin", password))
    auth.chmod(0o600)
    systems = {node: str(uuid.uuid4()) for node in node_names}
    stuck = str(uuid.uuid4())
    fake = [
        {"uuid": sid, "name": name, "power_state": "On", "external_notifier": False, "nics": []}
        for name, sid in [*systems.items(), (STUCK_SYSTEM, stuck)]
    ]
    conf = {
        "SUSHY_EMULATOR_LISTEN_IP": "127.0.0.1",
        "SUSHY_EMULATOR_LISTEN_PORT": port,
        "SUSHY_EMULATOR_SSL_CERT": str(tls["cert"]),
        "SUSHY_EMULATOR_SSL_KEY": str(tls["key"]),
        "SUSHY_EMULATOR_AUTH_FILE": str(auth),
        "SUSHY_EMULATOR_FAKE_DRIVER": True,
        "SUSHY_EMULATOR_STATE_DIR": str(run_dir / "state"),
        "SUSHY_EMULATOR_FAKE_SYSTEMS": fake,
        "NODEREMEDY_POWER_DELAY": POWER_DELAY,
        "NODEREMEDY_POWER_HOOK": power_hook or [],
        "NODEREMEDY_HOOK_SYSTEMS": list(node_names),
        "NODEREMEDY_IGNORE_POWER": [STUCK_SYSTEM],
    }
    conf_path = run_dir / "emulator.conf"
    conf_path.write_text("".join(f"{k} = {v!r}\n" for k, v in conf.items()))
    proc = sup.start(
        "redfish", [sys.executable, "-m", "noderemedy_lab.sushy_lab", "--config", str(conf_path)], cwd=run_dir
    )

    def uri(sid: str) -> str:
        return f"/redfish/v1/Systems/{sid}"

    endpoint = device_endpoint(
        port,
        "admin",
        password,
        tls,
        power_delay=POWER_DELAY,
        systems={node: {"id": sid, "uri": uri(sid)} for node, sid in systems.items()},
        stuck={"name": STUCK_SYSTEM, "id": stuck, "uri": uri(stuck)},
    )
    return endpoint, proc


def ready(endpoint: dict) -> bool:
    """The emulator accepts TCP connections."""
    return tcp_listening(endpoint["port"])
