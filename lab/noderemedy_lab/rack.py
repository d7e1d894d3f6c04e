"""A rack in the lab: kwok nodes behind one PDU and one FC switch, each with its own BMC, and the
two failures bare-metal admins fear most, made real at the devices.

The lab already gives every kwok node ``lab-node-<i>`` its own BMC (``ipmi_sim``), outlet ``i+1`` of
the snmpd APC rack PDU (``apc-rpdu``: one snmpd agent, one outlet per node) and port ``fc1/<i+1>`` of
the snmpd FC switch (``fc``). A :class:`Rack` wires them the way a rack is wired:

* **A node runs only while its BMC's chassis power is on and its PDU outlet is on.** The BMC stays
  reachable with its outlet off (the lab's simplification: its standby power is not modelled) and
  reports its own chassis state; the PDU reports the outlet. A node's power label
  (``lab.noderemedy.io/power``, which decides whether kwok heartbeats it) is therefore ``on`` only
  when both are on, ``off`` otherwise.
* **The rack's top-of-rack Ethernet switch** carries every node's traffic to the API server. The
  lab has no Ethernet for kwok nodes, so the switch is one state of the rack (``switch-down`` in
  the rack's directory): while it is down, a powered node's label is ``unreachable`` (not ``on``:
  kwok stops heartbeating it) and its devices keep saying power on.

A watcher thread (every :data:`POLL_SECONDS`) reads the devices' own state (each BMC's power file,
the PDU's state file, the switch marker) and relabels the nodes whose computed label changed; the
lab's BMC power hook leaves the nodes of a rack to it (``rack/nodes/<node>`` exists). So an outlet
switched off by ``snmpset``, ``fence_apc_snmp`` or the collection's ``pdu_power`` module takes its
node down exactly as an ``ipmitool chassis power off`` does.

The two rack failures:

* :meth:`Rack.power_loss`: every outlet of the rack off at once, in **one SNMP SET request** to the
  PDU (one varbind per outlet, ``rPDUOutletControlCommand`` = immediateOff(2), PowerNet-MIB); the
  nodes turn NotReady through the power label, after the node lifecycle controller's grace period.
* :meth:`Rack.switch_loss`: the switch fails; the nodes turn NotReady, their BMCs and outlets still
  say power on, so a fence must still cut them off before anything is released.

Costs, measured on this project's 2-core machine (docs/lab.md, "A rack"): each BMC is one
``ipmi_sim`` process (40 of them: 144 MiB RSS in all) and one UDP port (``port_base + 100 + i``);
the PDU and the switch are one snmpd each whatever the number of outlets.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .bmc import power_sets
from .config import POWER_LABEL
from .procs import ComponentError, require_binary

#: Seconds between two reads of the rack's devices by the watcher.
POLL_SECONDS = 0.2
#: PowerNet-MIB rPDUOutletControlCommand (write 1 immediateOn, 2 immediateOff) and
#: rPDUOutletStatusOutletState (1 on, 2 off), indexed by outlet number.
OUTLET_CONTROL = ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4"
OUTLET_STATUS = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4"
#: Power label value of a powered node that its switch cut off (kwok manages only ``on``).
UNREACHABLE = "unreachable"


def rack_dir(workdir: Path) -> Path:
    """The rack's state directory under the lab's ``workdir``: ``nodes/<node>`` marks a node of the
    rack (the BMC power hook then leaves its label to the rack), ``switch-down`` a failed switch."""
    return Path(workdir) / "rack"


class Rack:
    """The rack over ``nodes`` of a started ``lab`` (:class:`~noderemedy_lab.lab.Lab` with devices and
    Kubernetes). :meth:`start` wires it, :meth:`stop` unwires it (outlets on, switch up, labels
    from the BMCs alone again).

    Args:
        lab: the started lab.
        nodes: kwok nodes of the lab (default: all of them); each must have a BMC and an outlet.

    Raises:
        ComponentError: ``rack``: a node that is not a kwok node of the lab, or a lab without
            devices or Kubernetes.
    """

    def __init__(self, lab: Any, nodes: list[str] | None = None) -> None:
        info = lab.info
        if "devices" not in info or lab.kubeconfig is None:
            raise ComponentError("rack", "a rack needs the lab's devices and Kubernetes")
        names = list(info["nodes"]) if nodes is None else list(nodes)
        bad = [n for n in names if n not in info["nodes"]]
        if bad or not names:
            raise ComponentError("rack", f"nodes: not kwok nodes of this lab: {bad or names!r}")
        self.lab = lab
        self.nodes = names
        self.dir = rack_dir(Path(info["workdir"]))
        dev = info["devices"]
        self.pdu = dev["snmp"]["apc-rpdu"]
        self.switch = dev["snmp"]["fc"]
        self.outlets: dict[str, int] = {n: int(dev["outlets"][n]) for n in names}
        self.fc_ports: dict[str, str] = {n: dev["fc_ports"][n] for n in names}
        self.bmcs: dict[str, dict] = {n: dev["bmcs"][n] for n in names}
        self._applied: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rack-label")
        self._api: Any = None
        self._sync_lock = threading.Lock()
        #: (monotonic seconds, node, label) of every relabel the watcher made
        self.relabels: list[tuple[float, str, str]] = []

    # ------------------------------------------------------------------ wiring
    def start(self) -> Rack:
        """Mark the nodes as the rack's, switch up, and start the watcher (which labels at once)."""
        from kubernetes import client

        (self.dir / "nodes").mkdir(parents=True, exist_ok=True)
        (self.dir / "switch-down").unlink(missing_ok=True)
        for n in self.nodes:
            (self.dir / "nodes" / n).touch()
        (self.dir / "rack.json").write_text(
            json.dumps({"nodes": self.nodes, "outlets": self.outlets, "fc_ports": self.fc_ports}, indent=1)
        )
        self._api = client.CoreV1Api(self.lab.api_client())
        for node in self._api.list_node(_request_timeout=30).items:
            if node.metadata.name in self.outlets:
                self._applied[node.metadata.name] = (node.metadata.labels or {}).get(POWER_LABEL, "")
        self._stop.clear()
        self.sync()
        self._thread = threading.Thread(target=self._watch, name="rack-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Outlets on (one SET), switch up, the watcher's last pass, then the nodes are the BMC
        hook's again (label from the BMC's power alone, as in a lab without a rack)."""
        self.power_restore()
        self.switch_restore()
        self.sync()
        self.close()
        for n in self.nodes:
            (self.dir / "nodes" / n).unlink(missing_ok=True)

    def close(self) -> None:
        """Stop the watcher only (the lab is stopping: its nodes go with it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------ the failures
    def power_loss(self) -> None:
        """Every outlet of the rack off at once: one SNMP SET request to the PDU with one
        ``rPDUOutletControlCommand.<outlet> = 2`` (immediateOff) varbind per node.
        ComponentError ``snmpd-pdu`` if the PDU refuses it."""
        self._set_outlets(2)

    def power_restore(self) -> None:
        """Every outlet of the rack on again, in one SET request (immediateOn, 1)."""
        self._set_outlets(1)

    def switch_loss(self) -> None:
        """The rack's switch fails: every powered node turns unreachable (label ``unreachable``),
        its BMC and outlet still on."""
        (self.dir / "switch-down").touch()
        self.sync()

    def switch_restore(self) -> None:
        """The switch is back: powered nodes heartbeat again."""
        (self.dir / "switch-down").unlink(missing_ok=True)
        self.sync()

    def _set_outlets(self, value: int) -> None:
        argv = [
            require_binary("snmpset", "snmpd-pdu", "snmp"), "-v2c", "-c", self.pdu["community"], "-m", "",
            "-t", "10", "-r", "0", f"{self.pdu['host']}:{self.pdu['port']}",
        ]  # fmt: skip
        for n in self.nodes:
            argv += [f"{OUTLET_CONTROL}.{self.outlets[n]}", "i", str(value)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self._snmp_env())
        if out.returncode != 0:
            raise ComponentError("snmpd-pdu", f"outlets {value}: {out.stderr.strip() or out.stdout.strip()}")
        self.sync()

    # ------------------------------------------------------------------ reading the devices
    def outlet_states(self) -> dict[str, str]:
        """Each node's outlet as the PDU reports it over SNMP (one GET request for the whole rack,
        ``rPDUOutletStatusOutletState``): node -> ``on`` | ``off``."""
        argv = [
            require_binary("snmpget", "snmpd-pdu", "snmp"), "-v2c", "-c", self.pdu["ro_community"], "-m", "",
            "-On", "-Oqv", "-t", "10", "-r", "0", f"{self.pdu['host']}:{self.pdu['port']}",
            *(f"{OUTLET_STATUS}.{self.outlets[n]}" for n in self.nodes),
        ]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self._snmp_env())
        values = out.stdout.split()
        if out.returncode != 0 or len(values) != len(self.nodes):
            raise ComponentError("snmpd-pdu", f"outlet status: {out.stderr.strip() or out.stdout.strip()}")
        return {n: ("on" if v == "1" else "off") for n, v in zip(self.nodes, values, strict=True)}

    def bmc_power(self, node: str) -> str:
        """``node``'s chassis power as its BMC reports it over IPMI (``ipmitool chassis power
        status``): ``on`` | ``off``. ComponentError ``bmc <node>`` if the BMC does not answer."""
        out = self.lab.ipmitool(node, "chassis", "power", "status")
        text = out.stdout.strip().lower()
        if out.returncode != 0 or not text.startswith("chassis power is "):
            raise ComponentError(f"bmc {node}", f"power status: {out.stderr.strip() or text}")
        return text.rsplit(" ", 1)[1]

    def device_logs(self) -> dict[str, dict[str, list[tuple[float, int]]]]:
        """What the devices recorded, per node: ``{"bmc": [(epoch, 0|1), ...], "outlet": [(epoch,
        written value), ...]}`` from each BMC's ``power.log`` and the PDU backend's SET log (written
        values: 1 on, 2 off, 3 reboot...); a lying BMC's ignored sets are left out (they changed
        nothing: :func:`noderemedy_lab.bmc.power_sets`). Used to check that a release had its own evidence."""
        st = json.loads(Path(self.pdu["state_file"]).read_text())
        by_outlet: dict[str, list[tuple[float, int]]] = {}
        for t, port, value in st.get("log", []):
            by_outlet.setdefault(str(port), []).append((float(t), int(value)))
        out: dict[str, dict[str, list[tuple[float, int]]]] = {}
        for n in self.nodes:
            out[n] = {
                "bmc": power_sets(self.bmcs[n]["power_log"]),
                "outlet": by_outlet.get(str(self.outlets[n]), []),
            }
        return out

    # ------------------------------------------------------------------ the watcher
    def wanted(self) -> dict[str, str]:
        """The power label each node of the rack should have now, from the devices' own state:
        ``on`` (BMC on, outlet on, switch up), ``unreachable`` (powered, switch down) or ``off``."""
        st = json.loads(Path(self.pdu["state_file"]).read_text())
        switch_down = (self.dir / "switch-down").exists()
        out: dict[str, str] = {}
        for n in self.nodes:
            try:
                bmc_on = Path(self.bmcs[n]["power_file"]).read_text().strip() == "1"
            except OSError:
                bmc_on = True  # mid-rewrite (mv -f): the next pass reads it
            powered = bmc_on and st["ports"].get(str(self.outlets[n])) == 1
            out[n] = (UNREACHABLE if switch_down else "on") if powered else "off"
        return out

    def sync(self) -> list[str]:
        """Relabel every node whose wanted label differs from the one last applied; the nodes
        relabelled. Kubernetes errors propagate (the watcher logs them and retries). Nothing before
        :meth:`start` (a command driving another process's rack leaves the labels to its watcher)."""
        if self._api is None:
            return []
        with self._sync_lock:
            return self._sync()

    def _sync(self) -> list[str]:
        want = self.wanted()
        todo = [n for n, v in want.items() if self._applied.get(n) != v]

        def label(node: str) -> None:
            body = {"metadata": {"labels": {POWER_LABEL: want[node]}}}
            self._api.patch_node(node, body, _request_timeout=10)
            self._applied[node] = want[node]
            self.relabels.append((time.monotonic(), node, want[node]))

        for fut in [self._pool.submit(label, n) for n in todo]:
            fut.result()
        return todo

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - keep watching; say what failed
                print(f"[lab] rack watcher: {exc}", flush=True)

    def _snmp_env(self) -> dict[str, str]:
        return {**os.environ, "SNMP_PERSISTENT_DIR": self.lab.info["devices"]["snmp_persistent_dir"]}

    # ------------------------------------------------------------------ fence configuration
    def fence_configuration(
        self, namespace: str, power: str = "pdu", storage: bool = True, host: str | None = None
    ) -> list[dict]:
        """The rack's fence configuration in the node remedy seed's format (docs/fence-config.md),
        for a runner in ``namespace`` on the host: per node ``fence-config-<node>`` with isolation
        ``fc-off`` (its switch port), power management ``pdu-off pdu-on`` (its outlet; ``power``
        ``ipmi``: ``ipmi-off ipmi-on`` through its BMC) and recovery ``fc-on``; the PDU and switch
        templates shared by the rack, one BMC template per node; credentials in Secrets. Without
        ``storage``, power management only (no isolation or recovery step): the device work of a
        peer that only power-cycles the node, as FAR's ``fence_ipmilan`` does.

        A PDU power loss is healed only by the PDU (a BMC power-on cannot bring back a node whose
        outlet is off), so ``power="ipmi"`` suits the switch loss only.

        ``host``: the address the devices are reached at instead of their own (the real nodes'
        relay host, :meth:`noderemedy_lab.realnode.RealNodes.relay_devices`, for runs in pods);
        the ports stay the devices' own. Every device named gets that address: relay each one the
        configuration's steps use.
        """
        if power not in ("pdu", "ipmi"):
            raise ValueError(f"power: expected 'pdu' or 'ipmi', got {power!r}")

        def cm(name: str, data: dict[str, str]) -> dict:
            return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}  # fmt: skip

        def secret(name: str, data: dict[str, str]) -> dict:
            return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "stringData": data}  # fmt: skip

        pdu, fc = self.pdu, self.switch
        docs = [
            secret("rack-pdu", {"community": pdu["community"]}),
            secret("rack-switch", {"community": fc["community"]}),
            cm(
                "fence-method-template-rack-pdu",
                {
                    "template.properties": f"type=pdu\nmodel=apc-rpdu\naddress={host or pdu['host']}:{pdu['port']}\nsecret=rack-pdu\n"
                },
            ),  # fmt: skip
            cm(
                "fence-method-template-rack-switch",
                {
                    "template.properties": f"type=fc\nmodel=ifmib\naddress={host or fc['host']}:{fc['port']}\nsecret=rack-switch\n"
                },
            ),  # fmt: skip
        ]
        for n in self.nodes:
            bmc = self.bmcs[n]
            docs += [
                secret(f"bmc-{n}", {"username": bmc["username"], "password": bmc["password"]}),
                cm(
                    f"fence-method-template-bmc-{n}",
                    {
                        "template.properties": f"type=ipmi\naddress={host or bmc['host']}:{bmc['port']}\nsecret=bmc-{n}\ncipher={bmc['cipher']}\n"
                    },
                ),  # fmt: skip
                cm(
                    f"fence-config-{n}",
                    {
                        "config.properties": f"node_name={n}\n"
                        + f"isolation={'fc-off' if storage else ''}\n"
                        + f"power_management={power}-off {power}-on\n"
                        + f"recovery={'fc-on' if storage else ''}\n",
                        "fence-method-fc-off": f"template=fence-method-template-rack-switch\nplug={self.fc_ports[n]}\naction=off\n",
                        "fence-method-fc-on": f"template=fence-method-template-rack-switch\nplug={self.fc_ports[n]}\naction=on\n",
                        "fence-method-pdu-off": f"template=fence-method-template-rack-pdu\nplug={self.outlets[n]}\naction=off\n",
                        "fence-method-pdu-on": f"template=fence-method-template-rack-pdu\nplug={self.outlets[n]}\naction=on\n",
                        "fence-method-ipmi-off": f"template=fence-method-template-bmc-{n}\naction=off\n",
                        "fence-method-ipmi-on": f"template=fence-method-template-bmc-{n}\naction=on\n",
                    },
                ),
            ]
        return docs
