"""What one shared device call settles for each host of a batch, as that host's own job events.

``playbooks/fence_step.yml``'s first play switches the plugs of a batch's hosts on one PDU or FC
switch in one call (:mod:`noderemedy_runner.shared_devices`). For a host whose step is that one
method and whose own plug read back the wanted state, that call is the whole step: the filter
``noderemedy.core.shared_step`` (the fence evidence rule, applied to the host's own plug) sets
:data:`SERVED_FACT` once for the play, one entry per such host (``host``, ``node``, ``reading``,
``evidence``, ``release``), and the hosts to release are released in one
``noderemedy.core.node_release`` call (:data:`~noderemedy_runner.outcomes.SHARED_RELEASE_MODULE`,
one result per node). Those tasks run once for the play, so their job events name its first host
only; the second play ends at once for the hosts they served.

:func:`served_events` turns them into each served host's own events, the ones a run of its own
would have given: its evidence task's facts (:data:`~noderemedy_runner.outcomes.READING_FACT`,
:data:`~noderemedy_runner.outcomes.EVIDENCE_FACT`), its release, then :data:`DONE_FACT`. A host
is done when its own entry is in: at the filter's event when it releases nothing, at the release
call's event when it does. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noderemedy_runner.outcomes import EVIDENCE_FACT, READING_FACT, SHARED_RELEASE_MODULE

#: The playbook whose play-wide tasks :func:`served_events` splits into each host's own events. The
#: run-once task of another batched playbook (``out_of_service_taint.yml``'s one taint removal
#: call) stays an event of the play's first host: each host then checks its own node's entry in a
#: task of its own, whose result is the host's.
SHARED_PLAYBOOK = "fence_step.yml"
#: The fact the batched playbooks' last task sets: the host went through the whole play.
DONE_FACT = "noderemedy_host_done"
#: The fact fence_step.yml's first play sets once for the hosts its shared call served (filter
#: ``noderemedy.core.shared_step``): ``[{"host", "node", "reading", "evidence", "release"}]``.
SERVED_FACT = "fence_step_served"


#: The action of the events made for a host's facts.
SET_FACT = "ansible.builtin.set_fact"


def _own(
    event: Mapping[str, Any], host: str, n: str, task: str, res: dict[str, Any], action: str = SET_FACT
) -> dict[str, Any]:
    """An ok event of ``host`` for ``task`` (module ``action``) with result ``res``, made from the
    play-wide ``event`` (its ``n``-th host event of that event)."""
    data = {**(event.get("event_data") or {}), "host": host, "task": task, "res": res}
    data.update(resolved_action=action, task_action=action)
    return {
        **event,
        "event": "runner_on_ok",
        "uuid": f"{event.get('uuid') or 'shared'}-{host}-{n}",
        "event_data": data,
    }


def done_event(event: Mapping[str, Any], host: str) -> dict[str, Any]:
    """``host``'s event setting :data:`DONE_FACT`, made from ``event``."""
    return _own(event, host, "done", "Mark this node's run done", {"ansible_facts": {DONE_FACT: True}})


def served_events(
    event: Mapping[str, Any], node_hosts: Mapping[str, str]
) -> list[tuple[str, dict[str, Any]]] | None:
    """The events ``event`` holds for each host it is about, as ``(host, event)`` in order, or
    None when it is an event of one host as usual. ``node_hosts``: node -> inventory host.

    * The ok event of the task setting :data:`SERVED_FACT`: for each entry, the host's evidence
      event (``reading``, ``evidence``), and its :func:`done_event` unless it has a ``release``.
    * An event of :data:`~noderemedy_runner.outcomes.SHARED_RELEASE_MODULE`: for each entry of its
      ``nodes`` whose node is a host's, that host's release event (``node_taint``'s result for it,
      a refusal being a result with ``reason``, as the fence step's own release task reports one)
      and its :func:`done_event`. Without a ``nodes`` list (skipped, or the call as a whole failed:
      its hosts then release in the second play), ``[]``.
    """
    data = event.get("event_data") or {}
    res = data.get("res")
    res = res if isinstance(res, Mapping) else {}
    facts = res.get("ansible_facts")
    served = facts.get(SERVED_FACT) if isinstance(facts, Mapping) else None
    out: list[tuple[str, dict[str, Any]]] = []
    if event.get("event") == "runner_on_ok" and isinstance(served, list):
        for entry in served:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("host"), str):
                continue
            host = entry["host"]
            chosen = {READING_FACT: entry.get("reading") or {}, EVIDENCE_FACT: entry.get("evidence") or {}}
            out.append(
                (host, _own(event, host, "evidence", "Choose this run's evidence", {"ansible_facts": chosen}))
            )
            if not entry.get("release"):
                out.append((host, done_event(event, host)))
        return out
    if str(data.get("resolved_action") or data.get("task_action") or "") != SHARED_RELEASE_MODULE:
        return None
    nodes = res.get("nodes")
    if event.get("event") not in ("runner_on_ok", "runner_on_failed") or not isinstance(nodes, list):
        return []
    for entry in nodes:
        host = node_hosts.get(str(entry.get("node"))) if isinstance(entry, Mapping) else None
        if host is None:
            continue
        own = _own(
            event,
            host,
            "release",
            str(data.get("task") or "release"),
            {k: v for k, v in entry.items() if k != "failed"},
            SHARED_RELEASE_MODULE,
        )
        out += [(host, own), (host, done_event(event, host))]
    return out


__all__ = ["DONE_FACT", "SERVED_FACT", "SHARED_PLAYBOOK", "done_event", "served_events"]
