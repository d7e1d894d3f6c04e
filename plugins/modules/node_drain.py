#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_drain
short_description: Cordon, drain or uncordon a Kubernetes node with kubectl's semantics
version_added: 0.1.0
description:
  - Marks a node unschedulable (O(state=cordon)), schedulable (O(state=uncordon)), or cordons it and
    evicts its pods (O(state=drain)) with the rules of C(kubectl drain) (C(k8s.io/kubectl/pkg/drain)).
  - "Which pods go: DaemonSet pods are never evicted and refuse the drain unless O(ignore_daemonsets);
    mirror (static) pods are skipped; pods with C(emptyDir) volumes need O(delete_emptydir_data);
    pods without a controller need O(force); finished pods (Succeeded, Failed) always go. When a pod
    is refused, nothing is evicted and the error names every refused pod."
  - Evictions run in parallel. An eviction refused with 429 (a PodDisruptionBudget allows no
    disruption now) is retried every 5 seconds until O(timeout). When the eviction API is absent, or
    with O(disable_eviction), pods are deleted instead. Each pod is waited for until it is gone.
  - If a drain fails (refused pods, O(timeout) reached, an API error), a node this task cordoned is
    uncordoned again; pods already evicted stay evicted.
  - Check mode uses the API server's dry run (C(dryRun=All)) for the cordon and every eviction.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.kube.node
  - noderemedy.core.kube
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Server-side dry run; pods blocked by a PodDisruptionBudget are reported in RV(pending).
  diff_mode:
    support: partial
    details: Shows the node's C(spec.unschedulable) before and after; evicted pods are in RV(evicted).
  platform:
    platforms: posix
options:
  state:
    description:
      - V(drain) cordons the node and evicts its pods; V(cordon) only marks it unschedulable;
        V(uncordon) marks it schedulable again.
    type: str
    choices: [ cordon, drain, uncordon ]
    default: drain
  force:
    description:
      - Also delete pods that declare no controller, and DaemonSet pods whose DaemonSet is gone
        (C(kubectl drain --force)).
    type: bool
    default: false
  ignore_daemonsets:
    description:
      - Leave DaemonSet-managed pods in place instead of refusing the drain (C(--ignore-daemonsets)).
    type: bool
    default: false
  delete_emptydir_data:
    description:
      - Also evict pods with C(emptyDir) volumes; their data is lost (C(--delete-emptydir-data)).
    type: bool
    default: false
  disable_eviction:
    description:
      - Delete pods instead of evicting them. This bypasses PodDisruptionBudgets (C(--disable-eviction)).
    type: bool
    default: false
  grace_period:
    description:
      - Seconds each pod gets to terminate. V(-1) keeps each pod's own C(terminationGracePeriodSeconds);
        V(0) deletes the pod at once (C(--grace-period)).
    type: int
    default: -1
  timeout:
    description:
      - Seconds the whole drain may take (evictions, retries after 429 and waiting for pods to be gone).
        V(0) waits forever, as C(kubectl drain) does by default.
    type: int
    default: 300
  skip_wait_for_delete_timeout:
    description:
      - Pods that have been terminating for more than this many seconds are skipped and not waited for,
        for example on a NotReady node whose kubelet will never confirm the deletion
        (C(--skip-wait-for-delete-timeout)). V(0) disables this.
    type: int
    default: 0
  pod_selector:
    description:
      - Label selector; only matching pods are evicted (C(--pod-selector)).
    type: str
    default: ""
notes:
  - Unlike M(kubernetes.core.k8s_drain), a PodDisruptionBudget that refuses an eviction is retried until
    O(timeout), evictions run in parallel, and O(grace_period=0) is honoured.
seealso:
  - module: noderemedy.core.node_taint
  - name: kubectl drain
    description: The command whose semantics this module follows.
    link: https://kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/
"""

EXAMPLES = r"""
- name: Drain a node like kubectl drain --ignore-daemonsets --delete-emptydir-data
  noderemedy.core.node_drain:
    name: worker-3
    ignore_daemonsets: true
    delete_emptydir_data: true
    timeout: 600

- name: Evict only the web pods, deleting them at once
  noderemedy.core.node_drain:
    name: worker-3
    pod_selector: app=web
    grace_period: 0

- name: Put the node back into service
  noderemedy.core.node_drain:
    name: worker-3
    state: uncordon
"""

RETURN = r"""
node:
  description: Name of the node.
  returned: always
  type: str
  sample: worker-3
cordoned:
  description: Whether this task cordoned the node (false if it already was, or after a failed drain undid it).
  returned: state is drain
  type: bool
unschedulable:
  description: The node's C(spec.unschedulable) after the task.
  returned: state is cordon or uncordon
  type: bool
method:
  description: How pods were removed, V(eviction) or V(delete).
  returned: state is drain
  type: str
  sample: eviction
evicted:
  description: Pods (C(namespace/name)) evicted or deleted and gone; in check mode, those the dry run accepted.
  returned: state is drain
  type: list
  elements: str
  sample: [web/web-7d4b9c-xk2p9]
skipped_pods:
  description: Pods left on the node on purpose, with the reason.
  returned: state is drain
  type: list
  elements: dict
  sample: [{pod: kube-system/kube-proxy-abcde, reason: ignoring DaemonSet-managed Pods}]
pending:
  description: Pods still on the node when the task ended, with the reason (refused, blocked by a
    PodDisruptionBudget, still terminating).
  returned: state is drain
  type: list
  elements: dict
  sample: [{pod: db/db-0, reason: "eviction refused, retried until the end: Cannot evict pod as it would violate the pod's disruption budget."}]
warnings:
  description: kubectl's warnings, for example pods with local storage that were deleted.
  returned: state is drain
  type: list
  elements: str
retries:
  description: Evictions refused with 429 (a PodDisruptionBudget allowing no disruption) and tried again.
  returned: state is drain
  type: int
  sample: 3
elapsed:
  description: Seconds the drain took.
  returned: state is drain
  type: float
reason:
  description: On failure, the error class (not_found, forbidden, unreachable, timeout, invalid, ...).
  returned: failed
  type: str
"""

import traceback  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._drain import (  # noqa: E402
    DRAIN_ARGSPEC,
    DrainError,
    run_node_drain,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, get_api_client  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._kube_module import exit_with_diff, kube_module  # noqa: E402


def main() -> None:
    module = kube_module(DRAIN_ARGSPEC)
    try:
        result = run_node_drain(get_api_client(module.params), module.params, check_mode=module.check_mode)
    except KubeError as exc:
        extra = exc.result.to_dict() if isinstance(exc, DrainError) else {"node": module.params["name"]}
        extra.setdefault("changed", False)
        module.fail_json(msg=exc.message, reason=exc.reason, exception=traceback.format_exc(), **extra)
    exit_with_diff(module, result)


if __name__ == "__main__":
    main()
