"""sushy-tools' Redfish emulator, run with the lab's systems driver: ``python -m noderemedy_lab.sushy_lab``.

The emulator is sushy-tools' own (``sushy_tools.emulator.main``: its Flask routes, templates, HTTP
basic authentication and TLS). Only the systems driver is the lab's: :class:`LabDriver` subclasses
sushy-tools' fake driver (``resources/systems/fakedriver.py``, which needs no libvirt) and changes
three things, all read from the emulator's config file:

* power transitions take ``NODEREMEDY_POWER_DELAY`` seconds and then apply *by themselves* (a
  timer), as a real chassis does. The fake driver waits a random 1-11 s and applies the change
  only when someone reads the system; fixed, the lab is repeatable and fast;
* while a transition is pending the system reports ``PoweringOff`` / ``PoweringOn`` (Redfish
  ``ComputerSystem.PowerState``), as real BMCs do; clients must not take those for final states;
* every power change of a system named after a lab node runs ``NODEREMEDY_POWER_HOOK +
  [system name, "0"|"1"]`` *before* the new state can be read, as ipmi_sim's chassis_control
  hook does (:mod:`noderemedy_lab.bmc`); the lab's hook relabels the kwok node so it stops or
  resumes heartbeating. Systems listed in ``NODEREMEDY_IGNORE_POWER`` accept every reset (HTTP
  204) and never change: a BMC that says yes and does nothing.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

from sushy_tools import error
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems import fakedriver

#: Seconds a power hook may take (as ``bmc.POWER_HOOK_TIMEOUT``).
HOOK_TIMEOUT = 10


class LabDriver(fakedriver.FakeDriver):
    """sushy-tools' fake systems driver with timed transitions, ``Powering*`` states and a power hook."""

    _lock = threading.RLock()

    @classmethod
    def initialize(cls, config: Any, logger: Any) -> type:
        super().initialize(config, logger)
        cls._delay = float(config.get("NODEREMEDY_POWER_DELAY", 0.5))
        cls._hook = list(config.get("NODEREMEDY_POWER_HOOK") or [])
        cls._hook_systems = set(config.get("NODEREMEDY_HOOK_SYSTEMS") or [])
        cls._ignore = set(config.get("NODEREMEDY_IGNORE_POWER") or [])
        return cls

    def _get(self, identity: str) -> dict:
        with self._lock:
            return super()._get(identity)

    def _update(self, system: Any, **changes: Any) -> None:
        with self._lock:
            if isinstance(system, str):
                system = self._get(system)
            new = changes.get("power_state")
            if new is not None and new != system.get("power_state"):
                self._run_hook(system["name"], new)
            super()._update(system, **changes)

    def _run_hook(self, name: str, state: str) -> None:
        if not self._hook or name not in self._hook_systems:
            return
        argv = ["timeout", str(HOOK_TIMEOUT), *self._hook, name, "1" if state == "On" else "0"]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        level = self._logger.info if proc.returncode == 0 else self._logger.error
        level("power hook %s %s exited %s %s", name, state, proc.returncode, proc.stderr.strip())

    def get_power_state(self, identity: str) -> str:
        system = self._get(identity)
        pending = system.get("pending_power")
        if pending:
            return "PoweringOn" if pending["power_state"] == "On" else "PoweringOff"
        return system["power_state"]

    def set_power_state(self, identity: str, state: str) -> None:
        with self._lock:
            system = self._get(identity)
            if "On" in state:
                target = "On"
            elif state in ("ForceOff", "GracefulShutdown"):
                target = "Off"
            elif "Restart" in state:
                target = "On"
            else:
                raise error.NotSupportedError(f"Power state {state} is not supported")
            if system["name"] in self._ignore:
                self._logger.info("system %s accepted %s and ignores it", system["name"], state)
                return
            if "Restart" in state:
                self._update(system, power_state="Off", pending_power=None)
            if system["power_state"] == target:
                return
            self._update(
                system, pending_power={"power_state": target, "apply_time": time.time() + self._delay}
            )
        uuid = system["uuid"]
        timer = threading.Timer(self._delay, self._get, [uuid])
        timer.daemon = True
        timer.start()


def main() -> int:
    """Run sushy-tools' emulator (its own argument parser) with :class:`LabDriver` as the fake driver."""
    fakedriver.FakeDriver = LabDriver  # the emulator looks the class up when it first needs it
    return emulator.main()


if __name__ == "__main__":
    sys.exit(main())
