# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""IPMI chassis power fencing over RMCP+ (IPMI 2.0 "lanplus") with pyghmi.

Behaviour matches fence-agents ``fence_ipmilan`` (which runs ``ipmitool -I lanplus ... chassis
power status|on|off|cycle``): the same two IPMI commands are sent, *Get Chassis Status* (NetFn
Chassis 0x00, command 0x01; bit 0 of byte 1 = power is on) and *Chassis Control* (NetFn 0x00,
command 0x02; 0 = power down, 1 = power up, 2 = power cycle), IPMI v2.0 spec sections 28.2/28.3.
No OEM extension is used, so the driver behaves on every BMC as ``fence_ipmilan`` does.

pyghmi 1.6.19 (``pyghmi/ipmi/private/session.py``) has no cipher-suite parameter: it proposes
suite 17 (RAKP-HMAC-SHA256 / HMAC-SHA256-128 / AES-CBC-128) and, if the BMC refuses, falls back
to suite 3 (RAKP-HMAC-SHA1 / HMAC-SHA1-96 / AES-CBC-128); suite 0 (no authentication) is never
proposed, and a BMC without IPMI 2.0 gets an IPMI 1.5 MD5 session. The supported way to choose is
a :class:`~pyghmi.ipmi.private.session.Session` subclass: :class:`_Session` sets the first
proposal (``attemptedhash``: 1 = suite 3, 256 = suite 17) in ``_initsession`` and refuses the
fallback; after login the negotiated suite and the IPMI version are checked, so the session is
RMCP+ with the requested suite or the call fails. The privilege level is pyghmi's ``privlevel``
argument (explicit, so pyghmi's silent admin -> operator downgrade is off).

Pitfalls handled: credentials are passed as bytes (pyghmi's session cache never
matches str credentials and the second session for a BMC hangs); every session is logged out
(BMCs have few session slots); pyghmi's ``set_power(wait=True)`` polls once a second, the base
driver polls every ``poll_interval`` seconds instead; and a lost wake-up in pyghmi's I/O loop (a
reply that arrives before the waiter is registered waits out the 0.5-1 s retransmit timer, hit on
most logins over loopback) is closed by :func:`_install_wakeup_fix`.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils import _fence

with _fence.Library("pyghmi") as PYGHMI_LIBRARY:
    from pyghmi import exceptions as pyghmi_exc
    from pyghmi.ipmi.private import session as pyghmi_session

#: IPMI connection options; documented 1:1 by ``doc_fragments/fence.py`` ``IPMI``. Names are fence_ipmilan's.
IPMI_ARG_SPEC: dict[str, dict[str, Any]] = {
    **_fence.login_arg_spec(
        623, ["NODEREMEDY_IPMI_USERNAME", "IPMI_USERNAME"], ["NODEREMEDY_IPMI_PASSWORD", "IPMI_PASSWORD"]
    ),
    "cipher": {"type": "int", "default": 3},
    "privlvl": {
        "type": "str",
        "default": "administrator",
        "choices": ["callback", "user", "operator", "administrator"],
    },
}

#: ``privlvl`` -> IPMI privilege level (IPMI v2.0 table 22-28); names are fence_ipmilan's ``-L``.
PRIVILEGE_LEVELS = {"callback": 1, "user": 2, "operator": 3, "administrator": 4}

#: Cipher suites pyghmi can negotiate -> its ``attemptedhash`` (1 = SHA-1, 256 = SHA-256).
CIPHER_SUITES = {3: 1, 17: 256}

#: Chassis Control data byte (IPMI v2.0 section 28.3).
CHASSIS_CONTROL = {_fence.OFF: 0, _fence.ON: 1, "cycle": 2}

#: Seconds to wait for the answer to a Chassis Control before pyghmi sends it again (at most
#: ``power_timeout``). pyghmi's own first wait is 0.5-1 s, and a BMC carries out every copy it
#: receives (IPMI over UDP has no duplicate suppression for a retransmitted request: pyghmi's
#: session.py says as much of chassis reset): OpenIPMI's ``ipmi_sim`` answers only once its
#: chassis-control hook has run, and real BMCs may answer only once the power changed, so a BMC
#: slower than a second powered off twice, or would cycle twice. A lost packet is still sent again,
#: after this wait.
CHASSIS_CONTROL_ANSWER_WAIT = 5.0

#: IPMI completion codes -> error class (IPMI v2.0 table 5-2).
_CC_PRIVILEGE = 0xD4

#: pyghmi login error text -> error class and message (pyghmi ``constants.rmcp_codes`` and
#: session.py): the first entry with one of its texts in the error's text wins.
_LOGIN_ERRORS: list[tuple[tuple[str, ...], type[_fence.FenceError], str]] = [
    (("incorrect password",), _fence.AuthError, "authentication refused (password does not match)"),
    (("unauthorized name",), _fence.AuthError, "authentication refused (unknown user name)"),
    (("integrity code",), _fence.AuthError, "authentication refused (wrong Kg key)"),
    (("invalid integrity check",), _fence.AuthError, "authentication refused (integrity check failed)"),
    (
        ("privilege level", "invalid role", "privelege level"),
        _fence.PrivilegeError,
        "privilege level refused for this user",
    ),
    (("insufficient resources",), _fence.UnreachableError, "BMC has no free session slot (sessions leaked?)"),
    (
        ("cipher suite", "algorithm", "confidentiality"),
        _fence.RejectedError,
        "cipher suite refused by the BMC",
    ),
    (("md5 required",), _fence.RejectedError, "BMC offers only IPMI 1.5 (no RMCP+)"),
]

_WAKEUP_FIX_INSTALLED = False


def _install_wakeup_fix() -> None:
    """Close a lost wake-up in pyghmi 1.6.19's I/O loop (idempotent).

    ``Session.awaitresponse`` sends a request, then registers a waiter for the BMC's address
    with ``_io_wait``. When the reply arrives before that registration (loopback answers in
    ~0.1 ms), the I/O thread has already queued it on the session's ``pktqueue`` and nobody wakes
    the waiter until the retransmit timer (0.5-1 s) expires. The wrapper returns at once when a
    session for that address already holds a queued packet; the caller then processes it.
    """
    global _WAKEUP_FIX_INSTALLED
    if _WAKEUP_FIX_INSTALLED or not PYGHMI_LIBRARY.present:
        return
    original = pyghmi_session._io_wait

    def _io_wait(timeout: float, myaddr: Any = None, evq: Any = None) -> Any:
        if myaddr is not None:
            for sess in list(pyghmi_session.Session.bmc_handlers.get(myaddr, {}).values()):
                if sess.pktqueue:
                    return None
        return original(timeout, myaddr, evq)

    pyghmi_session._io_wait = _io_wait
    _WAKEUP_FIX_INSTALLED = True


def _session_class(cipher: int) -> type:
    """A pyghmi Session subclass that proposes only ``cipher`` (3 or 17)."""
    first_hash = CIPHER_SUITES[cipher]

    class _Session(pyghmi_session.Session):  # type: ignore[misc,name-defined]
        def _initsession(self) -> None:
            super()._initsession()
            self.attemptedhash = first_hash

        def _got_rmcp_response(self, data: Any) -> Any:
            # suite 17 requested: refuse pyghmi's silent fallback to suite 3
            if first_hash == 256 and len(data) > 1 and data[1] != 0 and self.attemptedhash == 256:
                self.attemptedhash = 0
            return super()._got_rmcp_response(data)

    _Session.__name__ = f"_Suite{cipher}Session"
    return _Session


_SESSION_CLASSES: dict[int, type] = {}


def classify_login_error(message: str, target: str) -> _fence.FenceError:
    """pyghmi login error text -> the matching :class:`FenceError`. Text not in the table is
    pyghmi giving up after its own retries met silence: :class:`DeviceTimeoutError`."""
    low = (message or "").lower()
    for needles, cls, text in _LOGIN_ERRORS:
        if any(needle in low for needle in needles):
            return cls(f"{text} [{message}]", target)
    return _fence.DeviceTimeoutError(
        "no answer from the BMC" + (f" [{message}]" if message and message != "None" else ""),
        target,
    )


#: ASF/RMCP presence ping (DSP0136 3.2.4.1): any IPMI LAN port answers it or ignores it, so it
#: only serves to learn whether the host refuses the port outright (ICMP port unreachable).
_RMCP_PRESENCE_PING = bytes.fromhex("060000ff06000011be80000000")


def port_refused(host: str, port: int, wait: float = 0.3) -> bool:
    """Whether ``host`` answers a UDP datagram to ``port`` with ICMP port unreachable, i.e.
    nothing listens there (a configuration mistake), as opposed to a silent BMC that is hung or
    down (a timeout). A connected UDP socket surfaces the ICMP error as ``ConnectionRefusedError``
    (udp(7)); a filtered path looks silent, so False is not proof that something listens."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    family, addr = infos[0][0], infos[0][4]
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(wait)
        try:
            sock.connect(addr)
            sock.send(_RMCP_PRESENCE_PING)
            sock.recv(512)
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


class IpmiDriver(_fence.FenceDriver):
    """Chassis power over RMCP+ with pyghmi; the single plug is ``chassis``.

    Args:
        ipaddr: BMC address; ipport: UDP port (623).
        username / password: BMC credentials (sent as bytes; never logged or returned).
        cipher: RMCP+ cipher suite, 3 (default, as ``fence_ipmilan --cipher=3``) or 17.
            0 (no authentication) is refused: a BMC accepts any password on it.
        privlvl: ``callback``, ``user``, ``operator`` or ``administrator`` (fence_ipmilan ``-L``).
        **fence: :class:`FenceDriver` options (power_timeout, power_wait, retry_on, poll_interval).
    Raises:
        FenceConfigError: empty address, user or password, unsupported cipher or privlvl.
    """

    method = "ipmi"

    def __init__(
        self,
        ipaddr: str,
        username: str,
        password: str,
        ipport: int = 623,
        cipher: int = 3,
        privlvl: str = "administrator",
        **fence: Any,
    ) -> None:
        _fence.check_address(ipaddr, ipport, "the BMC", "UDP port")
        if not username:
            raise _fence.FenceConfigError(
                "username: required (IPMI sessions without a user name are refused)"
            )
        if not password:
            raise _fence.FenceConfigError(
                "password: required (sessions without a password are unauthenticated)"
            )
        if cipher == 0:
            raise _fence.FenceConfigError(
                "cipher: suite 0 has no authentication (a BMC accepts any password) and is refused"
            )
        if cipher not in CIPHER_SUITES:
            raise _fence.FenceConfigError(
                f"cipher: suite {cipher} is not supported; use 3 (SHA-1/AES) or 17 (SHA-256/AES)"
            )
        if privlvl not in PRIVILEGE_LEVELS:
            raise _fence.FenceConfigError(f"privlvl: {privlvl!r} is not one of {', '.join(PRIVILEGE_LEVELS)}")
        super().__init__(target=f"{ipaddr}:{ipport}", plugs=["chassis"], **fence)
        self.ipaddr = ipaddr
        self.ipport = int(ipport)
        self._username = username.encode("utf-8")
        self._password = password.encode("utf-8")
        self.cipher = cipher
        self.privlvl = privlvl
        self._session: Any = None

    def open(self) -> None:
        """Log in (RMCP+, requested suite and privilege). Raises a classified :class:`FenceError`."""
        if not PYGHMI_LIBRARY.present:
            raise _fence.FenceConfigError("pyghmi: the Python library pyghmi is required")
        _install_wakeup_fix()
        cls = _SESSION_CLASSES.setdefault(self.cipher, _session_class(self.cipher))
        self._session = self._login(cls)
        sess = self._session
        if (
            getattr(sess, "ipmiversion", None) != 2.0
            or getattr(sess, "integrityalgo", None) != CIPHER_SUITES[self.cipher]
        ):
            self.close()
            raise _fence.RejectedError(
                f"BMC did not negotiate RMCP+ cipher suite {self.cipher}; refusing the session", self.target
            )

    def _login(self, cls: type) -> Any:
        """Log in, trying again until ``power_timeout`` seconds have passed with no answer.

        Each pyghmi login gives up after about 5 s of silence; a BMC that is busy or slow may
        answer a later try, so the tries go on until ``power_timeout``. The wait for each try is
        bounded by what is left of it. A login that completes after the caller gave up is logged
        out by its worker, so no session slot leaks. Silence until the deadline raises
        :class:`DeviceTimeoutError`, unless the host refuses the port outright
        (:func:`port_refused`): then :class:`UnreachableError`, a wrong address or port.
        """
        deadline = time.monotonic() + self.power_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                return self._login_once(cls, max(left, 0.0))
            except _fence.DeviceTimeoutError:
                if deadline - time.monotonic() > 0.5:
                    continue
                if port_refused(self.ipaddr, self.ipport):
                    raise _fence.UnreachableError(
                        "nothing listens at this address and port (ICMP port unreachable): "
                        "check ipaddr and ipport",
                        self.target,
                    ) from None
                raise _fence.DeviceTimeoutError(
                    f"no answer from the BMC within power_timeout={self.power_timeout:g}s "
                    "(BMC hung, busy or without power; or the path to it is filtered)",
                    self.target,
                ) from None

    def _login_once(self, cls: type, wait: float) -> Any:
        """One pyghmi login in a worker thread, waited for at most ``wait`` seconds; silence
        raises :class:`DeviceTimeoutError` (the caller decides whether to try again)."""
        box: dict[str, Any] = {}
        lock = threading.Lock()
        done = threading.Event()

        def login() -> None:
            try:
                sess = cls(
                    bmc=self.ipaddr,
                    userid=self._username,
                    password=self._password,
                    port=self.ipport,
                    privlevel=PRIVILEGE_LEVELS[self.privlvl],
                )
            except BaseException as exc:  # handed to the caller
                box["error"] = exc
                sess = None
            with lock:
                if box.get("abandoned") and sess is not None:
                    try:
                        sess.logout()
                    except Exception:
                        pass
                box["session"] = sess
                done.set()

        threading.Thread(target=login, name=f"ipmi-login-{self.target}", daemon=True).start()
        if not done.wait(wait):
            with lock:
                if not done.is_set():
                    box["abandoned"] = True
                    raise _fence.DeviceTimeoutError("no answer from the BMC", self.target)
        exc = box.get("error")
        if exc is not None:
            if PYGHMI_LIBRARY.present and isinstance(exc, pyghmi_exc.IpmiException):
                raise classify_login_error(str(exc), self.target) from None
            if isinstance(exc, OSError):
                raise _fence.UnreachableError(f"cannot reach the BMC: {exc}", self.target) from None
            raise exc
        return box["session"]

    def close(self) -> None:
        """Log out (Close Session); never raises. BMCs have few session slots: leaked sessions lock every client out."""
        sess, self._session = self._session, None
        _fence.close_quietly(sess, lambda s: s.logout())

    def _command(self, command: int, data: list[int], answer_wait: float | None = None) -> Any:
        """Send chassis command ``command`` (netfn 0x00) with ``data``; its answer (pyghmi's dict).
        ``answer_wait``: seconds before the first retransmit (None: pyghmi's 0.5-1 s). Raises
        UnreachableError, DeviceTimeoutError, PrivilegeError or RejectedError."""
        if self._session is None:
            raise _fence.UnreachableError("no IPMI session (open() not called or it failed)", self.target)
        try:
            rsp = self._session.raw_command(netfn=0x00, command=command, data=data, timeout=answer_wait)
        except pyghmi_exc.IpmiException as exc:
            raise _fence.DeviceTimeoutError(f"BMC stopped answering: {exc}", self.target) from None
        code = rsp.get("code", 0)
        if code == _CC_PRIVILEGE:
            raise _fence.PrivilegeError(
                f"insufficient privilege for chassis command 0x{command:02x} "
                f"(privlvl={self.privlvl}; power control needs operator or administrator)",
                self.target,
            )
        if code == 0xFFFF or rsp.get("error") == "timeout":
            raise _fence.DeviceTimeoutError("BMC did not answer the chassis command in time", self.target)
        if code or "error" in rsp:
            raise _fence.RejectedError(
                f"BMC rejected chassis command 0x{command:02x} with completion code 0x{code:02x}"
                f" ({rsp.get('error', 'unknown')})",
                self.target,
            )
        return rsp

    def get_state(self, plug: str) -> str:
        """Get Chassis Status: ``on`` if bit 0 of the current power state byte is set."""
        rsp = self._command(0x01, [])
        data = rsp.get("data") or b""
        if not data:
            raise _fence.RejectedError("empty Get Chassis Status answer", self.target)
        return _fence.ON if data[0] & 1 else _fence.OFF

    def set_state(self, plug: str, state: str) -> None:
        """Chassis Control ``power down`` (off) / ``power up`` (on) / ``power cycle`` (cycle), sent
        once and waited for :data:`CHASSIS_CONTROL_ANSWER_WAIT` seconds (at most ``power_timeout``)
        before it is sent again."""
        wait = min(CHASSIS_CONTROL_ANSWER_WAIT, max(float(self.power_timeout), 1.0))
        self._command(0x02, [CHASSIS_CONTROL[state]], answer_wait=wait)

    def cycle(self, check_mode: bool = False) -> dict[str, Any]:
        """Chassis Control ``power cycle``: NOT verified (the BMC cycles on its own).

        fence_ipmilan ``--method=cycle``. Returns ``{"before": "on"|"off", "sent": bool}``; a BMC
        refuses a cycle while the power is off (completion code 0xd5), so an off chassis is
        powered on instead (not verified either).
        """
        self.open()
        try:
            before = self.get_state("chassis")
            if check_mode:
                return {"before": before, "sent": False}
            if before == _fence.OFF:
                self.set_state("chassis", _fence.ON)
            else:
                self.set_state("chassis", "cycle")
            return {"before": before, "sent": True}
        finally:
            self.close()
