"""Parsing a ``fence-method-template-<name>`` ConfigMap: one fencing device (type or the seed's
``agent_name=``, model, address, Secret name, non-secret device options)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from noderemedy_runner.config.fence.devices import (
    _GENERIC_ONLY,
    _INT,
    _OID,
    _OID_RE,
    _REGION,
    _URI,
    _URI_RE,
    DEVICE_MODULES,
    DEVICE_OPTIONS,
    MODEL_PROFILES,
    REDFISH_SCHEMES,
    SEED_AGENTS,
)
from noderemedy_runner.config.fence.model import (
    TEMPLATE_KEY,
    TEMPLATE_PREFIX,
    FenceConfigError,
    FenceTemplate,
)
from noderemedy_runner.config.fence.properties import (
    _ADDRESS_RE,
    _DNS_SUBDOMAIN_RE,
    _TEMPLATE_KEYS,
    _reject_credentials,
    parse_properties,
)


def _parse_address(address: str, configmap: str) -> tuple[str, int | None]:
    m = _ADDRESS_RE.match(address)
    if not m:
        raise FenceConfigError(
            configmap, TEMPLATE_KEY, f"address={address!r} is not host[:port] or scheme://host[:port]"
        )
    port = m.group("port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"address={address!r}: port {port} not in 1..65535")
    return m.group("host").strip("[]"), None if port is None else int(port)


def _device_options(
    props: Mapping[str, str], dtype: str, model: str | None, configmap: str
) -> tuple[tuple[str, str], ...]:
    allowed = DEVICE_OPTIONS[dtype]
    out: list[tuple[str, str]] = []
    for key in sorted(set(props) - set(_TEMPLATE_KEYS)):
        if key not in allowed:
            raise FenceConfigError(
                configmap,
                TEMPLATE_KEY,
                f"unknown properties [{key!r}] for type={dtype}; allowed: {list(_TEMPLATE_KEYS) + sorted(allowed)}",
            )
        value = props[key]
        choices = allowed[key]
        if key in _GENERIC_ONLY and model != "generic":
            raise FenceConfigError(configmap, TEMPLATE_KEY, f"{key}= applies to model=generic only")
        if choices == _INT:
            ok = value.isdigit()
        elif choices == _OID:
            ok = bool(_OID_RE.match(value))
        elif choices == _URI:
            ok = bool(_URI_RE.match(value))
        elif choices == _REGION:
            ok = bool(re.match(r"^[a-z]{2}(-[a-z]+)+-[0-9]$", value))
        else:
            ok = choices is None or value in choices
        if not ok:
            want = (
                "an integer"
                if choices == _INT
                else "a dotted OID"
                if choices == _OID
                else "an absolute path (/...)"
                if choices == _URI
                else "a region name (us-east-1)"
                if choices == _REGION
                else f"one of {list(choices or ())}"
            )
            raise FenceConfigError(configmap, TEMPLATE_KEY, f"{key}={value!r} is not {want}")
        out.append((key, value))
    if model == "generic" and "status_oid" not in props:
        raise FenceConfigError(configmap, TEMPLATE_KEY, "model=generic needs status_oid=")
    return tuple(out)


def parse_template(configmap: str, data: Any) -> FenceTemplate:
    """Parse a ``fence-method-template-<name>`` ConfigMap's ``data``.

    Required: ``type=`` (ipmi|pdu|fc) or the seed's ``agent_name=`` (see :data:`SEED_AGENTS`),
    ``address=`` (or the seed's ``ipaddr=`` with optional ``ipport=``), ``secret=`` (a Secret
    name). ``model=`` for pdu and fc (:data:`MODEL_PROFILES`; default ``auto`` / ``ifmib``).
    Optional non-secret device options per :data:`DEVICE_OPTIONS`. Raises
    :class:`FenceConfigError` for anything else, and for credentials.
    """
    if not configmap.startswith(TEMPLATE_PREFIX) or len(configmap) == len(TEMPLATE_PREFIX):
        raise FenceConfigError(configmap, None, f"template ConfigMap names start with {TEMPLATE_PREFIX!r}")
    if not isinstance(data, Mapping):
        raise FenceConfigError(configmap, None, f"data must be a mapping, got {type(data).__name__}")
    if TEMPLATE_KEY not in data:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"missing; data keys are {sorted(map(str, data))}")
    extra = sorted(str(k) for k in data if k != TEMPLATE_KEY)
    if extra:
        raise FenceConfigError(configmap, extra[0], f"unexpected key; a template holds only {TEMPLATE_KEY}")
    props = parse_properties(data[TEMPLATE_KEY], configmap, TEMPLATE_KEY)
    _reject_credentials(props, configmap, TEMPLATE_KEY)

    seed_model: str | None = None
    if "type" in props and "agent_name" in props:
        raise FenceConfigError(configmap, TEMPLATE_KEY, "give type= or agent_name=, not both")
    if "type" in props:
        dtype = props["type"]
        if dtype not in DEVICE_MODULES:
            raise FenceConfigError(
                configmap, TEMPLATE_KEY, f"type={dtype!r} not one of {sorted(DEVICE_MODULES)}"
            )
    elif "agent_name" in props:
        agent = props["agent_name"]
        if agent not in SEED_AGENTS:
            raise FenceConfigError(
                configmap, TEMPLATE_KEY, f"agent_name={agent!r} not one of {sorted(SEED_AGENTS)}"
            )
        dtype, seed_model = SEED_AGENTS[agent]
    else:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"missing type= (one of {sorted(DEVICE_MODULES)})")

    models = MODEL_PROFILES[dtype]
    model: str | None = None
    if models:
        model = props.get("model") or seed_model or next(iter(models))
        if model not in models:
            raise FenceConfigError(
                configmap, TEMPLATE_KEY, f"model={model!r} not one of {list(models)} for type={dtype}"
            )
    elif "model" in props:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"model= does not apply to type={dtype}")
    options = _device_options(props, dtype, model, configmap)

    if "address" in props and ("ipaddr" in props or "ipport" in props):
        raise FenceConfigError(configmap, TEMPLATE_KEY, "give address= or ipaddr=/ipport=, not both")
    if "address" in props:
        address = props["address"]
    elif "ipaddr" in props:
        address = props["ipaddr"] + (f":{props['ipport']}" if props.get("ipport") else "")
    elif dtype in ("aws", "kdump"):
        address = ""  # aws: AWS's own regional endpoint; kdump: listen on every address, port 7410
    else:
        raise FenceConfigError(configmap, TEMPLATE_KEY, "missing address= (host[:port] of the device)")
    if not address and dtype not in ("aws", "kdump"):
        raise FenceConfigError(configmap, TEMPLATE_KEY, "address= is empty")
    host, port = _parse_address(address, configmap) if address else ("", None)
    if dtype == "aws" and address and not re.match(r"^https?://", address):
        raise FenceConfigError(
            configmap, TEMPLATE_KEY, f"address={address!r}: an EC2 endpoint is http(s)://host[:port]"
        )
    if dtype == "redfish":
        scheme = address.split("://", 1)[0] if "://" in address else "https"
        if scheme not in REDFISH_SCHEMES:
            raise FenceConfigError(
                configmap,
                TEMPLATE_KEY,
                f"address={address!r}: scheme {scheme!r} not one of {sorted(REDFISH_SCHEMES)}",
            )
        options = tuple(sorted((*options, ("ssl", "true" if REDFISH_SCHEMES[scheme] else "false"))))

    secret = props.get("secret", "")
    if not secret and dtype == "kdump":  # the kdump protocol has no credentials
        return FenceTemplate(configmap, dtype, model, address, "", host, port, options)  # type: ignore[arg-type]
    if not secret:
        raise FenceConfigError(
            configmap, TEMPLATE_KEY, "missing secret= (name of the Secret with the credentials)"
        )
    if not _DNS_SUBDOMAIN_RE.match(secret) or len(secret) > 253:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"secret={secret!r} is not a valid Secret name")
    return FenceTemplate(configmap, dtype, model, address, secret, host, port, options)  # type: ignore[arg-type]
