#!/usr/bin/env python3
"""Benchmark: drain a node holding 110 pods (the kubelet's default max pods) three ways, on one lab.

* ours: ``ansible-playbook`` running ``noderemedy.core.node_drain`` (whole process, start-up included);
* anchor 1: the lab's ``kubectl drain`` (v1.34.4);
* anchor 2: ``ansible-playbook`` running ``kubernetes.core.k8s_drain`` with ``delete_options.wait_timeout``
  set so that it, too, waits until the pods are gone (its ``wait_sleep`` default, 5 s).

Every tool drains the same node with the same 110 Deployment pods (pinned to the node with a
nodeSelector); between runs the node is uncordoned and the bench waits until 110 pods run on it
again. Rounds are interleaved (ours, kubectl, k8s_drain, ours, ...) and the median is reported.

Writes ``bench/results/drain.json``: a list of records ``{"case", "ours_s", "anchor", "anchor_s",
"ratio", ...}`` with ``ratio = ours_s / anchor_s`` (targets: <= 1.0 against kubectl, <= 0.2 against
k8s_drain) and the raw samples; a third record compares the two Ansible modules after subtracting
the start-up of a no-op ``ansible-playbook`` run (measured each round). Prints the ratios. No
assertion: the figures are data.

Usage: ``.venv/bin/python bench/drain.py [--rounds 5] [--pods 110] [--port-base N]`` (``--port-base``
defaults to ``$NODEREMEDY_LAB_PORT_BASE``, else 27000); starts and stops its own lab (3 kwok nodes).

Requirements, fetched by the script itself on first use (only PyPI is needed, not Galaxy):
kubernetes.core 6.x, taken from the wheel of PyPI's ``ansible`` package (which bundles it):
``pip download ansible==12.3.0 --no-deps`` into ``$NODEREMEDY_CACHE/pip`` (default
``~/.cache/noderemedy/pip``), then only ``ansible_collections/kubernetes/core`` is extracted to
``$NODEREMEDY_CACHE/collections`` (about 1 MB; the wheel is about 55 MB and is kept for the next run).
The ``json`` stdout callback used to read results is the repository's own
``tests/callback_plugins/nr_json.py`` (no ansible.posix needed). Exit status 2 if the download fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lab"))

from noderemedy_lab.config import LabConfig, cache_dir  # noqa: E402
from noderemedy_lab.lab import Lab  # noqa: E402

NODE = "lab-node-0"
NS = "bench-drain"

#: The PyPI ``ansible`` release whose wheel bundles the kubernetes.core we compare against (6.2.0).
ANSIBLE_WHEEL_VERSION = "12.3.0"
KUBERNETES_CORE_MAJOR = "6."


def ensure_kubernetes_core(cache: Path) -> tuple[Path, str]:
    """Make kubernetes.core 6.x available under ``cache/collections``; fetch it from PyPI if missing.

    Downloads ``ansible==ANSIBLE_WHEEL_VERSION`` (``pip download --no-deps``) into ``cache/pip``
    unless the wheel is there already, and extracts only ``ansible_collections/kubernetes/core``.

    Returns:
        ``(collections root for ANSIBLE_COLLECTIONS_PATH, kubernetes.core version)``.

    Raises:
        RuntimeError: the download failed, or the collection found is not 6.x.
    """
    root = cache / "collections"
    target = root / "ansible_collections" / "kubernetes" / "core"
    manifest = target / "MANIFEST.json"
    if not manifest.is_file():
        wheel_dir = cache / "pip"
        wheel = wheel_dir / f"ansible-{ANSIBLE_WHEEL_VERSION}-py3-none-any.whl"
        if not wheel.is_file():
            print(
                f"fetching kubernetes.core: pip download ansible=={ANSIBLE_WHEEL_VERSION} (~55 MB)",
                flush=True,
            )
            out = subprocess.run(
                [
                    sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    "-d", str(wheel_dir), f"ansible=={ANSIBLE_WHEEL_VERSION}",
                ],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if out.returncode != 0 or not wheel.is_file():
                raise RuntimeError(
                    f"pip download ansible=={ANSIBLE_WHEEL_VERSION} failed:\n{out.stderr[-2000:]}"
                )
        prefix = "ansible_collections/kubernetes/core/"
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp, zipfile.ZipFile(wheel) as whl:
            members = [m for m in whl.namelist() if m.startswith(prefix) and ".." not in m.split("/")]
            whl.extractall(tmp, members)
            if target.exists():
                shutil.rmtree(target)
            os.replace(Path(tmp) / prefix, target)
    version = json.loads(manifest.read_text())["collection_info"]["version"]
    if not version.startswith(KUBERNETES_CORE_MAJOR):
        raise RuntimeError(
            f"kubernetes.core {version} under {root}: want {KUBERNETES_CORE_MAJOR}x; remove it"
        )
    return root, version


def kubectl(lab: Lab, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = lab.kubectl(*args, timeout=300)
    if check and out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr}")
    return out


def pods_on_node(lab: Lab) -> list[dict]:
    out = kubectl(lab, "get", "pods", "-n", NS, "--field-selector", f"spec.nodeName={NODE}", "-o", "json")
    return json.loads(out.stdout)["items"]


def wait_full(lab: Lab, pods: int, timeout: float = 300) -> set[str]:
    """Wait until ``pods`` pods run on the node (none terminating); return their UIDs."""
    deadline = time.monotonic() + timeout
    while True:
        items = pods_on_node(lab)
        ok = [
            p
            for p in items
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        if len(ok) == pods and len(items) == pods:
            return {p["metadata"]["uid"] for p in ok}
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(ok)}/{pods} pods Running on {NODE} after {timeout} s")
        time.sleep(0.5)


def setup(lab: Lab, pods: int, workdir: Path) -> None:
    kubectl(lab, "create", "namespace", NS)
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "load", "namespace": NS},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": "load"}},
            "template": {
                "metadata": {"labels": {"app": "load"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": NODE},
                    "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                },
            },
        },
    }
    path = workdir / "load.json"
    path.write_text(json.dumps(doc))
    kubectl(lab, "apply", "-f", str(path))


def playbook(workdir: Path, name: str, task: dict) -> Path:
    path = workdir / f"{name}.yml"
    play = [{"hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": [task]}]
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


def run_tool(tool: str, lab: Lab, workdir: Path, env: dict) -> tuple[float, dict]:
    """Run one drain; returns (wall seconds, details)."""
    bindir = Path(sys.executable).parent
    kc = str(lab.kubeconfig)
    if tool == "noop":
        task = {"name": "noop", "ansible.builtin.ping": {}}
        argv = [str(bindir / "ansible-playbook"), "-i", "localhost,", str(playbook(workdir, "noop", task))]
    elif tool == "kubectl":
        argv = [lab.info["kube"]["binaries"]["kubectl"], "--kubeconfig", kc, "drain", NODE, "--timeout=600s"]
    elif tool == "ours":
        task = {
            "name": "drain",
            "noderemedy.core.node_drain": {"name": NODE, "kubeconfig": kc, "timeout": 600},
        }
        argv = [str(bindir / "ansible-playbook"), "-i", "localhost,", str(playbook(workdir, "ours", task))]
    else:
        task = {
            "name": "drain",
            "kubernetes.core.k8s_drain": {
                "name": NODE,
                "kubeconfig": kc,
                "delete_options": {"wait_timeout": 600},
            },
        }
        argv = [
            str(bindir / "ansible-playbook"),
            "-i",
            "localhost,",
            str(playbook(workdir, "k8s_drain", task)),
        ]
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{tool} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    details: dict = {}
    if tool == "ours":
        doc = json.loads(out.stdout)
        res = list(doc["plays"][0]["tasks"][0]["hosts"].values())[0]
        details = {"module_elapsed_s": res["elapsed"], "evicted": len(res["evicted"])}
    return wall, details


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument(
        "--port-base", type=int, default=int(os.environ.get("NODEREMEDY_LAB_PORT_BASE", "27000"))
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "drain.json")
    args = parser.parse_args()

    try:
        collections, k8s_core = ensure_kubernetes_core(cache_dir())
    except RuntimeError as exc:
        print(f"kubernetes.core: {exc}", file=sys.stderr)
        return 2
    k8s_anchor = f"kubernetes.core.k8s_drain ({k8s_core}, delete_options.wait_timeout set)"
    with tempfile.TemporaryDirectory(prefix="bench-drain-") as tmp:
        workdir = Path(tmp)
        ours_root = workdir / "collections" / "ansible_collections" / "noderemedy"
        ours_root.mkdir(parents=True)
        (ours_root / "core").symlink_to(ROOT)
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_COLLECTIONS_PATH": f"{workdir / 'collections'}:{collections}",
                "ANSIBLE_STDOUT_CALLBACK": "nr_json",
                "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "tests" / "callback_plugins"),
                "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
                "ANSIBLE_LOCALHOST_WARNING": "False",
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            }
        )
        lab = Lab(LabConfig(workdir=workdir / "lab", nodes=3, port_base=args.port_base, devices=False))
        lab.start(progress=lambda line: print(f"[lab] {line}", flush=True))
        samples: dict[str, list[float]] = {"ours": [], "kubectl": [], "k8s_drain": [], "noop": []}
        loads: dict[str, list[float]] = {key: [] for key in samples}
        extra: list[dict] = []
        try:
            setup(lab, args.pods, workdir)
            for rnd in range(args.rounds):
                loads["noop"].append(round(os.getloadavg()[0], 2))
                wall, _ = run_tool("noop", lab, workdir, env)
                samples["noop"].append(round(wall, 3))
                print(
                    f"round {rnd + 1} {'noop':10s} {wall:7.2f} s (ansible-playbook with one ping task)"
                    f" load {loads['noop'][-1]}",
                    flush=True,
                )
                for tool in ("ours", "kubectl", "k8s_drain"):
                    kubectl(lab, "uncordon", NODE)
                    before = wait_full(lab, args.pods)
                    loads[tool].append(round(os.getloadavg()[0], 2))
                    wall, details = run_tool(tool, lab, workdir, env)
                    left = {p["metadata"]["uid"] for p in pods_on_node(lab)} & before
                    if left:
                        raise RuntimeError(f"{tool}: {len(left)} drained pods still on {NODE}")
                    samples[tool].append(round(wall, 3))
                    if details:
                        extra.append(details)
                    print(
                        f"round {rnd + 1} {tool:10s} {wall:7.2f} s {details or ''} load {loads[tool][-1]}",
                        flush=True,
                    )
            kubectl(lab, "uncordon", NODE)
        finally:
            lab.stop()

    ours = round(statistics.median(samples["ours"]), 3)
    noop = round(statistics.median(samples["noop"]), 3)
    common = {
        "rounds": args.rounds,
        "statistic": "median",
        "ansible_playbook_noop_s": noop,
        "ansible_playbook_noop_samples_s": samples["noop"],
        "ours_module_elapsed_s": [e["module_elapsed_s"] for e in extra],
        "ours_command": "ansible-playbook (one task: noderemedy.core.node_drain)",
        "load_average_1m_before_each_run": loads,
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    records = []
    for anchor, key, target in (
        ("kubectl drain (v1.34.4)", "kubectl", 1.0),
        (k8s_anchor, "k8s_drain", 0.2),
    ):
        anchor_s = round(statistics.median(samples[key]), 3)
        records.append(
            {
                "case": f"drain a kwok node holding {args.pods} Deployment pods; wall time of the whole command",
                "ours_s": ours,
                "anchor": anchor,
                "anchor_s": anchor_s,
                "ratio": round(ours / anchor_s, 3),
                "target_ratio": target,
                "ours_samples_s": samples["ours"],
                "anchor_samples_s": samples[key],
                # per round, so a ratio is not skewed by a load spike hitting one tool only
                "ratio_per_round": [
                    round(o / a, 3) for o, a in zip(samples["ours"], samples[key], strict=True)
                ],
                **common,
            }
        )
        print(
            f"ours {ours:.2f} s vs {anchor} {anchor_s:.2f} s: ratio {ours / anchor_s:.3f} (target <= {target})"
        )
    # both Ansible modules pay the same ansible-playbook start-up: compare the work after it too
    k8s = round(statistics.median(samples["k8s_drain"]), 3)
    records.append(
        {
            "case": f"drain {args.pods} pods, Ansible modules only: wall time minus a no-op ansible-playbook run",
            "ours_s": round(ours - noop, 3),
            "anchor": k8s_anchor,
            "anchor_s": round(k8s - noop, 3),
            "ratio": round((ours - noop) / (k8s - noop), 3),
            "target_ratio": 0.2,
            **common,
        }
    )
    print(f"minus ansible start-up ({noop:.2f} s): ours {ours - noop:.2f} s vs k8s_drain {k8s - noop:.2f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
