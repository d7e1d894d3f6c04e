# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""kube-apiserver identity Leases (KEP-1965, private to noderemedy.core).

With the ``APIServerIdentity`` feature (beta, on by default since Kubernetes 1.26; an apiserver
publishes StorageVersions only with it and ``StorageVersionAPI`` both on,
``k8s.io/apiserver`` ``pkg/server/genericapiserver.go``) every kube-apiserver keeps a Lease in
``kube-system`` that says it is alive
(``k8s.io/kubernetes`` ``pkg/controlplane/apiserver/server.go``, v1.34):

- ``metadata.name`` is the apiserver's ID, ``apiserver-<base32 of a SHA-256 of its host name and
  "kube-apiserver">`` (``k8s.io/apiserver`` ``pkg/server/config.go``): the very ID the apiserver
  writes as ``apiServerID`` into every StorageVersion object (:mod:`._storage_version`). It depends
  only on the host name, so a new revision of the static pod on the same node keeps it.
- ``metadata.labels``: ``apiserver.kubernetes.io/identity: kube-apiserver`` (which component owns the
  Lease) and ``kubernetes.io/hostname: <os.Hostname() of the apiserver>``.
- ``spec.holderIdentity`` is ``<ID>_<uuid of this process>``; ``spec.renewTime`` is renewed every
  10 s and ``spec.leaseDurationSeconds`` is 3600. The apiserver's lease garbage collector deletes
  expired Leases, and kube-controller-manager's ``storageversiongc`` then removes the gone
  apiserver's entries from the StorageVersion objects.

So the Lease of a node's own kube-apiserver is the one labelled with the node's host name, and a
StorageVersion entry whose ID has no Lease (or only an expired one) belongs to an apiserver that is
gone: it is stale.

Pure: :func:`identities`, :func:`own_identity`, :func:`expected_id`. I/O: :func:`list_identity_leases`.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
import re
import struct
import time
from typing import Any

#: the label that marks a Lease as an apiserver identity Lease; its value names the component
IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
#: the value of :data:`IDENTITY_LABEL` on kube-apiserver's own Leases
KUBE_APISERVER = "kube-apiserver"
#: the well-known label with the apiserver's host name
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: the namespace of the identity Leases
NAMESPACE = "kube-system"

_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


class IdentityError(Exception):
    """The identity Leases cannot be read or do not name this node's apiserver.

    Attributes: ``field`` (the parameter at fault, e.g. ``apiserver_id``, or ''), ``reason``
    (machine-readable: ``NotFound``, ``Unreachable``, ``ApiError``).
    """

    def __init__(self, message: str, *, field: str = "", reason: str = "Error") -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason


def expected_id(hostname: str, component: str = KUBE_APISERVER) -> str:
    """The ID a kube-apiserver on host ``hostname`` gives itself (``k8s.io/apiserver``
    ``pkg/server/config.go``): ``"apiserver-"`` + lower-case unpadded base32 of the first 16 bytes of
    SHA-256 over the host name and the component, each prefixed with its 16-bit big-endian length."""
    data = b""
    for part in (hostname.encode(), component.encode()):
        data += struct.pack(">H", len(part)) + part
    digest = hashlib.sha256(data).digest()[:16]
    return "apiserver-" + base64.b32encode(digest).decode().rstrip("=").lower()


def _epoch(text: Any) -> float | None:
    """Seconds since the epoch of an RFC 3339 (Kubernetes ``MicroTime``) string; None if absent or unreadable."""
    m = _RFC3339.match(str(text or ""))
    if not m:
        return None
    base = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float(m.group(2) or 0)
    zone = m.group(3)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        base -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return base


def identities(leases: list[dict[str, Any]], now: float) -> dict[str, dict[str, Any]]:
    """The apiserver identities the Leases publish, by ID (the Lease name).

    ``leases`` are Lease objects as the API returns them (others than identity Leases are
    ignored); ``now`` is seconds since the epoch. Returns::

        {"apiserver-abc": {"component": "kube-apiserver", "hostname": "cp-1",
                           "holderIdentity": "apiserver-abc_<uuid>", "renewTime": "...",
                           "leaseDurationSeconds": 3600, "expired": False}}

    ``expired`` is True when ``renewTime`` plus ``leaseDurationSeconds`` lies before ``now`` (the
    apiserver stopped renewing; its garbage collector deletes such Leases).
    """
    out: dict[str, dict[str, Any]] = {}
    for lease in leases:
        meta = lease.get("metadata") or {}
        labels = meta.get("labels") or {}
        name = meta.get("name") or ""
        if not name or IDENTITY_LABEL not in labels:
            continue
        spec = lease.get("spec") or {}
        renewed = _epoch(spec.get("renewTime"))
        duration = spec.get("leaseDurationSeconds")
        expired = renewed is not None and isinstance(duration, int) and renewed + duration < now
        out[name] = {
            "component": labels.get(IDENTITY_LABEL) or "",
            "hostname": labels.get(HOSTNAME_LABEL) or "",
            "holderIdentity": spec.get("holderIdentity") or "",
            "renewTime": spec.get("renewTime"),
            "leaseDurationSeconds": duration,
            "expired": expired,
        }
    return out


def own_identity(idents: dict[str, dict[str, Any]], hostname: str, component: str = KUBE_APISERVER) -> str:
    """The ID of the ``component`` apiserver on host ``hostname``: the one identity Lease labelled
    with both (see :func:`identities`).

    Raises IdentityError naming ``apiserver_id`` (reason ``NotFound``) when no live Lease has that
    host name (the message lists the host names that have one, and says when this host's Lease has
    expired), or when several have it (reason ``Ambiguous``; an apiserver's ID depends on its host
    name, so that means two components share one label value).
    """
    mine = sorted(i for i, d in idents.items() if d["component"] == component and d["hostname"] == hostname)
    live = [i for i in mine if not idents[i]["expired"]]
    if len(live) == 1:
        return live[0]
    if len(live) > 1:
        raise IdentityError(
            f"apiserver_id: several {component} identity Leases are labelled {HOSTNAME_LABEL}={hostname}: "
            f"{', '.join(live)}; name the one of this node",
            field="apiserver_id",
            reason="Ambiguous",
        )
    others = sorted(
        f"{i} ({d['hostname'] or 'no host name'})"
        for i, d in idents.items()
        if d["component"] == component and not d["expired"]
    )
    expired = f" (its Lease {', '.join(mine)} has expired)" if mine else ""
    raise IdentityError(
        f"apiserver_id: no live {component} identity Lease in {NAMESPACE} is labelled "
        f"{HOSTNAME_LABEL}={hostname}{expired}; live ones: {', '.join(others) or 'none'}. Name this node's "
        "apiserver_id, or run on the node of the apiserver",
        field="apiserver_id",
        reason="NotFound",
    )


def list_identity_leases(api_client: Any, request_timeout: float = 10.0) -> list[dict[str, Any]]:
    """The Leases in ``kube-system`` that carry :data:`IDENTITY_LABEL` (any component), as dicts.

    Needs ``list`` on ``leases.coordination.k8s.io`` in ``kube-system``. Raises IdentityError:
    reason ``Unreachable`` when the server cannot be reached or times out, ``ApiError`` for any other
    API error (e.g. 403); errors are classified by ``_kube.classify``.
    """
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, request

    try:
        doc = request(
            api_client,
            "GET",
            f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
            query=[("labelSelector", IDENTITY_LABEL)],
            timeout=request_timeout,
        )
    except KubeError as exc:
        if exc.reason in ("unreachable", "timeout"):
            raise IdentityError(f"apiserver {exc.reason}: {exc}", reason="Unreachable") from exc
        raise IdentityError(
            f"listing the apiserver identity Leases in {NAMESPACE}: {exc} ({exc.reason}); the check needs "
            f"list on leases.coordination.k8s.io in {NAMESPACE}",
            reason="ApiError",
        ) from exc
    return list((doc or {}).get("items") or [])
