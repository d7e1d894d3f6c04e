# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods a storage-only fence releases: the pods whose volumes are the fenced storage.

A storage-only fence (``fc``: the node's FC switch ports read back disabled) stops only what the
node reaches through those ports, so it licenses force-deleting exactly the node's pods with a
volume on that storage (``fenced_storage`` matchers: CSI drivers, StorageClasses, hostPath
directories, the in-tree ``fc`` volume source) and nothing else (:mod:`._taint` does the release).
"""

from __future__ import annotations

from typing import Any


def _volume_matches(kinds: dict[str, Any], matcher: dict[str, Any]) -> bool:
    if matcher.get("fc") and kinds.get("fc"):
        return True
    if matcher.get("csi_driver") and kinds.get("csi_driver") == matcher["csi_driver"]:
        return True
    if matcher.get("storage_class") and kinds.get("storage_class") == matcher["storage_class"]:
        return True
    root = (matcher.get("host_path") or "").rstrip("/")
    path = kinds.get("host_path") or ""
    return bool(root) and (path == root or path.startswith(root + "/"))


def volume_kinds(volume: dict[str, Any], pv: dict[str, Any] | None) -> dict[str, Any]:
    """What a pod volume is, for :func:`uses_fenced_storage`: ``{"csi_driver", "storage_class",
    "host_path", "fc"}`` (absent when not that). ``pv``: the PersistentVolume bound to the
    volume's claim (None for an inline volume or an unbound claim)."""
    out: dict[str, Any] = {}
    src = (pv.get("spec") or {}) if pv is not None else volume
    if isinstance(src.get("csi"), dict):
        out["csi_driver"] = src["csi"].get("driver")
    if isinstance(src.get("hostPath"), dict):
        out["host_path"] = str(src["hostPath"].get("path") or "")
    if isinstance(src.get("fc"), dict):
        out["fc"] = True
    if pv is not None and (pv.get("spec") or {}).get("storageClassName"):
        out["storage_class"] = pv["spec"]["storageClassName"]
    return out


def uses_fenced_storage(
    pod: dict[str, Any], pvs: dict[str, dict[str, Any]], fenced_storage: list[dict[str, Any]]
) -> bool:
    """Whether one of the pod's volumes is storage a storage-only fence cut off.

    Args:
        pod: the pod.
        pvs: ``<namespace>/<claim>`` -> the PersistentVolume bound to that claim (claims missing
            here are unbound or unknown: they never match).
        fenced_storage: the matchers (``csi_driver``, ``storage_class``, ``host_path``: that
            directory or below it, ``fc``: the in-tree FC volume source); a volume matches one
            when any of the matcher's keys matches.
    """
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        pv = pvs.get(f"{namespace}/{claim}") if claim else None
        if claim and pv is None:
            continue
        kinds = volume_kinds(volume, pv)
        if any(_volume_matches(kinds, m) for m in fenced_storage):
            return True
    return False
