#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: aws_instance_power
short_description: Fence a node that is an AWS EC2 instance (stop / start), verified by read-back
version_added: 0.2.0
description:
  - Stops (C(StopInstances) with C(Force=true), as C(fence_aws) does) or starts an EC2 instance and
    verifies the result by polling C(DescribeInstances) until the instance is C(stopped) /
    C(running) or O(power_timeout) expires.
  - C(stopping) and C(pending) are transitions and never final; C(shutting-down) and C(terminated)
    are reported as V(terminated), never as off.
  - The instance comes from O(plug), from a C(spec.providerID) (O(provider_id)), or from the
    Node named by O(node), whose C(spec.providerID) the module reads itself.
  - Idempotent - O(state=on) / O(state=off) change nothing when the instance already reads back so.
  - Returns a RV(fence) dictionary that later steps (C(noderemedy.core.node_taint)) accept as proof
    of a verified fence.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.aws
  - noderemedy.core.fence
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    details: Reads the instance state, predicts the result, sends no stop or start.
  diff_mode:
    details: The power state before and after.
options:
  state:
    description:
      - V(off) stops the instance (forced) and verifies C(stopped); V(on) starts it and verifies
        C(running) (retried, see O(retry_on)).
      - V(reboot) is V(off) (verified) then V(on) - the node remedy seed's C(restart-instance). The
        reboot counts as done once off is verified (a failed start is a warning). Always changed.
      - V(status) only reads the instance state.
    type: str
    required: true
    choices: [ 'on', 'off', reboot, status ]
notes:
  - The credentials need C(ec2:DescribeInstances), C(ec2:StopInstances) and C(ec2:StartInstances).
  - Errors are classified in RV(error) - V(auth) (AuthFailure, bad signature), V(privilege)
    (UnauthorizedOperation), V(not_found) (no such instance), V(unreachable), V(rejected) (any
    other EC2 error), V(verify) (not read back in time), V(config).
  - Unlike C(fence_aws), the module never asks the instance metadata service for the instance it
    runs on, so it fences from anywhere (a pod, an admin's laptop).
seealso:
  - name: fence_aws
    description: The fence agent this module follows.
    link: https://github.com/ClusterLabs/fence-agents/blob/main/agents/aws/fence_aws.py
"""

EXAMPLES = r"""
- name: Stop the instance behind a Node and verify it is stopped
  noderemedy.core.aws_instance_power:
    provider_id: "{{ node.spec.providerID }}"
    credentials_secret:
      name: aws-fencing
      namespace: noderemedy
    state: 'off'
  register: fenced

- name: Start an instance again (keys from the environment)
  noderemedy.core.aws_instance_power:
    region: eu-west-1
    plug: i-0123456789abcdef0
    state: 'on'
"""

RETURN = r"""
power_state_before:
  description: State read before any request - V(on), V(off), V(powering_on), V(powering_off) or V(terminated).
  returned: success
  type: str
  sample: 'on'
power_state:
  description: State read back at the end (predicted in check mode).
  returned: success
  type: str
  sample: 'off'
instance_id:
  description: The instance that was read and switched.
  returned: success
  type: str
  sample: i-0123456789abcdef0
verify_seconds:
  description: Seconds from the first request until the read-back matched (both halves of a reboot); null when nothing was switched.
  returned: success
  type: float
  sample: 0.52
attempts:
  description: Request rounds sent for the last phase (start may be retried).
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
    - C(verified) is true only when the instance was read back C(stopped) during this run.
  returned: always
  type: dict
  contains:
    verified:
      description: The instance was read back stopped.
      type: bool
      sample: true
    method:
      description: Always V(aws).
      type: str
      sample: aws
    target:
      description: The EC2 endpoint as C(host:port).
      type: str
      sample: ec2.eu-west-1.amazonaws.com:443
    plugs:
      description: The instance ID.
      type: list
      elements: str
      sample: [i-0123456789abcdef0]
    state:
      description: V(off) when verified, else the last state read (null if none).
      type: str
      sample: 'off'
    verified_at:
      description: Epoch seconds of the read-back that verified off; null when not verified.
      type: float
      sample: 1763712000.25
"""


from ansible_collections.noderemedy.core.plugins.module_utils._aws import (  # noqa: E402
    AWS_ARG_SPEC,
    BOTO3_LIBRARY,
    AwsInstanceDriver,
    instance_from_provider_id,
    provider_id_of_node,
    region_of_zone,
)
from ansible_collections.noderemedy.core.plugins.module_utils._fence import (  # noqa: E402
    POWER_STATE_ARG_SPEC,
    driver_options,
    unverified,
)
from ansible_collections.noderemedy.core.plugins.module_utils._fence_module import (  # noqa: E402
    exit_power,
    fence,
    fencing_module,
)
from ansible_collections.noderemedy.core.plugins.module_utils._secret import apply_credentials_secret  # noqa: E402

#: Secret key -> option, for ``credentials_secret``.
SECRET_KEYS = {"access_key": "access_key", "secret_key": "secret_key"}

MODULE_ARG_SPEC = {
    **POWER_STATE_ARG_SPEC,
}


def main() -> None:
    module = fencing_module(
        AWS_ARG_SPEC,
        MODULE_ARG_SPEC,
        BOTO3_LIBRARY,
        mutually_exclusive=[("plug", "provider_id", "node")],
        required_one_of=[("plug", "provider_id", "node")],
    )
    p = module.params
    target = (p["endpoint_url"] or "ec2").split("://")[-1]

    def build() -> AwsInstanceDriver:
        instance, region, provider_id = p["plug"], p["region"], p["provider_id"]
        if p["node"]:
            ref = p["credentials_secret"] or {}
            provider_id = provider_id_of_node(p["node"], ref.get("kubeconfig"), ref.get("context"))
        if provider_id:
            zone, instance = instance_from_provider_id(provider_id)
            region = region or region_of_zone(zone)
        # The Secret is read once the instance is known, so a failure names it.
        apply_credentials_secret(module, SECRET_KEYS, unverified("aws", target, [instance]))
        return AwsInstanceDriver(
            instance_id=instance,
            region=region,
            access_key=p["access_key"],
            secret_key=p["secret_key"],
            endpoint_url=p["endpoint_url"],
            **driver_options(p),
        )

    driver, res = fence(module, "aws", target, [p["plug"] or p["provider_id"] or p["node"]], build, None)
    exit_power(module, driver, res, instance_id=driver.instance_id)


if __name__ == "__main__":
    main()
