"""The lab's vCenter: govmomi's simulator (vcsim engine) on 127.0.0.1 over HTTPS, one VM per node.

Runs ``vcsim-lab`` (built by :func:`noderemedy_lab.build.build_vcsim` from govmomi's ``simulator``
package and ``data/vcsim/main.go``): the VPX inventory (datacenter ``DC0``, cluster ``DC0_C0``,
resource pool VMs ``DC0_C0_RP0_VM<i>``), login with a per-run user and password, TLS with the
lab's own CA. VM ``DC0_C0_RP0_VM<i>`` is bound to node i: its power changes run the lab's power
hook. Power tasks take ``POWER_DELAY`` seconds (``PowerOffVM_Task``/``PowerOnVM_Task`` delay).
After the nodes' VMs come a spare VM (bound to no node) and the "stuck" VM (bound to no node),
which accepts ``PowerOffVM_Task`` (the task succeeds) and stays ``poweredOn`` (``-stays-on``),
for "the host says yes and does nothing".
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from .config import LabConfig
from .pki import device_endpoint, issue_device_pki
from .procs import Proc, Supervisor, prepare_peer, tcp_listening

POWER_DELAY = 0.5
READY_TIMEOUT = 30.0


def vm_name(index: int) -> str:
    """The VPX model's name of the ``index``-th VM in the cluster's resource pool."""
    return f"DC0_C0_RP0_VM{index}"


def start_peer(
    sup: Supervisor, cfg: LabConfig, base: Path, node_names: list[str], power_hook: list[str] | None
) -> tuple[dict, Proc]:
    """Build the simulator if needed and start it (process ``vsphere``) on ``cfg.port("vcsim")``.

    Returns (endpoint, process); endpoint: ``{"host", "port", "username", "password", "ca_file",
    "vms": {node: vm name}, "spare_vm": vm name (bound to no node), "stuck_vm": vm name (accepts
    power-off, stays on), "power_delay"}``.
    Raises ComponentError (``build vcsim`` or ``vsphere``).
    """
    from .build import binary_paths, build_vcsim

    binary = binary_paths()["vcsim"]
    if not binary.is_file():
        build_vcsim(lambda line: None)
    port = cfg.port("vcsim")
    run_dir = prepare_peer(port, "vsphere", base / "vsphere")
    tls = issue_device_pki(run_dir / "tls", "lab-vcenter")
    password = secrets.token_hex(8)
    vms = {node: vm_name(i) for i, node in enumerate(node_names)}
    stuck = vm_name(len(node_names) + 1)
    env = {
        "NODEREMEDY_POWER_HOOK": json.dumps(power_hook or []),
        "NODEREMEDY_VM_NODES": json.dumps({vm: node for node, vm in vms.items()}),
    }
    argv = [
        str(binary), "-l", f"127.0.0.1:{port}", "-username", "fencer", "-password", password,
        "-tlscert", str(tls["cert"]), "-tlskey", str(tls["key"]), "-vm", str(len(node_names) + 2),
        "-power-delay-ms", str(int(POWER_DELAY * 1000)), "-stays-on", stuck,
    ]  # fmt: skip
    proc = sup.start("vsphere", argv, env=env, cwd=run_dir)
    endpoint = device_endpoint(
        port,
        "fencer",
        password,
        tls,
        vms=vms,
        spare_vm=vm_name(len(node_names)),
        stuck_vm=stuck,
        power_delay=POWER_DELAY,
    )
    return endpoint, proc


def ready(endpoint: dict) -> bool:
    """The simulator accepts TCP connections."""
    return tcp_listening(endpoint["port"])
