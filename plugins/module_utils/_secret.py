# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading fencing credentials from a Kubernetes Secret.

* :func:`decode_secret_data` -- pure: the Secret's base64 ``data`` -> ``{key: str}``;
* :func:`read_secret` -- one GET of ``/api/v1/namespaces/<ns>/secrets/<name>`` through
  :func:`~ansible_collections.noderemedy.core.plugins.module_utils._kube.request` (the raw path:
  importing the generated ``CoreV1Api`` and its models costs about 0.8 s per module run);
* :data:`CREDENTIALS_SECRET_ARGSPEC` and :func:`apply_credentials_secret` -- the fencing modules'
  ``credentials_secret`` option: the module reads its device credentials from a Secret *itself*,
  so the values never pass through a task result, an extra variable or a log (DESIGN.md
  invariant 5), and a fence step needs no separate ``secret_info`` run (about 0.9 s less).

``_kube`` (and with it the kubernetes library) is imported only when a Secret is read, so the
fencing modules do not pay for it otherwise. Error messages name the Secret and the key, never a
value.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

#: The fencing modules' ``credentials_secret`` option; documented 1:1 by ``doc_fragments/fence.py``
#: ``DOCUMENTATION`` (with ``_fence.FENCE_ARG_SPEC``).
CREDENTIALS_SECRET_ARGSPEC: dict[str, dict[str, Any]] = {
    "credentials_secret": {
        "type": "dict",
        "no_log": False,  # a reference (Secret name and namespace), not a secret
        "options": {
            "name": {"type": "str", "required": True},
            "namespace": {"type": "str", "required": True},
            "kubeconfig": {"type": "raw"},
            "context": {"type": "str"},
        },
    }
}


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
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError

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
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import (
        KubeError,
        request,
    )

    where = f"{namespace}/{name}"
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(name, safe='')}"
    try:
        secret = request(client, "GET", path) or {}
    except KubeError as exc:
        if exc.reason == "not_found":
            raise KubeError(f"Secret {where} not found", "not_found", exc.status) from exc
        raise
    return decode_secret_data(secret.get("data") or {}, keys, where)


def kube_auth_from_env(kubeconfig: Any = None, context: str | None = None) -> dict[str, Any]:
    """The ``_kube`` auth options for a Secret read: ``kubeconfig`` and ``context`` as given, every
    other option (and those two when not given) from its ``K8S_AUTH_*`` environment variable, as
    the modules with the ``kube_auth`` options read them; with none, in-cluster or the default
    kubeconfig (``_kube.build_configuration``)."""
    from ansible.module_utils.parsing.convert_bool import boolean

    from ansible_collections.noderemedy.core.plugins.module_utils._kube import (
        KUBE_AUTH_ARGSPEC,
    )

    out: dict[str, Any] = {}
    for key, spec in KUBE_AUTH_ARGSPEC.items():
        value = None
        fallback = spec.get("fallback")
        if fallback:
            for var in fallback[1]:
                if os.environ.get(var):
                    value = os.environ[var]
                    break
        if value is not None and spec.get("type") == "bool":
            value = boolean(value, strict=False)
        out[key] = value
    if kubeconfig is not None:
        out["kubeconfig"] = kubeconfig
    if context is not None:
        out["context"] = context
    return out


def apply_credentials_secret(module: Any, keymap: Mapping[str, str], fence: Mapping[str, Any]) -> None:
    """Fill a fencing module's credential options from its ``credentials_secret`` (if given).

    Args:
        module: the ``AnsibleModule``; ``module.params["credentials_secret"]`` is ``{name,
            namespace, kubeconfig, context}`` or None (then nothing happens).
        keymap: Secret key -> module option, e.g. ``{"username": "username", "password":
            "password"}``. A key missing from the Secret is skipped; an option the task set itself
            is kept. Every value read is added to ``module.no_log_values``, so it is masked in
            anything the module returns.
        fence: the module's unverified ``fence`` evidence (``_fence.unverified``), returned when
            the Secret cannot be read.

    Fails the module (``error: config``, ``reason``: the Kubernetes error class -- not_found,
    forbidden, invalid ...; the message names the Secret, never a value) when the Secret cannot
    be read, before anything is sent to the device.
    """
    ref = module.params.get("credentials_secret")
    if not ref:
        return
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import (
        KubeError,
        get_api_client,
    )

    try:
        client = get_api_client(kube_auth_from_env(ref.get("kubeconfig"), ref.get("context")))
        data = read_secret(client, ref["name"], ref["namespace"], None)
    except KubeError as exc:
        module.fail_json(
            msg=f"credentials_secret: {exc.message}", error="config", reason=exc.reason, fence=dict(fence)
        )
    module.no_log_values.update(v for v in data.values() if v)
    for key, option in keymap.items():
        if key in data and module.params.get(option) in (None, ""):
            module.params[option] = data[key]
