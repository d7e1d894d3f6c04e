"""The remedy Configuration (node remedy seed, "Deployment"): which nodes are watched, which node
conditions make a node unhealthy and for how long, the remedies, and the storm guard.

A configuration source (a file, or a ConfigMap's ``*.yaml``/``*.yml`` keys) is a YAML stream of
one or more ``Configuration`` documents::

    apiVersion: node-remedy/v1alpha            # the seed's; remediation.noderemedy.io/v1alpha1 too
    kind: Configuration
    metadata: {name: workers}                  # optional; default "configuration-<index>"
    nodeSelector: type=compute                 # the seed's string form, or {matchLabels, matchExpressions}
    thresholdConfigs:
    - nodeConditionType: Ready
      nodeConditionStatus: [False, Unknown]    # one status or a list; YAML booleans allowed (seed)
      nodeConditionPeriod: 5m                  # Go duration, or an integer of seconds
      remedy1: [{name: fence}]                 # seed: remedyN lists of {name, period, clean-resources}
      recovery: [{name: recovery}]
    stormGuard:                                # ours (MachineHealthCheck / NodeHealthCheck semantics)
      maxUnhealthy: 40%                        # or minHealthy: 51%, or unhealthyRange: "[1-3]"
      cooldown: 5m
    pauseRequests: []                          # NodeHealthCheck: non-empty = no new fencing

Defaults (documented in docs/operations.md):

* ``nodeSelector``: every node.
* ``thresholdConfigs``: NodeHealthCheck's defaults, Ready ``False`` or ``Unknown`` for 300 s.
* remedies: ``fence`` (a NodeFence, whose steps come from ``fence-config-<node>``); recovery:
  ``recovery``.

Remedies (the seed's ``remedyConfigs``; escalation as NodeHealthCheck's
``escalatingRemediations``)::

    remedyConfigs:
    - name: repair                   # a remedy named in remedyN
      podTemplate:                   # a PodTemplateSpec: run as a Job, the node in $NODEREMEDY_NODE
        spec: {containers: [{name: repair, image: IMAGE:VERSION,
                             env: [secret-key],                  # seed shorthand: $SECRET_KEY
                             configmaps: [fence-method-config]}]} # seed shorthand: a mounted volume
      secretName: repair-credentials # the Secret of the env shorthand (default remedy-<name>)
    - name: terminate
      executor: job                  # no podTemplate: the fence flow, its runs here as Jobs

A remedy whose name has a ``podTemplate`` runs that template as a Job
(:func:`noderemedy_runner.job_manifests.remedy_job_manifest`); every other name is the fence flow of
``fence-config-<node>``, its runs in the runner's process or as Jobs (``executor``; default: the
runner's ``--executor``). The seed's container shorthand (``env`` as Secret keys, ``configmaps``)
is expanded at load time (:mod:`noderemedy_runner.config.podtemplate`). The remedies of ``remedy1``, ``remedy2``, ... run in that order (the
items of one list too), each given its ``period`` to make the node healthy before the next starts
(:mod:`noderemedy_runner.machines.remedies`). The fence flow ends the chain (it fences, releases
and recovers the node, with its own retries), so a remedy after it is refused.
* ``stormGuard``: on, ``minHealthy: 51%`` (NodeHealthCheck's default: more than half the
  selected nodes must be healthy) and ``cooldown: 300s``.

Every error is a :class:`ConfigError` naming the source, the document and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from noderemedy_runner.config.podtemplate import (
    MAX_REMEDY_NAME,
    PodTemplateError,
    check_secret_name,
    pod_template,
)
from noderemedy_runner.config.selectors import FieldError, LabelSelector, parse_label_selector, parse_seconds
from noderemedy_runner.config.selectors import parse_selector_string as _parse_selector_string
from noderemedy_runner.config.storm import (
    IntOrPercent,
    StormGuard,
    parse_storm_guard,
)

API_VERSIONS = ("node-remedy/v1alpha", "remediation.noderemedy.io/v1alpha1")
KIND = "Configuration"
CONDITION_STATUSES = ("True", "False", "Unknown")

#: NodeHealthCheck's default unhealthy conditions: Ready False / Unknown for 300 s.
DEFAULT_PERIOD_SECONDS = 300.0
DEFAULT_REMEDY = "fence"
DEFAULT_RECOVERY = "recovery"

_TOP_FIELDS = {
    "apiVersion",
    "kind",
    "metadata",
    "nodeSelector",
    "thresholdConfigs",
    "remedyConfigs",
    "stormGuard",
    "pauseRequests",
}
_THRESHOLD_FIELDS = {"nodeConditionType", "nodeConditionStatus", "nodeConditionPeriod", "recovery", "remedy"}
_REMEDY_KEY_RE = re.compile(r"^remedy(\d+)?$")
_REMEDY_FIELDS = {"name", "period", "clean-resources", "clean-resourece"}  # the seed's spelling too
_REMEDY_CONFIG_FIELDS = {"name", "podTemplate", "executor", "secretName"}
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ConfigError(ValueError):
    """A remedy Configuration that cannot be used; the message names the source, the document
    (``metadata.name`` or index) and the field, e.g.
    ``workers.yaml: Configuration workers: thresholdConfigs[0].nodeConditionPeriod: 'soon' is not a duration``."""


EXECUTORS = ("job", "inprocess")


@dataclass(frozen=True)
class Remedy:
    """One remedy of the seed's ``remedyN``/``recovery`` lists: ``name``, ``period`` (seconds to
    give it before the next remedy, None = unbounded), ``clean_resources`` (after a pod remedy
    succeeded: fence the node and release its workloads on that verified fence), and from its
    ``remedyConfigs`` entry ``pod_template`` (the PodTemplateSpec as canonical JSON; None: the
    fence flow) and ``executor`` (``job``/``inprocess`` for the fence flow's runs; None: the
    runner's default)."""

    name: str
    period: float | None = None
    clean_resources: bool = False
    pod_template: str | None = None
    executor: str | None = None

    @property
    def pod(self) -> bool:
        """Whether this remedy runs a pod template (else: the fence flow)."""
        return self.pod_template is not None

    def template(self) -> dict[str, Any]:
        """The PodTemplateSpec (a fresh dict); ``{}`` for a fence-flow remedy."""
        return json.loads(self.pod_template) if self.pod_template else {}

    def chain_entry(self) -> dict[str, Any]:
        """JSON for the NodeFence annotation ``remediation.noderemedy.io/remedy-chain``:
        ``name``, ``period`` (seconds or null), ``cleanResources``, ``pod``, ``executor``."""
        return {
            "name": self.name,
            "period": self.period,
            "cleanResources": self.clean_resources,
            "pod": self.pod,
            "executor": self.executor,
        }


@dataclass(frozen=True)
class RemedyConfig:
    """One ``remedyConfigs`` entry: ``name``, ``pod_template`` (canonical JSON or None),
    ``executor`` (``job``/``inprocess`` or None)."""

    name: str
    pod_template: str | None = None
    executor: str | None = None


@dataclass(frozen=True)
class Threshold:
    """One ``thresholdConfigs`` entry: a node whose condition ``condition_type`` has had a status
    in ``statuses`` for ``period`` seconds is unhealthy. ``remedies``: the ``remedy``/``remedyN``
    lists in order; ``recovery``: the recovery remedies."""

    condition_type: str
    statuses: frozenset[str]
    period: float
    remedies: tuple[tuple[Remedy, ...], ...] = ((Remedy(DEFAULT_REMEDY),),)
    recovery: tuple[Remedy, ...] = (Remedy(DEFAULT_RECOVERY),)

    def describe(self) -> str:
        """``Ready in {False,Unknown} for 300s``: for events and annotations."""
        return f"{self.condition_type} in {{{','.join(sorted(self.statuses))}}} for {self.period:g}s"

    def chain(self) -> tuple[Remedy, ...]:
        """The remedies in the order they escalate: ``remedy1``'s items, then ``remedy2``'s, ..."""
        return tuple(r for step in self.remedies for r in step)


DEFAULT_THRESHOLDS = (Threshold("Ready", frozenset({"False", "Unknown"}), DEFAULT_PERIOD_SECONDS),)


@dataclass(frozen=True)
class RemedyConfiguration:
    """One ``Configuration`` document. ``node_selector`` None = every node."""

    name: str
    node_selector: LabelSelector | None = None
    thresholds: tuple[Threshold, ...] = DEFAULT_THRESHOLDS
    storm_guard: StormGuard = field(default_factory=lambda: StormGuard(min_healthy=IntOrPercent(51, True)))
    pause_requests: tuple[str, ...] = ()
    remedy_configs: tuple[RemedyConfig, ...] = ()

    def remedy_config(self, name: str) -> RemedyConfig | None:
        """The ``remedyConfigs`` entry named ``name``, or None."""
        return next((r for r in self.remedy_configs if r.name == name), None)

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` is watched by this Configuration."""
        return self.node_selector is None or self.node_selector.matches(labels)


@dataclass(frozen=True)
class ConfigurationSet:
    """Every Configuration of a source, in order (a node belongs to the first that selects it),
    plus ``warnings`` (settings that are never used, e.g. a ``remedyConfigs`` entry that no
    ``remedyN`` names)."""

    configurations: tuple[RemedyConfiguration, ...]
    warnings: tuple[str, ...] = ()

    def named(self, name: str) -> RemedyConfiguration | None:
        """The Configuration whose ``metadata.name`` is ``name``, or None."""
        return next((c for c in self.configurations if c.name == name), None)

    def for_node(self, labels: Mapping[str, str]) -> RemedyConfiguration | None:
        """The first Configuration selecting a node with ``labels``, or None."""
        for cfg in self.configurations:
            if cfg.selects(labels):
                return cfg
        return None


def default_configuration() -> ConfigurationSet:
    """What the runner uses without ``--config``: one Configuration ``default`` with every default."""
    return ConfigurationSet((RemedyConfiguration("default"),))


# --- parsing ----------------------------------------------------------------------------------


def _duration(value: Any, where: str) -> float:
    try:
        return parse_seconds(value, where)
    except FieldError as exc:
        raise ConfigError(str(exc)) from exc


def parse_selector_string(text: str, where: str) -> LabelSelector:
    """A :class:`~noderemedy_runner.config.selectors.LabelSelector` from the label-selector string
    syntax (the seed's ``type=compute``; ``kubectl -l``), see
    :func:`noderemedy_runner.config.selectors.parse_selector_string`. Raises :class:`ConfigError`
    naming ``where``."""
    try:
        return _parse_selector_string(text, where)
    except FieldError as exc:
        raise ConfigError(str(exc)) from exc


def _statuses(value: Any, where: str) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ConfigError(f"{where}: needs at least one of {', '.join(CONDITION_STATUSES)}")
    out: set[str] = set()
    for item in items:
        if isinstance(item, bool):  # the seed writes `nodeConditionStatus: false`
            out.add("True" if item else "False")
            continue
        text = str(item).strip().capitalize() if isinstance(item, str) else None
        if text not in CONDITION_STATUSES:
            raise ConfigError(f"{where}: {item!r} is not one of {', '.join(CONDITION_STATUSES)}")
        out.add(text)
    return frozenset(out)


def _remedy_list(value: Any, where: str) -> tuple[Remedy, ...]:
    """The seed writes a remedy as a list of one-key maps (``- name: repair``, ``- period: 3m``);
    a list of ``{name, period, clean-resources}`` maps, a single map or a bare name work too."""
    if isinstance(value, str):
        value = [{"name": value}]
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: a non-empty list of remedies (each with a name)")
    # seed form: every item a one-key map, exactly one of them `name` → one remedy
    if all(isinstance(i, Mapping) and len(i) == 1 for i in value) and sum("name" in i for i in value) == 1:
        merged: dict[str, Any] = {}
        for i in value:
            merged.update(i)
        value = [merged]
    out = []
    for idx, item in enumerate(value):
        at = f"{where}[{idx}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: a remedy is a name or a map with name, period, clean-resources")
        unknown = sorted(set(map(str, item)) - _REMEDY_FIELDS)
        if unknown:
            raise ConfigError(f"{at}: unknown fields {unknown} (allowed: name, period, clean-resources)")
        name = item.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(f"{at}.name: {name!r} is not a lowercase name like 'fence'")
        period = _duration(item["period"], f"{at}.period") if "period" in item else None
        clean = item.get("clean-resources", item.get("clean-resourece", False))
        if not isinstance(clean, bool):
            raise ConfigError(f"{at}.clean-resources: {clean!r} is not true or false")
        out.append(Remedy(name, period, clean))
    return tuple(out)


def _threshold(data: Any, where: str) -> Threshold:
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where}: a threshold is a map with nodeConditionType, nodeConditionStatus, nodeConditionPeriod"
        )
    keys = set(map(str, data))
    unknown = sorted(k for k in keys - _THRESHOLD_FIELDS if not _REMEDY_KEY_RE.match(k))
    if unknown:
        raise ConfigError(f"{where}: unknown fields {unknown}")
    for req in ("nodeConditionType", "nodeConditionStatus", "nodeConditionPeriod"):
        if req not in data:
            raise ConfigError(f"{where}.{req}: required")
    ctype = data["nodeConditionType"]
    if not isinstance(ctype, str) or not re.match(r"^[A-Za-z][A-Za-z0-9_.-]*$", ctype):
        raise ConfigError(f"{where}.nodeConditionType: {ctype!r} is not a condition type like Ready")
    statuses = _statuses(data["nodeConditionStatus"], f"{where}.nodeConditionStatus")
    if ctype == "Ready" and "True" in statuses:
        raise ConfigError(
            f"{where}.nodeConditionStatus: Ready=True is a healthy node; use False and/or Unknown"
        )
    period = _duration(data["nodeConditionPeriod"], f"{where}.nodeConditionPeriod")
    remedy_keys = sorted(
        (k for k in keys if _REMEDY_KEY_RE.match(k)),
        key=lambda k: int(_REMEDY_KEY_RE.match(k).group(1) or 0),  # type: ignore[union-attr]
    )
    remedies = tuple(_remedy_list(data[k], f"{where}.{k}") for k in remedy_keys)
    recovery = (
        _remedy_list(data["recovery"], f"{where}.recovery")
        if "recovery" in data
        else (Remedy(DEFAULT_RECOVERY),)
    )
    return Threshold(ctype, statuses, period, remedies or ((Remedy(DEFAULT_REMEDY),),), recovery)


def _remedy_configs(value: Any, where: str) -> tuple[RemedyConfig, ...]:
    """The seed's ``remedyConfigs``: a list of ``{name, podTemplate}`` or ``{name, executor}``."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"{where}: a list of maps, each with a name")
    out: list[RemedyConfig] = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: a map with name and podTemplate or executor")
        unknown = sorted(set(map(str, item)) - _REMEDY_CONFIG_FIELDS)
        if unknown:
            raise ConfigError(
                f"{at}: unknown fields {unknown} (allowed: executor, name, podTemplate, secretName)"
            )
        name = item.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > MAX_REMEDY_NAME:
            raise ConfigError(
                f"{at}.name: {name!r} is not a lowercase name like 'repair' (at most {MAX_REMEDY_NAME} characters)"
            )
        if any(r.name == name for r in out):
            raise ConfigError(f"{at}.name: {name!r} used twice")
        executor = item.get("executor")
        if executor is not None and executor not in EXECUTORS:
            raise ConfigError(f"{at}.executor: {executor!r} not one of {', '.join(EXECUTORS)}")
        template = None
        if "podTemplate" in item:
            if executor is not None:
                raise ConfigError(
                    f"{at}.executor: a podTemplate remedy always runs as a Job; executor is for the fence flow"
                )
            try:
                secret = (
                    check_secret_name(item["secretName"], f"{at}.secretName")
                    if "secretName" in item
                    else None
                )
                template = pod_template(item["podTemplate"], f"{at}.podTemplate", name, secret)
            except PodTemplateError as exc:
                raise ConfigError(str(exc)) from exc
        elif "secretName" in item:
            raise ConfigError(f"{at}.secretName: only for a podTemplate (the Secret of its env shorthand)")
        out.append(RemedyConfig(name, template, executor))
    return tuple(out)


def _resolve(th: Threshold, cfgs: tuple[RemedyConfig, ...], where: str, warnings: list[str]) -> Threshold:
    """``th`` with each remedy's pod template and executor from ``cfgs``; refuses a remedy that
    comes after a fence-flow remedy (the fence flow ends the chain)."""
    by_name = {c.name: c for c in cfgs}

    def resolved(r: Remedy) -> Remedy:
        c = by_name.get(r.name)
        return replace(r, pod_template=c.pod_template, executor=c.executor) if c else r

    remedies = tuple(tuple(resolved(r) for r in step) for step in th.remedies)
    flow: str | None = None
    for step in remedies:
        for r in step:
            if flow is not None:
                raise ConfigError(
                    f"{where}: remedy {r.name!r} comes after {flow!r}, which runs the fence flow "
                    "(no podTemplate in remedyConfigs) and ends the escalation"
                )
            if not r.pod:
                flow = r.name
    recovery = tuple(resolved(r) for r in th.recovery)
    pods = [r.name for r in recovery if r.pod]
    if pods:
        warnings.append(
            f"{where}.recovery: {pods} have a podTemplate, which recovery does not run: recovery is the "
            "recovery step of fence-config-<node>"
        )
    return replace(th, remedies=remedies, recovery=recovery)


def parse_configuration(doc: Any, source: str, index: int = 0) -> tuple[RemedyConfiguration, list[str]]:
    """One ``Configuration`` document → (:class:`RemedyConfiguration`, warnings).

    ``source`` names the file or ConfigMap key for errors. Raises :class:`ConfigError` on a
    missing/unknown ``apiVersion``/``kind``, unknown fields, or any malformed field."""
    where = f"{source}: document {index}"
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: a Configuration is a map, got {type(doc).__name__}")
    if doc.get("kind") != KIND:
        raise ConfigError(f"{where}.kind: {doc.get('kind')!r}, expected {KIND!r}")
    if doc.get("apiVersion") not in API_VERSIONS:
        raise ConfigError(
            f"{where}.apiVersion: {doc.get('apiVersion')!r} not one of {', '.join(API_VERSIONS)}"
        )
    meta = doc.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ConfigError(f"{where}.metadata: a map")
    name = meta.get("name", f"configuration-{index}")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(f"{where}.metadata.name: {name!r} is not a lowercase DNS label")
    where = f"{source}: Configuration {name}"
    unknown = sorted(set(map(str, doc)) - _TOP_FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown fields {unknown} (allowed: {', '.join(sorted(_TOP_FIELDS))})")
    sel_raw = doc.get("nodeSelector")
    selector: LabelSelector | None = None
    if isinstance(sel_raw, str):
        selector = parse_selector_string(sel_raw, f"{where}: nodeSelector")
    elif sel_raw is not None:
        try:
            selector = parse_label_selector(sel_raw, f"{where}: nodeSelector")
        except FieldError as exc:
            raise ConfigError(str(exc)) from exc
    raw_thresholds = doc.get("thresholdConfigs")
    thresholds: tuple[Threshold, ...]
    if raw_thresholds is None:
        thresholds = DEFAULT_THRESHOLDS
    else:
        if not isinstance(raw_thresholds, list) or not raw_thresholds:
            raise ConfigError(f"{where}: thresholdConfigs: a non-empty list")
        thresholds = tuple(
            _threshold(t, f"{where}: thresholdConfigs[{i}]") for i, t in enumerate(raw_thresholds)
        )
    try:
        guard = parse_storm_guard(doc.get("stormGuard"), f"{where}: stormGuard")
    except FieldError as exc:
        raise ConfigError(str(exc)) from exc
    pauses = doc.get("pauseRequests") or []
    if not isinstance(pauses, list) or not all(isinstance(p, str) and p for p in pauses):
        raise ConfigError(f"{where}: pauseRequests: a list of non-empty strings (reasons)")
    warnings: list[str] = []
    remedy_cfgs = _remedy_configs(doc.get("remedyConfigs"), f"{where}: remedyConfigs")
    thresholds = tuple(
        _resolve(t, remedy_cfgs, f"{where}: thresholdConfigs[{i}]", warnings)
        for i, t in enumerate(thresholds)
    )
    used = {r.name for t in thresholds for r in t.chain()}
    unused = [r.name for r in remedy_cfgs if r.name not in used]
    if unused and raw_thresholds is not None:
        warnings.append(f"{where}: remedyConfigs {unused} are named by no remedyN list: never run")
    return RemedyConfiguration(name, selector, thresholds, guard, tuple(pauses), remedy_cfgs), warnings


def parse_configurations(text: str, source: str) -> ConfigurationSet:
    """Every ``Configuration`` in the YAML stream ``text`` (``source`` names it in errors).
    Raises :class:`ConfigError` on YAML errors, an empty stream or duplicate names."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not YAML: {exc}") from exc
    if not docs:
        raise ConfigError(f"{source}: no Configuration document")
    configs: list[RemedyConfiguration] = []
    warnings: list[str] = []
    for i, doc in enumerate(docs):
        cfg, warn = parse_configuration(doc, source, i)
        if any(c.name == cfg.name for c in configs):
            raise ConfigError(f"{source}: Configuration {cfg.name}: metadata.name used twice")
        configs.append(cfg)
        warnings.extend(warn)
    return ConfigurationSet(tuple(configs), tuple(warnings))


def parse_configmap(configmap: Mapping[str, Any]) -> ConfigurationSet:
    """Configurations from a ConfigMap object (JSON form): every ``data`` key ending in ``.yaml``
    or ``.yml``, in key order. Raises :class:`ConfigError` naming ``ConfigMap <ns>/<name> key <k>``."""
    meta = configmap.get("metadata") or {}
    cm = f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"
    data = configmap.get("data") or {}
    keys = sorted(k for k in data if k.endswith((".yaml", ".yml")))
    if not keys:
        raise ConfigError(f"{cm}: no data key ending in .yaml or .yml")
    configs: list[RemedyConfiguration] = []
    warnings: list[str] = []
    for key in keys:
        part = parse_configurations(str(data[key]), f"{cm} key {key}")
        for cfg in part.configurations:
            if any(c.name == cfg.name for c in configs):
                raise ConfigError(f"{cm} key {key}: Configuration {cfg.name}: metadata.name used twice")
            configs.append(cfg)
        warnings.extend(part.warnings)
    return ConfigurationSet(tuple(configs), tuple(warnings))


def load(spec: str, api_client: Any = None) -> ConfigurationSet:
    """Configurations from ``--config``: a file path, or ``configmap:<namespace>/<name>`` (read
    with ``api_client``). Raises :class:`ConfigError` (unreadable file, missing ConfigMap, bad
    content)."""
    if spec.startswith("configmap:"):
        ref = spec[len("configmap:") :]
        if ref.count("/") != 1 or not all(ref.split("/")):
            raise ConfigError(f"--config {spec!r}: expected configmap:<namespace>/<name>")
        ns, name = ref.split("/")
        from kubernetes import client

        from noderemedy_runner.kube.client import api
        from noderemedy_runner.kube.errors import KubeError

        try:
            obj = api(api_client, client.CoreV1Api).read_namespaced_config_map(name, ns)
        except KubeError as exc:
            raise ConfigError(f"ConfigMap {ns}/{name}: cannot read it ({exc})") from exc
        return parse_configmap({"metadata": {"namespace": ns, "name": name}, "data": obj.data or {}})
    try:
        with open(spec, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"{spec}: cannot read it ({exc.strerror})") from exc
    return parse_configurations(text, spec)


__all__ = [
    "API_VERSIONS",
    "ConfigError",
    "ConfigurationSet",
    "IntOrPercent",
    "EXECUTORS",
    "Remedy",
    "RemedyConfig",
    "RemedyConfiguration",
    "StormGuard",
    "Threshold",
    "default_configuration",
    "load",
    "parse_configmap",
    "parse_configuration",
    "parse_configurations",
    "parse_selector_string",
]
