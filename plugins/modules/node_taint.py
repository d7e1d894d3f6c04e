#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_taint
short_description: Add or remove Kubernetes node taints; the out-of-service taint only after a verified fence
version_added: 0.1.0
description:
  - Adds (O(state=present)) or removes (O(state=absent)) taints on a node. A taint is identified by
    its key and effect, as with C(kubectl taint); adding one with the same key and effect replaces its value.
  - "Adding the out-of-service taint (C(node.kubernetes.io/out-of-service), effect C(NoExecute);
    KEP-2268, non-graceful node shutdown) is guarded: the module refuses unless the node is NotReady
    (condition C(Ready) is C(False) or C(Unknown)) and O(fence_evidence) proves a verified fence no
    older than O(fence_max_age). The control plane then deletes the node's pods and detaches their
    volumes without waiting for the kubelet, so a node that is still running must never get it."
  - "A storage-only fence (O(fence_evidence) of method V(fc): the node's FC switch ports read back
    disabled) never adds the out-of-service taint: a partitioned node may still run the pods that use
    no fenced storage, and the taint would start their copies elsewhere. Only a power fence (or an
    admin's confirmation) licenses it. With such evidence the module adds the other O(taints), and
    with O(force_delete_pods) force-deletes only the node's pods with a volume on O(fenced_storage)
    (result RV(kept_pods) lists the others). Without O(fenced_storage) it refuses."
  - With O(wait), after adding the out-of-service taint the module waits until the node's pods are gone
    and its VolumeAttachments released, and returns what it waited for.
  - Removing the out-of-service taint (recovery, after the node is back) is not guarded.
  - Writes carry the node's C(resourceVersion); a concurrent change is re-read and retried.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.kube.node
  - noderemedy.core.kube
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Server-side dry run of the change; the out-of-service guard runs in check mode too; no waiting.
  diff_mode:
    support: full
    details: The node's taints before and after.
  platform:
    platforms: posix
options:
  state:
    description:
      - V(present) adds the taints, V(absent) removes them.
    type: str
    choices: [ present, absent ]
    default: present
  taints:
    description:
      - The taints to add or remove.
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
          - The taint's value; the KEP-2268 examples use V(nodeshutdown).
        type: str
        default: ""
      effect:
        description:
          - The taint's effect. Required with O(state=present); with O(state=absent) and no effect,
            every effect of the key is removed.
        type: str
        choices: [ NoSchedule, PreferNoSchedule, NoExecute ]
  fence_evidence:
    description:
      - Proof of a verified fence, required to add the out-of-service taint. Pass the C(fence) result of a
        C(noderemedy.core) fencing module, a dictionary with C(verified), C(method), C(target), C(state)
        and C(verified_at).
      - It must have C(verified=true), C(method) V(ipmi), V(redfish), V(aws), V(vmware) or V(pdu) with
        C(state=off), V(kdump) with C(state=kdump), or V(fc) with C(state=disabled) (a storage-only fence,
        see O(fenced_storage)), a C(target), and C(verified_at) (epoch seconds) at most O(fence_max_age) ago.
      - C(method=admin) with C(state=confirmed-down) is an admin's confirmation that the machine is down,
        checked by hand (Pacemaker's C(stonith_admin --confirm)); noderemedy-runner passes it only for a
        NodeFence an admin annotated, and records the act in an Event.
    type: dict
  fence_max_age:
    description:
      - Seconds a fence verification stays valid for adding the out-of-service taint.
    type: int
    default: 300
  force_delete_pods:
    description:
      - With the out-of-service taint, force-delete (grace period 0, as C(kubectl delete pod --force
        --grace-period=0)) the node's pods that do not tolerate it. The pod garbage collector does the
        same on its next pass (every 20 s); this releases them at once, so their StatefulSet
        replacements start that much sooner.
      - Guarded like the taint itself (node NotReady, valid O(fence_evidence)), also when the taint
        was already present. Each delete is preconditioned on the pod's uid.
    type: bool
    default: false
  fenced_storage:
    description:
      - The storage the node reaches only through the fenced FC ports, for a storage-only fence
        (O(fence_evidence) of method V(fc)). A pod whose volume matches one entry (any of its keys)
        is on fenced storage. A claim's volume is matched through its bound PersistentVolume.
    type: list
    elements: dict
    suboptions:
      csi_driver:
        description:
          - A CSI driver's name (C(spec.csi.driver) of the PersistentVolume, or of an inline CSI volume).
        type: str
      storage_class:
        description:
          - A StorageClass name (C(spec.storageClassName) of the PersistentVolume).
        type: str
      host_path:
        description:
          - "A host directory (a SAN file system mounted on the node): C(hostPath) volumes at or below it."
        type: path
      fc:
        description:
          - The in-tree Fibre Channel volume source (C(spec.fc) of the PersistentVolume).
        type: bool
  release_ready_node:
    description:
      - With storage-only O(fence_evidence) (method V(fc)), release the pods on O(fenced_storage) also
        when the node is Ready. A storage fence stops everything the node reaches through the fenced
        ports whether its kubelet runs or not; this is for a node that is unhealthy by another
        condition than Ready (for example V(DiskPressure), or node-problem-detector's V(KernelDeadlock)).
      - Never for the out-of-service taint, which stays for a NotReady node (KEP-2268).
    type: bool
    default: false
  wait:
    description:
      - After adding the out-of-service taint, wait until the node's pods (those not tolerating the
        taint) are gone and no VolumeAttachment names the node.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait with O(wait).
    type: int
    default: 300
seealso:
  - module: noderemedy.core.node_drain
  - name: Non-graceful node shutdown (KEP-2268)
    description: The out-of-service taint and what the control plane does with it.
    link: https://kubernetes.io/docs/concepts/cluster-administration/node-shutdown/#non-graceful-node-shutdown
"""

EXAMPLES = r"""
- name: Keep new pods off a node
  noderemedy.core.node_taint:
    name: worker-3
    taints:
      - key: maintenance
        value: disk
        effect: NoSchedule

- name: Power the node off through its BMC, verified by read-back
  noderemedy.core.ipmi_power:
    ipaddr: "{{ bmc_address }}"
    username: admin
    password: "{{ bmc_password }}"
    state: "off"
  register: power

- name: Release the node's workloads (pods force-deleted, volumes detached)
  noderemedy.core.node_taint:
    name: worker-3
    taints:
      - key: node.kubernetes.io/out-of-service
        value: nodeshutdown
        effect: NoExecute
    fence_evidence: "{{ power.fence }}"
    force_delete_pods: true
    wait: true
    wait_timeout: 600

- name: After the node is back, remove the taint
  noderemedy.core.node_taint:
    name: worker-3
    state: absent
    taints:
      - key: node.kubernetes.io/out-of-service
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
taints:
  description: The node's taints after the task.
  returned: success
  type: list
  elements: dict
  sample: [{key: node.kubernetes.io/out-of-service, value: nodeshutdown, effect: NoExecute,
            timeAdded: "2026-11-21T09:00:00Z"}]
added:
  description: Taints this task added.
  returned: success
  type: list
  elements: dict
removed:
  description: Taints this task removed (or replaced).
  returned: success
  type: list
  elements: dict
fence:
  description: The accepted fence evidence, with C(age) in seconds.
  returned: when the out-of-service taint was added
  type: dict
  sample: {verified: true, method: ipmi, target: "127.0.0.1:24100", state: "off", verified_at: 1795000000, age: 4.2}
deleted_pods:
  description: The pods (C(namespace/name)) force-deleted with O(force_delete_pods); with a storage-only
    fence, those on O(fenced_storage).
  returned: when O(force_delete_pods) and the out-of-service taint is wanted, not in check mode
  type: list
  elements: str
  sample: [demo/web-0]
kept_pods:
  description: With the evidence of a storage-only fence, the node's pods (C(namespace/name)) left
    running because none of their volumes is on O(fenced_storage).
  returned: when O(force_delete_pods) with storage-only fence evidence, not in check mode
  type: list
  elements: str
  sample: [demo/cache-0]
released:
  description: V(fenced_storage) when the evidence was a storage-only fence (no out-of-service taint added).
  returned: with storage-only fence evidence
  type: str
  sample: fenced_storage
waited:
  description: What the task waited for with O(wait) - C(pods) (C(namespace/name)) and C(volume_attachments)
    that were bound to the node and are now gone, and C(seconds).
  returned: when O(wait) and the out-of-service taint is wanted, not in check mode
  type: dict
  sample: {pods: [db/db-0], volume_attachments: [csi-0a1b2c], seconds: 12.5}
reason:
  description: On failure, the error class (not_found, forbidden, unreachable, timeout, invalid, conflict, ...).
  returned: failed
  type: str
"""

import traceback  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, get_api_client  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._kube_module import exit_with_diff, kube_module  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._taint import TAINT_ARGSPEC, run_node_taint  # noqa: E402


def main() -> None:
    module = kube_module(TAINT_ARGSPEC)
    try:
        result = run_node_taint(get_api_client(module.params), module.params, check_mode=module.check_mode)
    except KubeError as exc:
        module.fail_json(
            msg=exc.message, reason=exc.reason, node=module.params["name"], exception=traceback.format_exc()
        )
    exit_with_diff(module, result)


if __name__ == "__main__":
    main()
