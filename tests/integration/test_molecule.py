"""The molecule scenarios under ``extensions/molecule/`` (one per role) against the session's lab.

Each scenario runs as ``molecule test -s <scenario>`` (default driver, no instance: the peers are the
lab's BMCs, PDU, FC switch and control plane, described to the scenario by ``NODEREMEDY_LAB_INFO``
as ``noderemedy-lab env`` exports it): prepare, converge, idempotence (the second converge must
change nothing), verify (reads the peer's own state: ipmitool, snmpget, the API server, the files on
disk), cleanup. After each scenario the lab must be as it was found, because the rest of the session
shares it. Durations are printed (run with ``-s``), never asserted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.lab, pytest.mark.kube]

ROOT = Path(__file__).resolve().parents[2]
MOLECULE_DIR = ROOT / "extensions" / "molecule"
BINDIR = Path(sys.executable).parent

#: scenario -> the role it tests (a fence step with IPMI, with a PDU, with FC; drain;
#: Metal3 reboot; static-pod fallback)
SCENARIOS = {
    "fence_step_ipmi": "fence_step",
    "fence_step_pdu": "fence_step",
    "fence_step_fc": "fence_step",
    "node_drain": "node_drain",
    "metal3_reboot": "metal3_reboot",
    "static_pod_fallback": "static_pod_fallback",
}
#: actions every scenario must run successfully, in this order (side_effect: metal3_reboot's power-on)
ACTIONS = ["create", "prepare", "converge", "idempotence", "verify", "cleanup", "destroy"]
POWER_LABEL = "lab.noderemedy.io/power"


def test_every_role_has_a_scenario_and_every_scenario_is_run() -> None:
    found = sorted(p.parent.name for p in MOLECULE_DIR.glob("*/molecule.yml"))
    assert found == sorted(SCENARIOS)
    roles = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())
    assert sorted(set(SCENARIOS.values())) == roles


@pytest.fixture(scope="module")
def molecule_env(lab_kube, collections_path: Path) -> dict[str, str]:
    """The environment ``noderemedy-lab env`` gives a shell, plus this checkout as ``noderemedy.core``."""
    info = lab_kube.info
    kubectl_dir = Path(info["kube"]["binaries"]["kubectl"]).parent
    env = dict(os.environ)
    env.update(
        {
            "NODEREMEDY_LAB_DIR": str(lab_kube.config.workdir),
            "NODEREMEDY_LAB_INFO": str(lab_kube.config.state_file),
            "KUBECONFIG": str(lab_kube.kubeconfig),
            "SNMP_PERSISTENT_DIR": info["devices"]["snmp_persistent_dir"],
            "PATH": os.pathsep.join([str(BINDIR), str(kubectl_dir), env.get("PATH", "")]),
            "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
            "NO_COLOR": "1",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "PY_COLORS": "0",
        }
    )
    return env


def lab_snapshot(lab) -> dict:
    """What the scenarios touch, as the peers report it: the kwok nodes' readiness,
    schedulability and power label (API server), the last node's BMC power (ipmitool) and leftover
    molecule namespaces. The lab's real nodes, if this worker started them, are left out: no
    scenario addresses them, and their kubelets' own restarts are not the scenario's doing."""
    kwok = set(lab.info["nodes"])
    nodes = [
        n
        for n in json.loads(lab.kubectl("get", "nodes", "-o", "json", check=True).stdout)["items"]
        if n["metadata"]["name"] in kwok
    ]
    assert len(nodes) == len(kwok), f"nodes missing: {sorted(kwok - {n['metadata']['name'] for n in nodes})}"
    ready = {
        n["metadata"]["name"]: next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready")
        for n in nodes
    }
    namespaces = lab.kubectl("get", "namespaces", "-o", "name", check=True).stdout.split()
    power = lab.ipmitool(lab.info["nodes"][-1], "chassis", "power", "status")
    return {
        "ready": ready,
        "unschedulable": sorted(n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")),
        "power_label": {n["metadata"]["name"]: n["metadata"]["labels"].get(POWER_LABEL) for n in nodes},
        "bmc": power.stdout.strip(),
        "molecule_namespaces": sorted(ns for ns in namespaces if ns.startswith("namespace/molecule-")),
    }


def section(output: str, scenario: str, action: str) -> str:
    """The output of one action of ``molecule test`` (from its 'Executing' line to its 'Executed')."""
    start = output.rfind(f"[{scenario} > {action}] Executing")
    end = output.find(f"[{scenario} > {action}] Executed", start)
    assert start >= 0 and end > start, f"no {action} in the output of scenario {scenario}"
    return output[start:end]


def recap_changed(text: str) -> list[int]:
    """``changed=`` counts of every PLAY RECAP line in ``text``."""
    return [int(n) for n in re.findall(r"localhost\s+: ok=\d+\s+changed=(\d+)", text)]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_molecule_scenario(scenario: str, lab_kube, molecule_env: dict[str, str], tmp_path: Path) -> None:
    before = lab_snapshot(lab_kube)
    # molecule's default ephemeral directory (~/.ansible/tmp/molecule.<hash of the checkout's
    # directory name>.<scenario>) is shared by every checkout of the same name on this machine
    env = {**molecule_env, "MOLECULE_EPHEMERAL_DIRECTORY": str(tmp_path / f"molecule-{scenario}")}
    argv = [
        str(BINDIR / "molecule"),
        "--base-config",
        str(MOLECULE_DIR / "config.yml"),
        "test",
        "-s",
        scenario,
    ]
    t0 = time.monotonic()
    # one stream: molecule logs to stderr, ansible-playbook prints to stdout, in between
    proc = subprocess.run(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=540,
        check=False,
    )
    elapsed = time.monotonic() - t0
    out = proc.stdout
    print(f"\n[measure] molecule test -s {scenario}: {elapsed:.1f} s")
    assert proc.returncode == 0, f"molecule test -s {scenario} failed ({proc.returncode}):\n{out[-6000:]}"

    actions = ACTIONS[:4] + (["side_effect"] if scenario == "metal3_reboot" else []) + ACTIONS[4:]
    summary = [line for line in out.splitlines() if line.startswith(f"{scenario} > ")]
    for action in actions:
        assert f"{scenario} > {action}: Executed: Successful" in summary, f"{action} did not run:\n{summary}"
    # converge changed the peer, the second converge (molecule's idempotence check) changed nothing,
    # and verify only read
    assert recap_changed(section(out, scenario, "converge"))[-1] >= 1, section(out, scenario, "converge")
    assert recap_changed(section(out, scenario, "idempotence")) == [0]
    assert recap_changed(section(out, scenario, "verify")) == [0]
    assert "All assertions passed" in section(out, scenario, "verify")

    after = lab_snapshot(lab_kube)
    assert after == before, f"scenario {scenario} did not leave the lab as it found it"
    assert after["molecule_namespaces"] == []
