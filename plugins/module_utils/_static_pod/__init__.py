# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Static-pod fallback to the last-known-good revision (private to noderemedy.core).

Behaviour source: the OpenShift enhancement "Fallback on failing revisions of static pods" and its
implementation in openshift/library-go ``pkg/operator/staticpod/startupmonitor`` (``fallback.go``,
``monitor.go``) with the kube-apiserver readiness checks of cluster-kube-apiserver-operator
``pkg/cmd/startupmonitorreadiness``; the parts library-go left as TODOs (NeverStartedUp,
CrashLooping from the termination log, pruner protecting the linked revision) are implemented here
as the enhancement describes them. StorageVersion safety follows KEP-2339 (see
:mod:`._storage_version`). Design: ``docs/static-pod-fallback.md``.

The package, by concern (this file re-exports their API and is the modules' entry point,
:func:`execute`): ``vocabulary`` (annotations, reasons, defaults, the error type), ``readiness``
(pure decisions), ``layout`` (filesystem, lock, atomic writes), ``probes`` (HTTP checks, one
observation), ``kubelet`` (what the node's kubelet shows: node name, pod logs, the sources of start
attempts), ``monitor_pod`` (the startup monitor's own static pod), ``operations``, ``retries`` (the
monitor pod retrying by itself) and ``degraded`` (the Degraded condition and Events on the Node).

Split:

* pure decisions, no I/O: :func:`assess`, :func:`final_readiness`, :func:`retry_policy`,
  :func:`choose_fallback`, :func:`revisions_to_prune`, :func:`annotate_fallback`,
  :func:`parse_start_log`, :func:`failed_checks`;
* I/O at the edges: :class:`Layout` (filesystem), :class:`InstallerLock` (flock),
  :class:`HttpProber` (``/healthz``, ``/readyz``, etcd check), :func:`write_manifest_atomic`;
* the operations: :func:`run_monitor`, :func:`fallback`, :func:`mark_good`, :func:`status`,
  :func:`prune`, :func:`install`. Every operation returns a JSON-able ``dict``; every error is a
  :class:`StaticPodError`.

Layout (all paths are parameters; defaults as on an OpenShift node)::

    /etc/kubernetes/manifests/<operand>-pod.yaml                        live manifest (kubelet)
    /etc/kubernetes/static-pod-resources/<operand>-pod-<REV>/<operand>-pod.yaml   revision REV
    /etc/kubernetes/static-pod-resources/<operand>-last-known-good      symlink to a revision manifest
    /var/lock/<operand>-installer.lock                                  installer lock (flock)
    /var/log/pods/<namespace>_<pod>-<node>_<uid>/<container>/<n>.log   the kubelet's pod logs

Start attempts are observed from the kubelet's pod logs and the mirror pod, found on the node with
no option set (``kubelet``: the kubelet whose static pod path is the manifests directory gives the
node name and the pod logs directory; with no source the monitor refuses), or from a termination
log when one is given (``termination_log``; the enhancement's
``/var/log/kube-apiserver/termination.log``), one JSON object per line, written by whatever starts
the operand (a wrapper on a node, the test harness in ``tests/integration``)::

    {"event": "start", "time": 1763712000.5, "revision": 3, "pid": 4242}
    {"event": "exit", "time": 1763712001.2, "revision": 3, "exitCode": 1}

``time`` is seconds since the epoch; ``revision`` may be absent (then the record counts for the
revision on disk). Lines that are not such objects are ignored (a torn last line included).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.degraded import (
    NodeSignal,
    condition_type,
    degraded_state,
    live_annotations,
    report_until,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.kubelet import (
    NO_START_ATTEMPT_SOURCE,
    Sources,
    default_probe_ca_cert,
    find_kubelet,
    require_sources,
    resolve_sources,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.layout import (
    HAS_YAML,
    YAML_IMPORT_ERROR,
    InstallerLock,
    Layout,
    write_manifest_atomic,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.monitor_pod import (
    MONITOR_SUFFIX,
    monitor_params,
    monitor_pod,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.operations import (
    Options,
    fallback,
    install,
    mark_good,
    prune,
    retry,
    run_monitor,
    status,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.probes import (
    PROBE_ARGSPEC,
    HttpProber,
    MirrorPodReader,
    etcd_direct_check,
    etcd_flags,
    observe,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.readiness import (
    Check,
    MirrorPod,
    Observation,
    Readiness,
    annotate_fallback,
    assess,
    choose_fallback,
    failed_checks,
    final_readiness,
    mirror_pod_of,
    parse_start_log,
    retry_policy,
    revisions_to_prune,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.retries import (
    hand_over,
    monitor_in_static_pod,
    pending_retry,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    CRASH_LOOPING,
    DEFAULT_INTERVAL,
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_CAP,
    DEFAULT_REVISION_LIMIT,
    DEFAULT_TIMEOUT,
    ETCD_UNHEALTHY,
    FALLBACK_FOR_REVISION,
    FALLBACK_MESSAGE,
    FALLBACK_REASON,
    FALLBACK_REASONS,
    LAYOUT_ARGSPEC,
    NEVER_STARTED_UP,
    NOT_READY,
    RETRYABLE_REASONS,
    STORAGE_VERSION_SKEW,
    STORAGE_VERSIONS_FILE,
    UNEXPECTED_REVISION,
    UNHEALTHY,
    StaticPodError,
)

# --- module entry -----------------------------------------------------------------------------------

#: Options of ``noderemedy.core.static_pod_fallback`` beyond the shared groups (documented in the module).
STATES = ("monitor", "fallback", "mark_good", "status", "prune", "install", "retry")

#: Shared argspec of the StorageVersion options; documented 1:1 by doc fragment
#: ``noderemedy.core.static_pod.storage_version``.
STORAGE_VERSION_ARGSPEC: dict[str, dict[str, Any]] = {
    "storage_version_check": {"type": "str", "choices": ["auto", "always", "never"], "default": "auto"},
    "apiserver_id": {"type": "str"},
    "storage_version_unavailable": {"type": "str", "choices": ["proceed", "refuse"], "default": "proceed"},
}


def default_probe_url(kind: str) -> str:
    """Default probe base URL: the kube-apiserver's ``https://localhost:6443`` or etcd's ``https://localhost:2379``."""
    return "https://localhost:2379" if kind == "etcd" else "https://localhost:6443"


def _mirror_reader(params: dict[str, Any]) -> MirrorPodReader | None:
    """The mirror-pod reader for ``mirror_pod: auto`` (the default): when a client configuration is
    given (``kubeconfig`` or ``host``) and the kubernetes library is installed; None otherwise or
    with ``mirror_pod: never``."""
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import HAS_KUBERNETES, get_api_client

    if (params.get("mirror_pod") or "auto") == "never" or not HAS_KUBERNETES:
        return None
    if not (params.get("kubeconfig") or params.get("host")):
        return None
    return MirrorPodReader(
        lambda: get_api_client(params), request_timeout=float(params.get("probe_request_timeout") or 2.0)
    )


def _node_signal(params: dict[str, Any], layout: Layout) -> NodeSignal | None:
    """The Degraded signal on this node (:mod:`.degraded`) when a client configuration is given
    (``kubeconfig`` or ``host``) and the kubernetes library is installed; else None."""
    from ansible_collections.noderemedy.core.plugins.module_utils._kube import HAS_KUBERNETES, get_api_client

    if not HAS_KUBERNETES or not (params.get("kubeconfig") or params.get("host")) or not layout.node_name:
        return None
    return NodeSignal(lambda: get_api_client(params), layout.node_name, layout.operand)


def _monitor_pod_params(
    params: dict[str, Any], layout: Layout, sources: Sources, kind: str
) -> dict[str, Any]:
    """The module parameters the startup-monitor pod is rendered from: the caller's, with the
    layout's paths and what was found on the node (the monitor pod does not see the kubelet's
    process): the node name, the pod logs, the probe CA."""
    return {
        **params,
        "manifests_dir": str(layout.manifests_dir),
        "resources_dir": str(layout.resources_dir),
        "lock_file": str(layout.lock_file),
        "node_name": sources.node_name,
        "pod_logs_dir": params.get("pod_logs_dir") or sources.pod_logs_dir,
        "probe_ca_cert": params.get("probe_ca_cert") or default_probe_ca_cert(kind),
    }


def _see_the_kubelet(params: dict[str, Any], layout: Layout, mirror_possible: bool) -> Sources:
    """Resolve the sources of start attempts (:func:`.kubelet.resolve_sources`: the node name and
    pod logs of the kubelet that runs ``manifests_dir``), refuse when none works
    (:func:`.kubelet.require_sources`), and set them on ``layout``."""
    from pathlib import Path

    sources = resolve_sources(params, mirror_possible)
    require_sources(sources, layout.operand)
    layout.node_name = sources.node_name
    layout.pod_logs_dir = Path(sources.pod_logs_dir) if sources.pod_logs_dir else None
    return sources


def execute(params: dict[str, Any], check_mode: bool = False, storage_versions: Any = None) -> dict[str, Any]:
    """Run ``params["state"]`` with module-style ``params``; the module's whole job.

    ``storage_versions``: a :class:`._storage_version.StorageVersionSource`-like object, or None to
    build one from the kube auth options when the StorageVersion check is on (``always``, or
    ``auto`` for operand ``kube-apiserver``). Returns the result dict; raises StaticPodError.
    """
    layout = Layout.from_params(params)
    state = params.get("state") or "status"
    if (params.get("mirror_pod") or "auto") not in ("auto", "never"):
        raise StaticPodError("mirror_pod: must be auto or never", field="mirror_pod", reason="InvalidInput")
    if state not in STATES:
        raise StaticPodError(
            f"state: must be one of {', '.join(STATES)}", field="state", reason="InvalidInput"
        )
    for name in ("timeout", "interval", "lock_timeout"):
        if params.get(name) is not None and float(params[name]) <= 0:
            raise StaticPodError(f"{name}: must be > 0 seconds", field=name, reason="InvalidInput")
    svc = params.get("storage_version_check") or "auto"
    sv_on = svc == "always" or (svc == "auto" and layout.operand == "kube-apiserver")
    if sv_on and storage_versions is None and state in ("monitor", "fallback", "mark_good"):
        from ansible_collections.noderemedy.core.plugins.module_utils._kube import get_api_client
        from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (
            StorageVersionSource,
        )

        storage_versions = StorageVersionSource(
            lambda: get_api_client(params), params.get("apiserver_id"), strict=svc == "always"
        )
    opts = Options(
        revision=params.get("revision"),
        timeout=float(params.get("timeout") or DEFAULT_TIMEOUT),
        interval=float(params.get("interval") or DEFAULT_INTERVAL),
        reason=params.get("reason") or "",
        message=params.get("fallback_message") or "",
        force=bool(params.get("force")),
        revision_limit=int(params.get("revision_limit") or DEFAULT_REVISION_LIMIT),
        retry_previous_failures=int(params.get("retry_previous_failures") or 0),
        retry_base=float(params.get("retry_base") or DEFAULT_RETRY_BASE),
        retry_cap=float(params.get("retry_cap") or DEFAULT_RETRY_CAP),
        check_mode=check_mode,
        storage_versions=storage_versions if sv_on else None,
        storage_version_unavailable=params.get("storage_version_unavailable") or "proceed",
        in_static_pod=bool(params.get("in_static_pod")),
        mirror_pods=None,
        extra={"lock_timeout": float(params.get("lock_timeout") or DEFAULT_LOCK_TIMEOUT)},
    )
    try:
        retry_policy("", opts.retry_previous_failures, opts.retry_base, opts.retry_cap)
    except ValueError as exc:
        raise StaticPodError(str(exc), field="retry_base", reason="InvalidInput") from exc
    if opts.reason and opts.reason not in FALLBACK_REASONS:
        raise StaticPodError(
            f"reason: must be one of {', '.join(sorted(FALLBACK_REASONS))}",
            field="reason",
            reason="InvalidInput",
        )
    kind = params.get("probe_kind") or ("etcd" if layout.operand == "etcd" else "kube-apiserver")
    sources: Sources | None = None
    if state == "retry":
        res = retry(layout, opts)
    elif state == "install":
        spec = params.get("startup_monitor")
        render = None
        if spec is not None:
            mirror_possible = (params.get("mirror_pod") or "auto") == "auto" and bool(
                params.get("kubeconfig") or params.get("host")
            )
            sources = resolve_sources(params, mirror_possible)
            if not params.get("pod_logs_dir"):
                # a pod_logs_dir given is the caller's word (the monitor pod mounts it, creating it)
                require_sources(sources, layout.operand)
            full = _monitor_pod_params(params, layout, sources, kind)
            rev = int(opts.revision or 0)
            # rendered once up front: bad input is refused before the lock is taken
            monitor_pod(full, rev, spec, "kube-system")

            def render(namespace: str) -> dict[str, Any]:
                return monitor_pod(full, rev, spec, namespace)

        res = install(layout, opts, params.get("manifest"), params.get("files"), render)
    elif state == "status":
        res = status(layout, opts)
    elif state == "prune":
        res = prune(layout, opts)
    elif state == "mark_good":
        res = mark_good(layout, opts)
    elif state == "fallback":
        res = fallback(layout, opts)
    else:
        prober = HttpProber(
            params.get("probe_url") or default_probe_url(kind),
            kind,
            params.get("probe_ca_cert") or default_probe_ca_cert(kind),
            params.get("probe_client_cert"),
            params.get("probe_client_key"),
            params.get("probe_validate_certs", True) is not False,
            float(params.get("probe_request_timeout") or 2.0),
        )
        opts.mirror_pods = _mirror_reader(params)
        sources = _see_the_kubelet(params, layout, opts.mirror_pods is not None)
        signal = None if check_mode else _node_signal(params, layout)
        spec = params.get("startup_monitor")
        if spec is not None and not opts.in_static_pod:
            full = _monitor_pod_params(params, layout, sources, kind)
            monitor_pod(full, 0, spec, "kube-system")  # bad input refused before anything runs
        if opts.in_static_pod:
            res = monitor_in_static_pod(layout, opts, prober, signal=signal)
        else:
            res = run_monitor(layout, opts, prober)
            if spec is not None:
                rev = int(res["revision"])
                written = hand_over(layout, opts, rev, lambda ns: monitor_pod(full, rev, spec, ns))
                if written:
                    res["changed"] = True
                    res["files_written"].append(written)
                    res["retry_handed_over"] = written
            state_now = degraded_state(layout.operand, res, live_annotations(layout))
            if signal is not None and state_now is not None:
                res["degraded"] = report_until(signal, state_now, opts.timeout, opts.interval)
    res["state"] = state
    if sources is not None:
        res["start_attempt_sources"] = sources.as_result()
    res.setdefault("reason", "")
    res.setdefault("message", "")
    return res


__all__ = [
    "CRASH_LOOPING",
    "Check",
    "DEFAULT_INTERVAL",
    "DEFAULT_LOCK_TIMEOUT",
    "DEFAULT_RETRY_BASE",
    "DEFAULT_RETRY_CAP",
    "DEFAULT_REVISION_LIMIT",
    "DEFAULT_TIMEOUT",
    "ETCD_UNHEALTHY",
    "FALLBACK_FOR_REVISION",
    "FALLBACK_MESSAGE",
    "FALLBACK_REASON",
    "FALLBACK_REASONS",
    "HAS_YAML",
    "HttpProber",
    "InstallerLock",
    "LAYOUT_ARGSPEC",
    "Layout",
    "MONITOR_SUFFIX",
    "NO_START_ATTEMPT_SOURCE",
    "NodeSignal",
    "MirrorPod",
    "MirrorPodReader",
    "NEVER_STARTED_UP",
    "NOT_READY",
    "Observation",
    "Options",
    "PROBE_ARGSPEC",
    "RETRYABLE_REASONS",
    "Readiness",
    "STATES",
    "STORAGE_VERSIONS_FILE",
    "STORAGE_VERSION_ARGSPEC",
    "STORAGE_VERSION_SKEW",
    "Sources",
    "StaticPodError",
    "UNEXPECTED_REVISION",
    "UNHEALTHY",
    "YAML_IMPORT_ERROR",
    "annotate_fallback",
    "assess",
    "choose_fallback",
    "condition_type",
    "degraded_state",
    "default_probe_ca_cert",
    "default_probe_url",
    "etcd_direct_check",
    "etcd_flags",
    "execute",
    "failed_checks",
    "fallback",
    "final_readiness",
    "find_kubelet",
    "hand_over",
    "install",
    "mark_good",
    "mirror_pod_of",
    "monitor_in_static_pod",
    "monitor_params",
    "monitor_pod",
    "observe",
    "parse_start_log",
    "pending_retry",
    "prune",
    "retry",
    "retry_policy",
    "require_sources",
    "resolve_sources",
    "revisions_to_prune",
    "run_monitor",
    "status",
    "write_manifest_atomic",
]
