#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: ipmi_power
short_description: Fence a node through its BMC (IPMI chassis power), verified by read-back
version_added: 0.1.0
description:
  - Switches a machine's chassis power through its BMC over IPMI 2.0 RMCP+ (lanplus) and verifies
    the result by polling the BMC's power state until it matches or O(power_timeout) expires, as
    C(fence_ipmilan) does with C(--method=onoff), but without its one-second poll.
  - The same IPMI commands as C(fence_ipmilan) (C(ipmitool chassis power)) are sent, so any BMC that
    works with it works here. Every session is logged out, also on errors.
  - Idempotent - O(state=on) / O(state=off) change nothing when the power already reads back so.
  - Returns a RV(fence) dictionary that later steps (C(noderemedy.core.node_taint)) accept as proof
    of a verified fence.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.ipmi
  - noderemedy.core.fence
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    details: Logs in and reads the power state, predicts the result, sends no power command.
  diff_mode:
    details: The power state before and after.
options:
  state:
    description:
      - V(off) powers off and verifies off; V(on) powers on and verifies on (retried, see O(retry_on)).
      - V(reboot) with O(method=onoff) is V(off) (verified) then V(on), like C(fence_ipmilan); the
        reboot counts as done once off is verified (a failed power-on is a warning). Always changed.
      - V(status) only reads the power state.
    type: str
    required: true
    choices: [ 'on', 'off', reboot, status ]
  method:
    description:
      - How O(state=reboot) is done (fence_ipmilan C(--method)). V(onoff) is verified.
      - V(cycle) sends one IPMI power-cycle command and does NOT verify anything (the BMC cycles
        on its own; the node may never have been off). RV(fence.verified) is then false.
    type: str
    choices: [ onoff, cycle ]
    default: onoff
notes:
  - pyghmi picks cipher suites itself; the module restricts it to the one in O(cipher) and refuses
    the session otherwise. See C(plugins/module_utils/_ipmi.py) for how.
  - Errors are classified in RV(error) - V(auth) (wrong user or password), V(privilege) (for example a
    O(privlvl=user) session), V(unreachable) (nothing listens at the address and port), V(timeout) (no
    answer within O(power_timeout), as from a BMC that is hung, busy or without power), V(rejected), V(verify)
    (not read back in time), V(config).
seealso:
  - name: fence_ipmilan
    description: The fence agent this module follows.
    link: https://github.com/ClusterLabs/fence-agents/blob/main/agents/ipmilan/fence_ipmilan.py
"""

EXAMPLES = r"""
- name: Power off lab-node-0 and verify it is off
  noderemedy.core.ipmi_power:
    ipaddr: 10.0.0.10
    username: admin
    password: "{{ bmc_password }}"
    cipher: 3
    state: 'off'
  register: fenced

- name: Power off with the credentials of a Kubernetes Secret (keys username, password)
  noderemedy.core.ipmi_power:
    ipaddr: 10.0.0.10
    credentials_secret:
      name: lab-node-0-bmc
      namespace: noderemedy
    state: 'off'

- name: Credentials once for every fencing module
  module_defaults:
    group/noderemedy.core.fencing:
      power_timeout: 30
  block:
    - name: Reboot through the BMC (off verified, then on)
      noderemedy.core.ipmi_power:
        ipaddr: 10.0.0.11
        state: reboot
      environment:
        NODEREMEDY_IPMI_USERNAME: admin
        NODEREMEDY_IPMI_PASSWORD: "{{ bmc_password }}"
"""

RETURN = r"""
power_state_before:
  description: Chassis power read before any command, V(on) or V(off).
  returned: success
  type: str
  sample: 'on'
power_state:
  description: Chassis power read back at the end (predicted in check mode; after O(method=cycle) the state read before).
  returned: success
  type: str
  sample: 'off'
verify_seconds:
  description: Seconds from the first power command until the read-back matched (both halves of a reboot); null when nothing was switched.
  returned: success
  type: float
  sample: 0.012
attempts:
  description: Power-command rounds sent for the last phase (power-on may be retried).
  returned: success
  type: int
  sample: 1
error:
  description: Error class on failure - auth, privilege, unreachable, timeout, rejected, not_found, verify, config.
  returned: failure
  type: str
  sample: auth
fence:
  description:
    - Evidence of a verified fence, without secrets, for C(noderemedy.core.node_taint) O(noderemedy.core.node_taint#module:fence_evidence).
    - C(verified) is true only when the power was read back V(off) during this run (O(state=off),
      O(state=status) of an off machine, or the off half of a reboot).
  returned: always
  type: dict
  contains:
    verified:
      description: The power was read back off.
      type: bool
      sample: true
    method:
      description: Always V(ipmi).
      type: str
      sample: ipmi
    target:
      description: The BMC as C(host:port).
      type: str
      sample: 127.0.0.1:24100
    plugs:
      description: Always V([chassis]).
      type: list
      elements: str
      sample: [chassis]
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
from ansible_collections.noderemedy.core.plugins.module_utils._ipmi import (  # noqa: E402
    IPMI_ARG_SPEC,
    PYGHMI_LIBRARY,
    IpmiDriver,
)

MODULE_ARG_SPEC = {
    **POWER_STATE_ARG_SPEC,
    "method": {"type": "str", "default": "onoff", "choices": ["onoff", "cycle"]},
}


def main() -> None:
    module = fencing_module(IPMI_ARG_SPEC, MODULE_ARG_SPEC, PYGHMI_LIBRARY)
    p = module.params
    cycle = p["state"] == "reboot" and p["method"] == "cycle"
    driver, res = fence(
        module,
        "ipmi",
        f"{p['ipaddr']}:{p['ipport']}",
        ["chassis"],
        lambda: IpmiDriver(**driver_options(p, IPMI_ARG_SPEC)),
        run=(lambda d: d.cycle(check_mode=module.check_mode)) if cycle else None,
    )
    if not cycle:
        exit_power(module, driver, res)
        return
    result = {
        "changed": True,
        "power_state_before": res["before"],
        "power_state": res["before"],
        "verify_seconds": None,
        "attempts": 1 if res["sent"] else 0,
        "fence": driver.evidence(None),
    }
    module.warn("method=cycle is not verified: the node may never have been off")
    if module._diff:
        result["diff"] = {"before": {"power": res["before"]}, "after": {"power": "on"}}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
