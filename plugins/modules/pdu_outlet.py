#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pdu_outlet
short_description: Fence a node by switching its PDU outlets over SNMP, verified by read-back
version_added: 0.1.0
description:
  - Switches one or more outlets of a switched PDU over SNMP and verifies the result by polling the
    outlets' status until it matches or O(power_timeout) expires, as C(fence_apc_snmp) and
    C(fence_eaton_snmp) do, with their device profiles (OIDs and values).
  - Several outlets (a node with redundant power supplies) are handled together - all are switched
    off and read back off before any is switched on again.
  - Every outlet given by name is resolved, and every outlet read, before anything is switched, so a
    wrong name changes nothing.
  - Returns a RV(fence) dictionary that later steps (C(noderemedy.core.node_taint)) accept as proof
    of a verified fence.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.snmp
  - noderemedy.core.fence
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    details: Reads the outlets, predicts the result, sends no SET.
  diff_mode:
    details: Each outlet's state before and after.
options:
  plug:
    description:
      - The outlets, by number (V(3)) or by name (the PDU's outlet name column, for example V(lab-node-0)).
      - As fence-agents C(--plug), but a list.
    type: list
    elements: str
    required: true
    aliases: [ port, outlets ]
  state:
    description:
      - V(off) and V(on) switch and verify; V(reboot) is off (all outlets, verified) then on; a failed
        power-on after a verified off is a warning. V(status) only reads.
    type: str
    required: true
    choices: [ 'on', 'off', reboot, status ]
  profile:
    description:
      - The PDU family. V(auto) reads sysObjectID and picks the profile as C(fence_apc_snmp) and
        C(fence_eaton_snmp) do (an unknown APC device falls back to V(apc_ms)).
      - V(apc_rpdu) - APC rack PDU, PowerNet-MIB rPDUOutletControl (control) and rPDUOutletStatus (status).
      - V(apc_ms) - APC MasterSwitch, PowerNet-MIB sPDUOutletCtl (control and status).
      - V(apc_ms6) - APC MasterSwitch with firmware 6, sPDUOutletCtl status and rPDUOutletControl control.
      - V(eaton_managed) - Eaton managed ePDU (outlets numbered from 1 here, 0-based on the device).
      - V(eaton_switched) - Eaton (Pulizzi) switched ePDU.
      - V(generic) - any PDU, described by O(status_oid), O(control_oid) and the values.
    type: str
    default: auto
    choices: [ auto, apc_rpdu, apc_ms, apc_ms6, eaton_managed, eaton_switched, generic ]
  status_oid:
    description:
      - With O(profile=generic), the outlet status column; C(.N) (the outlet number) is appended, or
        write C({n}) where the number goes.
    type: str
  control_oid:
    description:
      - With O(profile=generic), the outlet control column (as O(status_oid)); default O(status_oid).
    type: str
  names_oid:
    description:
      - With O(profile=generic), the outlet name column, walked to find outlets given by name.
    type: str
  status_on:
    description:
      - With O(profile=generic), the status value meaning on.
    type: int
    default: 1
  status_off:
    description:
      - With O(profile=generic), the status value meaning off.
    type: int
    default: 2
  control_on:
    description:
      - With O(profile=generic), the value written to switch on; default O(status_on).
    type: int
  control_off:
    description:
      - With O(profile=generic), the value written to switch off; default O(status_off).
    type: int
notes:
  - Errors are classified in RV(error) - V(auth) (wrong SNMPv3 user or key), V(privilege) (read-only
    community or user), V(unreachable) (no answer; for v1/v2c also a wrong community), V(rejected)
    (the PDU refused the value), V(not_found) (no such outlet), V(verify) (not read back in time), V(config).
seealso:
  - name: fence_apc_snmp
    description: The fence agent whose APC profiles this module follows.
    link: https://github.com/ClusterLabs/fence-agents/blob/main/agents/apc_snmp/fence_apc_snmp.py
"""

EXAMPLES = r"""
- name: Switch off both power supplies of lab-node-0 (outlets named after the node)
  noderemedy.core.pdu_outlet:
    ipaddr: 10.0.0.20
    community: "{{ pdu_community }}"
    plug: [lab-node-0, lab-node-0-psu2]
    state: 'off'
  register: fenced

- name: SNMPv3 authPriv, outlet by number, explicit profile
  noderemedy.core.pdu_outlet:
    ipaddr: 10.0.0.21
    snmp_version: '3'
    username: fence
    password: "{{ snmp_auth_key }}"
    snmp_priv_passwd: "{{ snmp_priv_key }}"
    snmp_auth_prot: SHA
    snmp_priv_prot: AES
    profile: apc_rpdu
    plug: ['4']
    state: status

- name: A PDU fence-agents does not know
  noderemedy.core.pdu_outlet:
    ipaddr: 10.0.0.22
    community: "{{ pdu_community }}"
    profile: generic
    status_oid: 1.3.6.1.4.1.99999.1.2.1.3
    control_oid: 1.3.6.1.4.1.99999.1.2.1.4
    status_on: 1
    status_off: 0
    plug: ['7']
    state: 'off'
"""

RETURN = r"""
profile:
  description: The profile used (detected with O(profile=auto)).
  returned: success
  type: str
  sample: apc_rpdu
power_state_before:
  description: V(on) if any outlet was on before (as fence-agents), else V(off).
  returned: success
  type: str
  sample: 'on'
power_state:
  description: V(on) if any outlet reads back on at the end (predicted in check mode), else V(off).
  returned: success
  type: str
  sample: 'off'
outlets:
  description: Each outlet.
  returned: success
  type: list
  elements: dict
  contains:
    plug:
      description: The outlet as given in O(plug).
      type: str
      sample: lab-node-0
    outlet:
      description: Its outlet number.
      type: int
      sample: 1
    state_before:
      description: V(on) or V(off) before.
      type: str
      sample: 'on'
    state:
      description: V(on) or V(off) at the end.
      type: str
      sample: 'off'
verify_seconds:
  description: Seconds from the first SET until every outlet read back the wanted state; null when nothing was switched.
  returned: success
  type: float
  sample: 0.02
attempts:
  description: SET rounds sent for the last phase (power-on may be retried).
  returned: success
  type: int
  sample: 1
error:
  description: Error class on failure - auth, privilege, unreachable, rejected, not_found, verify, config.
  returned: failure
  type: str
  sample: verify
fence:
  description:
    - Evidence of a verified fence, without secrets, for C(noderemedy.core.node_taint).
    - C(verified) is true only when every outlet was read back V(off) during this run.
  returned: always
  type: dict
  contains:
    verified:
      description: Every outlet was read back off.
      type: bool
      sample: true
    method:
      description: Always V(pdu).
      type: str
      sample: pdu
    target:
      description: The PDU as C(host:port).
      type: str
      sample: 127.0.0.1:24010
    plugs:
      description: The outlets as given.
      type: list
      elements: str
      sample: [lab-node-0]
    state:
      description: V(off) when verified, else the last state read (null if none).
      type: str
      sample: 'off'
    verified_at:
      description: Epoch seconds of the read-back that verified off; null when not verified.
      type: float
      sample: 1763712000.25
"""


from ansible_collections.noderemedy.core.plugins.module_utils._fence import (  # noqa: E402
    POWER_STATE_ARG_SPEC,
    driver_options,
)
from ansible_collections.noderemedy.core.plugins.module_utils._fence_module import (  # noqa: E402
    exit_power,
    fence,
    fencing_module,
)
from ansible_collections.noderemedy.core.plugins.module_utils._pdu import (  # noqa: E402
    PDU_ARG_SPEC,
    PROFILES,
    PduDriver,
    generic_profile,
)
from ansible_collections.noderemedy.core.plugins.module_utils._snmp import (  # noqa: E402
    PYSNMP_LIBRARY,
    SNMP_ARG_SPEC,
    SNMP_SECRET_KEYS,
    client_from_params,
)

MODULE_ARG_SPEC = {
    "plug": {"type": "list", "elements": "str", "required": True, "aliases": ["port", "outlets"]},
    **POWER_STATE_ARG_SPEC,
    **PDU_ARG_SPEC,
}


def main() -> None:
    module = fencing_module(
        SNMP_ARG_SPEC,
        MODULE_ARG_SPEC,
        PYSNMP_LIBRARY,
        required_if=[("profile", "generic", ["status_oid"])],
    )
    p = module.params

    def build() -> PduDriver:
        if p["profile"] == "generic":
            profile = generic_profile(
                p["status_oid"],
                p["control_oid"],
                p["names_oid"],
                p["status_on"],
                p["status_off"],
                p["control_on"],
                p["control_off"],
            )
        else:
            profile = None if p["profile"] == "auto" else PROFILES[p["profile"]]
        return PduDriver(client_from_params(p), p["plug"], profile, **driver_options(p))

    driver, res = fence(module, "pdu", f"{p['ipaddr']}:{p['ipport']}", p["plug"], build, SNMP_SECRET_KEYS)
    exit_power(
        module,
        driver,
        res,
        ({"outlets": res.before}, {"outlets": res.after}),
        profile=driver.profile.name,
        outlets=driver.outlet_report(res),
    )


if __name__ == "__main__":
    main()
