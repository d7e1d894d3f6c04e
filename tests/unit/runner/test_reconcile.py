"""Pure pieces of the reconcilers and their I/O helpers (no cluster): node readings, pod toleration,
fence configuration loading and its errors, and the taint guard's refusal of a reading that is not
the one whose evidence is held."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from noderemedy_runner.config.fence import FenceConfigError
from noderemedy_runner.executor import Executor
from noderemedy_runner.kube.resources import has_taint, ready_condition
from noderemedy_runner.loops.memory import READING_FRESH_SECONDS, InMemory
from noderemedy_runner.loops.metal3 import Metal3RemediationReconciler
from noderemedy_runner.loops.nodefence import NodeFenceReconciler, load_fence_config
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import FenceReading
from noderemedy_runner.machines.nodefence import NodeFencePolicy

NODE = "worker-1"


def test_ready_condition_and_taint() -> None:
    node = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:10Z"}
            ]
        },
        "spec": {"taints": [{"key": act.OUT_OF_SERVICE_TAINT_KEY, "effect": "NoExecute"}]},
    }
    ready, since = ready_condition(node)
    assert not ready and since == 1767225610.0
    assert has_taint(node, act.OUT_OF_SERVICE_TAINT_KEY, "NoExecute")
    assert not has_taint(node, act.OUT_OF_SERVICE_TAINT_KEY, "NoSchedule")
    assert ready_condition({"status": {}}) == (False, None)


class ConfigMaps:
    """Reads ConfigMap data from a dict: the only KubeIO call load_fence_config makes."""

    def __init__(self, maps: dict[str, dict[str, str]]) -> None:
        self.maps = maps

    def get_configmap_data(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.maps.get(name)


CONFIG = {
    "config.properties": f"node_name={NODE}\nisolation=fc-off\npower_management=ipmi-off\nrecovery=fc-on",
    "fence-method-fc-off": "template=fence-method-template-fc\nplug=fc1/1\naction=off",
    "fence-method-fc-on": "template=fence-method-template-fc\nplug=fc1/1\naction=on",
    "fence-method-ipmi-off": "template=fence-method-template-bmc\naction=off",
}
FC = {"template.properties": "type=fc\naddress=127.0.0.1:161\nsecret=fc"}
BMC = {"template.properties": "type=ipmi\naddress=127.0.0.1:623\nsecret=bmc"}


def test_load_fence_config_reads_the_templates_it_names() -> None:
    kube: Any = ConfigMaps(
        {f"fence-config-{NODE}": CONFIG, "fence-method-template-fc": FC, "fence-method-template-bmc": BMC}
    )
    cfg = load_fence_config(kube, "ns", NODE)
    assert [m.name for m in cfg.isolation] == ["fc-off"] and cfg.secret_names() == {"fc", "bmc"}


def test_load_fence_config_names_a_missing_template_and_a_missing_configmap() -> None:
    kube: Any = ConfigMaps({f"fence-config-{NODE}": CONFIG, "fence-method-template-fc": FC})
    with pytest.raises(FenceConfigError) as info:
        load_fence_config(kube, "ns", NODE)
    assert str(info.value) == (
        f"ConfigMap 'fence-config-{NODE}' key 'fence-method-ipmi-off': "
        "template ConfigMap 'fence-method-template-bmc' not found"
    )
    with pytest.raises(
        FenceConfigError, match=f"ConfigMap 'fence-config-{NODE}': not found in namespace 'ns'"
    ):
        load_fence_config(ConfigMaps({}), "ns", NODE)  # type: ignore[arg-type]


def test_taint_is_refused_unless_the_held_evidence_is_for_that_reading(tmp_path: Path) -> None:
    """The executor is never reached: the reconciler refuses before any run."""
    rec = NodeFenceReconciler(
        kube=None,  # type: ignore[arg-type]
        executor=Executor(tmp_path, tmp_path),
        namespace="ns",
        policy=NodeFencePolicy(),
    )
    reading = FenceReading(NODE, True, "power_off", "ipmi-off", 100.0)
    other = FenceReading(NODE, True, "power_off", "ipmi-off", 101.0)
    held = rec.held("nf")
    held.reading, held.evidence = other, {"verified": True}
    action = act.taint_out_of_service(NODE, reading)
    assert rec._taint({"metadata": {"name": "nf"}}, NODE, action, held, threading.Event()) is False
    assert held.reading is None and held.evidence is None  # forces a fresh verify_fence
    assert not any(tmp_path.rglob("artifacts"))


def test_the_reconcilers_keep_one_memory_per_resource_and_forget_it(tmp_path: Path) -> None:
    """Both reconcilers keep their in-memory state in the shared base: one per key, dropped by
    forget(); a Metal3Remediation's key has its namespace, so equal names never share it."""
    ex = Executor(tmp_path, tmp_path)
    nf = NodeFenceReconciler(kube=None, executor=ex, namespace="ns", policy=NodeFencePolicy())  # type: ignore[arg-type]
    m3 = Metal3RemediationReconciler(kube=None, executor=ex)  # type: ignore[arg-type]
    held = nf.held("nf")
    assert nf.held("nf") is held and nf.held("other") is not held
    nf.forget("nf")
    assert nf.held("nf") is not held
    assert m3.held("a", "m") is m3.held("a", "m") and m3.held("a", "m") is not m3.held("b", "m")


def test_a_held_reading_is_offered_only_while_fresh() -> None:
    held = InMemory(reading=FenceReading(NODE, True, "power_off", "ipmi-off", 100.0))
    assert held.fresh_reading(100.0 + READING_FRESH_SECONDS) is held.reading
    assert held.fresh_reading(100.1 + READING_FRESH_SECONDS) is None
    assert InMemory().fresh_reading(100.0) is None
