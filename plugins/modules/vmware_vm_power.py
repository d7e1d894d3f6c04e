#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vmware_vm_power
short_description: Fence a node that is a vSphere VM (hard power off / on), verified by read-back
version_added: 0.2.0
description:
  - Powers a VM off (C(PowerOffVM_Task), a hard power-off) or on (C(PowerOnVM_Task)) through vCenter
    or ESXi, as C(fence_vmware_soap) does, and verifies the result by polling the VM's
    C(runtime.powerState) until it matches or O(power_timeout) expires.
  - A C(suspended) VM is not off (it resumes with its memory); C(fence_vmware_soap) reports it off.
  - Idempotent - O(state=on) / O(state=off) change nothing when the VM already reads back so.
  - Returns a RV(fence) dictionary that later steps (C(noderemedy.core.node_taint)) accept as proof
    of a verified fence.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.vmware
  - noderemedy.core.fence
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    details: Logs in and reads the power state, predicts the result, starts no task.
  diff_mode:
    details: The power state before and after.
options:
  state:
    description:
      - V(off) powers off and verifies C(poweredOff); V(on) powers on and verifies C(poweredOn)
        (retried, see O(retry_on)).
      - V(reboot) is V(off) (verified) then V(on); done once off is verified (a failed power-on is a
        warning). Always changed.
      - V(status) only reads the power state.
    type: str
    required: true
    choices: [ 'on', 'off', reboot, status ]
notes:
  - The user needs the privileges C(VirtualMachine.Interact.PowerOff) and C(VirtualMachine.Interact.PowerOn).
  - Errors are classified in RV(error) - V(auth) (InvalidLogin), V(privilege) (NoPermission),
    V(unreachable) (no connection, TLS failure), V(not_found) (no such VM), V(rejected) (other task
    faults), V(verify) (not read back in time), V(config).
seealso:
  - name: fence_vmware_soap
    description: The fence agent this module follows.
    link: https://github.com/ClusterLabs/fence-agents/blob/main/agents/vmware_soap/fence_vmware_soap.py
"""

EXAMPLES = r"""
- name: Power off the VM behind worker-3 and verify it is off
  noderemedy.core.vmware_vm_power:
    ipaddr: vcenter.example.com
    plug: worker-3
    ca_path: /etc/pki/vcenter-ca.crt
    credentials_secret:
      name: vcenter-fencing
      namespace: noderemedy
    state: 'off'
  register: fenced
"""

RETURN = r"""
power_state_before:
  description: Power read before any task - V(on), V(off) or V(suspended).
  returned: success
  type: str
  sample: 'on'
power_state:
  description: Power read back at the end (predicted in check mode).
  returned: success
  type: str
  sample: 'off'
verify_seconds:
  description: Seconds from the first power task until the read-back matched (both halves of a reboot); null when nothing was switched.
  returned: success
  type: float
  sample: 0.52
attempts:
  description: Power-task rounds sent for the last phase (power-on may be retried).
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
    - C(verified) is true only when C(runtime.powerState) was read back C(poweredOff) during this run.
  returned: always
  type: dict
  contains:
    verified:
      description: The VM was read back powered off.
      type: bool
      sample: true
    method:
      description: Always V(vmware).
      type: str
      sample: vmware
    target:
      description: vCenter or ESXi as C(host:port).
      type: str
      sample: vcenter.example.com:443
    plugs:
      description: The VM as given in O(plug).
      type: list
      elements: str
      sample: [worker-3]
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
from ansible_collections.noderemedy.core.plugins.module_utils._vmware import (  # noqa: E402
    PYVMOMI_LIBRARY,
    VMWARE_ARG_SPEC,
    VmwareVmDriver,
)

MODULE_ARG_SPEC = {
    **POWER_STATE_ARG_SPEC,
}


def main() -> None:
    module = fencing_module(
        VMWARE_ARG_SPEC,
        MODULE_ARG_SPEC,
        PYVMOMI_LIBRARY,
        mutually_exclusive=[("ssl_insecure", "ca_path")],
    )
    p = module.params
    driver, res = fence(
        module,
        "vmware",
        f"{p['ipaddr']}:{p['ipport']}",
        [p["plug"]],
        lambda: VmwareVmDriver(**driver_options(p, VMWARE_ARG_SPEC)),
    )
    exit_power(module, driver, res)


if __name__ == "__main__":
    main()
