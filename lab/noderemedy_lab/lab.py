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
import time
from collections.abc import Callable
from pathlib import Path

from .config import POWER_LABEL, LabConfig
from .procs import ComponentError, Supervisor, proc_start_time, require_binary

POWER_HOOK = """#!/bin/sh
# ipmi_sim chassis_control power hook (written by noderemedy_lab): $1 = node, $2 = 1 (on) | 0 (off).
# Relabels the node so kwok starts/stops heartbeating it (see noderemedy_lab.kube).
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

    # ------------------------------------------------------------------ lifecycle
    def start(self, progress: Callable[[str], None] | None = None, ready_timeout: float = 90.0) -> Lab:
        """Start every component; ComponentError (nothing left running) if one fails.

        ``ready_timeout`` is how long, in seconds, to wait for all nodes to turn Ready.
        """
        say = progress or (lambda line: None)
        cfg = self.config
        self._prepare_workdir()
        node_names = [cfg.node_name(i) for i in range(cfg.nodes)]
        self.info = {"workdir": str(cfg.workdir), "port_base": cfg.port_base, "nodes": node_names}
        binaries: dict[str, Path] = {}
        if cfg.kube:
            from .build import ensure_binaries

            binaries = ensure_binaries(say)
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

                say(f"starting {cfg.nodes} BMC(s), PDUs and FC switches")
                self.info["devices"] = start_devices(sup, cfg, node_names, power_hook)
            self._power_hook = power_hook
            for peer in cfg.peers:
                say(f"starting the {peer} peer")
                self.ensure_peer(peer, write=False)
            if cfg.kube:
                say("waiting for the nodes to turn Ready")
                self.wait_nodes(node_names, "True", ready_timeout)
            self.info["started_in_s"] = round(time.monotonic() - t0, 2)
            self.write_state()
        except BaseException:
            sup.stop_all()
            raise
        return self

    def stop(self) -> None:
        """Stop every process this lab started (reaping them) and mark ``lab.json`` stopped."""
        if self._api is not None:
            self._api.close()
            self._api = None
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
            )
        )
        os.chmod(path, 0o755)
        return path

    def write_state(self, extra: dict | None = None) -> None:
        """Write ``lab.json`` (mode 0600): ``info`` plus the process table and state."""
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
        out = self.ipmitool(node, "chassis", "power", state)
        if out.returncode != 0:
            raise ComponentError(
                f"bmc {node}", f"power {state} failed: {out.stderr.strip() or out.stdout.strip()}"
            )

    def power_off(self, node: str) -> None:
        """Cut ``node``'s power through its real BMC (``ipmitool chassis power off``)."""
        self._power(node, "off")

    def power_on(self, node: str) -> None:
        """Restore ``node``'s power through its real BMC (``ipmitool chassis power on``)."""
        self._power(node, "on")

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
                raise ComponentError("kube", f"nodes not {sorted(want)} after {timeout:.0f} s: {states}")
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
