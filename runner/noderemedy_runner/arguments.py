"""The command line of ``noderemedy-runner``: its flags (:func:`build_parser`; ``--help`` is the
user's first documentation), their checks (:func:`parse_args`: argparse's own exit 2 naming the
flag) and what they mean for the NodeFence machine (:func:`policy`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from noderemedy_runner.machines.actions import PLAYBOOKS
from noderemedy_runner.machines.nodefence import NodeFencePolicy
from noderemedy_runner.metrics import parse_addr

DESCRIPTION = """\
Fence and remediate failed Kubernetes nodes on bare metal.

noderemedy-runner watches the cluster's Nodes. When a node matches one of the remedy
Configuration's thresholds (by default: Ready is False or Unknown) for the threshold's period
(default 5m), it creates a NodeFence named after the node; the same process then runs the
fence steps of that NodeFence (isolation, power management, recovery) as Ansible playbooks,
using the node's fence-config-<node> ConfigMap. A storm guard stops new fencing when too many
nodes look dead at once (default: more than 49% of the selected nodes).
"""

EPILOG = """\
examples:
  check a Configuration file and print what it means, without touching a cluster:
    noderemedy-runner --config remedy.yaml --check-config

  watch a cluster but act on nothing (decisions are logged as JSON lines):
    noderemedy-runner --kubeconfig ~/.kube/config --config remedy.yaml --dry-run

  in the cluster (two replicas, one acts at a time):
    noderemedy-runner --config configmap:noderemedy/noderemedy-config --leader-elect \\
        --metrics-addr :8080

what it writes: NodeFence objects, their status, Leases (leader election and one per node in
remediation) and the ConfigMap noderemedy-status in --namespace, Events. Metrics, /healthz and
/readyz are served on --metrics-addr. See docs/operations.md.
"""


#: The NodeFence machine's defaults (docs/state-machines.md), the defaults of its flags.
_POLICY = NodeFencePolicy()
#: The NodeFence machine's settings whose flags stand together in ``--help``, in its order:
#: (flag, type, default, metavar, help); :data:`POLICY_FIELDS` names the field each one sets.
_POLICY_FLAGS: tuple[tuple[str, type, float, str, str], ...] = (
    (
        "--grace-seconds", float, 0.0, "SECONDS",
        "extra wait of the NodeFence machine, counted from the node turning NotReady, before its "
        "first step (default %(default)s: the Configuration's period already applied)",
    ),
    (
        "--step-retries", int, _POLICY.step_retries, "N",
        "extra attempts of a failed fence step before the NodeFence goes to Error (default %(default)s)",
    ),
    (
        "--retry-delay", float, _POLICY.retry_delay_seconds, "SECONDS",
        "wait before a step's next attempt (default %(default)s)",
    ),
    (
        "--max-restarts", int, _POLICY.max_restarts, "N",
        "restarts of a NodeFence's whole flow from Error (default %(default)s)",
    ),
    (
        "--restart-delay", float, _POLICY.restart_delay_seconds, "SECONDS",
        "wait in Error before a restart (default %(default)s)",
    ),
    (
        "--recovery-timeout", float, _POLICY.recovery_timeout_seconds, "SECONDS",
        "how long a fenced node may stay NotReady after Recovery before the NodeFence goes to "
        "Error (default %(default)s)",
    ),
)  # fmt: skip
#: Flag dest -> the :class:`NodeFencePolicy` field it sets (:func:`policy`).
POLICY_FIELDS = {
    "grace_seconds": "grace_seconds",
    "step_retries": "step_retries",
    "retry_delay": "retry_delay_seconds",
    "max_restarts": "max_restarts",
    "restart_delay": "restart_delay_seconds",
    "recovery_timeout": "recovery_timeout_seconds",
    "max_power_fencing": "max_power_fencing",
    "max_pods_released_per_minute": "max_pods_released_per_minute",
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (``--help`` is the user's first documentation)."""
    p = argparse.ArgumentParser(
        prog="noderemedy-runner",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    conn = p.add_argument_group("cluster")
    conn.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="kubeconfig file to reach the API server (default: $KUBECONFIG, else the in-cluster service account)",
    )
    conn.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "noderemedy"),
        metavar="NS",
        help="the runner's namespace: fence ConfigMaps and Secrets, Leases, the noderemedy-status "
        "ConfigMap (default: $POD_NAMESPACE, else %(default)s)",
    )
    det = p.add_argument_group("detection")
    det.add_argument(
        "--config",
        metavar="FILE|configmap:NS/NAME",
        help="the remedy Configuration: a YAML file, or a ConfigMap whose *.yaml keys hold it "
        "(default: built-in -- every node, Ready False/Unknown for 5m, storm guard minHealthy 51%%)",
    )
    det.add_argument(
        "--check-config",
        action="store_true",
        help="parse --config, print what it means, and exit (0 valid, 2 invalid); needs no cluster "
        "for a file",
    )
    only = det.add_mutually_exclusive_group()
    only.add_argument(
        "--detect-only",
        action="store_true",
        help="create/cancel NodeFences but run no playbooks (another process reconciles them)",
    )
    only.add_argument(
        "--reconcile-only",
        action="store_true",
        help="reconcile NodeFence and Metal3Remediation objects but create none (another process, "
        "e.g. a node health check, creates them)",
    )
    act = p.add_argument_group("remediation")
    act.add_argument(
        "--max-concurrent-runs",
        type=int,
        default=4,
        metavar="N",
        help="Ansible playbook runs in flight at once (default %(default)s)",
    )
    act.add_argument(
        "--batch-window",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="runs of the same fence playbook go as one ansible-playbook run, one inventory host "
        "per node, until this many seconds pass without another (at most 8 times this from the "
        'first; fan-out: docs/runner.md "Batches"; default %(default)s; 0: every run on its own)',
    )
    act.add_argument(
        "--idle-start",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a run whose fence playbook is idle (no batch of it gathering, running or ended within "
        "the window) and whose NodeFence is the only one being reconciled starts at once, without "
        "the batch window: one failed node pays no wait (default: on; --no-idle-start: every "
        "batch gathers)",
    )
    act.add_argument(
        "--batch-size",
        type=int,
        default=20,
        metavar="N",
        help="most nodes in one batch run, and its Ansible forks (default %(default)s); at most "
        "--max-concurrent-runs x N nodes are fenced at once",
    )
    act.add_argument(
        "--shared-batch-size",
        type=int,
        default=100,
        metavar="N",
        help="most nodes in one batch whose step starts on one PDU or FC switch: one module call "
        "switches all their plugs, so they need no fork each (forks stay at most --batch-size; "
        "default %(default)s)",
    )
    act.add_argument(
        "--run-deadline",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a playbook run is killed after this many seconds (default %(default)s)",
    )
    act.add_argument(
        "--run-nice",
        type=int,
        default=10,
        metavar="N",
        help="niceness added to each playbook run, as nice(1) (0-19, default %(default)s): when runs "
        "load every core, detecting failed nodes and writing status keep the runner's priority",
    )
    for flag, kind, default, metavar, text in _POLICY_FLAGS:
        act.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)
    act.add_argument(
        "--poll-interval",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often the watcher looks for NodeFences and Metal3Remediations due for a reconcile "
        "(default %(default)s); it schedules them from its watches, and lists them every 30 s",
    )
    act.add_argument(
        "--run-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for every playbook run, never a secret (repeatable), "
        "e.g. SNMP_PERSISTENT_DIR=/var/lib/snmp",
    )
    act.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("NODEREMEDY_DATA_DIR", "/var/lib/noderemedy-runner")),
        metavar="DIR",
        help="ansible-runner working directories (default: $NODEREMEDY_DATA_DIR or %(default)s)",
    )
    act.add_argument(
        "--executor",
        choices=("inprocess", "job"),
        default="inprocess",
        help="where playbook runs happen: in this process (default), or as remediation pods -- a "
        "Kubernetes Job per run from this pod's own image, ServiceAccount and placement, never on "
        "the node being fenced (only in a pod: POD_NAME/POD_NAMESPACE; docs/runner.md)",
    )
    act.add_argument(
        "--job-run",
        action="store_true",
        help="be a remediation pod: run the one playbook run in $NODEREMEDY_JOB, write its outcome "
        "to the termination message and exit (what --executor job starts)",
    )
    act.add_argument(
        "--playbook-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the playbooks the runner invokes are (fence_step.yml, fence_verify.yml, "
        "out_of_service_taint.yml, bmh_power.yml; docs/runner.md) (default: the collection's "
        "playbooks/)",
    )
    act.add_argument(
        "--metal3-selector",
        type=_label_selector,
        default=None,
        metavar="JSON",
        help="also reconcile Metal3Remediations whose labels match this metav1.LabelSelector, e.g. "
        '\'{"matchLabels": {"cluster.x-k8s.io/cluster-name": "lab"}}\' (default: only '
        "those annotated remediation.noderemedy.io/runner=true; the annotation wins; docs/metal3.md)",
    )
    act.add_argument(
        "--cloud-credentials-secret",
        default=None,
        metavar="NAME",
        help="a cloud node (spec.providerID aws:///...) without fence-config-<node> gets the seed's "
        "default cloud configuration (mark-unschedulable, restart-instance, mark-unschedulable) with "
        "the credentials of this Secret in --namespace (keys access_key, secret_key) (default: off; "
        "docs/fencing.md)",
    )
    act.add_argument(
        "--cloud-endpoint-url",
        default=None,
        metavar="URL",
        help="with --cloud-credentials-secret: an EC2-compatible endpoint instead of AWS's own",
    )
    act.add_argument(
        "--max-power-fencing",
        type=int,
        default=48,
        metavar="N",
        help="nodes in their PowerManagement step at once (the seed's 'at most N nodes'; default "
        "%(default)s: a whole rack of 1U servers at once; a false mass failure is the storm guard's "
        "to stop: docs/operations.md)",
    )
    act.add_argument(
        "--max-pods-released-per-minute",
        type=int,
        default=0,
        metavar="N",
        help="release rate limit: pods the out-of-service taint may evict within any 60 s (counted "
        "on the node at its release); a release over it waits with WorkloadsReleased=False "
        "ReleaseRateLimited, the fencing does not (default 0: no limit; docs/concepts.md)",
    )
    act.add_argument(
        "--device-check-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="seconds between read-only status checks of every fence device (Pacemaker's monitor; "
        "0: off); fence ConfigMaps are validated every few seconds regardless (docs/operations.md)",
    )
    act.add_argument(
        "--dry-run",
        action="store_true",
        help="decide and report (logs, metrics) but act on nothing: no NodeFence, status, Lease, "
        "Event or playbook",
    )
    ha = p.add_argument_group("high availability")
    ha.add_argument(
        "--leader-elect",
        action="store_true",
        help="run several replicas; only the holder of the Lease <namespace>/noderemedy-runner acts, "
        "the others take over within the lease duration if it dies",
    )
    ha.add_argument(
        "--leader-elect-lease-duration", type=int, default=15, metavar="SECONDS", help="(default %(default)s)"
    )
    ha.add_argument(
        "--leader-elect-renew-deadline", type=int, default=10, metavar="SECONDS", help="(default %(default)s)"
    )
    ha.add_argument(
        "--leader-elect-retry-period", type=int, default=2, metavar="SECONDS", help="(default %(default)s)"
    )
    ha.add_argument(
        "--leader-elect-lease-name", default="noderemedy-runner", metavar="NAME", help="(default %(default)s)"
    )
    ha.add_argument(
        "--no-respread",
        dest="respread",
        action="store_false",
        help="with --leader-elect in a pod (POD_NAME/POD_NAMESPACE): do not keep the runner's own "
        "replicas spread; by default the leader evicts (Eviction API, within the "
        "PodDisruptionBudget) a replica that shares a node with another while a node it may run on "
        "hosts none, as the descheduler's RemoveDuplicates does (docs/operations.md)",
    )
    ha.add_argument(
        "--identity",
        default=None,
        help="this replica's name in Leases and Events (default: hostname + random suffix)",
    )
    obs = p.add_argument_group("observability")
    obs.add_argument(
        "--metrics-addr",
        default=":8080",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz here; 0 disables (default %(default)s)",
    )
    obs.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="JSON log lines on stderr at this level (default %(default)s)",
    )
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags of ``argv`` (None: ``sys.argv``), parsed and checked: a value out of range exits
    with argparse's usage error (code 2) naming the flag; ``--help`` exits 0."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    return args


def policy(args: argparse.Namespace) -> NodeFencePolicy:
    """The NodeFence machine's settings the flags ``args`` give (:data:`POLICY_FIELDS`)."""
    return NodeFencePolicy(**{field: getattr(args, dest) for dest, field in POLICY_FIELDS.items()})


def run_env(args: argparse.Namespace) -> dict[str, str]:
    """``--run-env NAME=VALUE`` flags as a mapping (the last of one name wins)."""
    return dict(item.split("=", 1) for item in args.run_env)


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit through ``p.error`` (code 2, naming the flag) on a flag value out of its range."""
    if args.max_concurrent_runs < 1:
        p.error(f"--max-concurrent-runs: {args.max_concurrent_runs} must be at least 1")
    if args.batch_window < 0:
        p.error(f"--batch-window: {args.batch_window} must be 0 (no batches) or more seconds")
    if args.batch_size < 1:
        p.error(f"--batch-size: {args.batch_size} must be at least 1")
    if args.shared_batch_size < 1:
        p.error(f"--shared-batch-size: {args.shared_batch_size} must be at least 1")
    if args.run_deadline <= 0:
        p.error(f"--run-deadline: {args.run_deadline} must be positive")
    if not 0 <= args.run_nice <= 19:
        p.error(f"--run-nice: {args.run_nice} must be 0..19 (an increase of niceness)")
    for flag in (
        "grace_seconds", "step_retries", "retry_delay", "max_restarts", "restart_delay",
        "max_pods_released_per_minute",
    ):  # fmt: skip
        if getattr(args, flag) < 0:
            p.error(f"--{flag.replace('_', '-')}: {getattr(args, flag)} must not be negative")
    if args.recovery_timeout <= 0:
        p.error(f"--recovery-timeout: {args.recovery_timeout} must be positive")
    if args.poll_interval <= 0:
        p.error(f"--poll-interval: {args.poll_interval} must be positive")
    for item in args.run_env:
        if "=" not in item or not item.split("=", 1)[0]:
            p.error(f"--run-env: {item!r} is not NAME=VALUE")
    if args.playbook_dir is not None:
        missing = sorted({n for n in PLAYBOOKS.values() if not (args.playbook_dir / n).is_file()})
        if missing:
            p.error(f"--playbook-dir {str(args.playbook_dir)!r}: missing {', '.join(missing)}")
    try:
        parse_addr(args.metrics_addr)
    except ValueError as exc:
        p.error(str(exc))
    d, r, t = (
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    )
    if t < 1:
        p.error(f"--leader-elect-retry-period: {t} must be at least 1")
    if r <= 1.2 * t:
        p.error(f"--leader-elect-renew-deadline: {r} must exceed 1.2 x --leader-elect-retry-period ({t})")
    if d <= r:
        p.error(f"--leader-elect-lease-duration: {d} must exceed --leader-elect-renew-deadline ({r})")


def _label_selector(text: str) -> Any:
    """argparse type of ``--metal3-selector``: a metav1.LabelSelector in JSON."""
    import json  # only with the flag

    from noderemedy_runner.config.selectors import parse_label_selector

    try:
        return parse_label_selector(json.loads(text), "--metal3-selector")
    except ValueError as exc:  # FieldError too
        raise argparse.ArgumentTypeError(str(exc)) from exc


__all__ = ["DESCRIPTION", "EPILOG", "POLICY_FIELDS", "build_parser", "parse_args", "policy", "run_env"]
