# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fence driver base: one place that owns a whole fence action.

Shape: ansible.posix ``module_utils/firewalld.py`` (``FirewallTransaction.run()`` owns read ->
compare -> check mode -> write; subclasses only supply getters and setters). Here
:meth:`FenceDriver.run` owns read -> compare -> check mode -> set -> *verify by polling the
read-back state*; the IPMI, PDU and FC-switch drivers supply :meth:`FenceDriver.get_state` and
:meth:`FenceDriver.set_state` only.

Behaviour follows ClusterLabs fence-agents ``lib/fencing.py`` ``fence_action`` and
``async_set_multi_power_fn``:

* ``power_wait`` seconds are slept after the SETs, before the first read-back;
* the read-back is polled until every plug shows the wanted state or ``power_timeout`` seconds
  have passed since the SETs (fence-agents polls once a second; we poll every
  ``poll_interval`` seconds). A timeout is a failure (:class:`VerifyError`), never a success;
* ``on`` is tried ``1 + retry_on`` times, the ``on`` half of ``reboot`` ``retry_on`` times;
* ``reboot`` (method ``onoff``) is ``off`` (verified) then ``on``; when the ``on`` half fails
  the reboot still succeeded as a fence (fence-agents: "this should not fail as node was fenced
  successfully") and a warning is returned;
* several plugs (redundant power supplies): all are switched off and verified off before any is
  switched on.

Errors are classified once, here (shape: amazon.aws ``module_utils/errors.py``): every driver
raises one of the :class:`FenceError` subclasses, whose ``category`` is what modules return.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ansible.module_utils.basic import env_fallback

#: Power vocabulary used inside the drivers (fence-agents' ``on`` / ``off``).
ON = "on"
OFF = "off"

#: Actions :meth:`FenceDriver.run` understands (fence-agents ``--action`` names).
ACTIONS = ("on", "off", "reboot", "status")

#: The ``state`` option of the power-fencing modules: one of :data:`ACTIONS`.
POWER_STATE_ARG_SPEC: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "required": True, "choices": list(ACTIONS)},
}

#: Options shared by every fencing module; documented 1:1 by ``doc_fragments/fence.py`` ``DOCUMENTATION``.
#: Names and meanings are fence-agents' (``lib/fencing.py`` ``all_opt``).
FENCE_ARG_SPEC: dict[str, dict[str, Any]] = {
    "power_timeout": {"type": "float", "default": 20.0},
    "power_wait": {"type": "float", "default": 0.0},
    "retry_on": {"type": "int", "default": 1},
    "poll_interval": {"type": "float", "default": 0.1},
}


class Library:
    """A Python library a fencing driver needs (the ``try: import`` of Ansible's module
    guidelines, in one place): ``name`` (what ``missing_required_lib`` names) and
    ``import_error``, the traceback of the failed import (None when it imported).
    ``_fence_module.fencing_module`` fails the module when it is absent.

    The driver's imports go in a ``with`` block, which swallows their ``ImportError`` and keeps its
    traceback (any other error propagates)::

        with _fence.Library("sushy") as SUSHY_LIBRARY:
            import sushy

    When the import failed, the names the block would have bound stay unbound: a driver uses
    them only after :meth:`require` (or behind :attr:`present`).
    """

    def __init__(self, name: str, import_error: str | None = None) -> None:
        self.name = name
        self.import_error = import_error

    def __repr__(self) -> str:
        return f"Library({self.name!r}, present={self.present})"

    def __enter__(self) -> Library:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        """Keep the traceback of an ``ImportError`` (True: swallowed); any other error goes on."""
        if kind is None or not issubclass(kind, ImportError):
            return False
        self.import_error = "".join(traceback.format_exception(kind, exc, tb))
        return True

    @property
    def present(self) -> bool:
        """Whether the library imported."""
        return self.import_error is None

    def require(self) -> None:
        """Check, before a driver connects, that the library imported (the driver may be used
        without ``fencing_module``, which fails the module earlier).

        Raises:
            FenceConfigError: ``the Python library <name> is required``.
        """
        if not self.present:
            raise FenceConfigError(f"the Python library {self.name} is required")


def login_arg_spec(
    ipport: int | None, username_env: list[str], password_env: list[str]
) -> dict[str, dict[str, Any]]:
    """The device address and login options a fencing module shares with fence-agents
    (``lib/fencing.py`` ``all_opt``: ``--ip``, ``--ipport``, ``--username``, ``--password``).

    Args:
        ipport: the default port (IPMI 623, SNMP 161, vSphere 443); None: no default (Redfish
            derives it from ``ssl``).
        username_env / password_env: environment variables read, in order, when the option is
            not set (``env_fallback``).

    Returns the argspec entries ``ipaddr`` (required, alias ``ip``), ``ipport``, ``username``
    (alias ``login``) and ``password`` (alias ``passwd``, ``no_log``).
    """
    return {
        "ipaddr": {"type": "str", "required": True, "aliases": ["ip"]},
        "ipport": {"type": "int"} if ipport is None else {"type": "int", "default": ipport},
        "username": {"type": "str", "aliases": ["login"], "fallback": (env_fallback, list(username_env))},
        "password": {
            "type": "str",
            "no_log": True,
            "aliases": ["passwd"],
            "fallback": (env_fallback, list(password_env)),
        },
    }


class FenceError(Exception):
    """Base of the one error family every fencing driver raises.

    Attributes:
        category: short machine-readable class (``auth``, ``privilege``, ``unreachable``,
            ``rejected``, ``not_found``, ``verify``, ``config``), returned by modules as ``error``.
        target: ``host:port`` of the device ('' when not known yet).
    Messages never contain secrets (passwords, communities, SNMPv3 keys).
    """

    category = "fence"

    def __init__(self, message: str, target: str = "") -> None:
        super().__init__(f"{target}: {message}" if target else message)
        self.target = target


class FenceConfigError(FenceError, ValueError):
    """Bad input, detected before anything is sent to a device; the message names the field."""

    category = "config"


class AuthError(FenceError):
    """The device refused the credentials (wrong password, unknown user, wrong SNMPv3 key)."""

    category = "auth"


class PrivilegeError(FenceError):
    """Authenticated, but not allowed to do this (IPMI USER privilege, read-only SNMP community)."""

    category = "privilege"


class UnreachableError(FenceError):
    """Nothing answered in time: host down, nothing listening, or (SNMP v1/v2c) a wrong community,
    which agents silently drop."""

    category = "unreachable"


class DeviceTimeoutError(UnreachableError):
    """The device is known to be there but gave no answer within ``power_timeout`` seconds: hung,
    overloaded or powered down with its host. Not a configuration mistake (compare
    :class:`UnreachableError`, where nothing listens at the address)."""

    category = "timeout"


class RejectedError(FenceError):
    """The device answered but rejected the request or value (SNMP wrongValue, IPMI completion code)."""

    category = "rejected"


class NotFoundError(FenceError):
    """The outlet / port named in ``plug`` does not exist on the device."""

    category = "not_found"


class VerifyError(FenceError):
    """The read-back state did not reach the wanted state within ``power_timeout`` seconds."""

    category = "verify"


def check_address(ipaddr: str | None, ipport: int, device: str, port_kind: str) -> None:
    """Check a device's address and port before anything is sent (fence-agents ``--ip``,
    ``--ipport``), as the IPMI, Redfish and vSphere drivers and the SNMP client do.

    Args:
        ipaddr: host name or address; empty or None is refused.
        ipport: port number, 1 to 65535.
        device: what the address is, for the message (``the BMC``, ``the vCenter or ESXi``).
        port_kind: what the port is, for the message (``UDP port``, ``TCP port (1-65535)``).
    Raises:
        FenceConfigError: ``ipaddr: <device> address is required`` or ``ipport: <port> is not a
            <port_kind>``.
    """
    if not ipaddr:
        raise FenceConfigError(f"ipaddr: {device} address is required")
    if not 0 < int(ipport) < 65536:
        raise FenceConfigError(f"ipport: {ipport} is not a {port_kind}")


def require_login(username: str | None, password: str | None) -> None:
    """Check that a user name and a password were given (by option, environment or
    ``credentials_secret``) before a driver logs in with them (Redfish, vSphere).

    Raises:
        FenceConfigError: naming ``username`` or ``password``, whichever is missing (first
            ``username``); the message contains neither value.
    """
    if not username:
        raise FenceConfigError("username: required (option, environment or credentials_secret)")
    if not password:
        raise FenceConfigError("password: required (option, environment or credentials_secret)")


def close_quietly(handle: Any, close: Callable[[Any], object]) -> None:
    """Call ``close(handle)`` (log out, close a connection pool) unless ``handle`` is None, and
    swallow any exception: closing must never mask the result or error of the fence action.
    Drivers take their handle off ``self`` first, so a second call does nothing."""
    if handle is None:
        return
    try:
        close(handle)
    except Exception:  # noqa: BLE001 - closing must not mask the result
        pass


def aggregate(states: dict[str, str]) -> str:
    """One state for several plugs, as fence-agents ``get_multi_power_fn``: ``on`` if any plug is on,
    ``off`` only if every plug is off, else the first other state (a transition such as a Redfish
    ``powering_off``, which is never taken for off)."""
    values = list(states.values())
    if any(s == ON for s in values):
        return ON
    others = [s for s in values if s != OFF]
    return others[0] if others else OFF


def driver_options(params: dict[str, Any], *specs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The options of each argspec in ``specs`` (a driver's connection options, named as its
    keyword arguments: ``IPMI_ARG_SPEC``...) and the :data:`FENCE_ARG_SPEC` timing options
    (``power_timeout``, ``power_wait``, ``retry_on``, ``poll_interval``) of a module's ``params``,
    as keyword arguments of a :class:`FenceDriver`."""
    return {name: params[name] for spec in (*specs, FENCE_ARG_SPEC) for name in spec}


def failure(exc: FenceError, evidence: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``fail_json`` for a classified fencing error: ``msg``, ``error`` (the
    class, :attr:`FenceError.category`), ``fence`` (``evidence``: never verified) and the traceback."""
    return {"msg": str(exc), "error": exc.category, "fence": evidence, "exception": traceback.format_exc()}


def power_result(result: FenceResult, evidence: dict[str, Any], diff: bool, **extra: Any) -> dict[str, Any]:
    """What a power-fencing module returns for ``result``: ``changed``, ``power_state_before``,
    ``power_state``, the module's ``extra`` keys, ``verify_seconds``, ``attempts`` and ``fence``
    (``evidence``), with a ``diff`` of the power state when ``diff``. The caller reports
    ``result.warnings``."""
    out = {
        "changed": result.changed,
        "power_state_before": result.state_before,
        "power_state": result.state_after,
        **extra,
        "verify_seconds": result.verify_seconds,
        "attempts": result.attempts,
        "fence": evidence,
    }
    if diff:
        out["diff"] = {"before": {"power": result.state_before}, "after": {"power": result.state_after}}
    return out


def unverified(method: str, target: str, plugs: list[str]) -> dict[str, Any]:
    """The ``fence`` evidence of a run that failed before any driver existed (bad input): not verified."""
    return {
        "verified": False,
        "method": method,
        "target": target,
        "plugs": list(plugs),
        "state": None,
        "verified_at": None,
    }


def run_driver(
    module: Any,
    build: Callable[[], FenceDriver],
    fallback: dict[str, Any],
    run: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any]:
    """Build a fencing module's driver and run its action: the one place a fencing module turns a
    :class:`FenceError` into ``fail_json``.

    Args:
        module: the ``AnsibleModule`` (``params["state"]``, ``check_mode``, ``warn``, ``fail_json``).
        build: makes the driver from the module's options; may raise :class:`FenceError` (bad
            input: :class:`FenceConfigError`) or fail the module itself (``credentials_secret``).
        fallback: the unverified ``fence`` evidence (:func:`unverified`) returned when ``build``
            failed, so even bad input answers with the evidence shape.
        run: the action on the built driver; default ``driver.run(params["state"],
            check_mode=module.check_mode)``.

    Returns ``(driver, result)``; the warnings of a :class:`FenceResult` are already reported with
    ``module.warn``. On a :class:`FenceError` the module fails (:func:`failure`: ``msg``, ``error``
    class, never-verified ``fence`` -- the driver's own when it exists) and this never returns.
    """
    driver = None
    try:
        driver = build()
        result = run(driver) if run else driver.run(module.params["state"], check_mode=module.check_mode)
    except FenceError as exc:
        module.fail_json(**failure(exc, driver.evidence(None) if driver is not None else fallback))
    for warning in getattr(result, "warnings", None) or ():
        module.warn(warning)
    return driver, result


@dataclass
class FenceResult:
    """What one :meth:`FenceDriver.run` did.

    Attributes:
        action: the requested action (``on``, ``off``, ``reboot``, ``status``).
        changed: a SET was sent (or, in check mode, would be sent).
        before: plug -> ``on``/``off`` read before any SET.
        after: plug -> ``on``/``off`` read back at the end (predicted in check mode).
        verify_seconds: seconds from the first SET until the read-back matched (summed over
            the off and on halves of a reboot); None when nothing was verified.
        attempts: SET rounds sent for the last phase (``on`` may take ``1 + retry_on``).
        verified_off_at: epoch seconds at which every plug was read back ``off`` (None if never).
        warnings: human-readable warnings (e.g. the ``on`` half of a reboot failed).
    """

    action: str
    changed: bool
    before: dict[str, str]
    after: dict[str, str]
    verify_seconds: float | None = None
    attempts: int = 0
    verified_off_at: float | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def state_before(self) -> str:
        """Aggregated state before (see :func:`aggregate`)."""
        return aggregate(self.before)

    @property
    def state_after(self) -> str:
        """Aggregated state after (see :func:`aggregate`)."""
        return aggregate(self.after)


class FenceDriver:
    """Base of every fence driver: owns the action, the drivers supply the device I/O.

    Subclasses set :attr:`method` and implement :meth:`get_state`, :meth:`set_state` and
    optionally :meth:`open` / :meth:`close` (called once around :meth:`run`) and
    :meth:`resolve` (maps user plugs to device plugs before anything is sent).

    Args:
        target: ``host:port`` of the device, used in messages and the ``fence`` evidence.
        plugs: the plugs to act on (at least one; a BMC has the single plug ``chassis``).
        power_timeout: seconds to wait for the read-back after the SETs (> 0).
        power_wait: seconds slept after the SETs before the first read-back (>= 0).
        retry_on: extra attempts of ``on`` (fence-agents ``--retry-on``, >= 0).
        poll_interval: seconds between read-backs (> 0, at most 1).
        clock / sleep / wall: injectable time sources (monotonic seconds, sleep, epoch seconds).
    Raises:
        FenceConfigError: a value out of range, naming the option.
    """

    method = "fence"

    def __init__(
        self,
        target: str,
        plugs: list[str],
        power_timeout: float = 20.0,
        power_wait: float = 0.0,
        retry_on: int = 1,
        poll_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not plugs:
            raise FenceConfigError("plug: at least one outlet or port is required")
        if len(set(plugs)) != len(plugs):
            raise FenceConfigError(f"plug: duplicate entries in {plugs!r}")
        if power_timeout is None or power_timeout <= 0:
            raise FenceConfigError(f"power_timeout: must be > 0 seconds, got {power_timeout!r}")
        if power_wait is None or power_wait < 0:
            raise FenceConfigError(f"power_wait: must be >= 0 seconds, got {power_wait!r}")
        if retry_on is None or retry_on < 0:
            raise FenceConfigError(f"retry_on: must be >= 0, got {retry_on!r}")
        if poll_interval is None or not 0 < poll_interval <= 1:
            raise FenceConfigError(f"poll_interval: must be > 0 and <= 1 second, got {poll_interval!r}")
        self.target = target
        self.plugs = list(plugs)
        self.power_timeout = float(power_timeout)
        self.power_wait = float(power_wait)
        self.retry_on = int(retry_on)
        self.poll_interval = float(poll_interval)
        self._clock = clock
        self._sleep = sleep
        self._wall = wall

    @property
    def connect_timeout(self) -> float:
        """Seconds a driver's client waits for a connection to the device: ``power_timeout``, at
        most 10 (a request's answer may take the whole ``power_timeout``)."""
        return min(self.power_timeout, 10.0)

    # -- what drivers supply ---------------------------------------------------------------
    def open(self) -> None:
        """Connect / log in. Called once before the first :meth:`get_state`."""

    def close(self) -> None:
        """Disconnect / log out. Always called after :meth:`open`, also on errors."""

    def resolve(self) -> None:
        """Check and map every plug before anything is set (nothing half-applied).

        Raises:
            NotFoundError: a plug does not exist on the device.
        """

    def get_state(self, plug: str) -> str:
        """Read back ``plug``'s state: ``on``, ``off``, or a transition / unknown state (any other
        string; never taken for ``on`` or ``off``). Raises a :class:`FenceError`."""
        raise NotImplementedError

    def set_state(self, plug: str, state: str) -> None:
        """Ask the device to switch ``plug`` to ``state`` (``on``/``off``). Raises a :class:`FenceError`."""
        raise NotImplementedError

    # -- the action ------------------------------------------------------------------------
    def read_all(self) -> dict[str, str]:
        """plug -> state for every plug (one read each)."""
        return {plug: self.get_state(plug) for plug in self.plugs}

    def run(self, action: str, check_mode: bool = False) -> FenceResult:
        """Do ``action`` (``on``, ``off``, ``reboot``, ``status``) and verify it by read-back.

        Check mode reads the current state and predicts the result without sending a SET.
        Returns a :class:`FenceResult`.
        Raises:
            FenceConfigError: unknown action.
            VerifyError: the read-back did not reach the wanted state within ``power_timeout``.
            FenceError: any other classified device error.
        """
        if action not in ACTIONS:
            raise FenceConfigError(f"state: unknown action {action!r}, expected one of {', '.join(ACTIONS)}")
        self.open()
        try:
            self.resolve()
            return self._run(action, check_mode)
        finally:
            self.close()

    def _run(self, action: str, check_mode: bool) -> FenceResult:
        before = self.read_all()
        result = FenceResult(action=action, changed=False, before=before, after=dict(before))
        if action == "status":
            if aggregate(before) == OFF:
                result.verified_off_at = self._wall()
            return result
        if action in (ON, OFF) and all(s == action for s in before.values()):
            if action == OFF:
                result.verified_off_at = self._wall()
            return result
        result.changed = True
        if check_mode:
            result.after = {plug: (ON if action == "reboot" else action) for plug in self.plugs}
            return result
        if action == OFF:
            result.verify_seconds, result.after, result.attempts = self._switch(OFF, before, 1)
            result.verified_off_at = self._wall()
        elif action == ON:
            result.verify_seconds, result.after, result.attempts = self._switch(ON, before, 1 + self.retry_on)
        else:  # reboot, fence-agents method onoff
            seconds = 0.0
            current = before
            if any(s != OFF for s in before.values()):
                seconds, current, _rounds = self._switch(OFF, before, 1)
            result.verified_off_at = self._wall()
            result.after = current
            try:
                on_seconds, result.after, result.attempts = self._switch(ON, current, max(1, self.retry_on))
                seconds += on_seconds
            except FenceError as exc:
                result.warnings.append(f"fenced (read back off), but powering on again failed: {exc}")
            result.verify_seconds = seconds
        return result

    def _switch(
        self, state: str, current: dict[str, str], attempts: int
    ) -> tuple[float, dict[str, str], int]:
        """Set every plug not in ``state``, then poll until all are; ``attempts`` SET rounds.

        Returns (seconds from the first SET to the matching read-back, final states, rounds used).
        Raises VerifyError when the last round times out.
        """
        start = self._clock()
        last: dict[str, str] = dict(current)
        last_error: FenceError | None = None
        for attempt in range(1, attempts + 1):
            for plug in self.plugs:
                if last.get(plug) != state:
                    self.set_state(plug, state)
            if self.power_wait:
                self._sleep(self.power_wait)
            deadline = self._clock() + self.power_timeout
            while True:
                try:
                    last = self.read_all()
                    last_error = None
                except UnreachableError as exc:  # a BMC may drop packets while switching
                    last_error = exc
                if last_error is None and all(s == state for s in last.values()):
                    return self._clock() - start, last, attempt
                if self._clock() >= deadline:
                    break
                self._sleep(min(self.poll_interval, max(0.0, deadline - self._clock())))
        shown = ", ".join(f"{p}={s}" for p, s in last.items())
        why = f" (last read-back failed: {last_error})" if last_error else f" (read back: {shown})"
        raise VerifyError(
            f"not verified {state} within power_timeout={self.power_timeout:g}s after {attempts} attempt(s){why}; "
            f"the device is left commanded {state}",
            self.target,
        )

    # -- evidence --------------------------------------------------------------------------
    def evidence(self, result: FenceResult | None, words: dict[str, str] | None = None) -> dict[str, Any]:
        """The ``fence`` dict every module returns: proof (or not) of a verified fence. No secrets.

        Shape: ``{"verified": bool, "method": str, "target": "host:port", "plugs": [str],
        "state": str, "verified_at": epoch seconds | None}``. ``verified`` is true only when every
        plug was *read back* in the fenced state during this run (``state`` is then ``off``);
        otherwise ``state`` is the last known state. ``words`` maps ``on``/``off`` to the module's
        vocabulary (``fc_port``: ``enabled``/``disabled``).
        """
        words = words or {}
        if result is None:
            return unverified(self.method, self.target, self.plugs)
        verified = result.verified_off_at is not None
        return {
            "verified": verified,
            "method": self.method,
            "target": self.target,
            "plugs": list(self.plugs),
            "state": words.get(OFF, OFF) if verified else words.get(result.state_after, result.state_after),
            "verified_at": result.verified_off_at,
        }
