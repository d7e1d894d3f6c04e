"""The parsed fence configuration: :class:`FenceConfig` (the ordered methods of each NodeFence
step, by fencing level), :class:`FenceMethod`, :class:`FenceTemplate`, the ConfigMap names and
keys, and :class:`FenceConfigError`, which every problem raises."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from noderemedy_runner.config.fence.devices import (
    ACTION_STATES,
    DEVICE_MODULES,
    MODEL_PROFILES,
    NODE_MODULES,
    DeviceType,
)
from noderemedy_runner.vocabulary import Step

CONFIG_PREFIX = "fence-config-"
METHOD_PREFIX = "fence-method-"
TEMPLATE_PREFIX = "fence-method-template-"
CONFIG_KEY = "config.properties"
TEMPLATE_KEY = "template.properties"

#: Separator of fencing levels in a step's method list (``isolation=a | b``).
LEVEL_SEPARATOR = "|"
#: config.properties keys → NodeFence step.
STEP_KEYS: dict[str, Step] = {
    "isolation": "Isolation",
    "power_management": "PowerManagement",
    "recovery": "Recovery",
}


class FenceConfigError(ValueError):
    """A fence ConfigMap that cannot be used.

    Attributes: ``configmap`` (its name), ``key`` (the data key, or None for the object itself),
    ``problem`` (what is wrong). ``str()`` reads ``ConfigMap 'x' key 'y': problem``.
    """

    def __init__(self, configmap: str, key: str | None, problem: str) -> None:
        self.configmap = configmap
        self.key = key
        self.problem = problem
        where = f"ConfigMap {configmap!r}" + (f" key {key!r}" if key is not None else "")
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class FenceTemplate:
    """A ``fence-method-template-<name>`` ConfigMap: one fencing device.

    ``configmap`` is the template's ConfigMap name, ``device_type`` ipmi/pdu/fc, ``model`` the
    device family as written (pdu/fc; None for ipmi), ``address`` host[:port] or
    scheme://host[:port] as written, ``ipaddr``/``ipport`` the host and port parsed from it
    (``ipport`` None: the module's default, 623 for IPMI, 161 for SNMP), ``secret_name`` the
    Secret (same namespace) with the device's credentials, ``options`` non-secret module options
    (:data:`DEVICE_OPTIONS`) as sorted (name, value) pairs.
    """

    configmap: str
    device_type: DeviceType
    model: str | None
    address: str
    secret_name: str
    ipaddr: str = ""
    ipport: int | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def module(self) -> str:
        """FQCN of the collection module that drives this device type."""
        return DEVICE_MODULES.get(self.device_type) or NODE_MODULES[self.device_type]

    @property
    def profile(self) -> str | None:
        """The module's ``profile`` option for ``model`` (None for ipmi)."""
        return None if self.model is None else MODEL_PROFILES[self.device_type][self.model]


@dataclass(frozen=True)
class FenceMethod:
    """A ``fence-method-<name>`` entry: ``action`` (on/off/reboot) on ``plug`` of ``template``'s
    device (``plug`` is None for ipmi, whose BMC is per host)."""

    name: str
    template: FenceTemplate
    plug: str | None
    action: str

    @property
    def state(self) -> str:
        """The module's ``state`` for ``action`` (fc: ``disabled`` for off, ``enabled`` for on)."""
        return ACTION_STATES[self.template.device_type][self.action]

    def to_extravars(self) -> dict[str, Any]:
        """The method as executor extravars: references only (Secret *name*, never its data).

        Shape: ``name``, ``module`` (FQCN), ``device_type``, ``model``, ``profile``, ``address``,
        ``ipaddr``, ``ipport``, ``plug``, ``action`` (seed), ``state`` (module), ``options``
        (dict of non-secret module options), ``template`` and ``secret_name``.
        """
        t = self.template
        return {
            "name": self.name,
            "module": t.module,
            "device_type": t.device_type,
            "model": t.model,
            "profile": t.profile,
            "address": t.address,
            "ipaddr": t.ipaddr,
            "ipport": t.ipport,
            "plug": self.plug,
            "action": self.action,
            "state": self.state,
            "options": dict(t.options),
            "template": t.configmap,
            "secret_name": t.secret_name,
        }


Level = tuple[FenceMethod, ...]


@dataclass(frozen=True)
class FenceConfig:
    """A parsed ``fence-config-<node>`` ConfigMap: the ordered methods of each step.

    ``isolation``, ``power_management`` and ``recovery`` are each step's first fencing level
    (all its methods when the step has one level). ``fallback_levels`` maps a step
    (``Isolation``/``PowerManagement``) to its further levels, in order: Pacemaker's fencing
    topology, where level *n+1* is tried only when level *n* failed (docs/fence-config.md).
    ``fenced_storage``: the volume matchers of ``fenced_storage=`` (:func:`parse_fenced_storage`),
    the storage a storage-only fence of this node cuts off; () releases nothing on such a fence.
    """

    configmap: str
    node: str
    isolation: Level
    power_management: Level
    recovery: Level
    fallback_levels: Mapping[Step, tuple[Level, ...]] = field(default_factory=dict)
    fenced_storage: tuple[Mapping[str, str], ...] = ()

    def methods(self, step: Step, level: int = 1) -> Level:
        """The ordered methods of ``level`` (1-based, Pacemaker's numbering) of ``step``; ``()``
        for a level the step does not have."""
        levels = self.levels(step)
        return levels[level - 1] if 1 <= level <= len(levels) else ()

    def levels(self, step: Step) -> tuple[Level, ...]:
        """Every level of ``step`` in order (``()`` for a step with no methods)."""
        first = {
            "Isolation": self.isolation,
            "PowerManagement": self.power_management,
            "Recovery": self.recovery,
        }[step]
        return ((first,) if first else ()) + tuple(self.fallback_levels.get(step, ()))

    def all_methods(self) -> tuple[FenceMethod, ...]:
        """Every method of every level of every step, each once, in order of appearance."""
        seen: dict[str, FenceMethod] = {}
        for step in STEP_KEYS.values():
            for level in self.levels(step):
                for m in level:
                    seen.setdefault(m.name, m)
        return tuple(seen.values())

    def secret_names(self) -> frozenset[str]:
        """Names of every Secret the configuration refers to (for RBAC checks and pre-flight)."""
        return frozenset(m.template.secret_name for m in self.all_methods() if m.template.secret_name)


def config_map_name(node: str) -> str:
    """``fence-config-<node>``, the seed's per-node ConfigMap name."""
    return CONFIG_PREFIX + node
