"""Real nodes in the lab: kubelet + containerd + runc, each node in its own network namespace.

Node ``lab-real-<j>`` of a lab with port base B (host-global names carry the prefix
``nr<B>``, :attr:`~noderemedy_lab.config.LabConfig.host_prefix`):

* network: namespace ``nr<B>-real<j>`` with ``eth0`` (address ``10.S.T.<10+j>/24``, the node IP),
  the other end of the veth (``nr<B>r<j>``) enslaved to the lab's bridge ``nr<B>br`` on the host,
  which has ``10.S.T.1/24`` (:meth:`~noderemedy_lab.config.LabConfig.node_network`). Nothing is
  routed beyond: the host forwards nothing from the bridge (``conf/<bridge>/forwarding=0``, and the
  machine's ``ip_forward`` is 0), there is no default route in a node and no NAT on the host. A
  node reaches the apiserver at ``https://10.S.T.1:<apiserver port>``, where a ``socat`` relay
  (process ``apiserver-relay``) forwards to the apiserver on 127.0.0.1; the apiserver reaches the
  kubelet at the node IP. Pods get ``10.244.<j>.0/24`` from a CNI ``bridge`` (``cni0``, with
  ``ipMasq`` so that their traffic leaves the node with the node IP) inside the namespace; the
  in-cluster ``kubernetes`` Service points at the relay (kube-proxy in the node).
* processes: one :mod:`noderemedy_lab.nodeinit` per node (process ``node lab-real-<j>``), the
  parent of containerd (own root, state, socket), kubelet (``cgroupRoot`` ``/nr<B>/lab-real-<j>``)
  and kube-proxy. All of them are in the cgroup ``/nr<B>/lab-real-<j>`` of every v1 hierarchy.
* BMC: like every lab node (``ipmi_sim``); its power hook calls :func:`kill_node` on power off
  (SIGKILL of the node's whole cgroup: kubelet, containerd, shims, containers) and the lab boots
  the node again when the BMC's power file says on (:meth:`RealNodes.watch`).
* partition: :meth:`RealNodes.set_link` sets the host end of the veth down/up: kubelet and the
  containers keep running, cut off from the apiserver (and from the other nodes).
* runtime wrapper: containerd runs runc through ``runc-oom-wrapper`` (see
  :data:`noderemedy_lab.realnode_files.RUNC_WRAPPER`).

Everything is undone by :meth:`RealNodes.stop`; :func:`leftovers` lists what would remain, and
what a killed lab left is removed by the next on its port base. Cgroups: :mod:`.cgroups`; on the
host outside the nodes: :mod:`.realnode_host`; files written into them: :mod:`.realnode_files`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from . import pki
from .cgroups import cgroup_pids, kill_cgroup, kill_node, make_node_cgroup
from .config import CNI_BIN_DIR, KUBERNETES_VERSION, LabConfig
from .procs import ComponentError, Supervisor, require_binary, tail
from .realnode_files import CONTAINERD_CONFIG, FC_HOOK, RUNC_WRAPPER
from .realnode_host import (
    _run,
    _tcp_ok,
    _udp_bound,
    claim_prefix,
    cleanup_recorded,
    import_image,
    leftovers,
    remove_prefix,
    run_dir,
)

#: Taint every real node registers with, so that pods of the kwok tests never land on a real node
#: (their images do not exist there); real-node pods tolerate it.
REAL_TAINT = {"key": "lab.noderemedy.io/real", "value": "true", "effect": "NoSchedule"}
#: Label of the real nodes (``lab.noderemedy.io/real=true``).
REAL_LABEL = "lab.noderemedy.io/real"
#: Inside each real node, the mount point of the node's view of the shared storage; the storage
#: itself is ``/var/lab-shared/data`` (see :mod:`noderemedy_lab.nodeinit`).
SHARED_MOUNT = "/var/lab-shared"
#: Pod network of all real nodes (node j: 10.244.j.0/24); lives only inside the nodes' namespaces.
POD_CIDR = "10.244.0.0/16"
#: Seconds a node's containerd + kubelet get to register and turn Ready.
READY_TIMEOUT = 120.0
#: Seconds between a kubelet's node Lease renewals by default (a quarter of its 40 s duration).
KUBELET_LEASE_RENEW_SECONDS = 10


class RealNodes:
    """The lab's real nodes: start, power-cut, partition, stop.

    Args:
        cfg: the lab configuration (``real_nodes``, ``port_base``, ``workdir``).
        sup: the lab's supervisor (processes ``apiserver-relay`` and ``node lab-real-<j>``).
        kube: the lab's ``info["kube"]`` (pki, server).
        binaries: name -> path of the lab binaries (kubelet and kube-proxy among them).
        images: image name -> OCI archive (:func:`noderemedy_lab.images.ensure_node_images`).
        power_files: node -> the BMC's power file (``1``/``0``), read by :meth:`watch`.
        fc_state: node -> file holding ``up``/``down``, the node's FC port as the storage sees it.
    """

    def __init__(
        self,
        cfg: LabConfig,
        sup: Supervisor,
        kube: dict,
        binaries: dict[str, Path],
        images: dict[str, Path],
        power_files: dict[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.sup = sup
        self.kube = kube
        self.binaries = binaries
        self.images = images
        self.power_files = power_files or {}
        self.root = cfg.workdir / "real"
        self.prefix = cfg.host_prefix
        self.net_prefix, self.host_ip = cfg.node_network()
        self.bridge = f"{self.prefix}br"
        self.names = [cfg.real_node_name(j) for j in range(cfg.real_nodes)]
        self.specs: dict[str, dict] = {}
        self.shared = self.root / "shared"
        self._booting: set[str] = set()
        self._relays: list[str] = []
        self._claim: socket.socket | None = None

    # ---------------------------------------------------------------- names
    def netns(self, j: int) -> str:
        return f"{self.prefix}-real{j}"

    def veth(self, j: int) -> str:
        return f"{self.prefix}r{j}"

    def node_ip(self, j: int) -> str:
        return f"{self.net_prefix}.{10 + j}"

    def cgroup(self, j: int) -> str:
        return f"/{self.prefix}/{self.cfg.real_node_name(j)}"

    # ---------------------------------------------------------------- start
    def check(self) -> None:
        """ComponentError naming what is missing (a binary, a Debian package) or another running lab
        on this port base; then its names are this lab's until :meth:`stop` (:func:`claim_prefix`)."""
        for name, package in (
            ("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc"),
            ("containerd-shim-runc-v2", "containerd"), ("socat", "socat"), ("nsenter", "util-linux"),
            ("unshare", "util-linux"), ("ip", "iproute2"), ("iptables", "iptables"),
        ):  # fmt: skip
            require_binary(name, name if name != "containerd-shim-runc-v2" else "containerd", package)
        for name in ("kubelet", "kube-proxy"):
            path = self.binaries.get(name)
            if path is None or not Path(path).is_file():
                raise ComponentError(name, f"not built (run 'noderemedy-lab build'): {path}")
        if not Path(CNI_BIN_DIR, "bridge").is_file():
            raise ComponentError(
                "cni", f"no CNI plugins in {CNI_BIN_DIR} (install 'containernetworking-plugins')"
            )
        if not Path("/sys/fs/cgroup/freezer").is_dir():
            raise ComponentError("real node", "no cgroup v1 freezer hierarchy at /sys/fs/cgroup/freezer")
        if self._claim is None:
            self._claim = claim_prefix(self.prefix)

    def start(self, progress: Callable[[str], None] | None = None) -> dict:
        """Create the network, the relay and every node, boot them; returns ``info["real_nodes"]``.

        Does not wait for Ready (the lab does). ComponentError naming the component on failure;
        the caller then calls :meth:`stop`.
        """
        say = progress or (lambda line: None)
        self.check()
        # with the claim ours, whatever carries this lab's names was left by a lab on this port
        # base that was killed (its stop never ran)
        left = remove_prefix(self.prefix)
        if left:
            say(f"removed what a killed lab on port base {self.cfg.port_base} left: {', '.join(left)}")
        self.root.mkdir(parents=True, exist_ok=True)
        self.shared.mkdir(exist_ok=True)
        os.chmod(self.shared, 0o777)
        self._setup_network()
        self._start_relay()
        self._credentials()
        wrapper = self.root / "runc-oom-wrapper"
        wrapper.write_text(
            RUNC_WRAPPER.format(python=sys.executable, runc=require_binary("runc", "runc", "runc"))
        )
        wrapper.chmod(0o755)
        for j, name in enumerate(self.names):
            self.specs[name] = self._write_node(j, wrapper)
        say(f"booting {len(self.names)} real node(s): {', '.join(self.names)}")
        for name in self.names:
            self.boot(name)
        return self.info()

    def info(self) -> dict:
        """JSON-able description: ``{node: {"ip", "netns", "veth", "cgroup", "dir", "containerd_socket",
        "kubelet_log", "shared_dir" (host side), "shared_mount" (inside the node)}}``."""
        out = {}
        for j, name in enumerate(self.names):
            spec = self.specs.get(name, {})
            out[name] = {
                "ip": self.node_ip(j),
                "netns": self.netns(j),
                "veth": self.veth(j),
                "cgroup": self.cgroup(j),
                "dir": str(self.root / name),
                "containerd_socket": spec.get("containerd_socket"),
                "kubelet_log": str(self.cfg.workdir / "logs" / f"kubelet-{name}.log"),
                "shared_dir": str(self.shared),
                "shared_mount": SHARED_MOUNT + "/data",
                "fc_hook": str(self.root / name / "fc-hook.sh"),
            }
        return out

    def _setup_network(self) -> None:
        comp = "real node network"
        _run(["ip", "link", "add", self.bridge, "type", "bridge"], comp)
        _run(["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge], comp)
        Path(f"/proc/sys/net/ipv4/conf/{self.bridge}/forwarding").write_text("0")
        _run(["ip", "link", "set", self.bridge, "up"], comp)
        for j in range(len(self.names)):
            ns, veth = self.netns(j), self.veth(j)
            _run(["ip", "netns", "add", ns], comp)
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns], comp)
            _run(["ip", "link", "set", veth, "master", self.bridge, "up"], comp)
            _run(["ip", "-n", ns, "addr", "add", f"{self.node_ip(j)}/24", "dev", "eth0"], comp)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"], comp)
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"], comp)
            # services (kube-proxy DNATs them to the relay or to pods) and the other nodes' pods
            _run(["ip", "-n", ns, "route", "add", "10.96.0.0/16", "via", self.host_ip], comp)
            for k in range(len(self.names)):
                if k != j:
                    _run(["ip", "-n", ns, "route", "add", f"10.244.{k}.0/24", "via", self.node_ip(k)], comp)

    def _start_relay(self) -> None:
        port = self.cfg.port("kube-apiserver")
        socat = require_binary("socat", "apiserver-relay", "socat")
        self.sup.start(
            "apiserver-relay",
            [socat, f"TCP-LISTEN:{port},bind={self.host_ip},fork,reuseaddr", f"TCP:127.0.0.1:{port}"],
            ready=lambda: _tcp_ok(self.host_ip, port),
            timeout=10,
        )

    def relay_devices(self, endpoints: dict[str, tuple[str, int]]) -> str:
        """Make the lab's devices reachable from pods on the real nodes, as the apiserver is:
        for each ``name -> (proto, port)`` (``proto`` ``"udp"`` or ``"tcp"``; the device listens
        on 127.0.0.1:``port``), a ``socat`` relay (process ``device-relay <name>``) listens on the
        bridge address with the same port and forwards to 127.0.0.1. UDP relays fork one child
        per client address (``UDP4-LISTEN,fork``), so an IPMI session keeps one source port
        towards ipmi_sim; idle children end after 60 s. Returns the bridge address, the host a
        fence configuration inside the cluster names. ComponentError naming the relay if one does
        not start."""
        socat = require_binary("socat", "device-relay", "socat")
        for name, (proto, port) in sorted(endpoints.items()):
            proc = f"device-relay {name}"
            if proto == "udp":
                argv = [
                    socat,
                    "-T",
                    "60",
                    f"UDP4-LISTEN:{port},bind={self.host_ip},reuseaddr,fork",
                    f"UDP4:127.0.0.1:{port}",
                ]
                ready = lambda port=port: _udp_bound(self.host_ip, port)  # noqa: E731
            else:
                argv = [
                    socat,
                    f"TCP-LISTEN:{port},bind={self.host_ip},fork,reuseaddr",
                    f"TCP:127.0.0.1:{port}",
                ]
                ready = lambda port=port: _tcp_ok(self.host_ip, port)  # noqa: E731
            self.sup.start(proc, argv, ready=ready, timeout=10)
            self._relays.append(proc)
        return self.host_ip

    def _credentials(self) -> None:
        pki_dir = Path(self.kube["pki"])
        if not (pki_dir / "kube-proxy.crt").exists():
            pki.issue_client_cert(pki_dir, "kube-proxy", "system:kube-proxy")
        for name in self.names:
            pki.issue_client_cert(pki_dir, f"node-{name}", f"system:node:{name}", "system:nodes")

    def _kubeconfig(self, path: Path, stem: str, user: str) -> Path:
        """A kubeconfig against the relay; the apiserver's certificate names ``kubernetes``, not
        the bridge address, hence ``tls-server-name``."""
        return pki.write_kubeconfig(
            path,
            f"https://{self.host_ip}:{self.cfg.port('kube-apiserver')}",
            Path(self.kube["pki"]),
            stem,
            user,
            tls_server_name="kubernetes",
        )

    def _write_node(self, j: int, wrapper: Path) -> dict:
        name = self.names[j]
        d = self.root / name
        var = d / "var"
        for sub in ("lib", "log", "tmp", "cache"):
            (var / sub).mkdir(parents=True, exist_ok=True)
        if not (var / "run").is_symlink():
            (var / "run").symlink_to("/run")
        (d / "manifests").mkdir(exist_ok=True)
        (d / "cni").mkdir(exist_ok=True)
        pki_dir = Path(self.kube["pki"])
        # unix socket paths are limited to 104 bytes (containerd's ttrpc socket adds ".ttrpc"), and
        # a test's workdir can be longer: the sockets live under /tmp/<prefix>/<node> (not /run: the
        # node mounts a /run of its own, and the host's ctr must reach the socket too)
        sockdir = run_dir(self.prefix) / name
        sockdir.mkdir(parents=True, exist_ok=True)
        socket = sockdir / "containerd.sock"
        (d / "cni" / "10-lab.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "lab",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": True,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": f"10.244.{j}.0/24"}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=1,
            )
        )
        (d / "containerd.toml").write_text(
            CONTAINERD_CONFIG.format(
                root=var / "lib" / "containerd",
                socket=socket,
                pause=next(n for n in self.images if "pause" in n),
                cni_bin=CNI_BIN_DIR,
                cni_conf=d / "cni",
                wrapper=wrapper,
            )
        )
        (d / "resolv.conf").write_text(
            "# the lab's pods resolve nothing: no DNS leaves the lab\nnameserver 127.0.0.1\n"
        )
        kubelet_cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup(j),
            "failSwapOn": False,
            "readOnlyPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki_dir / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "staticPodPath": str(d / "manifests"),
            "containerRuntimeEndpoint": f"unix://{socket}",
            "enforceNodeAllocatable": [],
            "localStorageCapacityIsolation": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "resolvConf": str(d / "resolv.conf"),
            "clusterDomain": "cluster.local",
            "volumePluginDir": str(d / "volume-plugins"),
            "registerWithTaints": [REAL_TAINT],
            "healthzBindAddress": "127.0.0.1",
            "shutdownGracePeriod": "0s",
        }
        if self.cfg.node_monitor_grace_period < 2 * KUBELET_LEASE_RENEW_SECONDS:
            # the node Lease renewed every quarter of LabConfig.node_lease_seconds (2.5 s), as
            # kwok's nodes do: a renewal every 10 s (the kubelet's default) a little late on a
            # loaded host outlasts the test lab's 10 s grace period, and a healthy node reads
            # NotReady until the kubelet's next status update. The demo's 20 s keeps the default:
            # renewing more often there only makes a failed node read NotReady later.
            kubelet_cfg["nodeLeaseDurationSeconds"] = self.cfg.node_lease_seconds
        (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_cfg, sort_keys=False))
        kubelet_kc = self._kubeconfig(d / "kubelet.kubeconfig", f"node-{name}", f"system:node:{name}")
        proxy_kc = self._kubeconfig(d / "kube-proxy.kubeconfig", "kube-proxy", "system:kube-proxy")
        (d / "kube-proxy.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(proxy_kc)},
                    "hostnameOverride": name,
                    "mode": "iptables",
                    "clusterCIDR": POD_CIDR,
                    "healthzBindAddress": "127.0.0.1:10256",
                    "metricsBindAddress": "127.0.0.1:10249",
                    # 0: leave the (partly host-global) conntrack sysctls alone
                    "conntrack": {
                        "maxPerCore": 0,
                        "min": 0,
                        "tcpEstablishedTimeout": "0s",
                        "tcpCloseWaitTimeout": "0s",
                    },
                },
                sort_keys=False,
            )
        )
        fc_state = d / "fc-port"
        if not fc_state.exists():
            fc_state.write_text("up\n")
        hook = d / "fc-hook.sh"
        hook.write_text(
            FC_HOOK.format(
                state=fc_state, pid_file=d / "init.pid", shared=self.shared, data=SHARED_MOUNT + "/data"
            )
        )
        hook.chmod(0o755)
        spec = {
            "name": name,
            "index": j,
            "dir": str(d),
            "var": str(var),
            "cgroup": self.cgroup(j),
            "pid_file": str(d / "init.pid"),
            "logdir": str(self.cfg.workdir / "logs"),
            "containerd_config": str(d / "containerd.toml"),
            "containerd_socket": str(socket),
            "images": [str(p) for p in self.images.values()],
            "images_key": "+".join(sorted(Path(p).name for p in self.images.values())),
            "shared": str(self.shared),
            "fc_state": str(fc_state),
            "netns": self.netns(j),
            "kubelet_argv": [
                str(self.binaries["kubelet"]),
                f"--config={d / 'kubelet.yaml'}",
                f"--kubeconfig={kubelet_kc}",
                f"--hostname-override={name}",
                f"--node-ip={self.node_ip(j)}",
                f"--root-dir={var / 'lib' / 'kubelet'}",
                f"--node-labels={REAL_LABEL}=true,type=real",
            ],
            "kube_proxy_argv": [str(self.binaries["kube-proxy"]), f"--config={d / 'kube-proxy.yaml'}"],
        }
        (d / "spec.json").write_text(json.dumps(spec, indent=1))
        return spec

    # ---------------------------------------------------------------- power
    def boot(self, name: str) -> None:
        """Start node ``name``'s init (which starts containerd, kubelet, kube-proxy)."""
        spec = self.specs[name]
        make_node_cgroup(spec["cgroup"], len(self.names))
        argv = [
            require_binary("nsenter", "real node", "util-linux"), f"--net=/run/netns/{spec['netns']}", "--",
            require_binary("unshare", "real node", "util-linux"), "--mount", "--propagation", "slave", "--",
            sys.executable, "-m", "noderemedy_lab.nodeinit", str(Path(spec["dir"]) / "spec.json"),
        ]  # fmt: skip
        self.sup.start(
            f"node {name}", argv, env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        )

    def running(self, name: str) -> bool:
        """True if node ``name``'s init is alive (its power is on and it has not failed)."""
        proc = self.sup.procs.get(f"node {name}")
        return proc is not None and proc.alive()

    def check_alive(self) -> None:
        """ComponentError naming the failed component (from the node's log) of a node whose init
        exited although its power is on."""
        for name in self.names:
            proc = self.sup.procs.get(f"node {name}")
            if proc is None or proc.alive() or self._power(name) == "0":
                continue
            text = tail(proc.log, 40)
            component = f"real node {name}"
            for line in reversed(text.splitlines()):
                if " ERROR " in f" {line}":
                    what = line.split("ERROR", 1)[1].strip()
                    component = f"{what.split(':', 1)[0]} {name}"
                    break
            raise ComponentError(component, f"exited with {proc.popen.returncode}; log {proc.log}:\n{text}")

    def report(self, name: str) -> str:
        """What node ``name`` says when it does not come back: whether its init runs, and the last
        lines of the init's log and of its containerd's (both are gone with the lab's workdir)."""
        proc = self.sup.procs.get(f"node {name}")
        state = (
            "no init"
            if proc is None
            else "init running"
            if proc.alive()
            else f"init exited {proc.popen.returncode}"
        )
        containerd = Path(self.specs[name]["logdir"]) / f"containerd-{name}.log"
        init = tail(proc.log, 8) if proc is not None else ""
        return f"{name}: {state}; init log:\n{init}\ncontainerd log:\n{tail(containerd, 5)}"

    def _power(self, name: str) -> str:
        path = self.power_files.get(name)
        if path is None:
            return "1"
        try:
            return Path(path).read_text().strip()
        except OSError:
            return "1"

    def power_off(self, name: str) -> None:
        """Cut node ``name``'s power directly (what its BMC hook does): everything dies at once."""
        kill_node(self.specs[name])
        proc = self.sup.procs.get(f"node {name}")
        if proc is not None:
            proc.popen.wait(10)

    def watch(self) -> list[str]:
        """One pass of the power watcher: reap nodes whose power was cut, boot nodes whose BMC
        says power on and whose init was killed by the cut. Called every 0.2 s by the lab;
        returns the nodes it booted."""
        booted = []
        for name in self.names:
            proc = self.sup.procs.get(f"node {name}")
            power = self._power(name)
            if proc is not None:
                proc.alive()  # reaps a killed init
            if (
                power == "1"
                and proc is not None
                and not proc.alive()
                and proc.popen.returncode == -signal.SIGKILL
            ):
                # the BMC hook killed it (power off), and the power is back: boot
                self.boot(name)
                booted.append(name)
            elif power == "0" and proc is not None and proc.alive():
                kill_node(self.specs[name])
        return booted

    def set_link(self, name: str, up: bool) -> None:
        """Partition (``up=False``) or reconnect node ``name``: the host end of its veth goes down
        or up. The node's processes and containers are untouched."""
        j = self.names.index(name)
        _run(["ip", "link", "set", self.veth(j), "up" if up else "down"], f"real node {name}")

    # ---------------------------------------------------------------- stop
    def stop(self) -> None:
        """Kill every node (as a power cut), stop the relay, delete namespaces, veths, the bridge
        and the cgroups (:func:`remove_prefix`, when the names were claimed: never another running
        lab's), and the nodes' containerd state. Safe to call on a half-started lab."""
        for j, name in enumerate(self.names):
            proc = self.sup.procs.get(f"node {name}")
            if proc is not None and proc.alive():
                proc.popen.send_signal(signal.SIGTERM)
                try:
                    proc.popen.wait(20)
                except subprocess.TimeoutExpired:
                    pass
            with contextlib.suppress(ComponentError):
                kill_cgroup(self.cgroup(j), timeout=10)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(5)
        self.sup.stop("apiserver-relay")
        for proc in self._relays:
            self.sup.stop(proc)
        self._relays.clear()
        if self._claim is not None:  # every name with this prefix is this lab's (check)
            remove_prefix(self.prefix)
            self._claim.close()
            self._claim = None
        for name in self.names:
            shutil.rmtree(self.root / name / "var" / "lib" / "containerd", ignore_errors=True)


__all__ = [
    "KUBERNETES_VERSION",
    "RealNodes",
    "cgroup_pids",
    "cleanup_recorded",
    "import_image",
    "kill_node",
    "leftovers",
]


def main(argv: list[str]) -> int:
    """``python -m noderemedy_lab.realnode power-off <node dir>/spec.json`` (the BMC power hook)."""
    if len(argv) != 3 or argv[1] != "power-off":
        print("usage: python -m noderemedy_lab.realnode power-off SPEC_JSON", file=sys.stderr)
        return 2
    kill_node(json.loads(Path(argv[2]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
