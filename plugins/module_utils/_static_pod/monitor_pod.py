# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The startup monitor as a static pod of its own (``<operand>-startup-monitor``), as the OpenShift
enhancement "Fallback on failing revisions of static pods" runs it: the installer writes its
manifest next to the operand's; it runs this collection's module (``state: monitor``) on the node,
waits until the operand's live manifest is of its revision, judges it, and removes its own
manifest when done (library-go ``pkg/operator/staticpod/startupmonitor``: the monitor deletes its
manifest once it has marked the revision good or fallen back).

Pure rendering here (:func:`monitor_pod`, :func:`monitor_params`); the writes are the installer's
(:func:`.operations.install`) and the monitor's (:func:`.operations.run_monitor`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    REVISION_LABEL,
    StaticPodError,
)

#: Suffix of the monitor's manifest and pod name: ``<operand>-startup-monitor-pod.yaml`` /
#: ``<operand>-startup-monitor`` (library-go names the kube-apiserver's ``kube-apiserver-startup-monitor``).
MONITOR_SUFFIX = "-startup-monitor"

#: Module parameters the monitor pod is given from the installer's (layout, probe, timing, retry,
#: StorageVersion and the kube auth options that are paths or names; never ``api_key``).
PASSED_PARAMS = (
    "operand", "manifests_dir", "resources_dir", "lock_file", "lock_timeout", "termination_log",
    "pod_logs_dir", "node_name", "probe_url", "probe_kind", "probe_ca_cert", "probe_client_cert",
    "probe_client_key", "probe_validate_certs", "probe_request_timeout", "timeout", "interval",
    "retry_base", "retry_cap", "storage_version_check", "apiserver_id", "storage_version_unavailable",
    "mirror_pod", "kubeconfig", "context", "host", "validate_certs", "ca_cert", "client_cert", "client_key",
)  # fmt: skip

#: Parameters naming files or directories the monitor reads or writes: mounted into the pod
#: (``hostPath``, same path inside): directories as they are, files by their directory.
_DIR_PARAMS = ("manifests_dir", "resources_dir", "pod_logs_dir")
_FILE_PARAMS = (
    "lock_file", "termination_log", "probe_ca_cert", "probe_client_cert", "probe_client_key",
    "kubeconfig", "ca_cert", "client_cert", "client_key",
)  # fmt: skip

#: The monitor's command in the remediation pod image (ansible-core + this collection): the module
#: run ad hoc on the node, with the image's own Python (``ansible_playbook_python``).
DEFAULT_COMMAND = (
    "ansible", "localhost", "-i", "localhost,", "-c", "local",
    "-e", '{"ansible_python_interpreter": "{{ ansible_playbook_python }}"}',
    "-m", "noderemedy.core.static_pod_fallback", "-a",
)  # fmt: skip


def monitor_params(params: dict[str, Any], revision: int) -> dict[str, Any]:
    """The module parameters of the monitor of ``revision``: ``state: monitor``, ``in_static_pod``,
    and :data:`PASSED_PARAMS` that are set in the installer's ``params`` (defaults filled in by the
    installer's layout: ``manifests_dir``, ``resources_dir``, ``lock_file``). StaticPodError naming
    ``api_key``: a token would land in a manifest on disk; give the monitor a kubeconfig file."""
    if params.get("api_key"):
        raise StaticPodError(
            "api_key: not passed into the startup-monitor manifest (it would be written to disk); "
            "use kubeconfig or client_cert/client_key",
            field="api_key",
            reason="InvalidInput",
        )
    out = {k: params[k] for k in PASSED_PARAMS if params.get(k) is not None}
    out.update(state="monitor", revision=revision, in_static_pod=True)
    return out


def _mounts(params: dict[str, Any]) -> list[str]:
    """Host directories to mount (each at the same path), deduplicated, parents before children
    dropped when a parent is mounted already."""
    dirs = {str(params[k]) for k in _DIR_PARAMS if params.get(k)}
    for k in _FILE_PARAMS:
        v = params.get(k)
        if isinstance(v, str) and v:
            dirs.add(os.path.dirname(v))
    out: list[str] = []
    for d in sorted(dirs, key=lambda p: (p.count("/"), p)):
        if not any(d == m or d.startswith(m.rstrip("/") + "/") for m in out):
            out.append(d)
    return sorted(out)


def monitor_pod(
    params: dict[str, Any], revision: int, spec: dict[str, Any], namespace: str
) -> dict[str, Any]:
    """The startup-monitor static pod of ``revision`` (a v1 Pod dict).

    ``params``: the installer's module parameters (with the layout's defaults filled in);
    ``spec``: the ``startup_monitor`` option, ``{"image": str, "command": [str]?,
    "extra_mounts": [{"host_path", "mount_path"}]?}``. The pod is hostNetwork (the probes go to the
    operand's localhost), runs as root with ``hostPath`` mounts of every directory the monitor
    reads or writes (same path inside), ``restartPolicy: OnFailure`` (a monitor that fails is
    started again and resumes: a fallback in place is not written twice), labelled ``revision``.
    The command is ``spec["command"]`` (default :data:`DEFAULT_COMMAND`) followed by the monitor's
    parameters as one JSON argument. StaticPodError naming ``startup_monitor`` on bad input.
    """
    if not isinstance(spec, dict) or not isinstance(spec.get("image"), str) or not spec["image"]:
        raise StaticPodError(
            "startup_monitor: needs 'image' (the remediation pod image, with ansible and this collection)",
            field="startup_monitor",
            reason="InvalidInput",
        )
    unknown = sorted(set(spec) - {"image", "command", "extra_mounts"})
    if unknown:
        raise StaticPodError(
            f"startup_monitor: unknown key(s) {', '.join(unknown)} (image, command, extra_mounts)",
            field="startup_monitor",
            reason="InvalidInput",
        )
    command = spec.get("command") or list(DEFAULT_COMMAND)
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise StaticPodError(
            "startup_monitor.command: must be a list of strings",
            field="startup_monitor",
            reason="InvalidInput",
        )
    extra = spec.get("extra_mounts") or []
    if not isinstance(extra, list) or not all(
        isinstance(m, dict)
        and set(m) == {"host_path", "mount_path"}
        and all(isinstance(m[k], str) and m[k].startswith("/") for k in m)
        for m in extra
    ):
        raise StaticPodError(
            "startup_monitor.extra_mounts: must be a list of {host_path, mount_path} absolute paths",
            field="startup_monitor",
            reason="InvalidInput",
        )
    mparams = monitor_params(params, revision)
    name = f"{params['operand']}{MONITOR_SUFFIX}"
    mounts = [(d, d, False) for d in _mounts(mparams)]
    mounts += [(m["host_path"], m["mount_path"], True) for m in extra]
    volumes = []
    volume_mounts = []
    for i, (host, inside, ro) in enumerate(mounts):
        volumes.append({"name": f"host-{i}", "hostPath": {"path": host, "type": "DirectoryOrCreate"}})
        volume_mounts.append({"name": f"host-{i}", "mountPath": inside, "readOnly": ro})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": name, REVISION_LABEL: str(revision)},
        },
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "OnFailure",
            "terminationGracePeriodSeconds": 5,
            "priorityClassName": "system-node-critical",
            "containers": [
                {
                    "name": "startup-monitor",
                    "image": spec["image"],
                    "imagePullPolicy": "IfNotPresent",
                    "command": [*command, json.dumps(mparams, sort_keys=True)],
                    "securityContext": {"privileged": False, "runAsUser": 0},
                    "volumeMounts": volume_mounts,
                }
            ],
            "volumes": volumes,
        },
    }
