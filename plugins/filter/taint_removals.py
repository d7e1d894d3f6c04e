# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter ``noderemedy.core.taint_removals``: the nodes of a play's hosts that ask for the
out-of-service taint's removal, as ``noderemedy.core.node_release`` entries, so that one module
call removes the taint of a whole batch of recovered nodes (playbooks/out_of_service_taint.yml)."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: taint_removals
short_description: The nodes of a play's hosts whose taint is to be removed, as node_release entries
version_added: 0.1.0
author: noderemedy developers
description:
  - For the hosts of an C(out_of_service_taint.yml) run (one per node, the runner's batch), the
    C(node) of each host whose C(state) is V(absent), as an entry of
    M(noderemedy.core.node_release)'s O(noderemedy.core.node_release#module:nodes). A host without
    C(state) adds the taint, and is not listed.
options:
  _input:
    description: The play's hosts, for example C(ansible_play_hosts).
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars); each host's C(node) and C(state) are read.
    type: raw
    required: true
"""

EXAMPLES = r"""
# every host of the play that asks for the removal (state=absent), in one module call
- name: Remove the taint in one call
  noderemedy.core.node_release:
    state: absent
    nodes: "{{ ansible_play_hosts | noderemedy.core.taint_removals(hostvars) }}"
    taints:
      - {key: node.kubernetes.io/out-of-service, value: nodeshutdown, effect: NoExecute}
  run_once: true
"""

RETURN = r"""
_value:
  description: One C({name}) per host whose C(state) is V(absent), in the hosts' order; a node once.
  type: list
  elements: dict
"""


def taint_removals(hosts: Any, hostvars: Any) -> list[dict[str, str]]:
    """``[{"name": node}]`` for each of ``hosts`` whose variable ``state`` is ``absent``, in their
    order, each node once. ``hostvars``: host -> its variables. Pure.

    Raises AnsibleFilterError when ``hosts`` is not a list or such a host has no ``node`` string."""
    from ansible.errors import AnsibleFilterError

    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("taint_removals: the input must be a list of hosts")
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for host in hosts:
        hv = hostvars[host]
        if hv.get("state") != "absent":
            continue
        node = hv.get("node")
        if not isinstance(node, str) or not node:
            raise AnsibleFilterError(f"taint_removals: host {host!r} has no node")
        if node not in seen:
            seen.add(node)
            out.append({"name": node})
    return out


class FilterModule:
    """The collection's taint removal filter."""

    def filters(self) -> dict[str, Any]:
        """Name -> function, as Ansible's filter loader asks."""
        return {"taint_removals": taint_removals}
