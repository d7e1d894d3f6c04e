# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The startup monitor's vocabulary (OpenShift "Fallback on failing revisions of static pods"):
fallback annotations, reasons, defaults, the layout argspec and the one error type.
"""

from __future__ import annotations

import re
from typing import Any

# --- vocabulary (OpenShift startup monitor) -------------------------------------------------------

ANNOTATION_PREFIX = "startup-monitor.static-pods.openshift.io/"
FALLBACK_FOR_REVISION = ANNOTATION_PREFIX + "fallback-for-revision"
FALLBACK_REASON = ANNOTATION_PREFIX + "fallback-reason"
FALLBACK_MESSAGE = ANNOTATION_PREFIX + "fallback-message"
#: Ours, next to the enhancement's: the failures of the failed revision so far (on a fallback
#: manifest; on a retried revision's manifest, the failures before this retry), and when a
#: retryable fallback rolls the failed revision out again (RFC 3339). The kubelet copies them to
#: the mirror pod, where an admin reads them.
PREVIOUS_FAILURES = "static-pods.noderemedy.io/previous-failures"
RETRY_AT = "static-pods.noderemedy.io/retry-at"
#: The pod label holding the revision (as on OpenShift's revisioned static pods).
REVISION_LABEL = "revision"

NEVER_STARTED_UP = "NeverStartedUp"
CRASH_LOOPING = "CrashLooping"
UNHEALTHY = "Unhealthy"
NOT_READY = "NotReady"
ETCD_UNHEALTHY = "EtcdUnhealthy"
UNEXPECTED_REVISION = "UnexpectedRevision"
STORAGE_VERSION_SKEW = "StorageVersionSkew"

#: Reasons the enhancement retries after a backoff (external causes may heal).
RETRYABLE_REASONS = frozenset({NOT_READY, ETCD_UNHEALTHY, UNHEALTHY})
#: Reasons that lead to a fallback when the monitor times out.
FALLBACK_REASONS = frozenset({NEVER_STARTED_UP, CRASH_LOOPING, UNHEALTHY, NOT_READY, ETCD_UNHEALTHY})

#: File in a revision directory recording what that revision's apiserver could decode (KEP-2339).
STORAGE_VERSIONS_FILE = "storage-versions.json"

DEFAULT_TIMEOUT = 300.0
DEFAULT_INTERVAL = 2.0
DEFAULT_RETRY_BASE = 600.0
DEFAULT_RETRY_CAP = 21600.0  # 6 h, as the enhancement caps the backoff
DEFAULT_LOCK_TIMEOUT = 30.0
DEFAULT_REVISION_LIMIT = 5

#: Shared argspec of the layout options; documented 1:1 by doc fragment ``noderemedy.core.static_pod``.
LAYOUT_ARGSPEC: dict[str, dict[str, Any]] = {
    "operand": {"type": "str", "required": True},
    "manifests_dir": {"type": "path", "default": "/etc/kubernetes/manifests"},
    "resources_dir": {"type": "path", "default": "/etc/kubernetes/static-pod-resources"},
    "lock_file": {"type": "path"},
    "lock_timeout": {"type": "float", "default": DEFAULT_LOCK_TIMEOUT},
    "termination_log": {"type": "path"},
    "pod_logs_dir": {"type": "path"},
    "node_name": {"type": "str"},
}

_OPERAND_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class StaticPodError(Exception):
    """Any failure of a static-pod operation (bad input, layout, lock, write, StorageVersion).

    Attributes:
        field: the parameter or path at fault ('' if none), for clear module errors.
        reason: a machine-readable reason (e.g. ``LockBusy``, ``InvalidInput``, ``StorageVersionSkew``).
        result: a partial result dict for the caller to return (what was observed before the error).
    """

    def __init__(self, message: str, *, field: str = "", reason: str = "Error", result: dict | None = None):
        super().__init__(message)
        self.field = field
        self.reason = reason
        self.result = result or {}
