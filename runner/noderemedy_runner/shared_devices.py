"""One call for the nodes of a batch that share a fence device: an SNMP PDU or an FC switch.

A rack's nodes hang on one or two PDUs and one FC switch, and each of their NodeFences runs the
same step on that device at the same time: turn its outlet off, disable its switch port. A
``pdu_outlet`` or ``fc_port`` module call takes a list of plugs: it sets each one and reads them all back with one
GET, in one SNMP session, and costs about the same for 20 plugs as for one (on this project's
2-core lab machine, 20 ``fc_port`` calls of one port each took 14.5 CPU seconds, one call of 20
ports 1.7, ``ansible-playbook`` included: most of a call is Python and Ansible starting up). So the batches of ``fence_step.yml`` are formed per shared
device (:func:`shared_key`), and a batch whose nodes' first method is on one such device gets
the extra variable ``noderemedy_shared_device`` (:func:`shared_device`): the playbook's first play
switches all their plugs in one call, and each node then takes *its own plug's* read-back as its
method's result (``roles/fence_step/tasks/main.yml``); a node whose plug did not read back the
wanted state, or a call that failed, falls back to a call of its own, as without a batch.

Only the first method of a run is shared: the runner runs one segment of a step per run (a power
cut ``pdu-off``, then ``pdu-on``, are two runs), so that is the method a rack's runs have in
common, and what follows it keeps its order per node. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: Device types whose module switches and reads back many plugs in one call (``plug`` is a list).
SHARED_DEVICE_TYPES = frozenset({"pdu", "fc"})
#: The only playbook whose runs share a device call (``fence_verify.yml`` only reads).
SHARED_PLAYBOOK = "fence_step.yml"
#: The extra variable the batch's playbook reads: :func:`shared_device`'s result.
SHARED_VAR = "noderemedy_shared_device"
#: Method keys that differ between the nodes on one device (not part of the device's identity).
_PER_NODE_KEYS = frozenset({"name", "plug", "template"})


def _device(method: Mapping[str, Any]) -> dict[str, Any]:
    """A method's extravars less what differs between the nodes on one device."""
    return {k: v for k, v in method.items() if k not in _PER_NODE_KEYS}


def shared_key(playbook: str, extravars: Mapping[str, Any]) -> str:
    """The device a run's first method switches, as a string: ``""`` when the run cannot share
    a call (another playbook, no methods, a device type outside :data:`SHARED_DEVICE_TYPES`, no
    plug). Two runs with the same non-empty key switch plugs of one device to one state, with the
    same Secret, namespace, profile and options. Pure."""
    if playbook != SHARED_PLAYBOOK:
        return ""
    methods = extravars.get("methods")
    if not isinstance(methods, list) or not methods or not isinstance(methods[0], Mapping):
        return ""
    first = methods[0]
    plug = first.get("plug")
    if first.get("device_type") not in SHARED_DEVICE_TYPES or not isinstance(plug, (str, int)) or plug == "":
        return ""
    device = {k: v for k, v in first.items() if k not in _PER_NODE_KEYS}
    return json.dumps(
        {"namespace": extravars.get("namespace"), "method": device}, sort_keys=True, default=str
    )


def shared_device(playbook: str, by_host: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The extra variable :data:`SHARED_VAR` for a batch whose runs' extravars are ``by_host``
    (inventory host -> extravars), or None when no run's first method is on a shareable device.
    A lone host gets the call too: the playbook's first play then settles its whole step in a few
    tasks run once (:mod:`noderemedy_runner.shared_results`), where the step play would run half a
    dozen for it.

    Shape: ``{"method": <the first method's extravars less name, plug and template>, "hosts":
    [host, ...], "plugs": [plug as str, ...]}`` -- the hosts of the largest group with one
    :func:`shared_key` (sorted; ties: the key that sorts first), each host's plug at the same
    position. Pure."""
    groups: dict[str, list[str]] = {}
    for host in sorted(by_host):
        key = shared_key(playbook, by_host[host])
        if key:
            groups.setdefault(key, []).append(host)
    if not groups:
        return None
    key, hosts = max(sorted(groups.items()), key=lambda kv: len(kv[1]))
    return {
        "method": _device(by_host[hosts[0]]["methods"][0]),
        "hosts": hosts,
        "plugs": [str(by_host[h]["methods"][0]["plug"]) for h in hosts],
    }
