#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: kdump_wait
short_description: Wait for a crashed node's kdump message (fence_kdump), a fence without power
version_added: 0.2.0
description:
  - Listens for the UDP message that C(fence_kdump_send) sends from a node's kdump crash kernel, as
    fence-agents' C(fence_kdump) does. A valid message (magic number and version of the
    C(fence_kdump) protocol) from one of the node's addresses proves the node runs its crash kernel,
    so none of its workloads runs - RV(fence.verified) is then true, with C(method=kdump) and
    C(state=kdump), and C(noderemedy.core.node_taint) accepts it for workload release.
  - Without a message within O(timeout) seconds the module does not fail - RV(fence.verified) is
    false - so a fence step goes on with its power methods (the node remedy seed's kdump
    integration - release on the kdump message, power management after the timeout).
  - Never changes anything (C(changed) is always false).
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.fence.kdump
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Listens as without check mode (nothing is changed either way).
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - The node's kdump configuration must name the host that runs this module, for example in
    C(/etc/kdump.conf) C(fence_kdump_nodes <host>) and C(fence_kdump_args -p 7410 -i 1).
  - Fails (RV(error)) only for bad options (V(config)) or a port that cannot be bound (V(unreachable)).
seealso:
  - name: fence_kdump
    description: The fence agent this module follows.
    link: https://github.com/ClusterLabs/fence-agents/tree/main/agents/kdump
"""

EXAMPLES = r"""
- name: Wait up to 60 s for worker-3's kdump kernel
  noderemedy.core.kdump_wait:
    nodename: [worker-3, 10.0.0.23]
    timeout: 60
  register: kdump
  when: kdump.fence.verified
"""

RETURN = r"""
received:
  description: A valid kdump message arrived from the node.
  returned: success
  type: bool
  sample: true
source:
  description: The address the message came from; null without one.
  returned: success
  type: str
  sample: 10.0.0.23
waited:
  description: Seconds waited.
  returned: success
  type: float
  sample: 1.02
ignored:
  description: Datagrams ignored while waiting - their source address and why.
  returned: success
  type: list
  elements: dict
  sample: [{source: 10.0.0.99, reason: not an address of the node}]
error:
  description: Error class on failure - config, unreachable.
  returned: failure
  type: str
  sample: unreachable
fence:
  description:
    - Evidence for C(noderemedy.core.node_taint) O(noderemedy.core.node_taint#module:fence_evidence).
  returned: always
  type: dict
  contains:
    verified:
      description: The node's kdump message arrived.
      type: bool
      sample: true
    method:
      description: Always V(kdump).
      type: str
      sample: kdump
    target:
      description: The listening address as C(host:port).
      type: str
      sample: 0.0.0.0:7410
    plugs:
      description: The node's names, as O(nodename).
      type: list
      elements: str
      sample: [worker-3]
    state:
      description: V(kdump) when verified, else null.
      type: str
      sample: kdump
    verified_at:
      description: Epoch seconds the message arrived; null when not verified.
      type: float
      sample: 1763712000.25
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._fence import FenceError, failure, unverified  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._kdump import (  # noqa: E402
    KDUMP_ARG_SPEC,
    KdumpListener,
)


def main() -> None:
    module = AnsibleModule(argument_spec=dict(KDUMP_ARG_SPEC), supports_check_mode=True)
    p = module.params
    fallback = unverified("kdump", f"{p['listen_address'] or ''}:{p['ipport']}", list(p["nodename"] or []))
    try:
        listener = KdumpListener(
            p["nodename"],
            ipport=p["ipport"],
            family=p["family"],
            listen_address=p["listen_address"],
            timeout=p["timeout"],
        )
        out = listener.wait()
    except FenceError as exc:
        module.fail_json(**failure(exc, fallback))
    if not out["received"]:
        module.warn(f"no kdump message from {', '.join(p['nodename'])} within timeout={p['timeout']:g}s")
    module.exit_json(
        changed=False,
        received=out["received"],
        source=out["source"],
        waited=round(out["waited"], 3),
        ignored=[{"source": s, "reason": r} for s, r in listener.ignored],
        fence=out["fence"],
    )


if __name__ == "__main__":
    main()
