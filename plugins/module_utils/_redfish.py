# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redfish ``ComputerSystem`` power fencing with the sushy library (OpenStack's Redfish client).

Behaviour follows fence-agents ``fence_redfish``: the system is ``--systems-uri`` (or found in the
``Systems`` collection), *off* is the ``ComputerSystem.Reset`` action with ``ResetType=ForceOff``,
*on* is ``ResetType=On``, a reboot is off (verified) then on, and the power is read back from the
system's ``PowerState`` (DMTF DSP0268, ``ComputerSystem.v1_x``: ``On``, ``Off``, ``PoweringOn``,
``PoweringOff``, ``Paused``).

Differences from ``fence_redfish`` 4.12 (both on purpose):

* only ``Off`` counts as off and only ``On`` as on. ``PoweringOff`` and ``PoweringOn`` are
  transitions, reported as such and never final: ``fence_redfish`` maps every state but ``Off``
  to on, so it declares a machine that is still ``PoweringOn`` powered on;
* with several systems behind one manager and neither ``systems_uri`` nor ``plug``, the run
  fails instead of taking the collection's last member.

HTTP basic authentication is used (what every BMC accepts; sushy's session login needs a
SessionService). Errors are classified once, here: 401 -> ``auth``, 403 -> ``privilege``,
404 -> ``not_found``, no connection / TLS failure -> ``unreachable``, other HTTP errors and reset
types the system does not allow -> ``rejected``.
"""

from __future__ import annotations

import logging
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils import _fence

with _fence.Library("sushy") as SUSHY_LIBRARY:
    import sushy
    from sushy import auth as sushy_auth
    from sushy import exceptions as sushy_exc

#: Redfish connection options; documented 1:1 by ``doc_fragments/fence.py`` ``REDFISH``. Names are
#: fence_redfish's (``--ip``, ``--ipport``, ``--username``, ``--password``, ``--ssl-insecure``,
#: ``--redfish-uri``, ``--systems-uri``, ``--plug``).
REDFISH_ARG_SPEC: dict[str, dict[str, Any]] = {
    **_fence.login_arg_spec(
        None,
        ["NODEREMEDY_REDFISH_USERNAME", "REDFISH_USERNAME"],
        ["NODEREMEDY_REDFISH_PASSWORD", "REDFISH_PASSWORD"],
    ),
    "ssl": {"type": "bool", "default": True},
    "ssl_insecure": {"type": "bool", "default": False},
    "ca_path": {"type": "path"},
    "redfish_uri": {"type": "str", "default": "/redfish/v1"},
    "systems_uri": {"type": "str"},
    "plug": {"type": "str"},
}

#: Redfish ``ResetType`` for each wanted state (fence_redfish's choices).
RESET_TYPES = {_fence.OFF: "ForceOff", _fence.ON: "On"}

#: ``PowerState`` -> the driver's state; anything else (None, ``Paused``) is ``unknown``.
POWER_STATES = {
    "On": _fence.ON,
    "Off": _fence.OFF,
    "PoweringOn": "powering_on",
    "PoweringOff": "powering_off",
}


def _quiet_sushy() -> None:
    """sushy logs its retries and 401s at WARNING; the driver raises classified errors instead."""
    log = logging.getLogger("sushy")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    log.propagate = False


class RedfishDriver(_fence.FenceDriver):
    """Power of one Redfish ``ComputerSystem`` (the single plug: its URI, Id or name).

    Args:
        ipaddr: BMC host name or address.
        username / password: HTTP basic credentials (both required, password not empty).
        ipport: TCP port (None: 443 with ``ssl``, 80 without).
        ssl: HTTPS (fence_redfish always uses it); False for a ``redfish+http://`` BMC.
        ssl_insecure: do not verify the BMC's certificate (fence-agents ``--ssl-insecure``).
        ca_path: CA bundle file or directory to verify the certificate with (else the system's).
        redfish_uri: the service root (``/redfish/v1``).
        systems_uri: the system's URI; else ``plug`` (a member's ``Id``, ``Name`` or ``UUID``), else
            the collection's only member.
        Timing options: see :class:`~._fence.FenceDriver` (``power_timeout`` also bounds each
        HTTP request).
    Raises:
        FenceConfigError: missing credentials, a URI not starting with ``/``, bad timing values.
    """

    method = "redfish"

    def __init__(
        self,
        ipaddr: str,
        username: str | None,
        password: str | None,
        ipport: int | None = None,
        ssl: bool = True,
        ssl_insecure: bool = False,
        ca_path: str | None = None,
        redfish_uri: str = "/redfish/v1",
        systems_uri: str | None = None,
        plug: str | None = None,
        **timing: Any,
    ) -> None:
        port = ipport if ipport is not None else (443 if ssl else 80)
        _fence.check_address(ipaddr, port, "the BMC", "TCP port (1-65535)")
        host = f"[{ipaddr}]" if ":" in ipaddr else ipaddr
        super().__init__(f"{host}:{port}", [systems_uri or plug or "system"], **timing)
        _fence.require_login(username, password)
        for name, uri in (("redfish_uri", redfish_uri), ("systems_uri", systems_uri)):
            if uri is not None and not uri.startswith("/"):
                raise _fence.FenceConfigError(f"{name}: {uri!r} is not an absolute path (starts with /)")
        self.base_url = f"{'https' if ssl else 'http'}://{host}:{port}"
        self.verify: bool | str = False if (ssl_insecure or not ssl) else (ca_path or True)
        self.redfish_uri = redfish_uri.rstrip("/") + "/"
        self.systems_uri = systems_uri
        self.plug = plug
        self._username = username
        self._password = password
        self._root: Any = None
        self._system: Any = None
        #: URI of the system found by :meth:`resolve` (None before).
        self.resolved_uri: str | None = None

    # -- errors ----------------------------------------------------------------------------
    def _classify(self, exc: Exception, doing: str) -> _fence.FenceError:
        if isinstance(exc, sushy_exc.AccessError):
            if exc.status_code == 403:
                return _fence.PrivilegeError(f"{doing}: forbidden for this user (HTTP 403)", self.target)
            return _fence.AuthError(
                f"{doing}: authentication refused (HTTP 401, wrong user or password)", self.target
            )
        if isinstance(exc, sushy_exc.ResourceNotFoundError):
            return _fence.NotFoundError(f"{doing}: not found on the BMC (HTTP 404)", self.target)
        if isinstance(exc, sushy_exc.ConnectionError):
            text = str(exc)
            if "CERTIFICATE_VERIFY_FAILED" in text or "SSLError" in text:
                return _fence.UnreachableError(
                    f"{doing}: TLS failed ({text.rsplit('error:', maxsplit=1)[-1].strip()[:200]}); give ca_path, or "
                    "ssl_insecure=true for a BMC whose certificate cannot be verified",
                    self.target,
                )
            return _fence.UnreachableError(f"{doing}: cannot reach the BMC at {self.base_url}", self.target)
        if isinstance(exc, sushy_exc.HTTPError):
            return _fence.RejectedError(
                f"{doing}: HTTP {exc.status_code} {exc.detail or ''}".strip(), self.target
            )
        return _fence.RejectedError(f"{doing}: {exc}", self.target)

    # -- connection ------------------------------------------------------------------------
    def open(self) -> None:
        """Read the service root (no authentication needed there, as DSP0266 says)."""
        SUSHY_LIBRARY.require()
        _quiet_sushy()
        try:
            self._root = sushy.Sushy(
                self.base_url,
                auth=sushy_auth.BasicAuth(username=self._username, password=self._password),
                root_prefix=self.redfish_uri,
                verify=self.verify,
                read_timeout=self.power_timeout,
                connect_timeout=self.connect_timeout,
                server_side_retries=1,
                server_side_retries_delay=0.1,
            )
        except sushy_exc.SushyError as exc:
            raise self._classify(exc, f"service root {self.redfish_uri}") from None

    def close(self) -> None:
        """Drop the HTTP session (basic authentication holds no BMC session slot)."""
        root, self._root = self._root, None
        _fence.close_quietly(root, lambda r: r._conn.close())

    def resolve(self) -> None:
        """Find the system: ``systems_uri``, else the member matching ``plug``, else the only member.

        Raises:
            NotFoundError: no such system (or ``plug`` matches none, naming the members).
            FenceConfigError: several systems and neither ``systems_uri`` nor ``plug``.
        """
        try:
            if self.systems_uri:
                self._system = self._root.get_system(self.systems_uri)
                self.resolved_uri = self._system.path
                return
            members = self._root.get_system_collection().get_members()
        except sushy_exc.SushyError as exc:
            raise self._classify(exc, f"system {self.systems_uri or 'collection'}") from None
        if self.plug:
            for member in members:
                if self.plug in (member.identity, member.name, member.uuid, member.path):
                    self._system = member
                    self.resolved_uri = member.path
                    return
            names = sorted(f"{m.identity} ({m.name})" for m in members)
            raise _fence.NotFoundError(
                f"plug: no system with Id, Name or UUID {self.plug!r}; systems: {names}", self.target
            )
        if len(members) != 1:
            raise _fence.FenceConfigError(
                f"systems_uri: the BMC has {len(members)} systems ({sorted(m.path for m in members)}); "
                "give systems_uri or plug"
            )
        self._system = members[0]
        self.resolved_uri = members[0].path

    # -- the device ------------------------------------------------------------------------
    def get_state(self, plug: str) -> str:
        """Re-read the system: ``on``, ``off``, ``powering_on``, ``powering_off`` or ``unknown``."""
        try:
            self._system.refresh(force=True)
        except sushy_exc.SushyError as exc:
            raise self._classify(exc, "read PowerState") from None
        value = self._system.power_state
        value = getattr(value, "value", value)
        return POWER_STATES.get(value, "unknown")

    def set_state(self, plug: str, state: str) -> None:
        """POST ``ComputerSystem.Reset`` with ``ResetType`` ``ForceOff`` (off) or ``On`` (on)."""
        reset = RESET_TYPES[state]
        try:
            self._system.reset_system(sushy.ResetType(reset))
        except sushy_exc.InvalidParameterValueError:
            allowed = sorted(
                str(getattr(v, "value", v)) for v in self._system.get_allowed_reset_system_values()
            )
            raise _fence.RejectedError(
                f"the system does not allow ResetType {reset}; allowed: {allowed}", self.target
            ) from None
        except sushy_exc.SushyError as exc:
            raise self._classify(exc, f"ComputerSystem.Reset {reset}") from None
