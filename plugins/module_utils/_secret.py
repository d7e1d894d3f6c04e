# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading fencing credentials from a Kubernetes Secret (``noderemedy.core.secret_info``).

* :func:`decode_secret_data` -- pure: the Secret's base64 ``data`` -> ``{key: str}``;
* :func:`read_secret` -- one GET of ``/api/v1/namespaces/<ns>/secrets/<name>`` through
  :func:`~ansible_collections.noderemedy.core.plugins.module_utils._kube.request` (the raw path:
  importing the generated ``CoreV1Api`` and its models costs about 0.8 s per module run).

Error messages name the Secret and the key, never a value.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, request


def decode_secret_data(raw: Mapping[str, Any], keys: Iterable[str] | None, where: str) -> dict[str, str]:
    """Decode a Secret's ``data`` (base64 values) to UTF-8 text.

    Args:
        raw: the Secret's ``data`` (``{key: base64 str}``; None-like for an empty Secret).
        keys: keys that must exist (only they are returned); None or empty: every key.
        where: ``namespace/name`` of the Secret, for messages.

    Returns:
        ``{key: str}``.

    Raises:
        KubeError: ``invalid`` for a missing key (naming the keys that exist) or a value that is not
            base64 of UTF-8 text (naming the key, never the value).
    """
    raw = raw or {}
    out: dict[str, str] = {}
    for key in list(keys) if keys else sorted(raw):
        if key not in raw:
            raise KubeError(f"Secret {where}: key {key!r} missing; keys are {sorted(raw)}", "invalid")
        try:
            out[key] = base64.b64decode(raw[key], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, TypeError, ValueError) as exc:
            raise KubeError(f"Secret {where}: key {key!r} is not UTF-8 text", "invalid") from exc
    return out


def read_secret(client: Any, name: str, namespace: str, keys: Iterable[str] | None) -> dict[str, str]:
    """Decoded data of Secret ``namespace/name``: ``{key: str}`` (see :func:`decode_secret_data`).

    Args:
        client: a ``kubernetes.client.ApiClient`` (``_kube.get_api_client``).

    Raises:
        KubeError: ``not_found`` naming the Secret; ``invalid`` (see :func:`decode_secret_data`);
            any other class from ``_kube.classify`` (forbidden, unreachable, timeout, ...).
    """
    where = f"{namespace}/{name}"
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(name, safe='')}"
    try:
        secret = request(client, "GET", path) or {}
    except KubeError as exc:
        if exc.reason == "not_found":
            raise KubeError(f"Secret {where} not found", "not_found", exc.status) from exc
        raise
    return decode_secret_data(secret.get("data") or {}, keys, where)
