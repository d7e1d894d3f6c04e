# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operations, each returning a JSON-able dict and raising only StaticPodError: the monitor
(:mod:`.monitor`), fallback and retry (:mod:`.fallback`, with the StorageVersion gate), install
(:mod:`.install`), mark_good, status and prune (:mod:`.revisions`), with their :class:`Options`
(:mod:`.options`). This module names them all in one place.
"""

from __future__ import annotations

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.fallback import (
    fallback,
    retry,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.install import (
    install,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.monitor import (
    remove_own_manifest,
    run_monitor,
    wait_for_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.options import (
    Options,
    resolve_revision,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.revisions import (
    mark_good,
    prune,
    status,
)

__all__ = [
    "Options",
    "fallback",
    "install",
    "mark_good",
    "prune",
    "remove_own_manifest",
    "resolve_revision",
    "retry",
    "run_monitor",
    "status",
    "wait_for_revision",
]
