"""The lab as one object: start everything, describe it (``lab.json``), drive it, stop it.

``Lab(config).start()`` builds what is missing (:mod:`noderemedy_lab.build`), starts the control
plane and kwok (:mod:`noderemedy_lab.kube`), then one BMC per node, the PDUs and the FC switches
(:mod:`noderemedy_lab.devices`), and waits until every node is Ready. On any failure everything
already started is stopped before the error (a :class:`~noderemedy_lab.procs.ComponentError`
naming the component) propagates, so a failed start leaves nothing running.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import POWER_LABEL, LabConfig
from .procs import ComponentError, Supervisor, proc_start_time, require_binary

if TYPE_CHECKING:
    from .realnode import RealNodes

POWER_HOOK = """#!/bin/sh
# ipmi_sim chassis_control power hook (written by noderemedy_lab): $1 = node, $2 = 1 (on) | 0 (off).
# A real node loses every process at once on power off (noderemedy_lab.realnode.kill_node); the lab
# boots it again when the BMC's power file says on. A kwok node is relabelled so kwok starts/stops
# heartbeating it (see noderemedy_lab.kube).
case "$1" in
  lab-real-*)
    [ "$2" = 1 ] && exit 0
    exec "{python}" -m noderemedy_lab.realnode power-off "{real_dir}/$1/spec.json" ;;
esac
# a node of a rack: labelled by noderemedy_lab.rack from its BMC, its outlet and its switch
[ -e "{rack_dir}/nodes/$1" ] && exit 0
case "$2" in 1) v=on ;; *) v=off ;; esac
exec timeout 10 "{kubectl}" --kubeconfig "{kubeconfig}" --request-timeout=5s \\
    label node "$1" {label}="$v" --overwrite
"""


#: Peers started on demand (:meth:`Lab.ensure_peer`): name -> module with ``start_peer``, ``ready``,
#: ``READY_TIMEOUT`` and optionally ``configure(endpoint, lab)`` (run once it is ready; returns the
#: endpoint to record). The process is named after the peer.
OPTIONAL_PEERS = {"redfish": "redfish", "ec2": "ec2", "vsphere": "vsphere"}


class Lab:
    """A running lab. Attributes once started: ``config``, ``info`` (the ``lab.json`` document),
    ``kubeconfig`` (Path or None without kube), ``supervisor`` (owns the processes).

    Args:
        config: what to start (:class:`~noderemedy_lab.config.LabConfig`).
    """

    def __init__(self, config: LabConfig) -> None:
        self.config = config
        self.info: dict = {}
        self.kubeconfig: Path | None = None
        self.supervisor: Supervisor | None = None
        self._records: dict[str, dict] = {}
        self._api = None
        self._power_hook: list[str] | None = None
        self.real = None  # RealNodes once started
        self.rack = None  # noderemedy_lab.rack.Rack once started (LabConfig.rack)
        self._binaries: dict[str, Path] = {}
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(
        self,
        progress: Callable[[str], None] | None = None,
        ready_timeout: float = 90.0,
        defer_real_nodes: bool = False,
    ) -> Lab:
        """Start every component; ComponentError (nothing left running) if one fails.

        ``ready_timeout`` is how long, in seconds, to wait for all nodes to turn Ready.
        ``defer_real_nodes``: start the real nodes' BMCs and certificates now but their network,
        containerd and kubelet only at :meth:`start_real_nodes` (the test suite's lab does this, so
        that only the tests that need real nodes pay for them).
        """
        say = progress or (lambda line: None)
        cfg = self.config
        if cfg.real_nodes and not cfg.kube:
            raise ComponentError("lab", "real_nodes: real nodes need the control plane (kube)")
        self._prepare_workdir()
        node_names = [cfg.node_name(i) for i in range(cfg.nodes)]
        real_names = [cfg.real_node_name(j) for j in range(cfg.real_nodes)]
        self.info = {"workdir": str(cfg.workdir), "port_base": cfg.port_base, "nodes": node_names}
        if real_names:
            self.info["real_node_names"] = real_names
        binaries: dict[str, Path] = {}
        if cfg.kube:
            from .build import ensure_binaries

            binaries = ensure_binaries(say, node=bool(real_names), vcsim="vsphere" in cfg.peers)
            self._binaries = binaries
        self.supervisor = sup = Supervisor(cfg.workdir / "logs")
        t0 = time.monotonic()
        try:
            power_hook = None
            if cfg.kube:
                from .kube import start_kube

                say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
                self.info["kube"] = start_kube(sup, cfg, binaries, node_names)
                self.kubeconfig = Path(self.info["kube"]["kubeconfig"])
                power_hook = [str(self._write_power_hook())]
            if cfg.devices:
                from .devices import start_devices

                say(f"starting {cfg.nodes + cfg.real_nodes} BMC(s), PDUs and FC switches")
                self.info["devices"] = start_devices(sup, cfg, node_names + real_names, power_hook)
            self._power_hook = power_hook
            for peer in cfg.peers:
                say(f"starting the {peer} peer")
                self.ensure_peer(peer, write=False)
            if cfg.rack:
                from .rack import Rack

                say(f"wiring the rack: {cfg.nodes} nodes behind one PDU and one switch")
                self.rack = Rack(self).start()
                self.info["rack"] = {"nodes": node_names, "dir": str(self.rack.dir)}
            if cfg.kube:
                say("waiting for the nodes to turn Ready")
                self.wait_nodes(node_names, "True", ready_timeout)
            if real_names and not defer_real_nodes:
                self.start_real_nodes(say)
            self.info["started_in_s"] = round(time.monotonic() - t0, 2)
            self.write_state()
        except BaseException:
            if self.rack is not None:
                self.rack.close()
            self._stop_real()
            sup.stop_all()
            raise
        return self

    def start_real_nodes(
        self, progress: Callable[[str], None] | None = None, ready_timeout: float = 120.0
    ) -> dict:
        """Start the real nodes (network, relay, containerd, kubelet, kube-proxy) and wait until
        each is Ready; returns ``info["real_nodes"]`` (see :meth:`RealNodes.info`). Idempotent.

        ComponentError naming the component (``containerd lab-real-0``, ``kubelet lab-real-1``,
        ``apiserver-relay``...) if one fails; everything of the real nodes is then stopped again.
        """
        from .images import ensure_node_images
        from .realnode import RealNodes

        if self.real is not None:
            return self.info["real_nodes"]
        say = progress or (lambda line: None)
        cfg = self.config
        if not cfg.real_nodes or self.supervisor is None:
            raise ComponentError("lab", "real_nodes: this lab was configured without real nodes")
        images = ensure_node_images(say)
        bmcs = self.info.get("devices", {}).get("bmcs", {})
        real = RealNodes(
            cfg,
            self.supervisor,
            self.info["kube"],
            self._binaries,
            images,
            power_files={n: b["power_file"] for n, b in bmcs.items()},
        )
        self.real = real
        t0 = time.monotonic()
        try:
            self.info["real_nodes"] = real.start(say)
            self._service_endpoints(real.host_ip)
            self._relay_devices(real)
            self._fc_hooks()
            say("waiting for the real nodes to turn Ready")
            deadline = time.monotonic() + ready_timeout
            while True:
                real.check_alive()
                states = self.node_ready(real.names)
                if all(v == "True" for v in states.values()):
                    break
                if time.monotonic() > deadline:
                    raise ComponentError(
                        "kubelet", f"real nodes not Ready after {ready_timeout:.0f} s: {states}"
                    )
                time.sleep(0.25)
        except BaseException:
            self._stop_real()
            raise
        self.info["real_nodes_started_in_s"] = round(time.monotonic() - t0, 2)
        self._watcher = threading.Thread(target=self._watch, name="real-node-power", daemon=True)
        self._watcher.start()
        self.write_state()
        return self.info["real_nodes"]

    def _relay_devices(self, real: RealNodes) -> None:
        """Relay every BMC and SNMP device onto the real nodes' bridge address
        (:meth:`RealNodes.relay_devices`), so the runner in a pod fences through them as users'
        in-cluster runners reach their BMCs; ``info["devices"]["relay_host"]`` is that address (the
        ports are the devices' own)."""
        devices = self.info.get("devices")
        if not devices:
            return
        endpoints = {f"bmc {n}": ("udp", int(b["port"])) for n, b in devices.get("bmcs", {}).items()}
        endpoints |= {f"snmp {n}": ("udp", int(d["port"])) for n, d in devices.get("snmp", {}).items()}
        devices["relay_host"] = real.relay_devices(endpoints)

    def _service_endpoints(self, host_ip: str) -> None:
        """Point the ``kubernetes`` Service (no endpoint reconciler in the lab) at the relay the
        real nodes reach, so in-cluster clients on them work through kube-proxy."""
        doc = {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [
                {
                    "addresses": [{"ip": host_ip}],
                    "ports": [
                        {"name": "https", "port": self.config.port("kube-apiserver"), "protocol": "TCP"}
                    ],
                }
            ],
        }
        path = self.config.workdir / "kube" / "kubernetes-endpoints.json"
        path.write_text(json.dumps(doc))
        out = self.kubectl("apply", "-f", str(path))
        if out.returncode != 0:
            raise ComponentError(
                "kube-apiserver", f"cannot set the kubernetes endpoints: {out.stderr.strip()}"
            )

    def _fc_hooks(self) -> None:
        """Give the FC switch (snmpd ``fc``) a hook on each real node's port, so that the port's
        admin status controls the node's access to the shared storage."""
        import fcntl

        fc = self.info.get("devices", {}).get("snmp", {}).get("fc")
        if fc is None:
            return
        ports = self.info["devices"]["fc_ports"]
        state_file = Path(fc["state_file"])
        with open(str(state_file) + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            st = json.loads(state_file.read_text())
            for name, node in self.info["real_nodes"].items():
                port = ports[name].rsplit("/", 1)[1]
                st.setdefault("hooks", {})[port] = [node["fc_hook"]]
                node["fc_port"] = ports[name]
            tmp = state_file.with_name(state_file.name + ".tmp")
            tmp.write_text(json.dumps(st, indent=1))
            os.replace(tmp, state_file)

    def fc_port(self, node: str, enabled: bool) -> None:
        """Enable or disable ``node``'s port on the lab's FC switch (snmpd ``fc``) over SNMP, as a
        fence agent does (IF-MIB ifAdminStatus: up(1) / down(2)). For a real node this cuts or
        restores its access to the shared storage."""
        fc = self.info["devices"]["snmp"]["fc"]
        index = self.info["devices"]["fc_ports"][node].rsplit("/", 1)[1]
        argv = [
            require_binary("snmpset", "snmpset", "snmp"), "-v2c", "-c", fc["community"], "-m", "",
            f"{fc['host']}:{fc['port']}", f".1.3.6.1.2.1.2.2.1.7.{index}", "i", "1" if enabled else "2",
        ]  # fmt: skip
        env = {**os.environ, "SNMP_PERSISTENT_DIR": self.info["devices"]["snmp_persistent_dir"]}
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
        if out.returncode != 0:
            raise ComponentError("snmpd-fc", f"port of {node}: {out.stderr.strip() or out.stdout.strip()}")

    def _watch(self) -> None:
        while not self._watch_stop.wait(0.2):
            real = self.real
            if real is None:
                return
            try:
                booted = real.watch()
            except Exception as exc:  # noqa: BLE001 - keep watching; say what failed
                print(f"[lab] real node power watcher: {exc}", file=sys.stderr, flush=True)
                continue
            if booted:
                for name in booted:
                    self._records.pop(f"node {name}", None)
                self.write_state()

    def _stop_real(self) -> None:
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(5)
        if self.real is not None:
            self.real.stop()

    def import_image(self, archive: Path, nodes: list[str] | None = None) -> None:
        """Import an OCI/Docker archive into the containerd of each running real node (all by
        default) with ``ctr -n k8s.io images import``, as a node without a registry gets images.
        ComponentError naming the node's containerd if an import fails."""
        from .realnode import import_image

        for name, node in self.info.get("real_nodes", {}).items():
            if nodes is None or name in nodes:
                import_image(node["containerd_socket"], Path(archive), f"containerd {name}")

    def partition(self, node: str) -> None:
        """Cut real node ``node`` off the network (its link goes down); its kubelet and containers
        keep running."""
        self._real_node(node).set_link(node, up=False)

    def heal(self, node: str) -> None:
        """Reconnect real node ``node`` (link up)."""
        self._real_node(node).set_link(node, up=True)

    def _real_node(self, node: str):
        if self.real is None or node not in self.real.names:
            raise ComponentError("lab", f"node: {node!r} is not a running real node of this lab")
        return self.real

    def stop(self) -> None:
        """Stop every process this lab started (reaping them), remove the real nodes' namespaces,
        links and cgroups, and mark ``lab.json`` stopped."""
        if self._api is not None:
            self._api.close()
            self._api = None
        if self.rack is not None:
            self.rack.close()
        self._stop_real()
        if self.supervisor is not None:
            self.supervisor.stop_all()
        if self.config.state_file.exists():
            self.info["state"] = "stopped"
            self.write_state()

    def ensure_peer(self, name: str, write: bool = True) -> dict:
        """Start the optional peer ``name`` (one of :data:`OPTIONAL_PEERS`) unless it runs; its endpoint.

        Optional peers start only when asked for (``LabConfig.peers``, ``noderemedy-lab up --peers``,
        or a test's session fixture), so runs that do not need them do not pay for them. The
        endpoint is also stored as ``info["peers"][name]`` (and in ``lab.json`` when ``write``).
        Raises ComponentError naming the peer (nothing of it left running).
        """
        if name not in OPTIONAL_PEERS:
            raise ComponentError("lab", f"peer {name!r}: expected one of {sorted(OPTIONAL_PEERS)}")
        peers = self.info.setdefault("peers", {})
        if name in peers and self.supervisor is not None and self.supervisor.procs[name].alive():
            return peers[name]
        if self.supervisor is None:
            raise ComponentError(name, "the lab is not started")
        base = self.config.workdir / "devices"
        base.mkdir(parents=True, exist_ok=True)
        module = importlib.import_module(f".{OPTIONAL_PEERS[name]}", __package__)
        endpoint, proc = module.start_peer(
            self.supervisor, self.config, base, self.info["nodes"], self._power_hook
        )
        self.supervisor.wait_ready(proc, lambda: module.ready(endpoint), module.READY_TIMEOUT)
        configure = getattr(module, "configure", None)
        if configure is not None:
            try:
                endpoint = configure(endpoint, self)
            except BaseException:
                self.supervisor.stop(name)
                raise
        peers[name] = endpoint
        if write:
            self.write_state()
        return endpoint

    def _prepare_workdir(self) -> None:
        cfg = self.config
        if cfg.state_file.exists():
            try:
                old = json.loads(cfg.state_file.read_text())
            except (OSError, ValueError):
                old = {}
            alive = [
                name
                for name, row in old.get("processes", {}).items()
                if old.get("state") == "running" and proc_start_time(row["pid"]) == row.get("start_time")
            ]
            if alive:
                raise ComponentError(
                    "lab",
                    f"a lab is already running in {cfg.workdir} ({', '.join(alive)}): run 'noderemedy-lab down' first",
                )
        if cfg.workdir.exists():
            shutil.rmtree(cfg.workdir)
        cfg.workdir.mkdir(parents=True)
        os.chmod(cfg.workdir, 0o755)

    def _write_power_hook(self) -> Path:
        path = self.config.workdir / "kube" / "power-hook.sh"
        path.write_text(
            POWER_HOOK.format(
                kubectl=self.info["kube"]["binaries"]["kubectl"],
                kubeconfig=self.kubeconfig,
                label=POWER_LABEL,
                python=sys.executable,
                real_dir=self.config.workdir / "real",
                rack_dir=self.config.workdir / "rack",
            )
        )
        os.chmod(path, 0o755)
        return path

    def write_state(self, extra: dict | None = None) -> None:
        """Write ``lab.json`` (mode 0600): ``info`` plus the process table and state."""
        with self._write_lock:
            self._write_state(extra)

    def _write_state(self, extra: dict | None) -> None:
        doc = dict(self.info)
        doc.setdefault("state", "running")
        if self.supervisor is not None:
            # recorded while alive, once: a stopped lab keeps the table it ran with
            for name, proc in self.supervisor.procs.items():
                if name not in self._records and proc.alive():
                    self._records[name] = proc.record()
            doc["processes"] = dict(self._records)
        if extra:
            doc.update(extra)
        path = self.config.state_file
        tmp = path.with_name(".lab.json.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        self.info = {k: v for k, v in doc.items() if k != "processes"}

    # ------------------------------------------------------------------ driving it
    def kubectl(self, *args: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run the lab's kubectl with the admin kubeconfig; returns the CompletedProcess (text)."""
        if self.kubeconfig is None:
            raise ComponentError("kubectl", "this lab was started without Kubernetes")
        argv = [self.info["kube"]["binaries"]["kubectl"], "--kubeconfig", str(self.kubeconfig), *args]
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)

    def ipmitool(self, node: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Run ``ipmitool -I lanplus -C 3`` against ``node``'s BMC as its admin user."""
        bmc = self.info["devices"]["bmcs"][node]
        argv = [
            require_binary("ipmitool", "ipmitool", "ipmitool"),
            "-I", "lanplus", "-H", bmc["host"], "-p", str(bmc["port"]),
            "-U", bmc["username"], "-P", bmc["password"], "-C", str(bmc["cipher"]),
            *args,
        ]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def _power(self, node: str, state: str) -> None:
        from .bmc import set_power

        set_power(lambda *args: self.ipmitool(node, *args, timeout=90), node, state)

    def power_off(self, node: str) -> None:
        """Cut ``node``'s power through its real BMC (``ipmitool chassis power off``)."""
        self._power(node, "off")

    def power_on(self, node: str) -> None:
        """Restore ``node``'s power through its real BMC (``ipmitool chassis power on``)."""
        self._power(node, "on")

    def bmc_mode(self, node: str, mode: str) -> None:
        """Switch ``node``'s BMC into ``mode`` (``lies``, ``silent`` or ``normal``, see
        :func:`noderemedy_lab.bmc.set_bmc_mode`). ComponentError when the lab runs no such BMC."""
        from .bmc import set_bmc_mode

        proc = self.supervisor.procs.get(f"bmc {node}") if self.supervisor is not None else None
        if proc is None or node not in self.info.get("devices", {}).get("bmcs", {}):
            raise ComponentError(f"bmc {node}", "this lab runs no BMC for that node")
        set_bmc_mode(self.info["devices"]["bmcs"][node], mode, proc.pid)

    def api_client(self):
        """The lab's admin ``kubernetes.client.ApiClient``, built once and reused (polls go through
        it rather than a client or a kubectl process per request)."""
        if self.kubeconfig is None:
            raise ComponentError("kube", "this lab was started without Kubernetes")
        if self._api is None:
            from kubernetes import config as kconfig

            self._api = kconfig.new_client_from_config(str(self.kubeconfig))
        return self._api

    def node_ready(self, names: list[str] | None = None) -> dict[str, str]:
        """Ready condition status of each node: 'True', 'False', 'Unknown' or 'missing'."""
        from .kube import node_ready

        return node_ready(self.api_client(), names or self.info["nodes"])

    def mark_unreachable(self, node: str, timeout: float = 30.0) -> None:
        """Write what the node lifecycle controller writes once a node's heartbeats stop, without
        waiting its grace period: Ready ``Unknown``, reason ``NodeStatusUnknown`` (status
        subresource, read-modify-write on ``resourceVersion``).

        For tests where the node lifecycle controller is not what is tested. The node must be powered
        off first (:meth:`power_off`): its power label is then ``off``, so kwok no longer heartbeats
        it and nothing turns it Ready again; the controller itself later finds the Lease expired and
        leaves the condition as it is (already Unknown, same transition time) and taints the node
        unreachable, as on the real path. ComponentError if the label is not ``off`` within
        ``timeout`` seconds.

        A heartbeat kwok scheduled before the power went off still plays once (kwok checks the
        label when it schedules, :attr:`LabConfig.node_heartbeat_seconds`): it is scheduled at the
        node's last ``lastHeartbeatTime`` and plays within the delay plus its jitter (2.25 times
        the delay), so the condition is written once that time (plus 2 s of slack for a loaded
        kwok) has passed or the heartbeat was seen, whichever comes first; the heartbeat would
        otherwise turn the node Ready again after a caller saw it NotReady.
        """
        from datetime import UTC, datetime

        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        api = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + timeout
        while True:
            obj = api.read_node_status(node, _request_timeout=10)
            if (obj.metadata.labels or {}).get(POWER_LABEL) == "off":
                break
            if time.monotonic() > deadline:
                raise ComponentError("kube", f"node {node}: power label not 'off' after {timeout:.0f} s")
            time.sleep(0.25)
        first = self._last_heartbeat(obj)
        if first is not None:
            played_by = first.timestamp() + self.config.node_heartbeat_seconds * 2.25 + 2.0
            while time.time() < played_by:
                obj = api.read_node_status(node, _request_timeout=10)
                if self._last_heartbeat(obj) != first:
                    break
                time.sleep(0.25)
        now = datetime.now(UTC)
        while True:
            for cond in obj.status.conditions or []:
                if cond.type == "Ready" and cond.status != "Unknown":
                    cond.status, cond.reason = "Unknown", "NodeStatusUnknown"
                    cond.message, cond.last_transition_time = "Kubelet stopped posting node status.", now
            try:
                api.replace_node_status(node, obj, _request_timeout=10)
                return
            except ApiException as exc:
                if exc.status != 409 or time.monotonic() > deadline:
                    raise
            obj = api.read_node_status(node, _request_timeout=10)

    @staticmethod
    def _last_heartbeat(node: Any) -> Any:
        """The Ready condition's ``lastHeartbeatTime`` (a datetime) of a V1Node, None if absent."""
        for cond in node.status.conditions or []:
            if cond.type == "Ready":
                return cond.last_heartbeat_time
        return None

    def wait_nodes(self, names: list[str], ready: str | set[str], timeout: float) -> dict[str, str]:
        """Poll until every node's Ready status is in ``ready`` ('True', or {'False', 'Unknown'});
        returns the last statuses. ComponentError after ``timeout`` seconds."""
        want = {ready} if isinstance(ready, str) else set(ready)
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_ready(names)
            if all(s in want for s in states.values()):
                return states
            if time.monotonic() > deadline:
                off = {n: s for n, s in states.items() if s not in want}
                real = [n for n in off if self.real and n in self.real.names]
                said = "".join(f"\n{self.real.report(n)}" for n in real) if self.real else ""
                some = dict(list(off.items())[:20])
                raise ComponentError(
                    "kube",
                    f"{len(off)} of {len(states)} nodes not {sorted(want)} after {timeout:.0f} s: {some}{said}",
                )
            time.sleep(0.25)

    def status(self) -> dict[str, str]:
        """Health of every component: name -> 'ok' or what is wrong."""
        from .procs import udp_listening

        out: dict[str, str] = {}
        if self.supervisor is not None:
            for name, proc in self.supervisor.procs.items():
                out[name] = "ok" if proc.alive() else f"exited ({proc.popen.returncode})"
        if "kube" in self.info:
            from .kube import probe_components

            for name, state in probe_components(self.config, self.info["kube"]).items():
                if state != "ok":
                    out[name] = state
            for node, ready in self.node_ready().items():
                out[f"node {node}"] = "Ready" if ready == "True" else f"Ready={ready}"
        for node, bmc in self.info.get("devices", {}).get("bmcs", {}).items():
            if not udp_listening(bmc["port"]):
                out[f"bmc {node}"] = "not listening"
        return out
