"""Fence configuration and fence device health, decided before any node needs fencing.

Pacemaker runs a *monitor* operation on every stonith device, so a dead BMC or a wrong password is
found while the nodes are healthy, not on the day one of them dies. This module holds the pure
part: which ConfigMaps are valid (:func:`validate_namespace`), which devices to read
(:func:`devices_to_check`: one per device and plug, whatever number of nodes or methods use it),
how a read-only ``status`` result is classified (:func:`classify`) and which changes are worth an
Event (:func:`changed`). The I/O loop is :mod:`noderemedy_runner.loops.devicecheck`.

Reasons (condition/Event vocabulary, docs/operations.md "Fence device health"):

========================== ===========================================================
``FenceDeviceHealthy``     the device answered a ``status`` read with these credentials
``FenceAuthFailed``        the device refused the credentials or the privilege (module
                           error class ``auth`` or ``privilege``)
``FenceDeviceUnreachable`` nothing answered, or not within ``power_timeout`` (``unreachable``,
                           ``timeout``; SNMP v1/v2c agents drop a wrong community silently,
                           so that reads as unreachable too)
``FenceDeviceError``       any other failure: unknown outlet/port (``not_found``), a value the
                           device rejected, a missing Secret or Secret key (``config``)
``FenceConfigInvalid``     a fence ConfigMap the parser refuses (ConfigMap, key, problem)
========================== ===========================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from noderemedy_runner.config.fence import (
    CONFIG_PREFIX,
    TEMPLATE_PREFIX,
    FenceConfig,
    FenceConfigError,
    FenceMethod,
    parse_fence_config,
    parse_template,
    required_templates,
)

HealthReason = Literal["FenceDeviceHealthy", "FenceAuthFailed", "FenceDeviceUnreachable", "FenceDeviceError"]
HEALTHY: HealthReason = "FenceDeviceHealthy"
AUTH_FAILED: HealthReason = "FenceAuthFailed"
UNREACHABLE: HealthReason = "FenceDeviceUnreachable"
DEVICE_ERROR: HealthReason = "FenceDeviceError"
CONFIG_INVALID = "FenceConfigInvalid"

#: Module error classes (plugins/module_utils/_fence.py ``FenceError.category``) → reason.
ERROR_REASONS: dict[str, HealthReason] = {
    "auth": AUTH_FAILED,
    "privilege": AUTH_FAILED,
    "unreachable": UNREACHABLE,
    "timeout": UNREACHABLE,
}


@dataclass(frozen=True)
class DeviceCheck:
    """One device (and plug) to read: ``template`` (its ConfigMap), ``plug`` (None for ipmi),
    ``method`` (a method that uses it, whose device options and Secret the read uses),
    ``nodes`` (every node whose configuration uses it, sorted)."""

    template: str
    plug: str | None
    method: FenceMethod
    nodes: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        """``(template, plug or "")``: the identity of the device and plug."""
        return self.template, self.plug or ""

    @property
    def label(self) -> str:
        """``<template>`` or ``<template> plug <plug>``, for messages."""
        return self.template + (f" plug {self.plug}" if self.plug else "")

    def to_extravars(self) -> dict[str, Any]:
        """The method's extravars (references only) with ``action`` ``status``: nothing changes."""
        out = self.method.to_extravars()
        out["name"] = f"check-{self.template.removeprefix(TEMPLATE_PREFIX)}" + (
            f"-{self.plug}" if self.plug else ""
        )
        out["action"] = "status"
        return out


@dataclass(frozen=True)
class DeviceHealth:
    """The outcome of reading one device: ``reason`` (see the module docs), ``message`` (the
    module's message or error class; never a secret: the modules keep secrets out of messages),
    ``healthy``."""

    check: DeviceCheck
    reason: HealthReason
    message: str

    @property
    def healthy(self) -> bool:
        """Whether the device answered with these credentials."""
        return self.reason == HEALTHY

    def describe(self) -> str:
        """One line for an Event: device, type and address, the nodes it fences, what happened."""
        t = self.check.method.template
        nodes = ", ".join(self.check.nodes)
        what = "answered a status read" if self.healthy else self.message
        return f"{self.check.label} ({t.device_type} {t.address}) fencing node(s) {nodes}: {what}"


@dataclass(frozen=True)
class NamespaceConfigs:
    """Every fence ConfigMap of a namespace, validated: ``configs`` (node → parsed configuration),
    ``errors`` (ConfigMap name → the parser's error, templates included)."""

    configs: Mapping[str, FenceConfig]
    errors: Mapping[str, FenceConfigError]


def validate_namespace(configmaps: Mapping[str, Any]) -> NamespaceConfigs:
    """Validate every ``fence-config-<node>`` and ``fence-method-template-<t>`` in ``configmaps``
    (ConfigMap name → ``data``; other names are ignored).

    A template is validated on its own too, so a broken device template is reported even before
    a node uses it. A node configuration that names a broken template gets that template's error
    (which names the template ConfigMap and its key). Never raises.
    """
    errors: dict[str, FenceConfigError] = {}
    templates = {n: d for n, d in configmaps.items() if n.startswith(TEMPLATE_PREFIX)}
    for name, data in sorted(templates.items()):
        try:
            parse_template(name, data)
        except FenceConfigError as err:
            errors[name] = err
    configs: dict[str, FenceConfig] = {}
    for name, data in sorted(configmaps.items()):
        if not name.startswith(CONFIG_PREFIX) or name.startswith(TEMPLATE_PREFIX):
            continue
        node = name[len(CONFIG_PREFIX) :]
        try:
            needed = required_templates(name, data, node)
            cfg = parse_fence_config(name, data, {t: templates[t] for t in needed if t in templates}, node)
        except FenceConfigError as err:
            errors[name] = err
            continue
        configs[node] = cfg
    return NamespaceConfigs(configs, errors)


def devices_to_check(configs: Mapping[str, FenceConfig]) -> tuple[DeviceCheck, ...]:
    """One :class:`DeviceCheck` per (template, plug) used by any method of any level of any step
    of ``configs`` (node → configuration), sorted by key. Pure."""
    found: dict[tuple[str, str], tuple[FenceMethod, set[str]]] = {}
    for node, cfg in configs.items():
        for m in cfg.all_methods():
            key = (m.template.configmap, m.plug or "")
            if key not in found:
                found[key] = (m, set())
            found[key][1].add(node)
    return tuple(
        DeviceCheck(key[0], m.plug, m, tuple(sorted(nodes))) for key, (m, nodes) in sorted(found.items())
    )


def classify(check: DeviceCheck, ok: bool, error: str, message: str) -> DeviceHealth:
    """The health of ``check``'s device from its module's ``status`` result: ``ok`` (the task did
    not fail), ``error`` (the module's error class on failure) and ``message``."""
    if ok:
        return DeviceHealth(check, HEALTHY, "")
    reason = ERROR_REASONS.get(error, DEVICE_ERROR)
    text = f"{error}: {message}" if error else (message or "the status read failed")
    return DeviceHealth(check, reason, text[:512])


def results_for(
    checks: Sequence[DeviceCheck], results: Sequence[tuple[bool, str, str]], run_error: str = ""
) -> tuple[DeviceHealth, ...]:
    """Pair ``checks`` with the module results of one check run, in order (``(ok, error,
    message)`` each). A check without a result (the run stopped before it) is a
    ``FenceDeviceError`` with ``run_error``."""
    out = []
    for i, check in enumerate(checks):
        if i < len(results):
            ok, error, message = results[i]
            out.append(classify(check, ok, error, message))
        else:
            out.append(DeviceHealth(check, DEVICE_ERROR, run_error or "no result from the check run"))
    return tuple(out)


def changed(
    old: Mapping[tuple[str, str], DeviceHealth], new: Sequence[DeviceHealth]
) -> tuple[DeviceHealth, ...]:
    """The entries of ``new`` whose reason differs from ``old``'s (or that are new and not
    healthy): what deserves an Event. A healthy device seen for the first time is not news."""
    out = []
    for h in new:
        before = old.get(h.check.key)
        if (before is None and not h.healthy) or (before is not None and before.reason != h.reason):
            out.append(h)
    return tuple(out)


@runtime_checkable
class HealthObserver(Protocol):
    """Where device and configuration health goes besides Events (metrics). Never raises."""

    def fence_device_checked(self, template: str, plug: str, device_type: str, reason: str) -> None:
        """One device (and plug) was read; ``reason`` as in the module docs."""

    def fence_config_checked(self, configmap: str, valid: bool) -> None:
        """A fence ConfigMap was validated."""


class NullHealthObserver:
    """A :class:`HealthObserver` that records nothing."""

    def fence_device_checked(self, template: str, plug: str, device_type: str, reason: str) -> None:
        return None

    def fence_config_checked(self, configmap: str, valid: bool) -> None:
        return None


__all__ = [
    "AUTH_FAILED",
    "CONFIG_INVALID",
    "DEVICE_ERROR",
    "HEALTHY",
    "UNREACHABLE",
    "DeviceCheck",
    "DeviceHealth",
    "HealthObserver",
    "NamespaceConfigs",
    "NullHealthObserver",
    "changed",
    "classify",
    "devices_to_check",
    "results_for",
    "validate_namespace",
]
