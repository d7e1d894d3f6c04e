"""moto's server (the EC2 endpoint), run with timed instance transitions and the lab's power hook.

``python -m noderemedy_lab.moto_lab -H 127.0.0.1 -p PORT`` runs ``moto.server.main`` (moto's own
Flask/werkzeug server and EC2 backend) after wrapping two methods of moto's EC2 ``Instance``:

* ``stop`` leaves the instance ``stopping`` (code 64) for ``NODEREMEDY_POWER_DELAY`` seconds, then
  ``stopped`` (80); ``start`` leaves it ``pending`` (0), then ``running`` (16), as EC2 does (moto
  switches at once). Clients must wait for the final state;
* an instance whose ``Name`` tag is in ``NODEREMEDY_HOOK_SYSTEMS`` (JSON list) runs
  ``NODEREMEDY_POWER_HOOK`` (JSON argv) ``+ [name, "0"|"1"]`` before the final state can be read,
  as the lab's BMCs do (:mod:`noderemedy_lab.bmc`); instances tagged
  ``noderemedy-lab/ignore-power=true`` accept stop and start and stay as they are.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from typing import Any

from moto import server
from moto.ec2.models.instances import Instance

#: Seconds a power hook may take (as ``bmc.POWER_HOOK_TIMEOUT``).
HOOK_TIMEOUT = 10
IGNORE_TAG = "noderemedy-lab/ignore-power"

_lock = threading.RLock()
_delay = float(os.environ.get("NODEREMEDY_POWER_DELAY", "0.5"))
_hook: list[str] = json.loads(os.environ.get("NODEREMEDY_POWER_HOOK") or "[]")
_hook_names = set(json.loads(os.environ.get("NODEREMEDY_HOOK_SYSTEMS") or "[]"))
_original_start = Instance.start
_original_stop = Instance.stop


def _tags(inst: Any) -> dict[str, str]:
    return {t["key"]: t["value"] for t in inst.get_tags()}


def _run_hook(inst: Any, value: str) -> None:
    name = _tags(inst).get("Name", "")
    if not _hook or name not in _hook_names:
        return
    argv = ["timeout", str(HOOK_TIMEOUT), *_hook, name, value]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    print(f"power hook {name} {value} exited {proc.returncode} {proc.stderr.strip()}", flush=True)


def _finish(inst: Any, transient: str, final: str, code: int, hook_value: str) -> None:
    with _lock:
        if inst._state.name != transient:
            return
        _run_hook(inst, hook_value)
        inst._state.name, inst._state.code = final, code


def _later(*args: Any) -> None:
    timer = threading.Timer(_delay, _finish, args)
    timer.daemon = True
    timer.start()


def _switch(
    inst: Any, original: Any, transient: tuple[str, int], final: tuple[str, int], hook_value: str
) -> Any:
    """Call moto's ``original`` (``Instance.stop`` / ``Instance.start``) on ``inst``, leave it in
    ``transient`` (name, EC2 state code) and let the timer move it to ``final`` after running the
    power hook with ``hook_value``. Returns the state before, as moto does; an instance tagged
    :data:`IGNORE_TAG`, or already moving to or in ``final``, stays as it is."""
    with _lock:
        previous = copy.copy(inst._state)
        if _tags(inst).get(IGNORE_TAG) == "true" or previous.name in (transient[0], final[0]):
            return previous
        original(inst)
        inst._state.name, inst._state.code = transient
    _later(inst, transient[0], final[0], final[1], hook_value)
    return previous


def stop(self: Any) -> Any:
    """moto's ``Instance.stop``, then ``stopping`` until the timer moves it to ``stopped``."""
    return _switch(self, _original_stop, ("stopping", 64), ("stopped", 80), "0")


def start(self: Any) -> Any:
    """moto's ``Instance.start``, then ``pending`` until the timer moves it to ``running``."""
    return _switch(self, _original_start, ("pending", 0), ("running", 16), "1")


def main() -> int:
    """Run moto's server with the wrapped ``Instance.start`` / ``Instance.stop``."""
    Instance.stop = stop  # type: ignore[method-assign]
    Instance.start = start  # type: ignore[method-assign]
    server.main(sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
