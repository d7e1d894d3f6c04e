"""Lab configuration: where the lab lives, which ports each component takes, pinned versions.

Every peer listens on 127.0.0.1 only. Ports are laid out from one base so that two labs (a user's
demo lab and the test suite's) can run side by side with different bases:

=========================  ==================
component                  port (base + n)
=========================  ==================
etcd client / peer         +0 / +1
kube-apiserver (https)     +2
kube-controller-manager    +3 (secure port)
kube-scheduler             +4 (secure port)
kwok (metrics/healthz)     +5
snmpd APC rack PDU         +10
snmpd FC switch            +11
snmpsim APC MasterSwitch   +12
snmpsim Eaton ePDU         +13
snmpsim FC switch (IF-MIB) +14
Redfish BMC (sushy-tools)  +15 (https)
EC2 endpoint (moto)        +16 (http)
fence_kdump listener       +17 (udp, tests)
vCenter simulator (vcsim)  +18 (https)
BMC of node i (ipmi_sim)   +100 + i
=========================  ==================

Ports stay below 32768 (the start of Linux's ephemeral range) for bases up to 31000 - nodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

#: Pinned versions of what the lab builds from the Go module proxy (see :mod:`noderemedy_lab.build`).
KUBERNETES_VERSION = "1.34.4"
KWOK_VERSION = "0.7.0"
ETCD_VERSION = "3.6.16"
#: govmomi, whose vCenter simulator the lab's vSphere peer runs (``data/vcsim/main.go``).
GOVMOMI_VERSION = "0.52.0"

#: Debian packages the lab needs, by the component that needs them (for clear errors).
DEBIAN_PACKAGES = {
    "ipmi_sim": "openipmi",
    "ipmitool": "ipmitool",
    "snmpd": "snmpd",
    "snmpget": "snmp",
    "fence_ipmilan": "fence-agents",
}

PORT_OFFSETS = {
    "etcd": 0,
    "etcd-peer": 1,
    "kube-apiserver": 2,
    "kube-controller-manager": 3,
    "kube-scheduler": 4,
    "kwok": 5,
    "snmpd-pdu": 10,
    "snmpd-fc": 11,
    "snmpsim-apc": 12,
    "snmpsim-eaton": 13,
    "snmpsim-fc": 14,
    "redfish": 15,
    "moto": 16,
    "kdump": 17,
    "vcsim": 18,
}
BMC_PORT_OFFSET = 100

#: Label the lab's BMC power hook sets on a node: kwok manages (heartbeats) only nodes whose label
#: is not "off", so a powered-off node stops heartbeating and the real node lifecycle controller
#: turns it NotReady.
POWER_LABEL = "lab.noderemedy.io/power"


def cache_dir() -> Path:
    """Build cache outside the repository: ``$NODEREMEDY_CACHE`` or ``~/.cache/noderemedy``."""
    env = os.environ.get("NODEREMEDY_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "noderemedy"


def default_workdir() -> Path:
    """Working directory of the CLI's lab: ``$NODEREMEDY_LAB_DIR`` or ``~/.local/state/noderemedy/lab``."""
    env = os.environ.get("NODEREMEDY_LAB_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "noderemedy" / "lab"


@dataclass
class LabConfig:
    """What to start and where.

    Attributes:
        workdir: the lab's state directory (certificates, kubeconfig, logs, peer state, ``lab.json``).
        nodes: number of kwok nodes, each with its own BMC (1 to 1000).
        port_base: first port of the layout in the module docstring.
        kube: start the Kubernetes control plane and kwok (False: devices only).
        devices: start the BMCs, PDUs and FC switches.
        node_monitor_grace_period: seconds without heartbeat before a node turns NotReady
            (kube-controller-manager ``--node-monitor-grace-period``).
        node_lease_seconds: kwok's node lease duration in seconds.
        extra_apiserver_args: more kube-apiserver flags, e.g. ``--feature-gates=...``.
        peers: optional peers to start with the lab (``lab.OPTIONAL_PEERS``: ``redfish``...);
            tests start them on demand instead (``Lab.ensure_peer``).
    """

    workdir: Path = field(default_factory=default_workdir)
    nodes: int = 3
    port_base: int = 20000
    kube: bool = True
    devices: bool = True
    node_monitor_grace_period: int = 20
    node_lease_seconds: int = 10
    extra_apiserver_args: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        if not 1 <= self.nodes <= 1000:
            raise ValueError(f"nodes: must be between 1 and 1000, got {self.nodes}")
        if not 1024 <= self.port_base <= 65535 - BMC_PORT_OFFSET - self.nodes:
            raise ValueError(f"port_base: {self.port_base} leaves no room for {self.nodes} BMC ports")

    def port(self, component: str) -> int:
        """The port of ``component`` (a key of ``PORT_OFFSETS``); KeyError for an unknown one."""
        return self.port_base + PORT_OFFSETS[component]

    def bmc_port(self, index: int) -> int:
        """UDP port of node ``index``'s BMC (0-based)."""
        return self.port_base + BMC_PORT_OFFSET + index

    def node_name(self, index: int) -> str:
        """Name of kwok node ``index`` (0-based): ``lab-node-<index>``."""
        return f"lab-node-{index}"

    @property
    def state_file(self) -> Path:
        """``lab.json``: endpoints, credentials and process table of a running lab (mode 0600)."""
        return self.workdir / "lab.json"
