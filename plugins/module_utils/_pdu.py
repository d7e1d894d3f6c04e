# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Switched-PDU outlet fencing over SNMP: device profiles and the PDU driver.

Profiles are fence-agents' (``agents/apc_snmp/fence_apc_snmp.py`` classes ``ApcRPDU``,
``ApcMS``, ``ApcMS6``; ``agents/eaton_snmp/fence_eaton_snmp.py`` ``EatonManagedePDU``,
``EatonSwitchedePDU``), with their OIDs (APC PowerNet-MIB, Eaton/Pulizzi MIBs) and values:

=================  ==========================================  =========================================
profile            status OID (per outlet N)                   control OID / values
=================  ==========================================  =========================================
apc_rpdu           rPDUOutletStatusOutletState .318.1.1.12.3.5.1.1.4.N   rPDUOutletControlOutletCommand
                                                                .318.1.1.12.3.3.1.1.4.N; on 1, off 2
apc_ms             sPDUOutletCtl .318.1.1.4.4.2.1.3.N          same OID; on 1, off 2
apc_ms6            sPDUOutletCtl .318.1.1.4.4.2.1.3.N          rPDUOutletControlOutletCommand; on 1, off 2
eaton_managed      outlet state .534.6.6.6.1.2.2.1.3.(N-1)     same OID; on 1, off 0 (0-based outlets)
eaton_switched     .20677.2.6.3.N.0                            .20677.2.6.2.(N+1).0; on 1, off 2
generic            ``status_oid`` option                        ``control_oid`` option and values
=================  ==========================================  =========================================

``profile: auto`` reads sysObjectID (SNMPv2-MIB 1.3.6.1.2.1.1.2.0) and picks the profile as
fence_apc_snmp ``apc_set_device`` / fence_eaton_snmp ``eaton_set_device`` do; an unknown APC
(enterprise 318) device falls back to ``apc_ms``, "supported on every APC PDU".
Outlets are given by number or by name (the profile's outlet-name column, fence-agents
``outlet_table_oid``); every plug is resolved before any SET, so an unknown name changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    OFF,
    ON,
    FenceConfigError,
    FenceDriver,
    FenceError,
    NotFoundError,
    RejectedError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._snmp import SnmpClient, normalize_oid


@dataclass(frozen=True)
class PduProfile:
    """One PDU family: where the outlet state is read and written, and the values.

    Attributes:
        name: profile name (the ``profile`` option).
        description: human name (fence-agents ``ident_str``).
        status_oid / control_oid: OID templates with ``{n}`` = device outlet index.
        names_oid: column holding outlet names (walked to resolve a plug given by name), or None.
        state_on / state_off: status values; turn_on / turn_off: control values.
        index_offset: device index = outlet number + index_offset (Eaton managed: -1).
        control_offset: extra offset of the control index (Eaton switched: +1, "#1 is the global command").
    """

    name: str
    description: str
    status_oid: str
    control_oid: str
    names_oid: str | None
    state_on: int
    state_off: int
    turn_on: int
    turn_off: int
    index_offset: int = 0
    control_offset: int = 0


PROFILES: dict[str, PduProfile] = {
    p.name: p
    for p in (
        PduProfile(
            "apc_rpdu",
            "APC rack PDU (PowerNet-MIB rPDUOutletControl/Status)",
            "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.{n}",
            "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.{n}",
            "1.3.6.1.4.1.318.1.1.12.3.5.1.1.2",
            1,
            2,
            1,
            2,
        ),
        PduProfile(
            "apc_ms",
            "APC MasterSwitch (PowerNet-MIB sPDUOutletCtl)",
            "1.3.6.1.4.1.318.1.1.4.4.2.1.3.{n}",
            "1.3.6.1.4.1.318.1.1.4.4.2.1.3.{n}",
            "1.3.6.1.4.1.318.1.1.4.4.2.1.4",
            1,
            2,
            1,
            2,
        ),
        PduProfile(
            "apc_ms6",
            "APC MasterSwitch with firmware 6.x",
            "1.3.6.1.4.1.318.1.1.4.4.2.1.3.{n}",
            "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.{n}",
            "1.3.6.1.4.1.318.1.1.4.4.2.1.4",
            1,
            2,
            1,
            2,
        ),
        PduProfile(
            "eaton_managed",
            "Eaton managed ePDU",
            "1.3.6.1.4.1.534.6.6.6.1.2.2.1.3.{n}",
            "1.3.6.1.4.1.534.6.6.6.1.2.2.1.3.{n}",
            None,
            1,
            0,
            1,
            0,
            index_offset=-1,
        ),
        PduProfile(
            "eaton_switched",
            "Eaton switched ePDU (Pulizzi)",
            "1.3.6.1.4.1.20677.2.6.3.{n}.0",
            "1.3.6.1.4.1.20677.2.6.2.{n}.0",
            None,
            1,
            2,
            1,
            2,
            control_offset=1,
        ),
    )
}

#: sysObjectID -> profile (fence_apc_snmp ``agents_dir``, fence_eaton_snmp ``agents_dir``).
SYS_OBJECT_IDS = {
    "1.3.6.1.4.1.318.1.3.4.5": "apc_rpdu",
    "1.3.6.1.4.1.318.1.3.4.6": "apc_ms6",
    "1.3.6.1.4.1.534.6.6.6": "eaton_managed",
    "1.3.6.1.4.1.20677.1": "eaton_switched",
    "1.3.6.1.4.1.20677.2": "eaton_switched",
}
_APC_ENTERPRISE = "1.3.6.1.4.1.318."

PROFILE_CHOICES = ["auto", *PROFILES, "generic"]

#: PDU-specific options (profile and the generic profile's OIDs); documented in ``pdu_outlet``.
PDU_ARG_SPEC: dict[str, dict[str, Any]] = {
    "profile": {"type": "str", "default": "auto", "choices": PROFILE_CHOICES},
    "status_oid": {"type": "str"},
    "control_oid": {"type": "str"},
    "names_oid": {"type": "str"},
    "status_on": {"type": "int", "default": 1},
    "status_off": {"type": "int", "default": 2},
    "control_on": {"type": "int"},
    "control_off": {"type": "int"},
}


def generic_profile(
    status_oid: str | None,
    control_oid: str | None,
    names_oid: str | None = None,
    status_on: int = 1,
    status_off: int = 2,
    control_on: int | None = None,
    control_off: int | None = None,
) -> PduProfile:
    """Build the ``generic`` profile from options: OID prefixes to which ``.N`` is appended
    (or templates containing ``{n}``); control values default to the status values.

    Raises FenceConfigError naming the missing or bad option.
    """
    if not status_oid:
        raise FenceConfigError("status_oid: required with profile generic")

    def template(opt: str, value: str) -> str:
        if "{n}" in value:
            normalize_oid(value.replace("{n}", "1"))
            return value.strip().lstrip(".")
        try:
            return normalize_oid(value) + ".{n}"
        except FenceConfigError:
            raise FenceConfigError(f"{opt}: {value!r} is not a dotted numeric OID") from None

    status = template("status_oid", status_oid)
    control = template("control_oid", control_oid) if control_oid else status
    names = None
    if names_oid:
        try:
            names = normalize_oid(names_oid)
        except FenceConfigError:
            raise FenceConfigError(f"names_oid: {names_oid!r} is not a dotted numeric OID") from None
    if status_on == status_off:
        raise FenceConfigError("status_on / status_off: must differ")
    turn_on = status_on if control_on is None else control_on
    turn_off = status_off if control_off is None else control_off
    if turn_on == turn_off:
        raise FenceConfigError("control_on / control_off: must differ")
    return PduProfile(
        "generic", "generic SNMP PDU", status, control, names, status_on, status_off, turn_on, turn_off
    )


def detect_profile(sys_object_id: str) -> PduProfile | None:
    """sysObjectID -> profile as fence_apc_snmp does (unknown APC -> ``apc_ms``); None if unknown."""
    oid = sys_object_id.strip().lstrip(".")
    if oid in SYS_OBJECT_IDS:
        return PROFILES[SYS_OBJECT_IDS[oid]]
    if oid.startswith(_APC_ENTERPRISE):
        return PROFILES["apc_ms"]
    return None


class PduDriver(FenceDriver):
    """Outlets of a switched PDU over SNMP.

    Args:
        client: an :class:`SnmpClient` (closed by :meth:`close`).
        plugs: outlet numbers (``"3"``) or names (``"lab-node-0"``).
        profile: a :class:`PduProfile`, or None to detect it from sysObjectID.
        **fence: :class:`FenceDriver` options.
    """

    method = "pdu"

    def __init__(
        self, client: SnmpClient, plugs: list[str], profile: PduProfile | None = None, **fence: Any
    ) -> None:
        super().__init__(target=client.target, plugs=[str(p) for p in plugs], **fence)
        self.client = client
        self.profile = profile
        self.outlets: dict[str, int] = {}
        self.names: dict[str, str] = {}

    def close(self) -> None:
        """Close the SNMP engine."""
        self.client.close()

    def resolve(self) -> None:
        """Detect the profile if needed, then map every plug to an outlet number.

        Raises:
            FenceConfigError: the device type is unknown (set ``profile``).
            NotFoundError: an outlet name or number that does not exist.
        """
        if self.profile is None:
            sys_oid = self.client.sys_object_id()
            self.profile = detect_profile(sys_oid)
            if self.profile is None:
                raise FenceConfigError(
                    f"profile: cannot detect the PDU type from sysObjectID {sys_oid}; set profile "
                    f"({', '.join(PROFILE_CHOICES[1:])})"
                )
        table: list[tuple[str, int | str]] | None = None
        for plug in self.plugs:
            if plug.isdigit():
                number = int(plug)
                if number < 1:
                    raise FenceConfigError(f"plug: outlet numbers start at 1, got {plug}")
                self.outlets[plug] = number
                continue
            if self.profile.names_oid is None:
                raise FenceConfigError(
                    f"plug: profile {self.profile.name} has no outlet names; give outlet numbers (got {plug!r})"
                )
            if table is None:
                table = self.client.walk(self.profile.names_oid)
            matches = [oid.rsplit(".", 1)[1] for oid, value in table if str(value).strip('"') == plug]
            if not matches:
                known = ", ".join(str(row[1]) for row in table[:20])
                raise NotFoundError(
                    f"plug: no outlet named {plug!r} on this PDU (outlets: {known})", self.target
                )
            self.outlets[plug] = int(matches[0]) - self.profile.index_offset
            self.names[plug] = plug

    def _index(self, plug: str) -> int:
        return self.outlets[plug] + self.profile.index_offset

    def get_state(self, plug: str) -> str:
        """Read the outlet's status OID; values other than on/off -> RejectedError."""
        value = self.client.get(self.profile.status_oid.format(n=self._index(plug)))[0]
        if value == self.profile.state_on:
            return ON
        if value == self.profile.state_off:
            return OFF
        raise RejectedError(
            f"outlet {plug}: unexpected status value {value!r} ({self.profile.name})", self.target
        )

    def read_all(self) -> dict[str, str]:
        """All outlets' status in one GET PDU."""
        oids = [self.profile.status_oid.format(n=self._index(p)) for p in self.plugs]
        try:
            values = self.client.get(*oids)
        except NotFoundError:
            for plug in self.plugs:  # find which one, to name it
                try:
                    self.get_state(plug)
                except NotFoundError:
                    raise NotFoundError(
                        f"plug: outlet {plug} does not exist on this PDU", self.target
                    ) from None
            raise
        states = {}
        for plug, value in zip(self.plugs, values, strict=True):
            if value == self.profile.state_on:
                states[plug] = ON
            elif value == self.profile.state_off:
                states[plug] = OFF
            else:
                raise RejectedError(
                    f"outlet {plug}: unexpected status value {value!r} ({self.profile.name})", self.target
                )
        return states

    def set_state(self, plug: str, state: str) -> None:
        """SET the control OID to the profile's on/off value."""
        oid = self.profile.control_oid.format(n=self._index(plug) + self.profile.control_offset)
        self.client.set(oid, self.profile.turn_on if state == ON else self.profile.turn_off)

    def outlet_report(self, result: Any) -> list[dict[str, Any]]:
        """Per outlet: ``{"plug", "outlet", "state_before", "state"}`` for the module result."""
        return [
            {
                "plug": plug,
                "outlet": self.outlets.get(plug),
                "state_before": result.before.get(plug) if result else None,
                "state": result.after.get(plug) if result else None,
            }
            for plug in self.plugs
        ]


__all__ = ["PduDriver", "PduProfile", "PROFILES", "detect_profile", "generic_profile", "FenceError"]
