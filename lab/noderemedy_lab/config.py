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
cluster-api webhooks       +40 (https)
cluster-api health/metrics +41 / +42
BMC of node i (ipmi_sim)   +100 + i
=========================  ==================

Real nodes (:mod:`noderemedy_lab.realnode`) come after the kwok nodes in the device layout (node
``lab-real-<j>`` has BMC ``+100 + nodes + j``); their kubelet, kube-proxy and containerd listen
inside the node's own network namespace, so they take no port on the host. The apiserver reaches
them, and they reach it, through the lab's bridge (see :func:`LabConfig.node_network`).

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
#: cluster-api's core module, whose controller manager (Machine, MachineSet, Cluster and
#: MachineHealthCheck controllers) the lab's ``capi`` stand-in cluster runs (:mod:`noderemedy_lab.capi`):
#: the newest release on the Go module proxy that builds with the installed Go (1.26).
CLUSTER_API_VERSION = "1.14.2"

#: Debian packages the lab needs, by the component that needs them (for clear errors).
DEBIAN_PACKAGES = {
    "ipmi_sim": "openipmi",
    "ipmitool": "ipmitool",
    "snmpd": "snmpd",
    "snmpget": "snmp",
    "fence_ipmilan": "fence-agents",
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "socat": "socat",
    "nsenter": "util-linux",
    "buildah": "buildah",
    "busybox": "busybox-static",
}

#: Where Debian's containernetworking-plugins puts the CNI plugins (not /opt/cni/bin).
CNI_BIN_DIR = "/usr/lib/cni"

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
    "capi-webhook": 40,
    "capi-health": 41,
    "capi-metrics": 42,
}
BMC_PORT_OFFSET = 100
#: Most real nodes one lab runs (each costs ~200 MiB and a share of 2 cores).
MAX_REAL_NODES = 20

#: Annotation on a kwok node that stops kwok's node Stages for it (its node Lease goes on,
#: so it stays Ready): the conditions a test sets (DiskPressure, KernelDeadlock...) then stay as set
#: instead of being reset to kwok's defaults on the next heartbeat (:mod:`noderemedy_lab.conditions`).
HOLD_CONDITIONS_ANNOTATION = "lab.noderemedy.io/hold-conditions"
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
        node_heartbeat_seconds: delay of kwok's node-heartbeat Stage (a status PATCH with Ready
            True), seconds, plus a jitter of 1.25 times it (kwok's default: 20 s + up to 25 s).
            A heartbeat scheduled before a power cut still plays once after it, so a node can turn
            Ready again up to delay + jitter after its power went off: a lab whose tests cut power
            right after turning it on keeps this well under ``node_monitor_grace_period``.
        extra_apiserver_args: more kube-apiserver flags, e.g. ``--feature-gates=...``.
        peers: optional peers to start with the lab (``lab.OPTIONAL_PEERS``: ``redfish``...);
            tests start them on demand instead (``Lab.ensure_peer``).
        real_nodes: number of real nodes (kubelet + containerd + runc in their own network and
            mount namespaces, ``lab-real-<j>``), 0 to 20; each also gets a BMC, PDU outlet and FC
            port after the kwok nodes'.
        rack: wire every kwok node as a rack (:mod:`noderemedy_lab.rack`): a node runs only while
            its BMC and its PDU outlet are on and the rack's switch is up.
    """

    workdir: Path = field(default_factory=default_workdir)
    nodes: int = 3
    port_base: int = 20000
    kube: bool = True
    devices: bool = True
    node_monitor_grace_period: int = 20
    node_lease_seconds: int = 10
    node_heartbeat_seconds: float = 20.0
    extra_apiserver_args: list[str] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    real_nodes: int = 0
    rack: bool = False

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        if not 1 <= self.nodes <= 1000:
            raise ValueError(f"nodes: must be between 1 and 1000, got {self.nodes}")
        if not 0 <= self.real_nodes <= MAX_REAL_NODES:
            raise ValueError(f"real_nodes: must be between 0 and {MAX_REAL_NODES}, got {self.real_nodes}")
        if self.rack and not (self.kube and self.devices):
            raise ValueError("rack: a rack needs both the control plane (kube) and the devices")
        total = self.nodes + self.real_nodes
        if not 1024 <= self.port_base <= 65535 - BMC_PORT_OFFSET - total:
            raise ValueError(f"port_base: {self.port_base} leaves no room for {total} BMC ports")

    def port(self, component: str) -> int:
        """The port of ``component`` (a key of ``PORT_OFFSETS``); KeyError for an unknown one."""
        return self.port_base + PORT_OFFSETS[component]

    def bmc_port(self, index: int) -> int:
        """UDP port of node ``index``'s BMC (0-based)."""
        return self.port_base + BMC_PORT_OFFSET + index

    def node_name(self, index: int) -> str:
        """Name of kwok node ``index`` (0-based): ``lab-node-<index>``."""
        return f"lab-node-{index}"

    def real_node_name(self, index: int) -> str:
        """Name of real node ``index`` (0-based): ``lab-real-<index>``."""
        return f"lab-real-{index}"

    @property
    def host_prefix(self) -> str:
        """Prefix of everything host-global the lab creates (bridge, veths, network namespaces,
        cgroups): ``nr<port_base>``. Two labs never share a port base, so never a name."""
        return f"nr{self.port_base}"

    def node_network(self) -> tuple[str, str]:
        """The real nodes' network: ``("10.S.T", "10.S.T.1")``, a /24 prefix (without the last
        octet) and the host's address on the lab bridge. S and T come from the port base
        (S = 150 + (port_base // 256) % 90, T = port_base % 256), so labs with different port
        bases below 23040 apart never overlap, and never 10.96/16 (services) or 10.244/16 (pods)."""
        prefix = f"10.{150 + (self.port_base // 256) % 90}.{self.port_base % 256}"
        return prefix, f"{prefix}.1"

    @property
    def state_file(self) -> Path:
        """``lab.json``: endpoints, credentials and process table of a running lab (mode 0600)."""
        return self.workdir / "lab.json"
