#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: static_pod_fallback
short_description: Fall back a static pod (kube-apiserver, etcd) to its last-known-good revision
version_added: 0.1.0
description:
  - The OpenShift startup monitor as a module, run on the node. With O(state=monitor) it probes the
    operand's current revision until it is ready or O(timeout) seconds pass; a ready revision becomes
    last-known-good, a failed one is replaced by the last-known-good revision's manifest (or the highest
    earlier revision's), annotated with
    C(startup-monitor.static-pods.openshift.io/fallback-for-revision), C(.../fallback-reason) and
    C(.../fallback-message).
  - "Reasons: C(NeverStartedUp) (no start-up attempt in the termination log), C(CrashLooping) (more than
    one), C(Unhealthy) (C(/healthz) red), C(NotReady) (C(/readyz) red; the message lists the unfinished
    post-start hooks), C(EtcdUnhealthy) (the etcd check never passes), C(UnexpectedRevision) (the running
    pod is not the revision on disk; no fallback then), C(StorageVersionSkew) (fallback refused)."
  - The manifest is written as a dot-prefixed temporary file in the manifests directory and renamed, under
    the installer lock; no partial or backup file is ever left there.
  - Sources - openshift/library-go C(pkg/operator/staticpod/startupmonitor), the OpenShift enhancement
    "Fallback on failing revisions of static pods", KEP-2339 (StorageVersion API). See
    C(docs/static-pod-fallback.md).
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - noderemedy.core.static_pod
  - noderemedy.core.static_pod.probe
  - noderemedy.core.static_pod.storage_version
  - noderemedy.core.kube
attributes:
  check_mode:
    support: full
    details: Probes run (they only read), nothing is written, and the result predicts the writes.
  diff_mode:
    support: none
  platform:
    platforms: posix
    details: Linux (C(flock), C(rename) within one directory).
options:
  state:
    description:
      - V(monitor) probes until ready or O(timeout), then marks good or falls back.
      - V(fallback) falls back now (with O(reason) and O(fallback_message)).
      - V(mark_good) points the last-known-good link at the current revision (and records its decodable
        StorageVersions).
      - V(status) reports the layout; V(prune) deletes old revisions beyond O(revision_limit).
      - V(install) is the installer - under the installer lock it writes revision O(revision) (O(manifest),
        labelled C(revision), and O(files)) into its revision directory, renamed into place, then the live
        manifest atomically through a dot-named temp file (the kubelet never sees a partial manifest). A
        revision is immutable - the same content again changes nothing, other content is refused. While
        another installer holds the lock it waits up to O(lock_timeout), then fails having written nothing.
      - V(retry) rolls a failed revision out again once its backoff has passed (the enhancement's
        Retries) - the live manifest must be a fallback for a retryable reason (NotReady, EtcdUnhealthy,
        Unhealthy), whose C(static-pods.noderemedy.io/retry-at) annotation the fallback wrote
        (O(retry_base) doubled per earlier failure, at most O(retry_cap)). Before that time, or for
        CrashLooping and NeverStartedUp, nothing is written. Then run O(state=monitor) on it.
    type: str
    choices: [monitor, fallback, mark_good, status, prune, install, retry]
    default: status
  revision:
    description:
      - The revision being judged. Defaults to the C(revision) label of the live manifest.
      - With O(state=install), the revision to write (required, >= 1).
    type: int
  manifest:
    description:
      - With O(state=install), the operand's Pod manifest (a dictionary or YAML text), C(apiVersion=v1),
        C(kind=Pod). Its C(revision) label is set to O(revision).
    type: raw
  files:
    description:
      - With O(state=install), more files of the revision (plain file name to text), such as a revisioned
        config file the manifest mounts from the revision directory.
    type: dict
  startup_monitor:
    description:
      - With O(state=install), also write the startup monitor as a static pod of its own,
        C(<manifests_dir>/<operand>-startup-monitor-pod.yaml) (pod C(<operand>-startup-monitor), labelled
        C(revision)), next to the operand - first the monitor's manifest, then the operand's, both through
        dot-named temp files, and only when the live manifest changes.
      - The monitor pod runs this module with O(state=monitor), O(in_static_pod=true), this O(revision) and
        the installer's layout, probe, timing, retry, StorageVersion and kube auth options (not O(api_key),
        which is refused). It is hostNetwork, mounts every directory it reads or writes at the same path,
        and has C(restartPolicy=OnFailure).
      - >-
        With O(state=monitor) (not O(in_static_pod)), after a fallback for a retryable reason, write that
        startup monitor for the failed revision (under the installer lock, unless one of that revision is
        there): it waits for the fallback's C(static-pods.noderemedy.io/retry-at), rolls the revision out
        again and judges it, until a revision is marked good - the retries happen by themselves.
      - >-
        The monitor pod retries by itself in any case - after a retryable fallback it stays, waits for
        C(retry-at), rolls the revision out again and judges it again (the backoff doubling up to
        O(retry_cap)), until a revision is marked good, the fallback is not retried, or an installer writes
        another revision.
    type: dict
    suboptions:
      image:
        description: The image with ansible-core and this collection (the remediation pod image).
        type: str
        required: true
      command:
        description:
          - The command; the monitor's module parameters are appended as one JSON argument.
          - >-
            Defaults to the module run ad hoc with the image's Python, C(ansible localhost -i localhost, -c local
            -e '{"ansible_python_interpreter": "{{ ansible_playbook_python }}"}'
            -m noderemedy.core.static_pod_fallback -a).
        type: list
        elements: str
      extra_mounts:
        description: More read-only C(hostPath) mounts, such as a collection to use instead of the image's.
        type: list
        elements: dict
        suboptions:
          host_path:
            description: The directory on the node.
            type: path
            required: true
          mount_path:
            description: Where it appears in the monitor's container.
            type: path
            required: true
  in_static_pod:
    description:
      - With O(state=monitor), the monitor is the startup-monitor static pod O(startup_monitor) wrote. It
        waits, without a deadline and without writing anything, until the live manifest is of O(revision)
        (or already the fallback for it); then judges it; after a retryable fallback it waits for
        C(retry-at), rolls the revision out again and judges it again; at the end it removes its own
        manifest C(<operand>-startup-monitor-pod.yaml) if that is of O(revision), under the installer lock.
    type: bool
    default: false
  mirror_pod:
    description:
      - With O(state=monitor) and V(auto), when a client configuration is given (O(kubeconfig) or O(host)),
        each probe iteration also reads the operand's mirror pod C(<metadata.name>-<node_name>) through that
        API server (the localhost kube-apiserver on a node) - its C(revision) label, C(Ready) condition and
        first container's C(restartCount) (the enhancement's steps 5-6). A revision is then ready only when
        its mirror pod is of that revision and Ready; a higher restart count counts as start-up attempts.
        Best effort - when the API server does not answer, the files and HTTP checks alone decide.
      - V(never) does not read it.
    type: str
    choices: [auto, never]
    default: auto
  timeout:
    description: Seconds O(state=monitor) waits for readiness before deciding.
    type: float
    default: 300
  interval:
    description: Seconds between probe iterations.
    type: float
    default: 2
  reason:
    description: The fallback reason for O(state=fallback).
    type: str
    choices: [CrashLooping, EtcdUnhealthy, NeverStartedUp, NotReady, Unhealthy]
  fallback_message:
    description: The fallback message for O(state=fallback), written to the
      C(startup-monitor.static-pods.openshift.io/fallback-message) annotation.
    type: str
  force:
    description: Fall back even if the StorageVersion check finds a skew (or the API is unavailable with
      O(storage_version_unavailable=refuse)).
    type: bool
    default: false
  revision_limit:
    description: Revisions O(state=prune) keeps (the highest), besides the live and last-known-good ones.
    type: int
    default: 5
  retry_previous_failures:
    description: How often this revision already failed; the backoff in RV(retry) doubles with each. A
      retried revision carries its count in the C(static-pods.noderemedy.io/previous-failures) annotation,
      which counts when it is larger.
    type: int
    default: 0
  retry_base:
    description: Seconds of the first retry backoff for the retryable reasons.
    type: float
    default: 600
  retry_cap:
    description: Maximum seconds of the retry backoff (6 h, as the enhancement caps it).
    type: float
    default: 21600
notes:
  - >-
    Start attempts come from the kubelet's own per-container log files
    (C(/var/log/pods/<namespace>_<pod>_<uid>/<container>/<restartCount>.log)), the mirror pod (with a client
    configuration) and, when given, O(termination_log). With no option set the node name and the pod log
    directory are those of the running kubelet whose static pod path is O(manifests_dir) (its
    C(--hostname-override), else the host name). With no source that works, O(state=monitor) refuses
    (C(NoStartAttemptSource)) instead of judging a revision it cannot see.
  - >-
    With a client configuration the monitor shows on its Node while a revision has fallen back - the
    condition C(<Operand>StaticPodDegraded) (for example C(KubeApiserverStaticPodDegraded)) C(True), a
    C(StaticPodFallback) Event - and C(False) (C(RevisionMarkedGood)) once a revision is marked good.
"""

EXAMPLES = r"""
- name: Watch the new kube-apiserver revision, fall back if it does not become ready in 5 minutes
  noderemedy.core.static_pod_fallback:
    operand: kube-apiserver
    state: monitor
    timeout: 300
    probe_ca_cert: /etc/kubernetes/pki/ca.crt
    kubeconfig: /etc/kubernetes/admin.conf

- name: Fall back etcd now
  noderemedy.core.static_pod_fallback:
    operand: etcd
    state: fallback
    reason: CrashLooping
    fallback_message: etcd does not start after the upgrade

- name: Install revision 7 of kube-apiserver, with its audit policy (the installer)
  noderemedy.core.static_pod_fallback:
    operand: kube-apiserver
    state: install
    revision: 7
    manifest: "{{ lookup('ansible.builtin.file', 'kube-apiserver-pod.yaml') }}"
    files:
      audit-policy.yaml: "{{ lookup('ansible.builtin.file', 'audit-policy.yaml') }}"

- name: Keep five revisions
  noderemedy.core.static_pod_fallback:
    operand: kube-apiserver
    state: prune
    revision_limit: 5
"""

RETURN = r"""
action:
  description: What was done - V(mark_good), V(fallback), V(none), V(refused), V(status), V(prune), V(install).
  returned: always
  type: str
ready:
  description: Whether the revision became ready (O(state=monitor)).
  returned: state is monitor
  type: bool
reason:
  description: The machine-readable reason (empty when ready).
  returned: always
  type: str
  sample: CrashLooping
message:
  description: Human-readable detail; for NotReady it lists the unfinished post-start hooks.
  returned: always
  type: str
revision:
  description: The revision judged.
  returned: always
  type: int
fallback_revision:
  description: The revision fallen back to (null when there is none, as in bootstrap).
  returned: when a fallback was considered
  type: int
fallback_source:
  description: V(last-known-good), V(previous-revision) or V(none).
  returned: when a fallback was considered
  type: str
last_known_good_revision:
  description: The last-known-good revision after the operation.
  returned: when known
  type: int
files_written:
  description: Paths written (the live manifest, the link, the StorageVersion record).
  returned: always
  type: list
  elements: str
files_removed:
  description: Revision directories removed by O(state=prune).
  returned: always
  type: list
  elements: str
pruned_revisions:
  description: Revisions removed by O(state=prune).
  returned: state is prune
  type: list
  elements: int
retry:
  description: Retry policy for the failed revision - C(retryable), C(retry_after_seconds), C(backoff).
  returned: after a fallback
  type: dict
storage_version:
  description:
    - Result of the StorageVersion check or record - C(checked), C(available), C(skew), C(message); at
      mark-good time C(recorded), C(apiserver_id) (this node's apiserver, from its identity Lease unless
      O(apiserver_id) is given) and C(record).
    - C(stale_apiservers) - per apiServerID whose identity Lease is gone, C(reason) and C(resources); their
      entries are left out of the check.
    - A mark-good that cannot tell this node's apiserver fails having written nothing (the last-known-good
      link and the record stay as they were).
  returned: when the check is on
  type: dict
skewed_resources:
  description: Resources the target revision cannot decode (reason StorageVersionSkew).
  returned: when refused
  type: list
  elements: str
observations:
  description: Probe iterations run.
  returned: state is monitor
  type: int
elapsed_seconds:
  description: Seconds the monitor ran.
  returned: state is monitor
  type: float
start_attempt_sources:
  description:
    - The sources of start attempts used - C(used) (V(pod_logs_dir), V(mirror_pod), V(termination_log)),
      C(node_name), C(node_name_from) (V(node_name), V(kubelet --hostname-override), V(hostname)),
      C(pod_logs_dir), C(kubelet_pid), C(notes).
  returned: state is monitor, or install with startup_monitor
  type: dict
degraded:
  description: The Degraded signal written on the Node - C(condition), C(status), C(reason), C(reported).
  returned: state is monitor with a client configuration, after a fallback or a revision marked good
  type: dict
retries:
  description: Rollouts again the startup monitor pod did after their backoff (O(in_static_pod)).
  returned: state is monitor with in_static_pod
  type: int
rounds:
  description: Each judgement of the startup monitor pod - C(action), C(reason), C(retry_at).
  returned: state is monitor with in_static_pod
  type: list
  elements: dict
retry_handed_over:
  description: The startup monitor manifest written to retry the failed revision (O(startup_monitor)).
  returned: when a retryable fallback was handed over
  type: str
"""

import traceback  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._kube import (  # noqa: E402
    HAS_KUBERNETES,
    KUBE_AUTH_ARGSPEC,
    KUBERNETES_IMPORT_ERROR,
)
from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import (  # noqa: E402
    DEFAULT_INTERVAL,
    DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_CAP,
    DEFAULT_REVISION_LIMIT,
    DEFAULT_TIMEOUT,
    FALLBACK_REASONS,
    HAS_YAML,
    LAYOUT_ARGSPEC,
    PROBE_ARGSPEC,
    STATES,
    STORAGE_VERSION_ARGSPEC,
    YAML_IMPORT_ERROR,
    StaticPodError,
    execute,
)


def argument_spec() -> dict:
    """The module's argspec: its own options plus the shared groups (layout, probe, StorageVersion, kube auth)."""
    spec = dict(
        state=dict(type="str", choices=list(STATES), default="status"),
        revision=dict(type="int"),
        timeout=dict(type="float", default=DEFAULT_TIMEOUT),
        interval=dict(type="float", default=DEFAULT_INTERVAL),
        reason=dict(type="str", choices=sorted(FALLBACK_REASONS)),
        fallback_message=dict(type="str"),
        force=dict(type="bool", default=False),
        revision_limit=dict(type="int", default=DEFAULT_REVISION_LIMIT),
        retry_previous_failures=dict(type="int", default=0),
        retry_base=dict(type="float", default=DEFAULT_RETRY_BASE),
        retry_cap=dict(type="float", default=DEFAULT_RETRY_CAP),
        manifest=dict(type="raw"),
        files=dict(type="dict"),
        startup_monitor=dict(
            type="dict",
            options=dict(
                image=dict(type="str", required=True),
                command=dict(type="list", elements="str"),
                extra_mounts=dict(
                    type="list",
                    elements="dict",
                    options=dict(
                        host_path=dict(type="path", required=True),
                        mount_path=dict(type="path", required=True),
                    ),
                ),
            ),
        ),
        in_static_pod=dict(type="bool", default=False),
        mirror_pod=dict(type="str", choices=["auto", "never"], default="auto"),
    )
    spec.update(LAYOUT_ARGSPEC)
    spec.update(PROBE_ARGSPEC)
    spec.update(STORAGE_VERSION_ARGSPEC)
    spec.update(KUBE_AUTH_ARGSPEC)
    return spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[("state", "install", ("revision", "manifest"))],
    )
    if not HAS_YAML:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)
    params = module.params
    wants_sv = params["storage_version_check"] == "always" or (
        params["storage_version_check"] == "auto" and params["operand"] == "kube-apiserver"
    )
    if wants_sv and params["state"] in ("monitor", "fallback", "mark_good") and not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    try:
        result = execute(params, check_mode=module.check_mode)
    except StaticPodError as exc:
        partial = dict(exc.result)
        partial.update(reason=exc.reason, field=exc.field)
        partial.pop("msg", None)
        for warning in partial.pop("warnings", []):
            module.warn(warning)
        module.fail_json(msg=str(exc), exception=traceback.format_exc(), **partial)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
