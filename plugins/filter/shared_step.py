# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter ``noderemedy.core.shared_step``: what one shared PDU or FC switch call settles of each
of its hosts' fence step, by the fence evidence rule (``fence_evidence``, the one place it lives)
applied to each host's own plug (playbooks/fence_step.yml's first play)."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.noderemedy.core.plugins.filter.fence_evidence import fence_evidence

DOCUMENTATION = r"""
name: shared_step
short_description: What one shared PDU or FC switch call settles of each host's fence step
version_added: 0.1.0
author: noderemedy developers
description:
  - For the hosts of a fence step batch whose first method one M(noderemedy.core.pdu_outlet) or
    M(noderemedy.core.fc_port) call switched for all of them (the runner's extra variable
    C(noderemedy_shared_device)), the hosts whose whole step that call settled, each with its own
    reading and evidence.
  - "A host is listed only when its step is that one method, the call neither failed nor was
    skipped, and the host's own plug read back the state its method asked for. Its C(reading) and
    C(evidence) are those of the filter M(noderemedy.core.fence_evidence#filter) on the host's own
    record (the call's C(fence) naming only the host's plug), as the step's own evidence task would
    choose them."
  - "When the host's run releases workloads (C(release_workloads)) on that evidence, C(release) is
    its entry for M(noderemedy.core.node_release)'s O(noderemedy.core.node_release#module:nodes);
    only a power fence's release is taken here: a host whose release is a storage release
    (C(fenced_storage), C(release_ready_node), or storage-only evidence) is not listed, and runs its
    step on its own."
options:
  _input:
    description: The shared call's registered result (C(fence), C(outlets) or C(ports), C(failed)).
    type: dict
    required: true
  device:
    description: The extra variable C(noderemedy_shared_device) (C(method), C(hosts), C(plugs)).
    type: dict
    required: true
  hostvars:
    description:
      - Ansible's C(hostvars); each host's C(node), C(methods), C(release_workloads),
        C(fence_max_age), C(fenced_storage) and C(release_ready_node) are read.
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Settle the step of each host the shared call served whole
  ansible.builtin.set_fact:
    fence_step_served: "{{ fence_step_shared | noderemedy.core.shared_step(noderemedy_shared_device, hostvars) }}"
  run_once: true

- name: Release them in one call
  noderemedy.core.node_release:
    nodes: "{{ fence_step_served | selectattr('release') | map(attribute='release') | list }}"
    taints: [{key: node.kubernetes.io/out-of-service, value: nodeshutdown, effect: NoExecute}]
    force_delete_pods: true
  run_once: true
"""

RETURN = r"""
_value:
  description:
    - One entry per host settled, C(host), C(node), C(reading) and C(evidence) (as
      M(noderemedy.core.fence_evidence#filter) gives them), and C(release) (C(name), C(fence_evidence),
      C(fence_max_age) when the host sets it; V(null) when the host's run releases nothing).
  type: list
  elements: dict
"""


def _own_read_back(shared: dict[str, Any], plug: str) -> list[Any]:
    """The states the shared call read back for ``plug`` (a pdu_outlet's ``outlets`` or an
    fc_port's ``ports``)."""
    found = shared.get("outlets") or shared.get("ports") or []
    return [p.get("state") for p in found if isinstance(p, dict) and str(p.get("plug")) == plug]


def shared_step(shared: Any, device: Any, hostvars: Any) -> list[dict[str, Any]]:
    """``[{"host", "node", "reading", "evidence", "release"}]``: the hosts of ``device``
    (``noderemedy_shared_device``: ``{"method", "hosts", "plugs"}``) whose whole step the shared
    call ``shared`` settled, by the rule in DOCUMENTATION above. ``hostvars``: host -> its
    variables. Pure.

    Raises AnsibleFilterError when ``device`` has no ``hosts`` list."""
    from ansible.errors import AnsibleFilterError

    hosts = device.get("hosts") if isinstance(device, dict) else None
    if not isinstance(hosts, list):
        raise AnsibleFilterError("shared_step: the shared device has no hosts list")
    if not isinstance(shared, dict) or shared.get("failed") or shared.get("skipped"):
        return []
    out: list[dict[str, Any]] = []
    for host in hosts:
        hv = hostvars[host]
        methods, node = hv.get("methods"), hv.get("node")
        if not isinstance(methods, list) or len(methods) != 1 or not isinstance(methods[0], dict):
            continue
        if not isinstance(node, str) or not node:
            continue
        method = methods[0]
        plug = str(method.get("plug"))
        if _own_read_back(shared, plug) != [method.get("state")]:
            continue
        fence = {"verified": False, **(shared.get("fence") or {}), "plugs": [plug]}
        record = {"name": method.get("name"), "device_type": method.get("device_type"),
                  "action": method.get("action") or "", "fence": fence}  # fmt: skip
        choice = fence_evidence([record])
        release: dict[str, Any] | None = None
        if boolean(hv.get("release_workloads"), strict=False) and choice["evidence"]:
            # the second play would release: here only a power fence's plain taint release
            if choice["reading"].get("kind") != "power_off" or hv.get("fenced_storage"):
                continue
            if boolean(hv.get("release_ready_node"), strict=False):
                continue
            release = {"name": node, "fence_evidence": choice["evidence"]}
            if hv.get("fence_max_age") is not None:
                release["fence_max_age"] = int(hv["fence_max_age"])
        out.append({"host": host, "node": node, "reading": choice["reading"], "evidence": choice["evidence"],
                    "release": release})  # fmt: skip
    return out


class FilterModule:
    """The collection's shared step filter."""

    def filters(self) -> dict[str, Any]:
        """Name -> function, as Ansible's filter loader asks."""
        return {"shared_step": shared_step}
