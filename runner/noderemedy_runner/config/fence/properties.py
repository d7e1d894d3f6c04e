"""The ``key=value`` properties inside the fence ConfigMaps (a Java-properties subset), the
property names that are credentials (refused: credentials live in Secrets), and the name
patterns the parsers check."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from noderemedy_runner.config.fence.model import FenceConfigError

_CREDENTIAL_KEYS = (
    "password",
    "passwd",
    "username",
    "login",
    "user",
    "community",
    "auth_key",
    "priv_key",
    "snmp_priv_passwd",
)
_TEMPLATE_KEYS = ("name", "type", "agent_name", "model", "address", "ipaddr", "ipport", "secret")
_METHOD_KEYS = ("template", "plug", "action")

_PROP_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_METHOD_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
_PLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")
_ADDRESS_RE = re.compile(
    r"^(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?/?$"
)


def parse_properties(text: Any, configmap: str, key: str) -> dict[str, str]:
    """Parse ``key=value`` lines (a simple Java-properties subset) into a dict.

    Blank lines and lines starting with ``#`` or ``!`` are skipped; whitespace around keys and
    values is dropped. Raises :class:`FenceConfigError` for a non-string value, a line without
    ``=``, an empty or malformed key, or a key given twice (with both line numbers). Messages
    name lines by number and never echo a malformed line (it may hold a credential).
    """
    if not isinstance(text, str):
        raise FenceConfigError(configmap, key, f"value must be a string, got {type(text).__name__}")
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            # the line is not echoed: it may be a credential written without '=' (invariant 5)
            raise FenceConfigError(configmap, key, f"line {lineno}: expected key=value (no '=' found)")
        prop, _, value = line.partition("=")
        prop = prop.strip()
        if not _PROP_KEY_RE.match(prop):
            raise FenceConfigError(
                configmap, key, f"line {lineno}: malformed property name (letters, digits, '_', '.', '-')"
            )
        if prop in seen:
            raise FenceConfigError(configmap, key, f"line {lineno}: {prop}= already set on line {seen[prop]}")
        seen[prop] = lineno
        out[prop] = value.strip()
    return out


def _reject_credentials(props: Mapping[str, str], configmap: str, key: str) -> None:
    for prop in props:
        if prop.lower() in _CREDENTIAL_KEYS:
            raise FenceConfigError(
                configmap,
                key,
                f"{prop}= is a credential: credentials belong in the Secret named by secret= "
                "(a ConfigMap is readable by anyone who can read the namespace)",
            )


def _reject_unknown(props: Mapping[str, str], allowed: tuple[str, ...], configmap: str, key: str) -> None:
    unknown = sorted(set(props) - set(allowed))
    if unknown:
        raise FenceConfigError(configmap, key, f"unknown properties {unknown}; allowed: {list(allowed)}")
