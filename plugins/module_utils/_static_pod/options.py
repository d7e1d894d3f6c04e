# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operations' options (:class:`Options`, seconds everywhere), the result every operation
starts from, and which revision an operation acts on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    Layout,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    DEFAULT_INTERVAL,
    DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_CAP,
    DEFAULT_REVISION_LIMIT,
    DEFAULT_TIMEOUT,
    StaticPodError,
)


@dataclass
class Options:
    """Operation options (module parameters other than the layout); seconds everywhere."""

    revision: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    interval: float = DEFAULT_INTERVAL
    reason: str = ""
    message: str = ""
    force: bool = False
    revision_limit: int = DEFAULT_REVISION_LIMIT
    retry_previous_failures: int = 0
    retry_base: float = DEFAULT_RETRY_BASE
    retry_cap: float = DEFAULT_RETRY_CAP
    check_mode: bool = False
    #: ``None``: no StorageVersion check. Otherwise a callable returning the current encoding
    #: versions and this apiserver's decodable versions (see :mod:`._storage_version`).
    storage_versions: Any = None
    #: what to do when the StorageVersion API is not served or unreachable: proceed or refuse.
    storage_version_unavailable: str = "proceed"
    #: the monitor runs as the startup-monitor static pod (:mod:`.monitor_pod`): it waits until the
    #: live manifest is of its revision and removes its own manifest when done.
    in_static_pod: bool = False
    #: a :class:`.probes.MirrorPodReader` (the mirror pod through the API server), or None.
    mirror_pods: Any = None
    extra: dict = field(default_factory=dict)


def _base_result(layout: Layout) -> dict[str, Any]:
    return {
        "changed": False,
        "operand": layout.operand,
        "files_written": [],
        "files_removed": [],
    }


def resolve_revision(layout: Layout, opts: Options) -> int:
    """The revision being judged: ``opts.revision`` or the live manifest's ``revision`` label."""
    if opts.revision is not None:
        if opts.revision < 0:
            raise StaticPodError("revision: must be >= 0", field="revision", reason="InvalidInput")
        return opts.revision
    try:
        return layout.live_revision()
    except StaticPodError as exc:
        raise StaticPodError(
            f"revision: not given and the live manifest gives none ({exc})",
            field="revision",
            reason="InvalidInput",
        ) from exc
