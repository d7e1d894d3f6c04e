#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_release
short_description: Release the workloads of several fenced nodes in one call, each on its own verified fence
version_added: 0.1.0
description:
  - Adds the O(taints) to every node of O(nodes), as M(noderemedy.core.node_taint) with O(ignore:state=present)
    does for one node, with the same guard for each node on its own. Adding the out-of-service taint
    (C(node.kubernetes.io/out-of-service), effect C(NoExecute); KEP-2268) needs that node to be
    NotReady and that node's own O(nodes[].fence_evidence) to prove a verified power fence no older
    than its O(nodes[].fence_max_age).
  - For the nodes one fence device call fenced together, for example a rack's outlets that one
    M(noderemedy.core.pdu_outlet) call turned off and read back. One module process releases them
    all, where a M(noderemedy.core.node_taint) task costs each node a process of its own.
  - A node that is refused (no or stale evidence, a Ready node, storage-only evidence) or whose API
    calls fail is reported in RV(refused) and in its RV(nodes) entry; the other nodes are released.
    The task fails only when O(nodes) itself is invalid.
  - Storage-only fences (evidence of method V(fc)) are refused here; M(noderemedy.core.node_taint)
    with its O(noderemedy.core.node_taint#module:fenced_storage) releases the pods on fenced storage.
  - "With O(state=absent) the O(taints) are removed from every node instead, as
    M(noderemedy.core.node_taint) with O(ignore:state=absent) does for one: the end of the release
    once the nodes are back. Removing needs no evidence."
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.kube
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Server-side dry run of each node's change; each node's guard runs in check mode too.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  nodes:
    description:
      - The nodes to release, each with its own evidence. A node may appear once.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - Name of the node.
        type: str
        required: true
      fence_evidence:
        description:
          - The C(fence) result of the fencing module that verified this node's fence, naming this
            node's own plug, port or BMC.
          - Needed to add the out-of-service taint (a node without it is refused, V(invalid));
            not used with O(state=absent).
        type: dict
      fence_max_age:
        description:
          - Seconds this node's O(nodes[].fence_evidence) may be old.
        type: int
        default: 300
  taints:
    description:
      - The taints to add to every node, as M(noderemedy.core.node_taint)'s
        O(noderemedy.core.node_taint#module:taints).
    type: list
    elements: dict
    required: true
    suboptions:
      key:
        description:
          - The taint's key, for example V(node.kubernetes.io/out-of-service).
        type: str
        required: true
      value:
        description:
          - The taint's value.
        type: str
        default: ""
      effect:
        description:
          - The taint's effect.
        type: str
        choices: [ NoSchedule, PreferNoSchedule, NoExecute ]
  state:
    description:
      - V(present) adds the O(taints) to every node, each on its own guard; V(absent) removes them.
    type: str
    choices: [ present, absent ]
    default: present
  force_delete_pods:
    description:
      - With O(state=present), after the out-of-service taint, force-delete each released node's pods that do not tolerate
        it, as M(noderemedy.core.node_taint)'s O(noderemedy.core.node_taint#module:force_delete_pods).
    type: bool
    default: false
seealso:
  - module: noderemedy.core.node_taint
  - module: noderemedy.core.pdu_outlet
  - name: Non-graceful node shutdown (KEP-2268)
    description: The out-of-service taint and what the control plane does with it.
    link: https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/#non-graceful-node-shutdown
"""

EXAMPLES = r"""
- name: Turn off the outlets of the rack's failed nodes, read back in one call
  noderemedy.core.pdu_outlet:
    ipaddr: pdu-r12.example.com
    community: "{{ pdu_community }}"
    plug: ["3", "4", "7"]
    state: "off"
  register: outlets

- name: Release each node whose own outlet read back off
  noderemedy.core.node_release:
    nodes:
      - name: worker-3
        fence_evidence: "{{ outlets.fence | combine({'plugs': ['3']}) }}"
      - name: worker-4
        fence_evidence: "{{ outlets.fence | combine({'plugs': ['4']}) }}"
      - name: worker-7
        fence_evidence: "{{ outlets.fence | combine({'plugs': ['7']}) }}"
    taints:
      - key: node.kubernetes.io/out-of-service
        value: nodeshutdown
        effect: NoExecute
    force_delete_pods: true
  register: release

- name: Remove the taint from the rack's nodes once they are back
  noderemedy.core.node_release:
    nodes:
      - name: worker-3
      - name: worker-4
      - name: worker-7
    taints:
      - key: node.kubernetes.io/out-of-service
        value: nodeshutdown
        effect: NoExecute
    state: absent
"""

RETURN = r"""
nodes:
  description:
    - One entry per node of O(nodes), in their order. A released node's entry is
      M(noderemedy.core.node_taint)'s result (C(node), C(changed), C(taints), C(added), C(removed),
      C(fence), C(deleted_pods)); a refused node's has C(node), C(failed) (V(true)), C(reason) (the
      error class, for example V(invalid) or V(conflict)) and C(msg).
  returned: always
  type: list
  elements: dict
  sample: [{node: worker-3, changed: true, added: [{key: node.kubernetes.io/out-of-service, value: nodeshutdown,
            effect: NoExecute}], deleted_pods: [db/db-0]}, {node: worker-4, failed: true, reason: conflict,
            msg: "node worker-4 is Ready"}]
released:
  description: The nodes whose change was done (with O(state=absent), whose taints are gone).
  returned: always
  type: list
  elements: str
refused:
  description: The nodes that were refused or failed.
  returned: always
  type: list
  elements: str
reason:
  description: On failure, the error class (V(invalid) for a node named twice, or a configuration error).
  returned: failed
  type: str
"""

import traceback  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, get_api_client  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._kube_module import kube_module  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._release import RELEASE_ARGSPEC, run_release  # noqa: E402


def main() -> None:
    module = kube_module(RELEASE_ARGSPEC)
    try:
        result = run_release(get_api_client(module.params), module.params, check_mode=module.check_mode)
    except KubeError as exc:
        module.fail_json(msg=exc.message, reason=exc.reason, exception=traceback.format_exc())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
