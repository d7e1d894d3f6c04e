"""A remedy's pod template (the node remedy seed's ``remedyConfigs[].podTemplate``): checked at
load time, and the seed's container shorthand turned into Kubernetes fields.

The seed writes a remedy container as::

    containers:
    - name: repair
      image: IMAGE:VERSION
      command: [ "binary", "clean node command" ]
      env: ["secret-key"]                  # keys of a Secret
      configmaps: ["fence-method-config"]  # ConfigMaps to mount

which a PodSpec does not have (``env`` is a list of EnvVar maps; there is no ``configmaps``). The
shorthand is accepted and expanded here (:func:`pod_template`), so the rest of the runner only
ever sees a PodTemplateSpec:

* a **string in** ``env`` names a key of the remedy's Secret, and becomes
  ``{name: <KEY>, valueFrom: {secretKeyRef: {name: <secret>, key: <key>}}}``: the variable's name
  is the key upper-cased with ``-`` and ``.`` turned into ``_`` (``secret-key`` →
  ``$SECRET_KEY``). The Secret is the entry's ``secretName`` (default
  ``remedy-<remedy name>``, see :func:`default_secret_name`), in the runner's namespace, where
  the Job runs. Only the reference is in the Job; the kubelet reads the value. A Secret or key
  that does not exist keeps the pod from starting (``CreateContainerConfigError``): the remedy
  fails at once, naming it. EnvVar maps in ``env`` are kept as they are.
* ``configmaps`` names ConfigMaps (in the runner's namespace); each becomes a ``configMap``
  volume mounted read-only at ``/etc/noderemedy/configmaps/<name>`` (:data:`CONFIGMAP_MOUNT_ROOT`)
  in that container.

What is checked (each error a :class:`PodTemplateError` naming the field): the shape (``metadata``
with ``labels``/``annotations`` only, ``spec.containers`` a non-empty list), container names
(DNS labels, unique), images (non-empty, no surrounding spaces), ``command``/``args`` (lists of
strings), env names, Secret keys, ConfigMap names, labels and annotations (Kubernetes' own
syntax), volume names (no clash with the template's own), and ``restartPolicy`` (Never: retries
belong to the escalation). Anything else in the PodSpec is passed on as written; the API server
has the last word, and a Job it refuses fails that remedy at once with a condition and an Event
(:mod:`noderemedy_runner.loops.remedies`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

#: Where a ``configmaps`` entry is mounted: ``<root>/<configmap name>``.
CONFIGMAP_MOUNT_ROOT = "/etc/noderemedy/configmaps"
#: Longest remedy name: it is a label value of the remedy's Job (at most 63 characters).
MAX_REMEDY_NAME = 63

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: An environment variable name every Kubernetes release accepts (the C-identifier-like rule
#: before RelaxedEnvironmentVariableValidation).
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_TEMPLATE_FIELDS = {"metadata", "spec"}
_METADATA_FIELDS = {"labels", "annotations"}
_SHORTHAND_FIELDS = {"configmaps"}


class PodTemplateError(ValueError):
    """A pod template that cannot be used; the message names the field
    (``...remedyConfigs[0].podTemplate.spec.containers[0].env[1]: ...``)."""


def default_secret_name(remedy: str) -> str:
    """The Secret whose keys the ``env`` shorthand of remedy ``remedy`` names when its
    ``remedyConfigs`` entry sets no ``secretName``: ``remedy-<remedy>``."""
    return f"remedy-{remedy}"


def env_name(key: str) -> str:
    """The environment variable a Secret key of the ``env`` shorthand becomes: upper-cased,
    ``-`` and ``.`` as ``_`` (``secret-key`` → ``SECRET_KEY``)."""
    return key.upper().replace("-", "_").replace(".", "_")


def volume_name(configmap: str) -> str:
    """The volume of ConfigMap ``configmap`` (``configmaps`` shorthand): ``cm-<name>`` with dots as
    dashes; beyond 63 characters (a volume name is a DNS label) its first 52 and 10 hex digits of
    the name's SHA-256."""
    name = "cm-" + configmap.replace(".", "-")
    if len(name) <= 63:
        return name
    return f"{name[:52].rstrip('-')}-{hashlib.sha256(configmap.encode()).hexdigest()[:10]}"


def _qualified_key(key: Any, where: str) -> None:
    """A label or annotation key: ``[prefix/]name``, prefix a DNS subdomain (at most 253), name at
    most 63 characters of Kubernetes' qualified-name syntax."""
    if not isinstance(key, str):
        raise PodTemplateError(f"{where}: key {key!r} is not a string")
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))):
        raise PodTemplateError(f"{where}: key {key!r}: its prefix is not a DNS subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        raise PodTemplateError(f"{where}: key {key!r} is not a qualified name (at most 63 characters)")


def _metadata(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodTemplateError(f"{where}: a map with labels and/or annotations")
    unknown = sorted(set(map(str, value)) - _METADATA_FIELDS)
    if unknown:
        raise PodTemplateError(f"{where}: unknown fields {unknown} (allowed: annotations, labels)")
    out: dict[str, Any] = {}
    labels = value.get("labels")
    if labels is not None:
        out["labels"] = _key_map(
            labels, f"{where}.labels", _is_label_value, "a label value (at most 63 characters)"
        )
    annotations = value.get("annotations")
    if annotations is not None:
        out["annotations"] = _key_map(annotations, f"{where}.annotations", lambda _: True, "a string")
        if sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
            raise PodTemplateError(f"{where}.annotations: more than 256 KiB")
    return out


def _is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _key_map(value: Any, where: str, valid: Callable[[str], bool], what: str) -> dict[str, str]:
    """The ``labels`` or ``annotations`` at ``where``: a map of qualified keys
    (:func:`_qualified_key`) to strings that ``valid`` accepts, copied. Raises
    :class:`PodTemplateError` on another value, naming the first key whose value is not ``what``."""
    if not isinstance(value, Mapping):
        raise PodTemplateError(f"{where}: a map of strings")
    for k, v in value.items():
        _qualified_key(k, where)
        if not isinstance(v, str) or not valid(v):
            raise PodTemplateError(f"{where}.{k}: {v!r} is not {what}")
    return dict(value)


def _env(value: Any, where: str, secret: str) -> list[dict[str, Any]]:
    """The container's ``env``: shorthand strings as ``secretKeyRef`` entries, maps as written."""
    if not isinstance(value, list):
        raise PodTemplateError(f"{where}: a list of Secret keys (the seed's shorthand) or of EnvVar maps")
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(item, str):
            if len(item) > 253 or not _SECRET_KEY.match(item):
                raise PodTemplateError(
                    f"{at}: {item!r} is not a Secret key (letters, digits, '-', '_', '.'; at most 253)"
                )
            name = env_name(item)
            if not _ENV_NAME.match(name):
                raise PodTemplateError(
                    f"{at}: Secret key {item!r} gives the variable {name!r}, which may not start with a "
                    "digit; write an EnvVar map with valueFrom.secretKeyRef instead"
                )
            entry: dict[str, Any] = {
                "name": name,
                "valueFrom": {"secretKeyRef": {"name": secret, "key": item}},
            }
        elif isinstance(item, Mapping):
            given = item.get("name")
            if not isinstance(given, str) or not _ENV_NAME.match(given):
                raise PodTemplateError(f"{at}.name: {given!r} is not an environment variable name")
            name = given
            if "value" in item and not isinstance(item["value"], str):
                raise PodTemplateError(f"{at}.value: {item['value']!r} is not a string (quote it)")
            entry = dict(item)
        else:
            raise PodTemplateError(f"{at}: {item!r} is neither a Secret key nor an EnvVar map")
        if name in seen:
            raise PodTemplateError(f"{at}: variable {name} is set twice (also by {seen[name]})")
        seen[name] = at
        out.append(entry)
    return out


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise PodTemplateError(f"{where}: a list of strings")
    return list(value)


def _container(c: Any, where: str, secret: str, volumes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(c, Mapping):
        raise PodTemplateError(f"{where}: a container is a map with name and image")
    out = dict(c)
    name = c.get("name")
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
        raise PodTemplateError(f"{where}.name: {name!r} is not a lowercase DNS label (at most 63 characters)")
    image = c.get("image")
    if not isinstance(image, str) or not image or image != image.strip():
        raise PodTemplateError(f"{where}.image: required, a string without surrounding spaces")
    for key in ("command", "args"):
        if key in c:
            out[key] = _strings(c[key], f"{where}.{key}")
    if "env" in c:
        out["env"] = _env(c["env"], f"{where}.env", secret)
    if "configmaps" in c:
        names = c["configmaps"]
        if not isinstance(names, list):
            raise PodTemplateError(f"{where}.configmaps: a list of ConfigMap names")
        mounts = list(c.get("volumeMounts") or [])
        for i, cm in enumerate(names):
            at = f"{where}.configmaps[{i}]"
            if not isinstance(cm, str) or len(cm) > 253 or not _DNS_SUBDOMAIN.match(cm):
                raise PodTemplateError(f"{at}: {cm!r} is not a ConfigMap name (a DNS subdomain)")
            vol = volume_name(cm)
            path = f"{CONFIGMAP_MOUNT_ROOT}/{cm}"
            if any(isinstance(m, Mapping) and m.get("mountPath") == path for m in mounts):
                raise PodTemplateError(f"{at}: {cm!r} is named twice (both mounted at {path})")
            volumes.setdefault(vol, {"name": vol, "configMap": {"name": cm}})
            mounts.append({"name": vol, "mountPath": path, "readOnly": True})
        out["volumeMounts"] = mounts
        del out["configmaps"]
    return out


def pod_template(value: Any, where: str, remedy: str, secret_name: str | None = None) -> str:
    """The PodTemplateSpec of remedy ``remedy``, checked and with the seed's shorthand expanded
    (module docs), as canonical JSON (sorted keys).

    Args:
        value: the ``podTemplate`` as loaded from YAML.
        where: the field path for errors (``<source>: Configuration <name>: remedyConfigs[0].podTemplate``).
        remedy: the remedy's name (the default Secret of the ``env`` shorthand).
        secret_name: the entry's ``secretName`` (None: :func:`default_secret_name`).

    Raises :class:`PodTemplateError` naming the field."""
    if not isinstance(value, Mapping):
        raise PodTemplateError(f"{where}: a PodTemplateSpec (a map with spec.containers)")
    unknown = sorted(set(map(str, value)) - _TEMPLATE_FIELDS)
    if unknown:
        raise PodTemplateError(f"{where}: unknown fields {unknown} (a PodTemplateSpec has metadata and spec)")
    meta = _metadata(value.get("metadata"), f"{where}.metadata")
    spec = value.get("spec")
    if not isinstance(spec, Mapping):
        raise PodTemplateError(f"{where}.spec: required, a PodSpec (a map with containers)")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise PodTemplateError(f"{where}.spec.containers: a non-empty list of containers")
    if spec.get("restartPolicy", "Never") != "Never":
        raise PodTemplateError(
            f"{where}.spec.restartPolicy: {spec.get('restartPolicy')!r}; a remedy pod runs once (Never): "
            "retries belong to the escalation"
        )
    secret = secret_name or default_secret_name(remedy)
    own_volumes = spec.get("volumes") or []
    if not isinstance(own_volumes, list) or not all(isinstance(v, Mapping) for v in own_volumes):
        raise PodTemplateError(f"{where}.spec.volumes: a list of volumes")
    added: dict[str, dict[str, Any]] = {}
    out_containers = []
    names: set[str] = set()
    for i, c in enumerate(containers):
        at = f"{where}.spec.containers[{i}]"
        done = _container(c, at, secret, added)
        if done["name"] in names:
            raise PodTemplateError(f"{at}.name: {done['name']!r} used twice")
        names.add(done["name"])
        out_containers.append(done)
    own_names = {str(v.get("name")) for v in own_volumes}
    clash = sorted(own_names & set(added))
    if clash:
        raise PodTemplateError(
            f"{where}.spec.volumes: {clash} are also the volumes of the configmaps shorthand; rename them"
        )
    out_spec = {**spec, "containers": out_containers}
    if added:
        out_spec["volumes"] = [*own_volumes, *added.values()]
    out: dict[str, Any] = {"spec": out_spec}
    if meta:
        out["metadata"] = meta
    try:
        return json.dumps(out, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise PodTemplateError(f"{where}: not JSON-able ({exc})") from exc


def check_secret_name(value: Any, where: str) -> str:
    """A ``secretName``: a Secret name (DNS subdomain, at most 253 characters). Raises
    :class:`PodTemplateError` naming ``where``."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise PodTemplateError(f"{where}: {value!r} is not a Secret name (a DNS subdomain)")
    return value


__all__ = [
    "CONFIGMAP_MOUNT_ROOT",
    "MAX_REMEDY_NAME",
    "PodTemplateError",
    "check_secret_name",
    "default_secret_name",
    "env_name",
    "pod_template",
    "volume_name",
]
