"""A deterministic simulated world for the NodeFence machine: one node, an FC switch port and a
PDU outlet, and a reconcile loop that can crash. Used by the property tests (no cluster)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from noderemedy_runner.config.fence import FenceConfig, parse_fence_config
from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.machines.nodefence import (
    NodeFenceObservations,
    NodeFencePolicy,
    NodeFenceStatus,
    StepResult,
    decide,
    is_terminal,
)
from noderemedy_runner.machines.release import LeftOnNode

NODE = "worker-1"
NAME = "nf-worker-1"
T0 = 1_700_000_000
_IDENT_RE = re.compile(r"-r(\d+)-(isolation|power-management|recovery)-a(\d+)(?:-l(\d+))?(?:-s\d+)?$")
_STEP_INDEX = {"isolation": 0, "power-management": 1, "recovery": 2}


def fence_config(levels: bool = False) -> FenceConfig:
    """isolation=fc-off, power_management=pdu-off pdu-on, recovery=fc-on (the seed's shape).
    With ``levels``: power_management=ipmi-off ipmi-on | pdu-off pdu-on (IPMI, then the PDU)."""
    power = "ipmi-off ipmi-on | pdu-off pdu-on" if levels else "pdu-off pdu-on"
    data = {
        "config.properties": f"node_name={NODE}\nisolation=fc-off\npower_management={power}\nrecovery=fc-on",
        "fence-method-ipmi-off": "template=fence-method-template-ipmi\naction=off",
        "fence-method-ipmi-on": "template=fence-method-template-ipmi\naction=on",
        "fence-method-fc-off": "template=fence-method-template-fc\nplug=3\naction=off",
        "fence-method-fc-on": "template=fence-method-template-fc\nplug=3\naction=on",
        "fence-method-pdu-off": "template=fence-method-template-pdu\nplug=5\naction=off",
        "fence-method-pdu-on": "template=fence-method-template-pdu\nplug=5\naction=on",
    }
    if not levels:
        del data["fence-method-ipmi-off"], data["fence-method-ipmi-on"]
    templates = {
        "fence-method-template-ipmi": {
            "template.properties": "type=ipmi\naddress=127.0.0.1:16001\nsecret=bmc"
        },
        "fence-method-template-fc": {"template.properties": "type=fc\naddress=127.0.0.1:16014\nsecret=fc"},
        "fence-method-template-pdu": {
            "template.properties": "type=pdu\nmodel=apc-rpdu\naddress=127.0.0.1:16010\nsecret=pdu"
        },
    }
    return parse_fence_config(f"fence-config-{NODE}", data, templates, node=NODE)


@dataclass
class World:
    """``fails[i]``: whether run (restarts, step, attempt) fails, i = restarts*9 + step*3 + attempt.
    ``revive``: the node comes back Ready after a successful power cycle; ``ready_after_isolation``:
    it comes back right after storage isolation. ``bmc_dead``: the BMC died with the node (every
    run with an ipmi method fails before touching anything; reads of it say ``unknown``).
    ``detach_waits``: after a release, a VolumeAttachment of the node stays for that many looks
    (the attach/detach controller still detaching); recovery must not start meanwhile."""

    fails: tuple[bool, ...]
    revive: bool
    ready_after_isolation: bool = False
    bmc_dead: bool = False
    node_ready: bool = False
    power_on: bool = True
    fc_up: bool = True
    taint: bool = False
    ever_fenced: bool = False
    releases: int = 0
    detach_waits: int = 0
    attached: int = 0
    runs: list[str] = field(default_factory=list)
    #: (restarts, method name, action) of every power action that reached the PDU, in order
    power_log: list[tuple[int, str, str]] = field(default_factory=list)

    def fails_run(self, ident: str) -> bool:
        m = _IDENT_RE.search(ident)
        assert m, ident
        level = int(m.group(4) or 1) - 1
        i = int(m.group(1)) * 9 + _STEP_INDEX[m.group(2)] * 3 + int(m.group(3)) + 13 * level
        return self.fails[i % len(self.fails)]

    def run_step(self, action: Action, now: float) -> StepResult:
        assert action.ident is not None
        self.runs.append(action.ident)
        if self.bmc_dead and any(m["device_type"] == "ipmi" for m in action.extravars["methods"]):
            return StepResult(action.ident, ok=False, message="BMC unreachable")
        if self.fails_run(action.ident):
            return StepResult(
                action.ident, ok=False, timed_out=len(action.ident) % 2 == 0, message="device said no"
            )
        states: list[tuple[dict[str, Any], str]] = []
        for m in action.extravars["methods"]:
            if m["device_type"] == "fc":
                self.fc_up = m["action"] == "on"
                self.ever_fenced |= not self.fc_up
                states.append((m, "on" if self.fc_up else "off"))
            else:
                self.power_on = m["action"] == "on"
                self.ever_fenced |= not self.power_on
                restarts = _IDENT_RE.search(action.ident)
                assert restarts is not None
                self.power_log.append((int(restarts.group(1)), m["name"], m["action"]))
                states.append((m, "on" if self.power_on else "off"))
        if action.step == "Isolation" and self.ready_after_isolation:
            self.node_ready = True
        if action.step == "PowerManagement" and self.revive and self.power_on:
            self.node_ready = True
        return StepResult(action.ident, ok=True, fence=evidence_reading(states, now))

    def verify(self, action: Action, now: float) -> FenceReading | None:
        states = []
        for m in action.extravars["methods"]:
            up = self.fc_up if m["device_type"] == "fc" else self.power_on
            state = "on" if up else "off"
            if m["device_type"] == "ipmi" and self.bmc_dead:
                state = "unknown"
            states.append((m, state))
        return evidence_reading(states, now) or FenceReading(NODE, False, "power_off", "none", now)


def evidence_reading(states: list[tuple[dict[str, Any], str]], now: float) -> FenceReading | None:
    """What the run's evidence task (roles/fence_step/tasks/evidence.yml, tested against real
    ansible-runner in test_evidence.py) reports in this world: (method, state read back) pairs →
    a power off read back off, else the fc ports asked off all read back off, else nothing."""
    off = [(m, state) for m, state in states if m["action"] == "off"]
    for m, state in off:
        if m["device_type"] != "fc" and state == "off":
            return FenceReading(NODE, True, "power_off", m["name"], now)
    ports = [(m, state) for m, state in off if m["device_type"] == "fc"]
    if not ports:
        return None
    source = ",".join(m["name"] for m, _ in ports)
    return FenceReading(NODE, all(state == "off" for _, state in ports), "storage_isolated", source, now)


@dataclass
class Outcome:
    status: NodeFenceStatus
    world: World
    actions: list[Action]
    terminated: bool


def run(
    world: World,
    policy: NodeFencePolicy,
    crashes: tuple[int, ...] = (),
    max_iterations: int = 2000,
    check: bool = True,
    config: FenceConfig | None = None,
) -> Outcome:
    """Reconcile until ``decide`` returns ``none``. ``crashes[i]`` for iteration i: 0 = no crash,
    1 = crash after the action (in-memory results lost), 2 = crash before a status write lands.
    With ``check``, every persisted status is round-tripped through its JSON form."""
    config = config or fence_config()
    persisted = NodeFenceStatus()
    now = float(T0)
    result: StepResult | None = None
    fence: FenceReading | None = None
    actions: list[Action] = []
    for i in range(max_iterations):
        obs = NodeFenceObservations(
            node=NODE,
            now=now,
            node_ready=world.node_ready,
            not_ready_since=None if world.node_ready else float(T0),
            taint_present=world.taint,
            fence=fence,
            result=result,
            generation=1,
            left_on_node=(LeftOnNode((), ("csi-1",) * min(world.attached, 1)) if world.taint else None),
        )
        if world.attached:
            world.attached -= 1
        action = decide(NAME, persisted, obs, config, policy)
        actions.append(action)
        crash = crashes[i] if i < len(crashes) else 0
        if action.kind == "none":
            return Outcome(persisted, world, actions, is_terminal(persisted, policy))
        if action.kind == "write_status":
            assert action.status is not None
            if crash != 2:
                persisted = NodeFenceStatus.from_dict(action.status)
                if check:
                    assert persisted.to_dict() == dict(action.status)
        elif action.kind == "run_step":
            if action.step == "Recovery":  # safe return: storage unfenced only after the detach
                assert not world.taint or not world.attached, "recovery started before the detach"
            result = world.run_step(action, now)
            fence = result.fence if result.ok else None
        elif action.kind == "verify_fence":
            fence = world.verify(action, now)
        elif action.kind == "taint_out_of_service":
            # invariant 1 in the world: the node was really fenced before its workloads go.
            assert world.ever_fenced, "released workloads of a node that was never fenced"
            assert action.fence is not None and action.fence is obs.fence and obs.fence.licenses_taint(NODE)
            world.taint = True
            world.releases += 1
            world.attached = world.detach_waits
        elif action.kind == "untaint_out_of_service":
            assert not world.attached, "the taint went before the detach"
            world.taint = False
        elif action.kind == "wait":
            now += action.seconds
        else:
            raise AssertionError(f"unexpected action {action}")
        if crash:
            result, fence = None, None
    return Outcome(persisted, world, actions, False)
