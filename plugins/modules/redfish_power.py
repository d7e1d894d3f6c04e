#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: redfish_power
short_description: Fence a node through its BMC's Redfish service, verified by read-back
version_added: 0.2.0
description:
  - Switches a machine's power with the Redfish C(ComputerSystem.Reset) action (C(ForceOff) for off,
    C(On) for on), as C(fence_redfish) does, and verifies the result by polling the system's
    C(PowerState) until it matches or O(power_timeout) expires.
  - Only C(Off) counts as off and only C(On) as on; C(PoweringOff) and C(PoweringOn) are transitions
    and never final (C(fence_redfish) reports a machine that is still C(PoweringOn) as on).
  - Idempotent - O(state=on) / O(state=off) change nothing when the power already reads back so.
  - Returns a RV(fence) dictionary that later steps (C(noderemedy.core.node_taint)) accept as proof
    of a verified fence.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.redfish
  - noderemedy.core.fence
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    details: Reads the power state, predicts the result, sends no reset.
  diff_mode:
    details: The power state before and after.
options:
  state:
    description:
      - V(off) powers off (C(ForceOff)) and verifies off; V(on) powers on and verifies on (retried,
        see O(retry_on)).
      - V(reboot) is V(off) (verified) then V(on), like C(fence_redfish); the reboot counts as done
        once off is verified (a failed power-on is a warning). Always changed.
      - V(status) only reads the power state.
    type: str
    required: true
    choices: [ 'on', 'off', reboot, status ]
notes:
  - Errors are classified in RV(error) - V(auth) (HTTP 401), V(privilege) (HTTP 403), V(unreachable)
    (no connection, TLS failure), V(not_found) (no such system), V(rejected) (other HTTP errors, a
    reset type the system does not allow), V(verify) (not read back in time), V(config).
seealso:
  - name: fence_redfish
    description: The fence agent this module follows.
    link: https://github.com/ClusterLabs/fence-agents/blob/main/agents/redfish/fence_redfish.py
  - name: Redfish specification (DSP0266) and schema (DSP0268)
    description: ComputerSystem PowerState and the Reset action.
    link: https://www.dmtf.org/standards/redfish
"""

EXAMPLES = r"""
- name: Power off lab-node-0 and verify it is off
  noderemedy.core.redfish_power:
    ipaddr: bmc-0.example.com
    username: admin
    password: "{{ bmc_password }}"
    ca_path: /etc/pki/bmc-ca.crt
    systems_uri: /redfish/v1/Systems/System.Embedded.1
    state: 'off'
  register: fenced

- name: Power on the system named lab-node-1, credentials from a Secret (keys username, password)
  noderemedy.core.redfish_power:
    ipaddr: 10.0.0.20
    plug: lab-node-1
    ssl_insecure: true
    credentials_secret:
      name: lab-bmc-redfish
      namespace: noderemedy
    state: 'on'
"""

RETURN = r"""
power_state_before:
  description: Power read before any reset - V(on), V(off), V(powering_on), V(powering_off) or V(unknown).
  returned: success
  type: str
  sample: 'on'
power_state:
  description: Power read back at the end (predicted in check mode).
  returned: success
  type: str
  sample: 'off'
systems_uri:
  description: URI of the system that was read and switched.
  returned: success
  type: str
  sample: /redfish/v1/Systems/System.Embedded.1
verify_seconds:
  description: Seconds from the first reset until the read-back matched (both halves of a reboot); null when nothing was switched.
  returned: success
  type: float
  sample: 0.52
attempts:
  description: Reset rounds sent for the last phase (power-on may be retried).
  returned: success
  type: int
  sample: 1
error:
  description: Error class on failure - auth, privilege, unreachable, rejected, not_found, verify, config.
  returned: failure
  type: str
  sample: auth
fence:
  description:
    - Evidence of a verified fence, without secrets, for C(noderemedy.core.node_taint) O(noderemedy.core.node_taint#module:fence_evidence).
    - C(verified) is true only when C(PowerState) was read back C(Off) during this run (O(state=off),
      O(state=status) of an off system, or the off half of a reboot).
  returned: always
  type: dict
  contains:
    verified:
      description: The power was read back off.
      type: bool
      sample: true
    method:
      description: Always V(redfish).
      type: str
      sample: redfish
    target:
      description: The BMC as C(host:port).
      type: str
      sample: 127.0.0.1:24015
    plugs:
      description: The system as given (O(systems_uri), else O(plug), else V(system)).
      type: list
      elements: str
      sample: [/redfish/v1/Systems/System.Embedded.1]
    state:
      description: V(off) when verified, else the last power state read (null if none).
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
from ansible_collections.noderemedy.core.plugins.module_utils._redfish import (  # noqa: E402
    REDFISH_ARG_SPEC,
    SUSHY_LIBRARY,
    RedfishDriver,
)

MODULE_ARG_SPEC = {
    **POWER_STATE_ARG_SPEC,
}


def main() -> None:
    module = fencing_module(
        REDFISH_ARG_SPEC,
        MODULE_ARG_SPEC,
        SUSHY_LIBRARY,
        mutually_exclusive=[("systems_uri", "plug"), ("ssl_insecure", "ca_path")],
    )
    p = module.params
    driver, res = fence(
        module,
        "redfish",
        f"{p['ipaddr']}:{p['ipport'] or (443 if p['ssl'] else 80)}",
        [p["systems_uri"] or p["plug"] or "system"],
        lambda: RedfishDriver(**driver_options(p, REDFISH_ARG_SPEC)),
    )
    exit_power(module, driver, res, systems_uri=driver.resolved_uri)


if __name__ == "__main__":
    main()
