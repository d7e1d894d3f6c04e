"""Parsing a ``fence-config-<node>`` ConfigMap: its steps' method lists (with fencing levels),
its ``fence-method-<name>`` entries, ``fenced_storage=``, and the whole configuration with its
templates (:func:`parse_fence_config`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noderemedy_runner.config.fence.devices import _URI_RE, DEVICE_ACTIONS
from noderemedy_runner.config.fence.model import (
    CONFIG_KEY,
    CONFIG_PREFIX,
    LEVEL_SEPARATOR,
    METHOD_PREFIX,
    STEP_KEYS,
    TEMPLATE_PREFIX,
    FenceConfig,
    FenceConfigError,
    FenceMethod,
    FenceTemplate,
)
from noderemedy_runner.config.fence.properties import (
    _DNS_SUBDOMAIN_RE,
    _METHOD_KEYS,
    _METHOD_NAME_RE,
    _PLUG_RE,
    _reject_credentials,
    _reject_unknown,
    parse_properties,
)
from noderemedy_runner.config.fence.templates import parse_template


def _method_list(value: str, configmap: str, prop: str) -> tuple[str, ...]:
    names = tuple(n for n in re.split(r"[\s,]+", value) if n)
    for name in names:
        if not _METHOD_NAME_RE.match(name):
            raise FenceConfigError(
                configmap, CONFIG_KEY, f"{prop}=: method name {name!r} is not lowercase [a-z0-9-_.]"
            )
    return names


def _level_lists(value: str, configmap: str, prop: str) -> tuple[tuple[str, ...], ...]:
    """``a b | c d`` → ``(("a", "b"), ("c", "d"))``; ``""`` → ``()`` (no methods)."""
    if LEVEL_SEPARATOR not in value:
        names = _method_list(value, configmap, prop)
        return (names,) if names else ()
    if prop == "recovery":
        raise FenceConfigError(
            configmap,
            CONFIG_KEY,
            "recovery=: fencing levels ('|') apply to isolation= and power_management= only "
            "(recovery undoes the fence, it has no alternatives)",
        )
    levels = tuple(_method_list(part, configmap, prop) for part in value.split(LEVEL_SEPARATOR))
    for i, names in enumerate(levels, start=1):
        if not names:
            raise FenceConfigError(configmap, CONFIG_KEY, f"{prop}=: level {i} has no methods")
    for i, names in enumerate(levels, start=1):
        if not any(levels[j] == names for j in range(i - 1)):
            continue
        raise FenceConfigError(configmap, CONFIG_KEY, f"{prop}=: level {i} repeats an earlier level")
    return levels


#: ``fenced_storage=`` entry kinds -> the key of the volume matcher they give (``node_taint``'s
#: ``fenced_storage`` option): a CSI driver, a StorageClass, a hostPath directory (and what is
#: under it), and ``fc`` for the in-tree Fibre Channel volume source (``spec.fc``).
FENCED_STORAGE_KINDS = {"csi": "csi_driver", "storageclass": "storage_class", "hostpath": "host_path"}
_FENCED_STORAGE_NAME_RE = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9._/-]{0,252}$")


def parse_fenced_storage(value: str, configmap: str) -> tuple[Mapping[str, str], ...]:
    """``fenced_storage=`` (space or comma separated ``csi:<driver>``, ``storageclass:<name>``,
    ``hostpath:<absolute dir>``, ``fc``) → the volume matchers (``{"csi_driver": ...}``,
    ``{"storage_class": ...}``, ``{"host_path": ...}``, ``{"fc": "true"}``), in order. They
    describe the storage the node reaches only through its fc ports, so a storage-only fence may
    release the pods using it (docs/concepts.md "What a fence releases"). Raises
    :class:`FenceConfigError` naming the entry."""
    out: list[Mapping[str, str]] = []
    for entry in (e for e in re.split(r"[\s,]+", value) if e):
        kind, sep, name = entry.partition(":")
        if entry == "fc":
            out.append({"fc": "true"})
            continue
        if not sep or kind not in FENCED_STORAGE_KINDS or not _FENCED_STORAGE_NAME_RE.match(name):
            raise FenceConfigError(
                configmap,
                CONFIG_KEY,
                f"fenced_storage=: entry {entry!r} is not csi:<driver>, storageclass:<name>, "
                "hostpath:<absolute dir> or fc",
            )
        if kind == "hostpath" and (not name.startswith("/") or name == "/"):
            raise FenceConfigError(
                configmap,
                CONFIG_KEY,
                f"fenced_storage=: {entry!r}: a hostpath is an absolute directory, not /",
            )
        out.append({FENCED_STORAGE_KINDS[kind]: name})
    return tuple(out)


@dataclass(frozen=True)
class _RawConfig:
    node: str
    steps: dict[str, tuple[tuple[str, ...], ...]]
    methods: dict[str, dict[str, str]]
    fenced_storage: tuple[Mapping[str, str], ...] = ()


def _parse_raw(configmap: str, data: Any, node: str | None) -> _RawConfig:
    if not configmap.startswith(CONFIG_PREFIX) or len(configmap) == len(CONFIG_PREFIX):
        raise FenceConfigError(
            configmap, None, f"fence configuration ConfigMaps are named {CONFIG_PREFIX}<node>"
        )
    name_node = configmap[len(CONFIG_PREFIX) :]
    if node is not None and node != name_node:
        raise FenceConfigError(configmap, None, f"is not the fence configuration of node {node!r}")
    if not isinstance(data, Mapping):
        raise FenceConfigError(configmap, None, f"data must be a mapping, got {type(data).__name__}")
    if CONFIG_KEY not in data:
        raise FenceConfigError(configmap, CONFIG_KEY, f"missing; data keys are {sorted(map(str, data))}")
    for key in data:
        if key != CONFIG_KEY and not (isinstance(key, str) and key.startswith(METHOD_PREFIX)):
            raise FenceConfigError(
                configmap, str(key), f"unexpected key; expected {CONFIG_KEY} or {METHOD_PREFIX}<name>"
            )
    props = parse_properties(data[CONFIG_KEY], configmap, CONFIG_KEY)
    _reject_credentials(props, configmap, CONFIG_KEY)
    _reject_unknown(props, ("node_name", *STEP_KEYS, "fenced_storage"), configmap, CONFIG_KEY)
    if "node_name" not in props:
        raise FenceConfigError(configmap, CONFIG_KEY, "missing node_name=")
    if props["node_name"] != name_node:
        raise FenceConfigError(
            configmap,
            CONFIG_KEY,
            f"node_name={props['node_name']!r} does not match the ConfigMap's node {name_node!r}",
        )
    steps: dict[str, tuple[tuple[str, ...], ...]] = {}
    for prop in STEP_KEYS:
        if prop not in props:
            raise FenceConfigError(configmap, CONFIG_KEY, f"missing {prop}= (leave it empty for no methods)")
        steps[prop] = _level_lists(props[prop], configmap, prop)
    methods: dict[str, dict[str, str]] = {}
    for name in (n for levels in steps.values() for level in levels for n in level):
        if name in methods:
            continue
        key = METHOD_PREFIX + name
        if key not in data:
            using = [p for p, ls in steps.items() if any(name in level for level in ls)]
            raise FenceConfigError(
                configmap, key, f"missing (method {name!r} is listed in {', '.join(using)}=)"
            )
        mprops = parse_properties(data[key], configmap, key)
        _reject_credentials(mprops, configmap, key)
        _reject_unknown(mprops, _METHOD_KEYS, configmap, key)
        tmpl = mprops.get("template", "")
        if not tmpl:
            raise FenceConfigError(configmap, key, f"missing template= ({TEMPLATE_PREFIX}<name>)")
        if not tmpl.startswith(TEMPLATE_PREFIX) or not _DNS_SUBDOMAIN_RE.match(tmpl) or len(tmpl) > 253:
            raise FenceConfigError(
                configmap, key, f"template={tmpl!r} is not a ConfigMap name {TEMPLATE_PREFIX}<name>"
            )
        if not mprops.get("action"):
            raise FenceConfigError(configmap, key, "missing action=")
        methods[name] = mprops
    return _RawConfig(
        name_node, steps, methods, parse_fenced_storage(props.get("fenced_storage", ""), configmap)
    )


def required_templates(configmap: str, data: Any, node: str | None = None) -> frozenset[str]:
    """Names of the template ConfigMaps a ``fence-config-<node>`` refers to (to fetch them).

    Raises :class:`FenceConfigError` exactly as :func:`parse_fence_config` does for this ConfigMap.
    """
    raw = _parse_raw(configmap, data, node)
    return frozenset(m["template"] for m in raw.methods.values())


def parse_fence_config(
    configmap: str,
    data: Any,
    templates: Mapping[str, Any],
    node: str | None = None,
) -> FenceConfig:
    """Parse a ``fence-config-<node>`` ConfigMap's ``data`` with its templates' ``data``.

    ``templates`` maps template ConfigMap names to their ``data`` (at least those of
    :func:`required_templates`). ``node``, if given, must be the ConfigMap's node.
    Raises :class:`FenceConfigError` (which ConfigMap, which key, what is wrong) for: a wrong
    name, unknown keys, malformed properties, a missing or mismatched ``node_name``, a step
    naming a method with no ``fence-method-<name>`` entry, a missing template, an action the
    device type does not support (ipmi/pdu: on, off, reboot; fc: on, off), a plug on an ipmi
    method or a missing plug on a pdu/fc method, and credentials anywhere.
    """
    raw = _parse_raw(configmap, data, node)
    parsed_templates: dict[str, FenceTemplate] = {}
    methods: dict[str, FenceMethod] = {}
    for name, mprops in raw.methods.items():
        key = METHOD_PREFIX + name
        tname = mprops["template"]
        if tname not in parsed_templates:
            if tname not in templates:
                raise FenceConfigError(configmap, key, f"template ConfigMap {tname!r} not found")
            parsed_templates[tname] = parse_template(tname, templates[tname])
        template = parsed_templates[tname]
        action = mprops["action"]
        allowed = DEVICE_ACTIONS[template.device_type]
        if action not in allowed:
            raise FenceConfigError(
                configmap,
                key,
                f"action={action!r} not supported by {template.device_type} devices {list(allowed)}",
            )
        plug: str | None = mprops.get("plug") or None
        if template.device_type == "ipmi":
            if plug is not None:
                raise FenceConfigError(configmap, key, "plug= does not apply to ipmi (the BMC is per host)")
        elif template.device_type == "vmware":
            # optional: the VM's name or UUID; without it, the VM named after the node
            if plug is not None and not _PLUG_RE.match(plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not a VM name or UUID")
        elif template.device_type == "kdump":
            # optional: the node's host name or address the message comes from (default: the node)
            if plug is not None and not _PLUG_RE.match(plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not a host name or address")
        elif template.device_type == "aws":
            # optional: the instance id; without it, the one in the Node's spec.providerID
            if plug is not None and not re.match(r"^i-[0-9a-f]{8,17}$", plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not an EC2 instance id (i-...)")
        elif template.device_type == "redfish":
            # optional: the system's URI, or its Id/Name/UUID; without it, the BMC's only system
            if plug is not None and not (_URI_RE.match(plug) or _PLUG_RE.match(plug)):
                raise FenceConfigError(
                    configmap, key, f"plug={plug!r} is not a system URI (/redfish/v1/Systems/...) or Id"
                )
        else:
            if plug is None:
                raise FenceConfigError(
                    configmap,
                    key,
                    f"missing plug= ({'outlet' if template.device_type == 'pdu' else 'port'} of {tname})",
                )
            if not _PLUG_RE.match(plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not an outlet/port name or number")
        methods[name] = FenceMethod(name, template, plug, action)
    steps = {
        prop: tuple(tuple(methods[n] for n in level) for level in levels)
        for prop, levels in raw.steps.items()
    }
    fallback = {STEP_KEYS[prop]: levels[1:] for prop, levels in steps.items() if len(levels) > 1}
    first = {prop: levels[0] if levels else () for prop, levels in steps.items()}
    return FenceConfig(
        configmap,
        raw.node,
        first["isolation"],
        first["power_management"],
        first["recovery"],
        fallback,
        raw.fenced_storage,
    )
