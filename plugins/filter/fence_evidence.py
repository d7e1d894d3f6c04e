# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter ``noderemedy.core.fence_evidence``: which read-back of one fence step run is a
verified fence (the one place that rule lives; roles/fence_step/tasks/evidence.yml applies it)."""

from __future__ import annotations

from typing import Any

DOCUMENTATION = r"""
name: fence_evidence
short_description: Choose a fence step run's evidence of a verified fence from its read-backs
version_added: 0.1.0
author: noderemedy developers
description:
  - The rule behind the one promise (the out-of-service taint and the force-deletion of a node's
    pods come only after that node is verifiably fenced), applied to the read-backs one run of
    C(roles/fence_step) recorded, in the order its methods ran.
  - A power device (V(ipmi), V(redfish), V(aws), V(vmware), V(kdump), V(pdu)) asked C(off) whose
    C(fence.verified) is V(true) is a power fence, everything on the node being dead. The first such
    method is the evidence.
  - Else, when the run turned V(fc) ports C(off), the node is storage-isolated only when every one of
    them read back disabled; the first port's C(fence) is then the evidence.
  - Methods asked C(on) or C(reboot), and V(node) methods (cordon), prove nothing.
  - A C(fence.verified) counts only when it is the boolean V(true).
options:
  _input:
    description:
      - The run's read-backs, each a dict with C(name), C(device_type), C(action) and C(fence) (the
        fencing module's own C(fence) result, with C(verified), C(method), C(target) and C(verified_at)).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Choose this run's evidence of a verified fence
  ansible.builtin.set_fact:
    fence_step_reading: "{{ fence_step_choice.reading }}"
    fence_step_evidence: "{{ fence_step_choice.evidence }}"
  vars:
    fence_step_choice: "{{ fence_step_results | noderemedy.core.fence_evidence }}"
"""

RETURN = r"""
_value:
  description:
    - C(reading) is the run's reading, V({}) when no method fenced anything; else C(fenced) (bool),
      C(kind) (V(power_off) or V(storage_isolated)) and C(source) (the method names it comes from,
      joined by commas).
    - C(evidence) is the fencing module's own C(fence) result proving the fence, the evidence
      M(noderemedy.core.node_taint) takes; V({}) unless fenced.
  type: dict
"""

#: device types whose verified ``off`` means the node has no power (or is halted)
POWER_DEVICES = frozenset(("ipmi", "redfish", "aws", "vmware", "kdump", "pdu"))


def _verified(result: Any) -> bool:
    fence = result.get("fence") if isinstance(result, dict) else None
    return isinstance(fence, dict) and fence.get("verified") is True


def fence_evidence(results: Any) -> dict[str, dict[str, Any]]:
    """``{"reading": {...}, "evidence": {...}}`` for one run's read-backs ``results`` (a list of
    dicts: ``name``, ``device_type``, ``action``, ``fence``), by the rule in DOCUMENTATION above.

    Raises AnsibleFilterError when ``results`` is not a list of dicts."""
    from ansible.errors import AnsibleFilterError

    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise AnsibleFilterError(f"fence_evidence: expected a list of dicts, got {type(results).__name__}")
    off = [r for r in results if r.get("action") == "off"]
    power_off = [r for r in off if r.get("device_type") in POWER_DEVICES and _verified(r)]
    if power_off:
        first = power_off[0]
        return {
            "reading": {"fenced": True, "kind": "power_off", "source": first.get("name")},
            "evidence": dict(first["fence"]),
        }
    ports = [r for r in off if r.get("device_type") == "fc"]
    if not ports:
        return {"reading": {}, "evidence": {}}
    down = all(_verified(r) for r in ports)
    reading = {
        "fenced": down,
        "kind": "storage_isolated",
        "source": ",".join(str(r.get("name")) for r in ports),
    }
    return {"reading": reading, "evidence": dict(ports[0]["fence"]) if down else {}}


class FilterModule:
    """The collection's fence evidence filter."""

    def filters(self) -> dict[str, Any]:
        """Name -> function, as Ansible's filter loader asks."""
        return {"fence_evidence": fence_evidence}
