"""The lab's BMCs: one OpenIPMI ``ipmi_sim`` per node on 127.0.0.1, power kept in a file.

Each BMC gets its own directory ``<devices>/bmc/<node>/`` with ``lan.conf`` (rendered from
``data/lan.conf.in``), a fresh ``state/`` directory (``ipmi_sim -s``: users changed over IPMI persist
there and would leak into the next run) and the node directory read by the ``chassis_control`` hook
(``data/chassis_control.sh``): ``power`` (1 on, 0 off), ``power.log`` (``<epoch seconds> <0|1>`` per
power set; ``<epoch seconds> <0|1> ignored`` for a set a lying BMC answered and did not do),
``events.log`` (reset/boot/identify requests and power-hook failures) and, when the lab has a
power hook, the executable ``power_hook`` wrapper.

Misbehaviours (:func:`set_bmc_mode`, :data:`BMC_MODES`; ``Lab.bmc_mode(node, mode)``): ``lies``
answers every power command as done while the power stays as it is (the file ``ignore_power``;
:func:`set_ignore_power`), ``silent`` stops answering at all (its ipmi_sim is SIGSTOPped: the UDP
port stays bound, so a client sees no ICMP refusal, only silence), ``normal`` undoes either.

How ipmi_sim (OpenIPMI 2.0.33) drives the hook, observed with ipmitool 1.8.19 on this lab:
``chassis power off|on`` -> ``set power 0|1``; ``chassis power cycle`` -> ``set power 0`` and about one
second later ``set power 1``; ``chassis power reset`` -> ``set reset 1`` (power unchanged, logged as an
event); ``chassis power soft`` -> ``set shutdown 1`` (recorded as power off). ipmi_sim waits for the
hook, so the wrapper bounds the lab's power hook with ``timeout``.

Privileges: ipmi_sim grants a session the privilege level the client *requests* (it does not cap it
at the user's limit from ``lan.conf``), so the USER account ``viewer`` is refused power control only
in a session opened at USER level (``ipmitool -L USER``).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from string import Template

from .config import LabConfig
from .procs import ComponentError, Proc, Supervisor, require_binary, require_port_free, udp_listening

#: Readiness waits deferred by the start functions: (process, ready predicate, timeout in seconds).
Pending = list[tuple[Proc, Callable[[], bool], float]]

#: Seconds the lab's power hook may take before the chassis_control wrapper gives up on it.
POWER_HOOK_TIMEOUT = 10
#: Seconds to wait for an ipmi_sim to listen.
BMC_READY_TIMEOUT = 20.0
#: The cipher suite every lab client must use: ipmi_sim refuses 15-17, suites 7/8 hang, 11/12 crash
#: ipmitool, and without one clients probe for 10-14 s a call.
CIPHER = 3

_UNSAFE = set(" \t\r\n\"'\\$`")


def data_path(name: str) -> Path:
    """Path of a file shipped in ``noderemedy_lab/data``."""
    return Path(str(resources.files("noderemedy_lab") / "data" / name))


def check_safe_path(path: Path, component: str) -> None:
    """ComponentError naming ``component`` if ``path`` holds whitespace, quotes, ``$``, backslash or backtick.

    Such paths end up in ipmi_sim's ``lan.conf`` and snmpd's ``pass_persist`` lines, which have no
    reliable quoting.
    """
    bad = sorted(set(str(path)) & _UNSAFE)
    if bad:
        raise ComponentError(
            component, f"path {str(path)!r} contains characters the peer cannot quote: {bad!r}"
        )


def new_password() -> str:
    """A fresh random password: 16 hex characters (IPMI 1.5 allows at most 16 bytes)."""
    return secrets.token_hex(8)


def render_lan_conf(
    *, name: str, port: int, hook: Path, node_dir: Path, admin: str, oper: str, viewer: str
) -> str:
    """Text of one BMC's ``lan.conf`` (users ``admin``/ADMIN, ``oper``/OPERATOR, ``viewer``/USER)."""
    template = Template(data_path("lan.conf.in").read_text())
    return template.substitute(
        name=name,
        port=port,
        guid=uuid.uuid4().hex,
        hook=hook,
        node_dir=node_dir,
        admin_password=admin,
        oper_password=oper,
        viewer_password=viewer,
    )


def render_power_hook(power_hook: list[str], node_name: str) -> str:
    """Text of the ``power_hook`` wrapper: runs ``power_hook + [node_name, "0"|"1"]`` under ``timeout``."""
    argv = ["timeout", str(POWER_HOOK_TIMEOUT), *power_hook, node_name]
    return (
        "#!/bin/sh\n# lab power hook of "
        + node_name
        + " (written by noderemedy_lab.bmc)\nexec "
        + shlex.join(argv)
        + ' "$1"\n'
    )


def validate_power_hook(power_hook: list[str] | None) -> None:
    """ComponentError (component ``bmc``) unless ``power_hook`` is None or a non-empty list of strings
    whose first item is an executable."""
    if power_hook is None:
        return
    if not isinstance(power_hook, list) or not power_hook or not all(isinstance(a, str) for a in power_hook):
        raise ComponentError("bmc", f"power_hook: expected a non-empty list of strings, got {power_hook!r}")
    if shutil.which(power_hook[0]) is None:
        raise ComponentError("bmc", f"power_hook: {power_hook[0]!r} is not an executable")


def set_power(ipmitool: Callable[..., subprocess.CompletedProcess], node: str, state: str) -> None:
    """``chassis power <state>`` (``on``/``off``) through ``ipmitool(*args)``, the lab's client of
    ``node``'s BMC; if ipmitool gave up, the state read back (``chassis power status``).

    ipmi_sim answers a power set only once its hook returns, and a real node's power-off hook (the
    whole node killed) can outlast ipmitool's lanplus retransmissions (about 10 s: "Unable to set
    Chassis Power Control") on a loaded machine although the BMC did it; ipmi_sim serves the
    retransmitted requests afterwards, each an idempotent repeat, and the status read is answered
    after them. As fence_ipmilan, the state is read back; the set is sent once more only when it
    differs. ComponentError naming the BMC when it still differs."""
    detail = ""
    for _ in range(2):
        out = ipmitool("chassis", "power", state)
        if out.returncode == 0:
            return
        detail = out.stderr.strip() or out.stdout.strip()
        status = ipmitool("chassis", "power", "status")
        if status.returncode == 0 and status.stdout.strip().endswith(f" {state}"):
            return
        detail += f"; read back: {status.stdout.strip() or status.stderr.strip()}"
    raise ComponentError(f"bmc {node}", f"power {state} failed: {detail}")


def wait_or_defer(
    sup: Supervisor, proc: Proc, ready: Callable[[], bool], timeout: float, pending: Pending | None
) -> None:
    """Wait until ``ready()`` (ComponentError as :meth:`Supervisor.wait_ready`), or append the wait to
    ``pending`` so that several peers start in parallel and the caller waits on them afterwards."""
    if pending is None:
        sup.wait_ready(proc, ready, timeout)
    else:
        pending.append((proc, ready, timeout))


def start_bmcs(
    sup: Supervisor,
    cfg: LabConfig,
    base: Path,
    node_names: list[str],
    power_hook: list[str] | None,
    pending: Pending | None = None,
) -> dict[str, dict]:
    """Start one ipmi_sim per node under ``base/bmc`` and wait until each listens on UDP.

    Args:
        sup: the supervisor that owns the processes (named ``bmc <node>``).
        cfg: ports come from ``cfg.bmc_port(i)`` for ``node_names[i]``.
        base: the devices directory.
        node_names: the nodes, in index order.
        power_hook: argv run as ``power_hook + [node, "0"|"1"]`` after every power set, or None.
        pending: if given, readiness waits are appended to it instead of done here (see
            :func:`wait_or_defer`); the BMCs are then not yet known to listen on return.

    Returns:
        ``{node: {"host", "port", "username", "password", "operator": {...}, "user": {...},
        "cipher": 3, "power_file", "power_log", "events_log"}}`` (see :func:`noderemedy_lab.devices.start_devices`).

    Raises:
        ComponentError: ``bmc`` for a missing ipmi_sim or bad power hook, ``bmc <node>`` for a taken
            port or an ipmi_sim that exits or does not listen within ``BMC_READY_TIMEOUT`` seconds.
    """
    ipmi_sim = require_binary("ipmi_sim", "bmc", "openipmi")
    require_binary("timeout", "bmc", "coreutils")
    validate_power_hook(power_hook)
    hook = data_path("chassis_control.sh")
    emu = data_path("bmc.emu")
    check_safe_path(hook, "bmc")
    check_safe_path(base, "bmc")
    bmcs: dict[str, dict] = {}
    for i, node in enumerate(node_names):
        component = f"bmc {node}"
        port = cfg.bmc_port(i)
        require_port_free(port, component, "udp")
        run_dir = base / "bmc" / node
        if run_dir.exists():
            shutil.rmtree(run_dir)  # a fresh state dir per run: users changed over IPMI persist there
        node_dir = run_dir / "node"
        (run_dir / "state").mkdir(parents=True)
        node_dir.mkdir()
        (node_dir / "power").write_text("1\n")
        (node_dir / "power.log").touch()
        (node_dir / "events.log").touch()
        if power_hook is not None:
            wrapper = node_dir / "power_hook"
            wrapper.write_text(render_power_hook(power_hook, node))
            wrapper.chmod(0o755)
        creds = {"admin": new_password(), "oper": new_password(), "viewer": new_password()}
        conf = run_dir / "lan.conf"
        conf.write_text(render_lan_conf(name=f"bmc-{node}", port=port, hook=hook, node_dir=node_dir, **creds))
        conf.chmod(0o600)
        proc = sup.start(
            component,
            [ipmi_sim, "-c", str(conf), "-f", str(emu), "-s", str(run_dir / "state"), "-n"],
            cwd=run_dir,
        )
        wait_or_defer(sup, proc, lambda port=port: udp_listening(port), BMC_READY_TIMEOUT, pending)
        bmcs[node] = {
            "host": "127.0.0.1",
            "port": port,
            "username": "admin",
            "password": creds["admin"],
            "operator": {"username": "oper", "password": creds["oper"]},
            "user": {"username": "viewer", "password": creds["viewer"]},
            "cipher": CIPHER,
            "power_file": str(node_dir / "power"),
            "power_log": str(node_dir / "power.log"),
            "events_log": str(node_dir / "events.log"),
        }
    return bmcs


#: What :func:`set_bmc_mode` can make of a lab BMC.
BMC_MODES = ("normal", "lies", "silent")


def set_bmc_mode(bmc: dict, mode: str, pid: int) -> None:
    """Switch the BMC ``bmc`` (an entry of :func:`start_bmcs`' result) whose ipmi_sim runs as
    ``pid`` into ``mode``:

    * ``lies``: every power command is answered as done and changes nothing; each is logged in
      its ``power_log`` as ``<epoch seconds> <0|1> ignored`` (and in ``events_log``);
    * ``silent``: the BMC stops answering (SIGSTOP; nothing it receives meanwhile is acted on
      until it answers again: a client's session never opens, so no power command is queued);
    * ``normal``: answers and obeys again (SIGCONT, the lie flag removed).

    Takes effect at the next packet. Raises ValueError naming ``mode`` when it is not one of
    :data:`BMC_MODES`; ProcessLookupError when ``pid`` is gone."""
    if mode not in BMC_MODES:
        raise ValueError(f"mode: {mode!r} is not one of {', '.join(BMC_MODES)}")
    os.kill(pid, signal.SIGSTOP if mode == "silent" else signal.SIGCONT)
    set_ignore_power(bmc, mode == "lies")


def set_ignore_power(bmc: dict, ignore: bool) -> None:
    """Make the BMC ``bmc`` (an entry of :func:`start_bmcs`' result) accept every power command and
    change nothing (``ignore`` True: each is logged as ``power <0|1> ignored`` in its
    ``events_log`` and as ``<epoch seconds> <0|1> ignored`` in its ``power_log``), or behave
    normally again (False). Takes effect at the next command."""
    flag = Path(bmc["power_file"]).parent / "ignore_power"
    if ignore:
        flag.touch()
    else:
        flag.unlink(missing_ok=True)


def power_sets(power_log: str | Path, *, with_ignored: bool = False) -> list[tuple[float, int]]:
    """The power sets a lab BMC's chassis-control hook recorded in ``power_log``: ``[(epoch
    seconds, 0 off | 1 on), ...]`` in order. A lying BMC's ``<epoch> <0|1> ignored`` lines are
    commands it answered as done and did not carry out: left out unless ``with_ignored``. A missing
    log is ``[]``; ValueError naming the line for one that is neither form."""
    path = Path(power_log)
    if not path.exists():
        return []
    out: list[tuple[float, int]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) == 2 or (len(fields) == 3 and fields[2] == "ignored"):
            if len(fields) == 2 or with_ignored:
                out.append((float(fields[0]), int(fields[1])))
            continue
        raise ValueError(f"{path}:{number}: not '<epoch> <0|1> [ignored]': {line!r}")
    return out
