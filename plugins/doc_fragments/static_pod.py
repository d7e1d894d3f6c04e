# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the static-pod option groups, 1:1 with ``plugins/module_utils/_static_pod/``:
``DOCUMENTATION`` = ``LAYOUT_ARGSPEC``, ``PROBE`` = ``PROBE_ARGSPEC``,
``STORAGE_VERSION`` = ``STORAGE_VERSION_ARGSPEC``."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  operand:
    description:
      - Name of the static-pod operand, for example V(kube-apiserver) or V(etcd).
      - Names the files of the layout below (C(<operand>-pod.yaml), C(<operand>-pod-<REV>), ...).
    type: str
    required: true
  manifests_dir:
    description:
      - The kubelet's static-pod manifests directory; the live manifest is C(<manifests_dir>/<operand>-pod.yaml).
      - The kubelet reads every non-dot file here, so the module only ever writes a dot-prefixed
        temporary file here and renames it into place.
    type: path
    default: /etc/kubernetes/manifests
  resources_dir:
    description:
      - Holds the revisions C(<operand>-pod-<REV>/<operand>-pod.yaml) (with C(configmaps/), C(secrets/))
        and the symbolic link C(<operand>-last-known-good).
    type: path
    default: /etc/kubernetes/static-pod-resources
  lock_file:
    description:
      - The installer lock (C(flock), exclusive). Nothing is written while another process holds it.
      - Defaults to C(/var/lock/<operand>-installer.lock).
    type: path
  lock_timeout:
    description:
      - Seconds to poll for the installer lock before failing with reason C(LockBusy).
    type: float
    default: 30
  termination_log:
    description:
      - >-
        A start-attempt log of the operand, one JSON object per line
        (C({"event": "start", "time": <epoch seconds>, "revision": <REV>})), written by a wrapper that
        starts the operand (the kubelet does not write it). Start attempts give the reasons
        C(NeverStartedUp), C(CrashLooping) and C(UnexpectedRevision).
      - Read only when given, and then the kubelet's pod logs are not looked for unless O(pod_logs_dir) is given.
    type: path
  pod_logs_dir:
    description:
      - >-
        The kubelet's pod log directory. Start attempts come from what the kubelet writes there
        - C(<namespace>_<pod>_<uid>/<container>/<restartCount>.log), one file per start of the
        operand's first container - in the newest pod directory of the operand's static pod that
        was written after the live manifest.
      - >-
        Defaults (with O(state=monitor), unless O(termination_log) is given) to the C(podLogsDir) of the
        running kubelet whose static pod path is O(manifests_dir), else V(/var/log/pods); used when it is a
        directory.
      - >-
        With no source of start attempts (no pod log directory, no client configuration for the mirror
        pod, no O(termination_log)) O(state=monitor) refuses to run, reason C(NoStartAttemptSource),
        rather than roll back a revision it cannot see.
    type: path
  node_name:
    description:
      - The node's name as the kubelet registers it; the kubelet names a static pod
        C(<metadata.name>-<node_name>) (its log directory and mirror pod).
      - >-
        Defaults to the C(--hostname-override) of the running kubelet whose static pod path is
        O(manifests_dir), else the host name in lower case (kubelet C(GetHostname)).
    type: str
"""

    PROBE = r"""
options:
  probe_url:
    description:
      - Base URL of the operand's health endpoints.
      - Defaults to V(https://localhost:6443) (kube-apiserver) or V(https://localhost:2379) (etcd).
    type: str
  probe_kind:
    description:
      - Which checks to run. V(kube-apiserver) - C(/healthz?verbose), C(/readyz?verbose) and
        C(/healthz/etcd); V(etcd) - C(/livez), C(/readyz) and C(/health).
      - Defaults to V(etcd) for operand V(etcd), else V(kube-apiserver).
    type: str
    choices: [kube-apiserver, etcd]
  probe_ca_cert:
    description:
      - CA bundle (PEM) to verify the operand's serving certificate.
      - >-
        Defaults, for a kube-apiserver, to kubeadm's cluster CA C(/etc/kubernetes/pki/ca.crt) when it
        exists, else the system CAs. On a loopback O(probe_url) the chain is verified but not the host
        name (a kubeadm serving certificate does not name C(localhost)).
    type: path
  probe_client_cert:
    description: Client certificate (PEM) for the health checks.
    type: path
  probe_client_key:
    description: Key of O(probe_client_cert) (a path, not a secret value).
    type: path
  probe_validate_certs:
    description: Verify the operand's serving certificate.
    type: bool
    default: true
  probe_request_timeout:
    description: Seconds per health-check request.
    type: float
    default: 2.0
"""

    STORAGE_VERSION = r"""
options:
  storage_version_check:
    description:
      - StorageVersion rollback safety (KEP-2339). When a revision is marked good, record what its
        apiserver reports it can decode; before falling back to a revision, refuse with reason
        C(StorageVersionSkew) if it cannot decode an encoding version the cluster now stores.
      - V(auto) checks for operand V(kube-apiserver) only, best effort - without a usable client
        configuration the check is reported as unavailable; V(always) checks and fails on a bad
        client configuration; V(never).
      - Uses the Kubernetes authentication options.
    type: str
    choices: [auto, always, never]
    default: auto
  apiserver_id:
    description:
      - The apiserver identity (C(apiServerID) in StorageVersion objects) of this node's apiserver.
      - By default it is found where Kubernetes publishes it - the identity Lease in C(kube-system)
        labelled C(apiserver.kubernetes.io/identity=kube-apiserver) and C(kubernetes.io/hostname=<this
        host's name>); its name is the ID. This needs C(list) on C(leases.coordination.k8s.io) in
        C(kube-system).
      - StorageVersion entries of apiservers whose identity Lease is gone or expired are stale - named in
        C(storage_version.stale_apiservers) and a warning, and left out of the check.
    type: str
  storage_version_unavailable:
    description:
      - What to do when the StorageVersion API is not served or the apiserver cannot be reached
        during a fallback. V(proceed) falls back (and says so in RV(storage_version)); V(refuse)
        fails unless O(force) is set.
    type: str
    choices: [proceed, refuse]
    default: proceed
"""
