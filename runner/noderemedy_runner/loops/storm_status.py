"""The storm guard's status: what the detector writes into ConfigMap ``<namespace>/noderemedy-status``
and reads back when it starts leading, and which Event a change of the storm state gives.

One key per Configuration, ``<configuration>.json``: the :class:`~noderemedy_runner.machines.storm.StormState`
(``active``, ``storm``, the counts, ``reason``: TooManyUnhealthy / Cooldown / WithinLimit /
Disabled, ``message``, ``since``/``endedAt`` in RFC 3339) and a ``StormGuardActive`` condition
(:data:`STORM_CONDITION`). A new leader restores the storm states (and so a running cooldown)
from it (:meth:`StatusConfigMap.restore`): the storm guard's decisions are the pure
:mod:`noderemedy_runner.machines.storm`'s; this module only shapes, writes and reads their record.

Events on the ConfigMap (:func:`storm_event`): ``StormGuardActive`` when a storm starts,
``StormGuardCooldown`` when it ends and the cooldown runs, ``StormGuardCleared`` when fencing resumes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from noderemedy_runner.kube.errors import KubeError, NotFound
from noderemedy_runner.kube.events import COMPONENT
from noderemedy_runner.kube.leases import MANAGED_BY_LABEL
from noderemedy_runner.machines.conditions import Condition, format_time, parse_time, set_condition
from noderemedy_runner.machines.storm import StormState

log = logging.getLogger(__name__)

#: The status ConfigMap's name (in the runner's namespace).
STATUS_CONFIGMAP = "noderemedy-status"
#: The condition type each Configuration's record holds.
STORM_CONDITION = "StormGuardActive"


def status_key(configuration: str) -> str:
    """The ConfigMap key of Configuration ``configuration``'s record."""
    return f"{configuration}.json"


def storm_record(
    configuration: str, state: StormState, old: Iterable[Condition], now: float
) -> dict[str, Any]:
    """The record of ``configuration``'s storm ``state`` at ``now`` (seconds since the epoch): the
    state's fields and its ``StormGuardActive`` condition, set on the ``old`` conditions (its
    ``lastTransitionTime`` kept while the status stays the same). Pure."""
    conds = set_condition(
        old, STORM_CONDITION, "True" if state.active else "False", state.reason, state.message, now
    )
    return {
        "configuration": configuration,
        "active": state.active,
        "storm": state.storm,
        "total": state.total,
        "unhealthy": state.unhealthy,
        "allowed": state.allowed,
        "reason": state.reason,
        "message": state.message,
        "since": format_time(state.since) if state.since is not None else None,
        "endedAt": format_time(state.ended_at) if state.ended_at is not None else None,
        "conditions": [c.to_dict() for c in conds],
    }


def record_conditions(raw: str | None) -> tuple[Condition, ...]:
    """The conditions of a record as stored (JSON text); () when there is none or it is
    unreadable (it is written anew). Pure."""
    if not raw:
        return ()
    try:
        return tuple(Condition.from_dict(c) for c in json.loads(raw).get("conditions", ()))
    except (ValueError, TypeError):
        return ()


def state_from_record(doc: Mapping[str, Any]) -> StormState:
    """The :class:`StormState` a record holds (:func:`storm_record`'s inverse, the condition
    left out). Raises ValueError, KeyError or TypeError on a record that is not one. Pure."""
    return StormState(
        active=bool(doc.get("active")),
        storm=bool(doc.get("storm")),
        since=parse_time(doc["since"]) if doc.get("since") else None,
        ended_at=parse_time(doc["endedAt"]) if doc.get("endedAt") else None,
        total=int(doc.get("total", 0)),
        unhealthy=int(doc.get("unhealthy", 0)),
        reason=str(doc.get("reason", "WithinLimit")),
    )


def changed(old: StormState | None, new: StormState) -> bool:
    """Whether ``new`` is worth reporting after ``old`` (None: nothing known yet): its activity,
    reason or counts differ. Pure."""
    if old is None:
        return True
    return (old.active, old.reason, old.unhealthy, old.total) != (
        new.active,
        new.reason,
        new.unhealthy,
        new.total,
    )


def storm_event(configuration: str, old: StormState | None, new: StormState) -> tuple[str, str, str] | None:
    """The Event (type, reason, message) the step from ``old`` to ``new`` gives: a storm starts
    (Warning ``StormGuardActive``), it ends and the cooldown runs (``StormGuardCooldown``), fencing
    resumes (``StormGuardCleared``); None for any other step. Pure."""
    if new.active and new.storm and not (old and old.storm):
        return "Warning", "StormGuardActive", f"Configuration {configuration}: {new.message}"
    if new.active and not new.storm and old and old.storm:
        return "Normal", "StormGuardCooldown", f"Configuration {configuration}: {new.message}"
    if old and old.active and not new.active:
        return "Normal", "StormGuardCleared", f"Configuration {configuration}: fencing resumes; {new.message}"
    return None


class StatusConfigMap:
    """ConfigMap :data:`STATUS_CONFIGMAP` in ``namespace``, read and written through ``core`` (a
    ``CoreV1Api`` of the kube layer: every call with a timeout, errors as
    :class:`~noderemedy_runner.kube.errors.KubeError`)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace

    def ref(self) -> dict[str, str]:
        """The ConfigMap as an Event's object reference."""
        return {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "name": STATUS_CONFIGMAP,
            "namespace": self.namespace,
        }

    def restore(self, configurations: Iterable[str]) -> dict[str, StormState]:
        """The storm states recorded for ``configurations`` (those with a readable record). A
        missing ConfigMap gives {}; an unreadable one or record is logged and left out."""
        try:
            cm = self.core.read_namespaced_config_map(STATUS_CONFIGMAP, self.namespace)
        except NotFound:
            return {}
        except KubeError as exc:
            log.warning("status ConfigMap unreadable: %s", exc)
            return {}
        out: dict[str, StormState] = {}
        for name in configurations:
            raw = (cm.data or {}).get(status_key(name))
            if not raw:
                continue
            try:
                out[name] = state_from_record(json.loads(raw))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("status ConfigMap key %s ignored: %s", status_key(name), exc)
        return out

    def write(self, configuration: str, state: StormState, now: float) -> None:
        """Record ``configuration``'s storm ``state`` at ``now`` (:func:`storm_record`), creating
        the ConfigMap when it is missing; the other keys are kept. A refused write is logged, not
        raised (the next change writes again)."""
        key = status_key(configuration)
        try:
            try:
                cm = self.core.read_namespaced_config_map(STATUS_CONFIGMAP, self.namespace)
                data = dict(cm.data or {})
            except NotFound:
                cm, data = None, {}
            doc = storm_record(configuration, state, record_conditions(data.get(key)), now)
            data[key] = json.dumps(doc, indent=1)
            if cm is None:
                body = client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(
                        name=STATUS_CONFIGMAP, namespace=self.namespace, labels={MANAGED_BY_LABEL: COMPONENT}
                    ),
                    data=data,
                )
                self.core.create_namespaced_config_map(self.namespace, body)
            else:
                cm.data = data
                self.core.replace_namespaced_config_map(STATUS_CONFIGMAP, self.namespace, cm)
        except KubeError as exc:
            log.warning("status ConfigMap not written: %s", exc)


__all__ = [
    "STATUS_CONFIGMAP",
    "STORM_CONDITION",
    "StatusConfigMap",
    "changed",
    "record_conditions",
    "state_from_record",
    "status_key",
    "storm_event",
    "storm_record",
]
