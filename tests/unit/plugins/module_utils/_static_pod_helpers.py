"""Shared by the static-pod fallback's tests (test_static_pod*.py): probe answers and an
observation builder, a kube-apiserver Pod of a revision, a revision layout under a temporary root
and readers of it, and an injected clock with scripted observations for the monitor loop."""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod import Check, Layout, Observation

OK = Check(True, True, 200, "ok")
REFUSED = Check(False, False, 0, "", "ConnectionRefusedError: [Errno 111] Connection refused")
READYZ_HOOKS = (
    "[+]ping ok\n[+]etcd ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"
    "[-]poststarthook/scheduling/bootstrap-system-priority-classes failed: reason withheld\n"
    "readyz check failed\n"
)
ETCD_RED = Check(False, True, 500, "[-]etcd failed: reason withheld\nhealthz check failed\n")


def obs(attempts=1, running=3, healthz=OK, readyz=OK, etcd=OK, t=0.0) -> Observation:
    return Observation(t, attempts, running, healthz, readyz, etcd)


def pod(rev: int, name: str = "kube-apiserver", flag: str = "") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"revision": str(rev)}},
        "spec": {
            "containers": [
                {"name": name, "image": "k8s", "command": ["kube-apiserver", f"--rev={rev}{flag}"]}
            ]
        },
    }


def make_layout(root: Path, revisions=(1, 2, 3), live: int | None = 3, lkg: int | None = None) -> Layout:
    params = {
        "operand": "kube-apiserver",
        "manifests_dir": str(root / "manifests"),
        "resources_dir": str(root / "resources"),
        "lock_file": str(root / "lock" / "kube-apiserver-installer.lock"),
        "termination_log": str(root / "log" / "termination.log"),
    }
    layout = Layout.from_params(params)
    for d in (
        layout.manifests_dir,
        layout.resources_dir,
        layout.lock_file.parent,
        layout.termination_log.parent,
    ):
        d.mkdir(parents=True, exist_ok=True)
    for r in revisions:
        layout.revision_dir(r).mkdir()
        (layout.revision_dir(r) / "configmaps").mkdir()
        layout.revision_manifest(r).write_text(yaml.safe_dump(pod(r)))
    if live is not None:
        layout.live_manifest.write_text(yaml.safe_dump(pod(live)))
    if lkg is not None:
        layout.lkg_link.symlink_to(layout.revision_manifest(lkg))
    return layout


def live(layout: Layout) -> dict:
    return yaml.safe_load(layout.live_manifest.read_text())


def non_dot_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if not p.name.startswith("."))


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s > 0
        self.t += s


def scripted(observations):
    it = iter(observations)
    last = {}

    def observe(now, left):
        try:
            last["o"] = next(it)
        except StopIteration:
            pass
        o = last["o"]
        return Observation(now, o.start_attempts, o.running_revision, o.healthz, o.readyz, o.etcd)

    return observe
