#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fc_port
short_description: Fence a node's storage or network paths by disabling its switch ports over SNMP
version_added: 0.1.0
description:
  - Disables or enables switch ports over SNMP (fabric fencing) and verifies the result by polling
    the ports' status until it matches or O(power_timeout) expires, as C(fence_ifmib) and
    C(fence_cisco_mds) do.
  - With O(profile=ifmib) the port's IF-MIB C(ifAdminStatus) is written; a port counts as disabled
    only when its admin status reads down and, where the switch reports it, its C(ifOperStatus) is no
    longer up (C(fence_ifmib) checks the admin status only; set O(verify_oper_status=false) for that).
  - With O(profile=cisco_mds) the FIBRE-CHANNEL-FE-MIB C(fcFxPortPhysAdminStatus) of port C(fcX/Y) is
    written, verified with C(fcFxPortPhysOperStatus) where reported.
  - Every port is resolved and read before anything is written, so a wrong name changes nothing.
  - Returns a RV(fence) dictionary that later steps (C(noderemedy.core.node_taint)) accept as proof of
    a verified (storage) fence.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.snmp
  - noderemedy.core.fence
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    details: Reads the ports, predicts the result, sends no SET.
  diff_mode:
    details: Each port's state before and after.
options:
  plug:
    description:
      - The ports. O(profile=ifmib) - an ifIndex (V(3)), an C(ifDescr) or an C(ifName) (V(fc1/3));
        O(profile=cisco_mds) - C(fcX/Y) names.
    type: list
    elements: str
    required: true
    aliases: [ port, ports ]
  state:
    description:
      - V(disabled) fences (admin down, verified); V(enabled) unfences (admin up, verified);
        V(status) only reads.
    type: str
    required: true
    choices: [ enabled, disabled, status ]
  profile:
    description:
      - V(ifmib) (any IF-MIB switch, as C(fence_ifmib)) or V(cisco_mds) (FC-FE-MIB, as C(fence_cisco_mds)).
    type: str
    choices: [ ifmib, cisco_mds ]
    default: ifmib
  verify_oper_status:
    description:
      - Require the operational status to leave up/online before a port counts as disabled, where
        the switch reports it. V(false) verifies by the admin status only, as the fence agents do.
    type: bool
    default: true
notes:
  - Errors are classified in RV(error) - V(auth), V(privilege) (read-only community or user),
    V(unreachable) (no answer; for v1/v2c also a wrong community), V(rejected), V(not_found) (no such
    port), V(verify) (not read back in time), V(config).
seealso:
  - name: fence_ifmib
    description: The fence agent this module follows.
    link: https://github.com/ClusterLabs/fence-agents/blob/main/agents/ifmib/fence_ifmib.py
"""

EXAMPLES = r"""
- name: Cut lab-node-0 off the SAN (both HBA ports)
  noderemedy.core.fc_port:
    ipaddr: 10.0.0.30
    community: "{{ switch_community }}"
    plug: [fc1/1, fc2/1]
    state: disabled
  register: storage_fenced

- name: Cisco MDS over SNMPv3
  noderemedy.core.fc_port:
    ipaddr: 10.0.0.31
    snmp_version: '3'
    username: fence
    password: "{{ snmp_auth_key }}"
    snmp_priv_passwd: "{{ snmp_priv_key }}"
    profile: cisco_mds
    plug: [fc1/3]
    state: enabled
"""

RETURN = r"""
state_before:
  description: V(enabled) if any port was enabled before, else V(disabled).
  returned: success
  type: str
  sample: enabled
state:
  description: V(enabled) if any port is enabled at the end (predicted in check mode), else V(disabled).
  returned: success
  type: str
  sample: disabled
ports:
  description: Each port.
  returned: success
  type: list
  elements: dict
  contains:
    plug:
      description: The port as given in O(plug).
      type: str
      sample: fc1/1
    index:
      description: The ifIndex (ifmib) or C(module.port) index (cisco_mds) used in the OIDs.
      type: str
      sample: '1'
    oper_status_checked:
      description: Whether the operational status was part of the verification.
      type: bool
      sample: true
    state_before:
      description: V(enabled) or V(disabled) before.
      type: str
      sample: enabled
    state:
      description: V(enabled) or V(disabled) at the end.
      type: str
      sample: disabled
verify_seconds:
  description: Seconds from the first SET until every port read back the wanted state; null when nothing was switched.
  returned: success
  type: float
  sample: 0.02
error:
  description: Error class on failure - auth, privilege, unreachable, rejected, not_found, verify, config.
  returned: failure
  type: str
  sample: not_found
fence:
  description:
    - Evidence of a verified fence, without secrets, for C(noderemedy.core.node_taint).
    - C(verified) is true only when every port was read back disabled during this run.
  returned: always
  type: dict
  contains:
    verified:
      description: Every port was read back disabled.
      type: bool
      sample: true
    method:
      description: Always V(fc).
      type: str
      sample: fc
    target:
      description: The switch as C(host:port).
      type: str
      sample: 127.0.0.1:24011
    plugs:
      description: The ports as given.
      type: list
      elements: str
      sample: [fc1/1]
    state:
      description: V(disabled) when verified, else the last state read (null if none).
      type: str
      sample: disabled
    verified_at:
      description: Epoch seconds of the read-back that verified the ports disabled; null when not verified.
      type: float
      sample: 1763712000.25
"""


from ansible_collections.noderemedy.core.plugins.module_utils._fc_switch import (  # noqa: E402
    FC_ARG_SPEC,
    WORDS,
    FcSwitchDriver,
)
from ansible_collections.noderemedy.core.plugins.module_utils._fence import driver_options  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._fence_module import fence, fencing_module  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._snmp import (  # noqa: E402
    PYSNMP_LIBRARY,
    SNMP_ARG_SPEC,
    SNMP_SECRET_KEYS,
    client_from_params,
)

MODULE_ARG_SPEC = {
    "plug": {"type": "list", "elements": "str", "required": True, "aliases": ["port", "ports"]},
    "state": {"type": "str", "required": True, "choices": ["enabled", "disabled", "status"]},
    **FC_ARG_SPEC,
}

#: module state -> driver action
ACTIONS = {"enabled": "on", "disabled": "off", "status": "status"}


def main() -> None:
    module = fencing_module(SNMP_ARG_SPEC, MODULE_ARG_SPEC, PYSNMP_LIBRARY)
    p = module.params
    driver, res = fence(
        module,
        "fc",
        f"{p['ipaddr']}:{p['ipport']}",
        p["plug"],
        lambda: FcSwitchDriver(client_from_params(p), p["plug"], **driver_options(p, FC_ARG_SPEC)),
        SNMP_SECRET_KEYS,
        lambda d: d.run(ACTIONS[p["state"]], check_mode=module.check_mode),
    )
    result = {
        "changed": res.changed,
        "state_before": WORDS[res.state_before],
        "state": WORDS[res.state_after],
        "ports": driver.port_report(res),
        "verify_seconds": res.verify_seconds,
        "fence": driver.evidence(res, WORDS),
    }
    if module._diff:
        result["diff"] = {
            "before": {"ports": {k: WORDS[v] for k, v in res.before.items()}},
            "after": {"ports": {k: WORDS[v] for k, v in res.after.items()}},
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
