"""The lab's SNMP peers: Net-SNMP ``snmpd`` with a stateful ``pass_persist`` backend, and snmpsim.

``snmpd`` plays the devices whose status follows their control (snmpsim's ``writecache`` cannot
link a status OID to a control OID):

* ``apc-rpdu``: APC rack PDU (PowerNet-MIB rPDUOutletControl/Status, sysObjectID .318.1.3.4.5);
* ``fc``: FC switch (IF-MIB ifAdminStatus with ifOperStatus following it, FIBRE-CHANNEL-FE-MIB).

snmpsim (``writecache`` variation: a SET is remembered and read back, status OID = control OID) plays:

* ``apc-ms``: APC MasterSwitch (sPDUOutletCtl, sysObjectID .318.1.3.4.2);
* ``eaton``: Eaton managed ePDU (outlet control .534.6.6.6.1.2.2.1.3.<plug-1>, 0 off / 1 on);
* ``fc-sim``: FC switch (IF-MIB ifAdminStatus, FC-FE-MIB fcFxPortPhysAdminStatus; ifOperStatus static).

Every peer answers SNMP v1/v2c with a per-run random read-write community (snmpd peers also a
read-only one) and SNMPv3 authPriv (SHA/AES) for a user with per-run random keys.

snmpsim quirks handled here: the community is the data file's name;
v3 with an empty context reads ``self.snmprec`` (a hard link); options after ``--v3-engine-id``
belong to that engine; as root it must drop privileges (``--process-user``), after which its venv,
data and cache must be reachable by that user. snmpd quirks: ``-C -c conf -m ''``,
``-I -smux,ifTable,ifXTable,ifStackTable,interfaces``, the listen address only in the conf, and
``SNMP_PERSISTENT_DIR`` per peer.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from string import Template

from . import config
from .bmc import Pending, check_safe_path, data_path, wait_or_defer
from .config import LabConfig
from .procs import ComponentError, Supervisor, require_binary, require_port_free, udp_listening

#: What the snmpsim venv gets (versions verified in the lab reference). pysmi is a dependency
#: snmpsim forgets to declare; cryptography gives it SNMPv3 privacy.
SIMVENV_REQUIREMENTS = ["snmpsim==1.2.2", "pysmi==2.0.0", "pysnmp==7.1.30", "cryptography"]
#: Seconds allowed for creating the snmpsim venv and installing into it.
SIMVENV_TIMEOUT = 600
#: Seconds to wait for an snmpd / snmpsim to listen (snmpsim indexes its data on first start).
SNMPD_READY_TIMEOUT = 20.0
SNMPSIM_READY_TIMEOUT = 60.0
#: Outlets per PDU / ports per FC switch (at least; more if the lab has more nodes).
MIN_PORTS = 8

SYS_OBJECT_IDS = {
    "apc-rpdu": ".1.3.6.1.4.1.318.1.3.4.5",  # PowerNet-MIB rack PDU: fence_apc_snmp "ApcRPDU"
    "fc": ".1.3.6.1.4.1.9.12.3.1.3.999",  # illustrative; fence_ifmib / fence_cisco_mds never read it
    "apc-ms": ".1.3.6.1.4.1.318.1.3.4.2",  # MasterSwitch: not in fence_apc_snmp's table -> sPDUOutletCtl
    "eaton": ".1.3.6.1.4.1.534.6.6.6",  # fence_eaton_snmp "EatonManagedePDU"
    "fc-sim": ".1.3.6.1.4.1.9.12.3.1.3.840",
}

#: device -> (supervisor/component name, port key in LabConfig, kind)
PEERS = {
    "apc-rpdu": ("snmpd-pdu", "snmpd-pdu", "snmpd"),
    "fc": ("snmpd-fc", "snmpd-fc", "snmpd"),
    "apc-ms": ("snmpsim-apc", "snmpsim-apc", "snmpsim"),
    "eaton": ("snmpsim-eaton", "snmpsim-eaton", "snmpsim"),
    "fc-sim": ("snmpsim-fc", "snmpsim-fc", "snmpsim"),
}

V3_USER = "nrfence"


# ---------------------------------------------------------------------------------------------
# snmpsim venv


def simvenv_dir() -> Path:
    """Where :func:`ensure_simvenv` keeps the venv: ``noderemedy_lab.config.cache_dir()/simvenv``."""
    return config.cache_dir() / "simvenv"


def ensure_simvenv() -> Path:
    """The snmpsim venv (built on Debian's ``/usr/bin/python3``), created on first use.

    Idempotent and fast (one file read) when the venv is complete: a marker file
    ``.noderemedy-complete`` holding :data:`SIMVENV_REQUIREMENTS` is written last, so an
    interrupted install is redone. Concurrent callers serialise on ``<venv>.lock``. Files are
    created world-readable (umask 022) so that snmpsim can still import after dropping to
    ``nobody`` when the cache directory is itself reachable by ``nobody``.

    Returns:
        The venv directory; ``bin/snmpsim-command-responder`` is in it.

    Raises:
        ComponentError: component ``snmpsim``: no ``/usr/bin/python3``, venv creation failed
            (hint: install the Debian package ``python3-venv``), or pip failed (with its output tail).
    """
    venv = simvenv_dir()
    marker = venv / ".noderemedy-complete"
    want = "\n".join(SIMVENV_REQUIREMENTS) + "\n"
    with contextlib.suppress(OSError):
        if marker.read_text() == want:
            return venv
    python = Path("/usr/bin/python3")
    if not python.exists():
        raise ComponentError("snmpsim", "/usr/bin/python3 not found (install the Debian package 'python3')")
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(str(venv) + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):
            if marker.read_text() == want:
                return venv
        if venv.exists():
            shutil.rmtree(venv)
        steps = [
            ([str(python), "-m", "venv", str(venv)], " (install the Debian package 'python3-venv')"),
            (
                [
                    str(venv / "bin" / "pip"),
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    *SIMVENV_REQUIREMENTS,
                ],
                "",
            ),
        ]
        for argv, hint in steps:
            try:
                res = subprocess.run(
                    argv,
                    capture_output=True,
                    text=True,
                    timeout=SIMVENV_TIMEOUT,
                    umask=0o022,
                    stdin=subprocess.DEVNULL,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ComponentError("snmpsim", f"building the venv {venv} failed: {exc}{hint}") from exc
            if res.returncode != 0:
                out = (res.stdout + res.stderr).strip().splitlines()[-15:]
                raise ComponentError(
                    "snmpsim",
                    f"building the venv {venv} failed: {' '.join(argv[:3])}... exited {res.returncode}{hint}\n"
                    + "\n".join(out),
                )
        marker.write_text(want)
        marker.chmod(0o644)
    return venv


# ---------------------------------------------------------------------------------------------
# credentials and data


def new_secret() -> str:
    """A per-run random community or v3 key: 16 hex characters (net-snmp needs keys of >= 8)."""
    return secrets.token_hex(8)


def port_names(profile: str, node_names: list[str]) -> dict[str, str]:
    """Outlet / port names by 1-based index: node i on outlet/port i+1; the rest ``outlet<N>`` / ``fc1/<N>``."""
    n = max(MIN_PORTS, len(node_names))
    if profile == "apc-rpdu":
        return {
            str(i): (node_names[i - 1] if i <= len(node_names) else f"outlet{i}") for i in range(1, n + 1)
        }
    return {str(i): f"fc1/{i}" for i in range(1, n + 1)}


def initial_state(profile: str, node_names: list[str]) -> dict:
    """The pass_persist state file at start: every outlet / port on (1), no delay."""
    names = port_names(profile, node_names)
    ports = {p: 1 for p in names}
    aliases = (
        {str(i + 1): f"{node}-hba0" for i, node in enumerate(node_names)} if profile == "fcswitch" else {}
    )
    return {
        "ports": ports,
        "prev": dict(ports),
        "changed": {},
        "names": names,
        "aliases": aliases,
        "log": [],
        "delay": 0.0,
    }


def _system(descr: str, objid: str, name: str) -> list[tuple[str, str, str]]:
    return [
        ("1.3.6.1.2.1.1.1.0", "4", descr),
        ("1.3.6.1.2.1.1.2.0", "6", objid.lstrip(".")),
        ("1.3.6.1.2.1.1.3.0", "67", "123456"),
        ("1.3.6.1.2.1.1.5.0", "4", name),
    ]


def _writable(oid: str, low: int, high: int) -> tuple[str, str, str]:
    """The snmpsim record of a writable Integer32 at ``oid`` that remembers SETs, 1 at first, and
    rejects a value outside ``low..high`` (wrongValue)."""
    return (oid, "2:writecache", f"value=1,vlist=lt:{low}:wrongvalue:gt:{high}:wrongvalue")


def _rows(count_oid: str, table: str, n: int) -> list[tuple[str, str, str]]:
    """The row count (``count_oid``) and the index column (``table.1.<i>`` = i, i from 1) of an
    SNMP table of ``n`` rows, as snmpsim records."""
    return [(count_oid, "2", str(n))] + [(f"{table}.1.{i}", "2", str(i)) for i in range(1, n + 1)]


def snmprec_records(device: str, node_names: list[str]) -> list[tuple[str, str, str]]:
    """snmpsim records ``(oid, tag, value)`` of ``device`` (``apc-ms``, ``eaton`` or ``fc-sim``), sorted by OID.

    Tags: 2 Integer32, 4 OctetString, 6 OID, 67 TimeTicks; ``2:writecache`` is a writable integer
    that remembers SETs, with ``vlist`` rejecting values outside the MIB's range (wrongValue).
    Sources: PowerNet-MIB sPDUOutletControlTable (apc-ms), fence_eaton_snmp's EatonManagedePDU OIDs
    (eaton), IF-MIB and FIBRE-CHANNEL-FE-MIB (fc-sim). ValueError for another device.
    """
    n = max(MIN_PORTS, len(node_names))
    outlet_names = port_names("apc-rpdu", node_names)
    oid = SYS_OBJECT_IDS.get(device, "")
    if device == "apc-ms":
        recs = _system("APC MasterSwitch simulator (PowerNet-MIB sPDUOutletCtl)", oid, "apc-sim")
        t = "1.3.6.1.4.1.318.1.1.4.4.2.1"
        recs += _rows("1.3.6.1.4.1.318.1.1.4.4.1.0", t, n)  # sPDUOutletControlTableSize, ...Index
        for i in range(1, n + 1):
            recs.append((f"{t}.2.{i}", "2", "4"))  # sPDUOutletPending: noCommandPending
            # sPDUOutletCtl: 1 on, 2 off, 3 reboot, 4 unknown, 5..7 *WithDelay
            recs.append(_writable(f"{t}.3.{i}", 1, 7))
            recs.append((f"{t}.4.{i}", "4", outlet_names[str(i)]))  # sPDUOutletCtlName
    elif device == "eaton":
        recs = _system("Eaton Managed ePDU simulator", oid, "eaton-sim")
        t = "1.3.6.1.4.1.534.6.6.6.1.2.2.1"
        for i in range(n):
            recs.append((f"{t}.1.{i}", "2", str(i)))  # outlet number (0-based)
            recs.append(_writable(f"{t}.3.{i}", 0, 2))
    elif device == "fc-sim":
        recs = _system("FC switch simulator (IF-MIB + FC-FE-MIB)", oid, "fc-sim")
        t = "1.3.6.1.2.1.2.2.1"
        recs += _rows("1.3.6.1.2.1.2.1.0", t, n)  # ifNumber, ifIndex
        for i in range(1, n + 1):
            recs.append((f"{t}.2.{i}", "4", f"fc1/{i}"))  # ifDescr
            recs.append((f"{t}.3.{i}", "2", "56"))  # ifType fibreChannel
            recs.append(_writable(f"{t}.7.{i}", 1, 3))  # ifAdminStatus
            recs.append((f"{t}.8.{i}", "2", "1"))  # ifOperStatus (static in snmpsim)
            recs.append((f"1.3.6.1.2.1.31.1.1.1.1.{i}", "4", f"fc1/{i}"))  # ifName
            alias = f"{node_names[i - 1]}-hba0" if i <= len(node_names) else ""
            recs.append((f"1.3.6.1.2.1.31.1.1.1.18.{i}", "4", alias))  # ifAlias
            # fcFxPortPhysAdminStatus.<module 22>.<port-1>: online(1) offline(2) testing(3)
            recs.append(_writable(f"1.3.6.1.2.1.75.1.2.2.1.1.22.{i - 1}", 1, 3))
    else:
        raise ValueError(f"snmprec_records: unknown snmpsim device {device!r}")
    return sorted(recs, key=lambda r: tuple(int(x) for x in r[0].split(".")))


def write_snmprec(data_dir: Path, community: str, records: list[tuple[str, str, str]]) -> Path:
    """Write ``data_dir/<community>.snmprec`` and hard-link it as ``self.snmprec`` (v3, empty context).

    snmpsim serves a v1/v2c request from the data file named like the community, and a v3 request
    with an empty context name from ``self.snmprec``; a symlink would be deduplicated.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"{community}.snmprec"
    path.write_text("".join(f"{oid}|{tag}|{value}\n" for oid, tag, value in records))
    path.chmod(0o644)
    selfp = data_dir / "self.snmprec"
    selfp.unlink(missing_ok=True)
    os.link(path, selfp)
    return path


def nobody_can_reach(path: Path) -> bool:
    """True if a user that is neither owner nor group member can traverse to and read ``path``.

    Checks the 'other' permission bits of every ancestor directory (x) and of ``path`` itself
    (r, and x for a directory); used to decide whether snmpsim may drop to ``nobody``.
    """
    path = Path(path).resolve()
    for parent in reversed(path.parents):
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(path).st_mode
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & need == need


def set_status_delay(snmp_endpoint: dict, seconds: float) -> None:
    """Make an snmpd peer's status OIDs lag ``seconds`` behind a SET (0 restores immediate status).

    Args:
        snmp_endpoint: one entry of ``start_devices(...)["snmp"]`` of kind ``snmpd``
            (``apc-rpdu`` or ``fc``): its ``state_file`` is edited under the backend's lock.
        seconds: the lag in seconds, >= 0. Applies to SETs made from now on; after a SET the status
            OIDs (rPDU outlet state, ifOperStatus, fcFxPortPhysOperStatus, and the rPDU control
            OID which reads back the same state) show the previous value until the lag has passed.
            0 also ends the lag of earlier SETs: every status reads its port's admin state at once.

    Raises:
        ValueError: the endpoint has no ``state_file`` (snmpsim peers cannot lag) or ``seconds`` < 0.
        OSError: the state file cannot be read or written.
    """
    state_file = snmp_endpoint.get("state_file") if isinstance(snmp_endpoint, dict) else None
    if not state_file:
        kind = snmp_endpoint.get("kind") if isinstance(snmp_endpoint, dict) else type(snmp_endpoint).__name__
        raise ValueError(
            f"set_status_delay: endpoint of kind {kind!r} has no state_file (only snmpd peers lag)"
        )
    seconds = float(seconds)
    if seconds < 0:
        raise ValueError(f"set_status_delay: seconds must be >= 0, got {seconds}")
    with open(state_file + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        st = json.loads(Path(state_file).read_text())
        st["delay"] = seconds
        if not seconds:  # immediate status again: transitions still lagging complete now
            st["lag"] = {}
        tmp = Path(state_file + ".tmp")
        tmp.write_text(json.dumps(st, indent=1))
        os.replace(tmp, state_file)


# ---------------------------------------------------------------------------------------------
# starting the peers


def _endpoint(device: str, kind: str, port: int, community: str, ro_community: str) -> dict:
    return {
        "kind": kind,
        "host": "127.0.0.1",
        "port": port,
        "community": community,
        "ro_community": ro_community,
        "v3": {
            "user": V3_USER,
            "auth_key": new_secret(),
            "auth_proto": "SHA",
            "priv_key": new_secret(),
            "priv_proto": "AES",
        },
        "sys_object_id": SYS_OBJECT_IDS[device],
    }


def start_snmpd(
    sup: Supervisor,
    cfg: LabConfig,
    base: Path,
    device: str,
    node_names: list[str],
    pending: Pending | None = None,
) -> dict:
    """Start one snmpd peer (``apc-rpdu`` or ``fc``) under ``base/<component>``; its endpoint dict.

    With ``pending``, the wait until it listens is deferred (see :func:`noderemedy_lab.bmc.wait_or_defer`).

    Raises:
        ComponentError: named after the peer (``snmpd-pdu`` / ``snmpd-fc``): port taken, snmpd
            missing, exited, or not listening within :data:`SNMPD_READY_TIMEOUT` seconds.
    """
    component, port_key, kind = PEERS[device]
    port = cfg.port(port_key)
    snmpd = require_binary("snmpd", component, "snmpd")
    require_port_free(port, component, "udp")
    run = base / component
    if run.exists():
        shutil.rmtree(run)
    persist = run / "persist"
    persist.mkdir(parents=True)
    profile = "apc-rpdu" if device == "apc-rpdu" else "fcswitch"
    state_file = run / "state.json"
    state_file.write_text(json.dumps(initial_state(profile, node_names), indent=1))
    backend = data_path("fence_pass.py")
    check_safe_path(backend, component)
    check_safe_path(run, component)
    python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
    ep = _endpoint(device, kind, port, new_secret(), new_secret())
    template = Template(data_path(f"snmpd-{'pdu' if device == 'apc-rpdu' else 'fc'}.conf.in").read_text())
    conf = run / "snmpd.conf"
    conf.write_text(
        template.substitute(
            port=port,
            community=ep["community"],
            ro_community=ep["ro_community"],
            v3_user=ep["v3"]["user"],
            auth_key=ep["v3"]["auth_key"],
            priv_key=ep["v3"]["priv_key"],
            sys_object_id=ep["sys_object_id"],
            python=python,
            backend=backend,
            state_file=state_file,
        )
    )
    conf.chmod(0o600)
    argv = [
        snmpd,
        "-f",
        "-C",
        "-c",
        str(conf),
        "-m",
        "",
        "-Lf",
        str(run / "snmpd.log"),
        "-I",
        "-smux,ifTable,ifXTable,ifStackTable,interfaces",
    ]
    proc = sup.start(component, argv, env={"SNMP_PERSISTENT_DIR": str(persist), "MIBS": ""}, cwd=run)
    wait_or_defer(sup, proc, lambda: udp_listening(port), SNMPD_READY_TIMEOUT, pending)
    ep["state_file"] = str(state_file)
    return ep


def _process_user() -> tuple[str, str] | None:
    """(user, group) snmpsim must drop to when we are root: ``nobody`` and nobody's primary group."""
    if os.geteuid() != 0:
        return None
    pw = pwd.getpwnam("nobody")
    return pw.pw_name, grp.getgrgid(pw.pw_gid).gr_name


def start_snmpsim(
    sup: Supervisor,
    cfg: LabConfig,
    base: Path,
    device: str,
    node_names: list[str],
    venv: Path,
    pending: Pending | None = None,
) -> dict:
    """Start one snmpsim peer (``apc-ms``, ``eaton`` or ``fc-sim``) under ``base/<component>``.

    With ``pending``, the wait until it listens is deferred (see :func:`noderemedy_lab.bmc.wait_or_defer`).

    As root, snmpsim drops to ``nobody`` when ``nobody`` can reach its venv and data
    directory; the cache directory is then chowned to ``nobody``. When one of them lies under a
    directory closed to others (``/root``, pytest's ``/tmp/pytest-of-root``), it keeps running as
    root through snmpsim's own ``SNMPSIM_ALLOW_ROOT=true`` switch (snmpsim.daemon.PrivilegesOf);
    the choice is written to ``mode.txt`` in the peer's directory.

    Raises:
        ComponentError: named after the peer (``snmpsim-apc`` / ``snmpsim-eaton`` / ``snmpsim-fc``).
    """
    component, port_key, kind = PEERS[device]
    port = cfg.port(port_key)
    require_port_free(port, component, "udp")
    responder = venv / "bin" / "snmpsim-command-responder"
    if not responder.exists():
        raise ComponentError(
            component, f"{responder} missing: remove {venv} and retry (ensure_simvenv rebuilds it)"
        )
    run = base / component
    if run.exists():
        shutil.rmtree(run)
    data = run / "data"
    cache = run / "cache"
    cache.mkdir(parents=True)
    community = new_secret()
    ep = _endpoint(device, kind, port, community, community)
    write_snmprec(data, community, snmprec_records(device, node_names))
    env: dict[str, str] = {}
    drop: list[str] = []
    who = _process_user()
    note = f"noderemedy_lab: snmpsim {device} runs as uid {os.geteuid()}"
    if who is not None:
        reachable = nobody_can_reach(venv / "bin" / "snmpsim-command-responder") and nobody_can_reach(data)
        if reachable:
            pw = pwd.getpwnam(who[0])
            os.chown(cache, pw.pw_uid, pw.pw_gid)
            drop = [f"--process-user={who[0]}", f"--process-group={who[1]}"]
            note = f"noderemedy_lab: snmpsim {device} drops to {who[0]}:{who[1]}"
        else:
            env["SNMPSIM_ALLOW_ROOT"] = "true"
            note = (
                f"noderemedy_lab: snmpsim {device} stays root (SNMPSIM_ALLOW_ROOT=true): "
                f"{venv} or {data} is not reachable by {who[0]}"
            )
    (run / "mode.txt").write_text(note + "\n")
    v3 = ep["v3"]
    # options after --v3-engine-id belong to that engine: the engine's own come after it
    argv = [
        str(responder),
        f"--cache-dir={cache}",
        *drop,
        "--v3-engine-id=auto",
        f"--v3-user={v3['user']}",
        f"--v3-auth-key={v3['auth_key']}",
        f"--v3-auth-proto={v3['auth_proto']}",
        f"--v3-priv-key={v3['priv_key']}",
        f"--v3-priv-proto={v3['priv_proto']}",
        f"--data-dir={data}",
        f"--agent-udpv4-endpoint=127.0.0.1:{port}",
    ]
    proc = sup.start(component, argv, env=env, cwd=run)
    wait_or_defer(sup, proc, lambda: udp_listening(port), SNMPSIM_READY_TIMEOUT, pending)
    return ep
