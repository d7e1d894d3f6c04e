# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric fencing: disable a node's switch ports over SNMP and verify them down.

Profiles (fence-agents ``fence_ifmib`` and ``fence_cisco_mds``):

* ``ifmib`` -- IF-MIB (RFC 2863) ``ifAdminStatus`` 1.3.6.1.2.1.2.2.1.7.<ifIndex> (up 1, down 2)
  is written; the port is given by ifIndex, ``ifDescr`` (1.3.6.1.2.1.2.2.1.2) or ``ifName``
  (1.3.6.1.2.1.31.1.1.1.1). fence_ifmib reads back ``ifAdminStatus`` only; we also read
  ``ifOperStatus`` (1.3.6.1.2.1.2.2.1.8) where the switch reports it: a port counts as disabled
  only when its admin status is down *and* its operational status is no longer up(1) (RFC 2863:
  "If ifAdminStatus is down(2) then ifOperStatus should be down(2)").
* ``cisco_mds`` -- FIBRE-CHANNEL-FE-MIB (RFC 2837) ``fcFxPortPhysAdminStatus``
  1.3.6.1.2.1.75.1.2.2.1.1.<module>.<port> (online 1, offline 2) with ``fcX/Y`` mapped as
  fence_cisco_mds ``cisco_port2oid``: module = X + 21, port = Y - 1; verified with
  ``fcFxPortPhysOperStatus`` (…75.1.2.2.1.2, online 1) where reported.

``verify_oper_status: false`` verifies by the admin status alone, as the fence agents do (for
switches, or simulators, whose operational status does not follow the admin status).
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    OFF,
    ON,
    FenceConfigError,
    FenceDriver,
    NotFoundError,
    RejectedError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._snmp import SnmpClient

IF_ADMIN_STATUS = "1.3.6.1.2.1.2.2.1.7"
IF_OPER_STATUS = "1.3.6.1.2.1.2.2.1.8"
IF_DESCR = "1.3.6.1.2.1.2.2.1.2"
IF_NAME = "1.3.6.1.2.1.31.1.1.1.1"
FC_ADMIN_STATUS = "1.3.6.1.2.1.75.1.2.2.1.1"
FC_OPER_STATUS = "1.3.6.1.2.1.75.1.2.2.1.2"

PROFILE_CHOICES = ["ifmib", "cisco_mds"]

#: Module vocabulary <-> driver vocabulary.
WORDS = {ON: "enabled", OFF: "disabled"}

#: FC-switch specific options; documented in ``fc_port``.
FC_ARG_SPEC: dict[str, dict[str, Any]] = {
    "profile": {"type": "str", "default": "ifmib", "choices": PROFILE_CHOICES},
    "verify_oper_status": {"type": "bool", "default": True},
}

_CISCO_PORT = re.compile(r"^fc(\d+)/(\d+)$")


def cisco_port_index(port: str) -> str:
    """``fcX/Y`` -> ``"<X+21>.<Y-1>"`` (fence_cisco_mds ``cisco_port2oid``); FenceConfigError otherwise."""
    match = _CISCO_PORT.match(port.strip().lower())
    if not match or int(match.group(2)) < 1:
        raise FenceConfigError(f"plug: {port!r} is not a Cisco MDS port name like fc1/3")
    return f"{int(match.group(1)) + 21}.{int(match.group(2)) - 1}"


class FcSwitchDriver(FenceDriver):
    """Switch ports (``on`` = enabled, ``off`` = disabled) over SNMP.

    Args:
        client: an :class:`SnmpClient` (closed by :meth:`close`).
        plugs: ports (``ifmib``: ifIndex, ifDescr or ifName; ``cisco_mds``: ``fcX/Y``).
        profile: ``ifmib`` or ``cisco_mds``.
        verify_oper_status: also require the operational status to leave up/online when disabling.
        **fence: :class:`FenceDriver` options.
    Raises:
        FenceConfigError: unknown profile or a malformed port name.
    """

    method = "fc"

    def __init__(
        self,
        client: SnmpClient,
        plugs: list[str],
        profile: str = "ifmib",
        verify_oper_status: bool = True,
        **fence: Any,
    ) -> None:
        if profile not in PROFILE_CHOICES:
            raise FenceConfigError(f"profile: {profile!r} is not one of {', '.join(PROFILE_CHOICES)}")
        super().__init__(target=client.target, plugs=[str(p) for p in plugs], **fence)
        self.client = client
        self.profile = profile
        self.verify_oper_status = verify_oper_status
        self.index: dict[str, str] = {}
        self.oper: dict[str, bool] = {}
        if profile == "cisco_mds":
            for plug in self.plugs:
                self.index[plug] = cisco_port_index(plug)

    def close(self) -> None:
        """Close the SNMP engine."""
        self.client.close()

    def _oids(self) -> tuple[str, str]:
        if self.profile == "cisco_mds":
            return FC_ADMIN_STATUS, FC_OPER_STATUS
        return IF_ADMIN_STATUS, IF_OPER_STATUS

    def resolve(self) -> None:
        """Map ports to indexes (walking ifDescr/ifName for names) and probe the oper status.

        Raises NotFoundError for a port that does not exist.
        """
        admin, oper = self._oids()
        tables: dict[str, list[tuple[str, Any]]] = {}

        def table(oid: str) -> list[tuple[str, Any]]:
            if oid not in tables:
                tables[oid] = self.client.walk(oid)
            return tables[oid]

        for plug in self.plugs:
            if plug in self.index:
                continue
            if plug.isdigit():
                self.index[plug] = plug
                continue
            # ifDescr first; ifName is walked only for a name ifDescr does not have
            found = [oid.rsplit(".", 1)[1] for oid, value in table(IF_DESCR) if str(value) == plug]
            found = found or [oid.rsplit(".", 1)[1] for oid, value in table(IF_NAME) if str(value) == plug]
            if not found:
                raise NotFoundError(
                    f"plug: no port with ifDescr or ifName {plug!r} on this switch", self.target
                )
            self.index[plug] = found[0]
        present = self._instances(admin)
        missing = [plug for plug in self.plugs if not present[plug]]
        if missing:
            raise NotFoundError(f"plug: port {missing[0]} does not exist on this switch", self.target)
        if self.verify_oper_status:
            # a port whose oper status is not reported is verified by its admin status
            self.oper.update(self._instances(oper))

    def _instances(self, column: str) -> dict[str, bool]:
        """Whether the agent has ``column``'s instance for each port: one GET of them all, and
        port by port only when that GET names one it has not."""
        try:
            self.client.get(*(f"{column}.{self.index[plug]}" for plug in self.plugs))
            return dict.fromkeys(self.plugs, True)
        except NotFoundError:
            pass
        found: dict[str, bool] = {}
        for plug in self.plugs:
            try:
                self.client.get(f"{column}.{self.index[plug]}")
                found[plug] = True
            except NotFoundError:
                found[plug] = False
        return found

    def _state(self, plug: str, admin: Any, oper: Any | None) -> str:
        if admin not in (1, 2, 3):
            raise RejectedError(f"port {plug}: unexpected admin status {admin!r}", self.target)
        if admin == 1:
            return ON
        if oper is not None and oper == 1:
            return ON  # admin down but still up: not fenced yet
        return OFF

    def get_state(self, plug: str) -> str:
        """``on`` (enabled) or ``off`` (admin down and, where reported, oper not up)."""
        return self.read_all_for([plug])[plug]

    def read_all_for(self, plugs: list[str]) -> dict[str, str]:
        """Admin (and oper) status of ``plugs`` in one GET PDU."""
        admin, oper = self._oids()
        oids: list[str] = []
        for plug in plugs:
            oids.append(f"{admin}.{self.index[plug]}")
            if self.oper.get(plug):
                oids.append(f"{oper}.{self.index[plug]}")
        values = iter(self.client.get(*oids))
        states = {}
        for plug in plugs:
            adm = next(values)
            opr = next(values) if self.oper.get(plug) else None
            states[plug] = self._state(plug, adm, opr)
        return states

    def read_all(self) -> dict[str, str]:
        """Every port's state in one GET."""
        return self.read_all_for(self.plugs)

    def set_state(self, plug: str, state: str) -> None:
        """SET the admin status: up/online 1 (on), down/offline 2 (off)."""
        admin = self._oids()[0]
        self.client.set(f"{admin}.{self.index[plug]}", 1 if state == ON else 2)

    def port_report(self, result: Any) -> list[dict[str, Any]]:
        """Per port: ``{"plug", "index", "oper_status_checked", "state_before", "state"}``."""
        return [
            {
                "plug": plug,
                "index": self.index.get(plug),
                "oper_status_checked": bool(self.oper.get(plug)),
                "state_before": WORDS.get(result.before.get(plug)) if result else None,
                "state": WORDS.get(result.after.get(plug)) if result else None,
            }
            for plug in self.plugs
        ]


__all__ = ["FcSwitchDriver", "cisco_port_index", "FC_ARG_SPEC", "WORDS", "SnmpClient"]
