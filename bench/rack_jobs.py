"""The Job executor's side of ``bench/rack.py``: its runs go as Kubernetes Jobs (remediation pods)
on the lab's real nodes, as in a cluster.

What that takes on the rack lab, the way ``bench/remedy_pods.py`` sets it up:

- the remediation pod image built from this checkout (``./dev image``) and imported into the
  containerd of each real node (no registry here);
- the runner's Deployment (``lab/deploy``: CRDs, RBAC, ServiceAccount, the real nodes as its
  placement) in :data:`JOB_NAMESPACE`, scaled to 0, and a placeholder pod of its pod template whose
  identity (``POD_NAME``/``POD_NAMESPACE``) the host-process runner takes, so its Jobs get that pod's
  image, ServiceAccount, least-privilege RBAC and placement;
- the rack's PDU and FC switch reachable from the pods: a UDP relay each on the real nodes' bridge
  (:meth:`noderemedy_lab.realnode.RealNodes.relay_devices`), the fence configuration naming the
  relay's address (:meth:`noderemedy_lab.rack.Rack.fence_configuration` ``host``).

Each batch of runs is one Job (one pod start on a real node, then one ``ansible-playbook`` for its
hosts in it: ``runner/noderemedy_runner/job_batches.py``); a lone run is a Job of its own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from remedy_pods import NAMESPACE as JOB_NAMESPACE
from remedy_pods import OVERLAY, build_image, placeholder_pod  # noqa: F401 - build_image for rack.py

#: Real nodes the rack lab starts for the Job executor (the Jobs' placement; never a rack node).
REAL_NODES = 2


def prepare(lab: Any, rack: Any, archive: Path) -> dict[str, Any]:
    """Everything the Job executor needs on a started rack lab with real nodes; returns
    ``{"namespace", "env", "host"}``: the runner's namespace (fence configuration goes there), the
    runner's environment (the placeholder pod's identity) and the devices' relay address (the PDU
    and the switch only: a configuration for the Jobs must not name the BMCs). ``archive``: the
    remediation pod image (:func:`build_image`, called before the lab starts). RuntimeError when
    the lab has no real nodes."""
    if lab.real is None:
        raise RuntimeError("the Job executor needs the lab's real nodes (LabConfig real_nodes)")
    lab.import_image(archive)
    lab.kubectl("apply", "--server-side", "-k", str(OVERLAY), check=True, timeout=120)
    lab.kubectl("-n", JOB_NAMESPACE, "scale", "deployment", "noderemedy-runner", "--replicas=0", check=True)
    pod = placeholder_pod(lab)
    host = lab.real.relay_devices(
        {"rack-pdu": ("udp", int(rack.pdu["port"])), "rack-switch": ("udp", int(rack.switch["port"]))}
    )
    return {
        "namespace": JOB_NAMESPACE,
        "env": {"POD_NAME": pod, "POD_NAMESPACE": JOB_NAMESPACE},
        "host": host,
    }


def kubepods_cpu_s(lab: Any) -> float:
    """CPU seconds used so far by every pod of the lab's real nodes (cgroup v1 ``cpuacct.usage``
    of each node's ``kubepods`` cgroup): the Job executor's runs, which are no children of the
    runner."""
    total = 0
    for node in lab.info.get("real_nodes", {}).values():
        usage = Path("/sys/fs/cgroup/cpuacct") / node["cgroup"].strip("/") / "kubepods" / "cpuacct.usage"
        total += int(usage.read_text())
    return total / 1e9


class PodMeter:
    """What the runner's own process figures miss under the Job executor (``job`` None: nothing):
    the CPU of its runs, taken in the real nodes' pods, from :meth:`start` to :meth:`figures`."""

    def __init__(self, lab: Any, job: dict[str, Any] | None) -> None:
        self.lab, self.job, self.cpu0 = lab, job, 0.0

    def start(self) -> None:
        if self.job:
            self.cpu0 = kubepods_cpu_s(self.lab)

    def figures(self, runner_cpu_s: float, log_text: str) -> dict[str, Any]:
        """Overrides of ``run_ours``' figures: ``cpu_runs_s`` (the pods'), ``cpu_s`` (runner +
        pods) and ``ansible_playbook_processes`` (one per Job: the distinct Jobs the runner's
        ``... as Job <name>`` lines name, a batch's once)."""
        if not self.job:
            return {}
        pods = kubepods_cpu_s(self.lab) - self.cpu0
        jobs = len(set(re.findall(r" as Job ([a-z0-9-]+)", log_text)))
        return {
            "cpu_runs_s": round(pods, 1),
            "cpu_s": round(runner_cpu_s + pods, 1),
            "ansible_playbook_processes": jobs,
            "cpu_runs_where": "the real nodes' kubepods cgroups (every pod on them)",
        }
