# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""StorageVersion API (KEP-2339) reading and rollback safety (private to noderemedy.core).

KEP-2339 "StorageVersion API for HA API servers": every kube-apiserver (with the
``StorageVersionAPI`` and ``APIServerIdentity`` feature gates and
``internal.apiserver.k8s.io/v1alpha1`` enabled) publishes, per resource, a cluster-scoped
``StorageVersion`` object named ``<group>.<resource>`` whose ``status`` is::

    storageVersions: [{apiServerID, encodingVersion, decodableVersions: [...], servedVersions: [...]}]
    commonEncodingVersion: "apps/v1"      # set when all servers agree
    conditions: [{type: AllEncodingVersionsEqual, status: "True"|"False", ...}]

Rollback safety (the use the KEP names: "an apiserver ... should not be downgraded to a version
that cannot decode what is stored"): when a static-pod revision is marked good we record what its
apiserver reported it can decode; before falling back to that revision we compare every
resource's current encoding version(s) with that record (:func:`check_rollback`).

HA control planes: the apiserver a record is taken from is this node's, found by its identity Lease
(:mod:`._apiserver_identity`: the Lease labelled with this host's name). Entries of apiservers whose
identity Lease is gone (or expired) are stale: an apiserver that no longer runs neither decodes nor
writes anything, so they are named and left out of every comparison (:func:`drop_stale`).

Pure: :func:`summarize`, :func:`drop_stale`, :func:`encodings`, :func:`decodable_for`,
:func:`check_rollback`, :func:`record_bytes`. I/O: :func:`list_storage_versions` (a
``kubernetes.client.ApiClient``), :func:`load_record`, :class:`StorageVersionSource`.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

GROUP = "internal.apiserver.k8s.io"
VERSION = "v1alpha1"
PLURAL = "storageversions"
RECORD_KIND = "StorageVersionRecord"


class StorageVersionError(Exception):
    """A StorageVersion failure: bad record file, ambiguous apiserver identity, API error.

    Attributes: ``field`` (parameter at fault or ''), ``reason`` (machine-readable).
    """

    def __init__(self, message: str, *, field: str = "", reason: str = "Error") -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason


class StorageVersionUnavailable(StorageVersionError):
    """The StorageVersion API is not served (404: feature gate or runtime-config off) or unreachable."""

    def __init__(self, message: str, *, reason: str = "NotServed") -> None:
        super().__init__(message, reason=reason)


def list_storage_versions(api_client: Any, request_timeout: float = 10.0) -> list[dict]:
    """The StorageVersion objects (dicts as the API returns them) from ``api_client``.

    Raises StorageVersionUnavailable when the API is not served (HTTP 404, reason ``NotServed``)
    or the server cannot be reached (reason ``Unreachable``), StorageVersionError for any other
    API error (e.g. 403, reason ``ApiError``). Errors are classified by ``_kube.classify``.
    """
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, request

    try:
        doc = request(api_client, "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}", timeout=request_timeout)
    except KubeError as exc:
        if exc.reason == "not_found":
            raise StorageVersionUnavailable(
                f"{PLURAL}.{GROUP}/{VERSION} is not served by this apiserver (HTTP 404): enable the "
                "StorageVersionAPI and APIServerIdentity feature gates and the runtime-config"
            ) from exc
        if exc.reason in ("unreachable", "timeout"):
            raise StorageVersionUnavailable(f"apiserver {exc.reason}: {exc}", reason="Unreachable") from exc
        raise StorageVersionError(
            f"listing {PLURAL}.{GROUP}: {exc} ({exc.reason})", reason="ApiError"
        ) from exc
    return list((doc or {}).get("items") or [])


def summarize(items: list[dict]) -> dict[str, Any]:
    """Per resource and per apiserver view of StorageVersion objects.

    Returns::

        {"resources": {"apps.deployments": {
             "group": "apps", "resource": "deployments",
             "commonEncodingVersion": "apps/v1" | None,
             "encodingVersions": ["apps/v1"],           # the common one, else each server's
             "allEncodingVersionsEqual": True | False | None,
             "servers": {"<apiServerID>": {"encodingVersion", "decodableVersions", "servedVersions"}}}},
         "apiservers": {"<apiServerID>": {"apps.deployments": {...same per-server dict...}}}}
    """
    resources: dict[str, Any] = {}
    apiservers: dict[str, dict[str, Any]] = {}
    for item in items:
        name = (item.get("metadata") or {}).get("name") or ""
        st = item.get("status") or {}
        group, _sep, resource = name.rpartition(".")
        servers = {}
        for sv in st.get("storageVersions") or []:
            sid = sv.get("apiServerID") or ""
            entry = {
                "encodingVersion": sv.get("encodingVersion") or "",
                "decodableVersions": sorted(sv.get("decodableVersions") or []),
                "servedVersions": sorted(sv.get("servedVersions") or []),
            }
            servers[sid] = entry
            apiservers.setdefault(sid, {})[name] = entry
        common = st.get("commonEncodingVersion")
        equal = None
        for cond in st.get("conditions") or []:
            if cond.get("type") == "AllEncodingVersionsEqual":
                equal = cond.get("status") == "True"
        resources[name] = {
            "group": group,
            "resource": resource,
            "commonEncodingVersion": common,
            "encodingVersions": [common]
            if common
            else sorted({s["encodingVersion"] for s in servers.values() if s["encodingVersion"]}),
            "allEncodingVersionsEqual": equal,
            "servers": servers,
        }
    return {"resources": resources, "apiservers": apiservers}


def drop_stale(
    summary: dict[str, Any], idents: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Leave the entries of apiservers without a live identity Lease out of a :func:`summarize` view.

    ``idents`` is :func:`._apiserver_identity.identities` (by ID, with ``expired``). An entry is
    stale when its ``apiServerID`` has no Lease (reason ``NoIdentityLease``) or only an expired one
    (``IdentityLeaseExpired``). Returns ``(summary without them, stale)``, where stale is
    ``{"<apiServerID>": {"reason": str, "resources": [names]}}``. In a resource that had stale
    entries, ``encodingVersions``, ``commonEncodingVersion`` and ``allEncodingVersionsEqual`` are
    recomputed over the live servers (the apiserver computes them over every entry); a resource
    with no live entry left is dropped. ``summary`` itself is not changed.
    """
    stale: dict[str, dict[str, Any]] = {}
    for sid, per in sorted(summary["apiservers"].items()):
        ident = idents.get(sid)
        if ident is None or ident.get("expired"):
            stale[sid] = {
                "reason": "NoIdentityLease" if ident is None else "IdentityLeaseExpired",
                "resources": sorted(per),
            }
    if not stale:
        return summary, stale
    resources: dict[str, Any] = {}
    for name, r in summary["resources"].items():
        if not any(sid in stale for sid in r["servers"]):
            resources[name] = r
            continue
        servers = {sid: e for sid, e in r["servers"].items() if sid not in stale}
        if not servers:
            continue
        versions = sorted({e["encodingVersion"] for e in servers.values() if e["encodingVersion"]})
        common = versions[0] if len(versions) == 1 else None
        resources[name] = {
            **r,
            "servers": servers,
            "commonEncodingVersion": common,
            "encodingVersions": versions,
            "allEncodingVersionsEqual": common is not None,
        }
    apiservers = {sid: per for sid, per in summary["apiservers"].items() if sid not in stale}
    return {"resources": resources, "apiservers": apiservers}, stale


def stale_message(stale: dict[str, dict[str, Any]]) -> str:
    """One line naming the stale apiservers of :func:`drop_stale` (empty when there are none)."""
    if not stale:
        return ""
    named = ", ".join(
        f"{sid} ({d['reason']}, {len(d['resources'])} resources)" for sid, d in sorted(stale.items())
    )
    return f"StorageVersion entries of apiservers whose identity Lease is gone are stale, left out: {named}"


def encodings(summary: dict[str, Any]) -> dict[str, list[str]]:
    """``{resource name: [encoding versions the cluster stores now]}`` from :func:`summarize`."""
    return {
        name: list(r["encodingVersions"]) for name, r in summary["resources"].items() if r["encodingVersions"]
    }


def decodable_for(summary: dict[str, Any], apiserver_id: str | None = None) -> dict[str, Any]:
    """What one apiserver can decode: ``{"apiServerID": str, "resources": {name: [versions]}}``.

    Without ``apiserver_id`` the only identity present is used; StorageVersionError naming
    ``apiserver_id`` (with the candidates) if there are several or none, or the given one is absent.
    """
    ids = sorted(summary["apiservers"])
    if apiserver_id is None:
        if len(ids) != 1:
            raise StorageVersionError(
                f"apiserver_id: {len(ids)} apiserver identities report StorageVersions ({', '.join(ids) or 'none'}); "
                "name the one of this revision",
                field="apiserver_id",
                reason="InvalidInput",
            )
        apiserver_id = ids[0]
    if apiserver_id not in summary["apiservers"]:
        raise StorageVersionError(
            f"apiserver_id: {apiserver_id!r} reports no StorageVersion (present: {', '.join(ids) or 'none'})",
            field="apiserver_id",
            reason="NotFound",
        )
    per = summary["apiservers"][apiserver_id]
    return {
        "apiServerID": apiserver_id,
        "resources": {n: list(e["decodableVersions"]) for n, e in sorted(per.items())},
    }


def check_rollback(current: dict[str, list[str]], record: dict[str, Any]) -> list[dict[str, Any]]:
    """Resources a revision with ``record`` could not decode, given the cluster's ``current`` encodings.

    ``record`` is a loaded record (``{"resources": {name: [decodable versions]}}``). A resource is
    skewed when one of its current encoding versions is not in the recorded decodable versions.
    Resources the record does not know are not skewed (that revision does not serve them, so it
    never reads them); they are ignored here and listed by :func:`unknown_to_record`.

    Returns ``[{"resource", "encodingVersion", "decodableVersions"}]`` sorted by resource.
    """
    rec = record.get("resources") or {}
    out = []
    for name in sorted(current):
        if name not in rec:
            continue
        for enc in current[name]:
            if enc not in rec[name]:
                out.append({"resource": name, "encodingVersion": enc, "decodableVersions": list(rec[name])})
    return out


def unknown_to_record(current: dict[str, list[str]], record: dict[str, Any]) -> list[str]:
    """Resources stored now that ``record`` has no entry for (sorted)."""
    rec = record.get("resources") or {}
    return sorted(n for n in current if n not in rec)


def record_bytes(revision: int, decodable: dict[str, Any]) -> bytes:
    """The JSON record written into a revision directory at mark-good time."""
    doc = {
        "kind": RECORD_KIND,
        "revision": revision,
        "apiServerID": decodable["apiServerID"],
        "recordedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "resources": decodable["resources"],
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def load_record(path: Path) -> dict[str, Any] | None:
    """Load a record written by :func:`record_bytes`; None if absent; StorageVersionError if invalid."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageVersionError(f"cannot read StorageVersion record {path}: {exc}") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise StorageVersionError(
            f"StorageVersion record {path} is not JSON: {exc}", reason="InvalidRecord"
        ) from exc
    res = doc.get("resources") if isinstance(doc, dict) else None
    if not isinstance(res, dict) or not all(
        isinstance(v, list) and all(isinstance(x, str) for x in v) for v in res.values()
    ):
        raise StorageVersionError(
            f"StorageVersion record {path}: 'resources' must map names to lists of versions",
            reason="InvalidRecord",
        )
    return doc


class StorageVersionSource:
    """Reads StorageVersions and the apiserver identity Leases through a Kubernetes API client, for
    the fallback's gate and the mark-good record.

    Args:
        client_factory: zero-argument callable returning a ``kubernetes.client.ApiClient`` (called
            lazily, so a down apiserver only matters when the gate runs); errors it raises are
            reported as StorageVersionUnavailable (reason ``Unreachable``).
        apiserver_id: the identity of the revision's apiserver; None: this node's, found by its
            identity Lease (:func:`._apiserver_identity.own_identity` with ``hostname``).
        request_timeout: seconds per API request.
        strict: a client configuration error (``KubeError`` reason ``invalid``) is a
            StorageVersionError naming ``kubeconfig``; when False it is reported as unavailable
            (reason ``Unreachable``), for the best-effort ``storage_version_check: auto``.
        hostname: the host name of this node's kube-apiserver (the ``kubernetes.io/hostname`` label
            of its identity Lease); default this host's name (``socket.gethostname()``, the
            ``os.Hostname()`` a kube-apiserver on this host labels its Lease with).
        clock: seconds since the epoch, for the Leases' expiry.

    Everything is read before anything is written: :meth:`summary` and :meth:`decodable` raise
    (StorageVersionError, or StorageVersionUnavailable) before the caller writes.
    """

    def __init__(
        self,
        client_factory: Any,
        apiserver_id: str | None = None,
        request_timeout: float = 10.0,
        strict: bool = True,
        hostname: str | None = None,
        clock: Any = time.time,
    ) -> None:
        self._factory = client_factory
        self.strict = strict
        self.apiserver_id = apiserver_id
        self.request_timeout = request_timeout
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self._clock = clock
        self._summary: dict[str, Any] | None = None
        self._stale: dict[str, dict[str, Any]] = {}
        self._identities: dict[str, dict[str, Any]] = {}

    def _client(self) -> Any:
        try:
            return self._factory()
        except StorageVersionError:
            raise
        except Exception as exc:
            if self.strict and getattr(exc, "reason", "") == "invalid":  # _kube.KubeError: bad config
                raise StorageVersionError(
                    f"kubeconfig: cannot build a Kubernetes client for the StorageVersion check: {exc}",
                    field="kubeconfig",
                    reason="InvalidInput",
                ) from exc
            raise StorageVersionUnavailable(f"no API client: {exc}", reason="Unreachable") from exc

    def summary(self) -> dict[str, Any]:
        """:func:`summarize` of the live objects without stale entries (:func:`drop_stale`); fetched once.

        Raises StorageVersionUnavailable (API not served, server unreachable) or StorageVersionError
        (any other API error, including on the identity Leases).
        """
        if self._summary is None:
            from ansible_collections.noderemedy.core.plugins.module_utils._apiserver_identity import (
                IdentityError,
                identities,
                list_identity_leases,
            )

            client = self._client()
            items = list_storage_versions(client, self.request_timeout)
            try:
                leases = list_identity_leases(client, self.request_timeout)
            except IdentityError as exc:
                if exc.reason == "Unreachable":
                    raise StorageVersionUnavailable(str(exc), reason="Unreachable") from exc
                raise StorageVersionError(str(exc), reason=exc.reason) from exc
            self._identities = identities(leases, float(self._clock()))
            self._summary, self._stale = drop_stale(summarize(items), self._identities)
        return self._summary

    def stale(self) -> dict[str, dict[str, Any]]:
        """The stale entries :meth:`summary` left out (:func:`drop_stale`); empty before it ran."""
        return dict(self._stale)

    def encodings(self) -> dict[str, list[str]]:
        """Current encoding versions per resource; StorageVersionUnavailable if none are published."""
        enc = encodings(self.summary())
        if not enc:
            raise StorageVersionUnavailable(
                "the StorageVersion API is served but holds no objects", reason="Empty"
            )
        return enc

    def identities(self) -> dict[str, dict[str, Any]]:
        """The identity Leases :meth:`summary` read (:func:`._apiserver_identity.identities`)."""
        return dict(self._identities)

    def this_node_id(self) -> str:
        """The ID of the live kube-apiserver identity Lease labelled with ``hostname`` (after :meth:`summary`).

        StorageVersionError naming ``apiserver_id`` (reason ``NotFound`` or ``Ambiguous``).
        """
        from ansible_collections.noderemedy.core.plugins.module_utils._apiserver_identity import (
            IdentityError,
            own_identity,
        )

        self.summary()
        try:
            return own_identity(self._identities, self.hostname)
        except IdentityError as exc:
            raise StorageVersionError(str(exc), field=exc.field, reason=exc.reason) from exc

    def own_id(self) -> str:
        """``apiserver_id``, else this node's apiserver ID from its identity Lease (after :meth:`summary`).

        StorageVersionError naming ``apiserver_id``: reason ``NotFound`` (no live Lease of this
        host, or the given ID's Lease is gone), ``Ambiguous``.
        """
        self.summary()
        if self.apiserver_id is not None:
            gone = self._stale.get(self.apiserver_id)
            if gone is not None:
                raise StorageVersionError(
                    f"apiserver_id: {self.apiserver_id!r} has no live identity Lease ({gone['reason']}): its "
                    "StorageVersion entries are stale",
                    field="apiserver_id",
                    reason="NotFound",
                )
            return self.apiserver_id
        return self.this_node_id()

    def decodable(self) -> dict[str, Any]:
        """:func:`decodable_for` this node's apiserver (:meth:`own_id`), plus ``stale`` (:meth:`stale`).

        StorageVersionUnavailable (reason ``Empty``) when no apiserver reports StorageVersions at all;
        StorageVersionError naming ``apiserver_id`` when this node's apiserver cannot be told or
        reports none.
        """
        summary = self.summary()
        if not summary["apiservers"] and not self._stale:
            raise StorageVersionUnavailable(
                "the StorageVersion API is served but holds no objects", reason="Empty"
            )
        out = decodable_for(summary, self.own_id())
        out["stale"] = self.stale()
        return out


def info(
    client_factory: Any,
    apiserver_id: str | None = None,
    names: list[str] | None = None,
    hostname: str | None = None,
    clock: Any = time.time,
) -> dict[str, Any]:
    """The result of ``noderemedy.core.storage_version_info``.

    Returns ``{"available": bool, "message": str, "resources": {...}, "apiservers": {...},
    "encodings": {...}, "identities": {...}, "stale_apiservers": {...}, "this_apiserver_id": str|None}``
    (shapes of :func:`summarize`, :func:`encodings`, :func:`._apiserver_identity.identities` and
    :func:`drop_stale`). ``resources``, ``apiservers`` and ``encodings`` leave stale entries out;
    ``this_apiserver_id`` is the live kube-apiserver identity labelled with ``hostname`` (default
    this host's name), None when there is none. Filtered to ``apiserver_id`` and ``names`` when
    given. An unserved or unreachable API gives ``available: False`` (not an error); KubeError from
    ``client_factory`` (bad configuration) and StorageVersionError (e.g. 403) propagate.
    """
    client = client_factory()
    source = StorageVersionSource(lambda: client, apiserver_id, hostname=hostname, clock=clock)
    try:
        summary = source.summary()
    except StorageVersionUnavailable as exc:
        return {
            "available": False,
            "message": str(exc),
            "resources": {},
            "apiservers": {},
            "encodings": {},
            "identities": {},
            "stale_apiservers": {},
            "this_apiserver_id": None,
        }
    try:
        this_id: str | None = source.this_node_id()
    except StorageVersionError:
        this_id = None
    resources = summary["resources"]
    apiservers = summary["apiservers"]
    stale = source.stale()
    if names:
        resources = {n: r for n, r in resources.items() if n in names}
        apiservers = {sid: {n: e for n, e in per.items() if n in names} for sid, per in apiservers.items()}
    if apiserver_id is not None:
        apiservers = {sid: per for sid, per in apiservers.items() if sid == apiserver_id}
        resources = {
            n: {**r, "servers": {s: e for s, e in r["servers"].items() if s == apiserver_id}}
            for n, r in resources.items()
        }
    message = f"{len(resources)} resources, {len(apiservers)} apiserver(s)"
    if stale:
        message += "; " + stale_message(stale)
    return {
        "available": True,
        "message": message,
        "resources": resources,
        "apiservers": apiservers,
        "encodings": encodings({"resources": resources}),
        "identities": source.identities(),
        "stale_apiservers": stale,
        "this_apiserver_id": this_id,
    }
