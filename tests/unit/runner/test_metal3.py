"""Metal3Remediation machine (cluster-api-provider-metal3 contract): transition table, sweep,
hypothesis properties (invariant 1, resume after crash, bounded retries), parsing, opt-in."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.config.selectors import FieldError, LabelSelector, parse_duration, parse_label_selector
from noderemedy_runner.machines.actions import Action, FenceReading
from noderemedy_runner.machines.metal3 import (
    FINALIZER,
    OPT_IN_ANNOTATION,
    PHASES,
    HostRef,
    Metal3Error,
    Metal3Observations,
    Metal3RemediationStatus,
    RemediationStrategy,
    decide,
    opted_in,
)
from noderemedy_runner.machines.release import LeftOnNode, RateHold

T0 = 1_700_000_000.0
NOW = T0 + 1000
NODE = "worker-1"
HOST = HostRef("host-1", "metal3", "ipmi://127.0.0.1:9001", "host-1-bmc", True)
STRATEGY = RemediationStrategy("Reboot", retry_limit=2, timeout_seconds=300)
OFF = FenceReading(NODE, True, "power_off", "BareMetalHost/metal3/host-1", NOW)
ON = FenceReading(NODE, False, "power_off", "BareMetalHost/metal3/host-1", NOW)
OFF_OTHER = FenceReading("worker-2", True, "power_off", "BareMetalHost/metal3/host-2", NOW)
PODS_LEFT = LeftOnNode(pods=("default/web-0",))
VA_LEFT = LeftOnNode(volume_attachments=("csi-0123",))
HOLD = RateHold("the release of node worker-1 waits", 2.5)


def st_(phase: str = "Running", retry: int = 0, last: float | None = NOW - 10) -> Metal3RemediationStatus:
    return Metal3RemediationStatus(phase, retry, last)


def ob(**kw: Any) -> Metal3Observations:
    base: dict[str, Any] = {"now": NOW, "node": NODE, "has_finalizer": True}
    base.update(kw)
    return Metal3Observations(**base)


def go(
    status: Metal3RemediationStatus,
    obs: Metal3Observations,
    strategy: RemediationStrategy = STRATEGY,
    host: HostRef = HOST,
) -> Action:
    return decide("m3r-1", "metal3", "machine-1", status, strategy, host, obs)


ROWS: list[tuple[str, Metal3RemediationStatus, Metal3Observations, dict[str, Any], str, dict[str, Any]]] = [
    ("deleting/nothing", st_("Deleting machine"), ob(), {}, "none", {}),
    ("failed/nothing", st_("Failed"), ob(), {}, "none", {}),
    ("any/host-offline-fails", st_("Waiting"), ob(), {"host": dataclasses.replace(HOST, online=False)}, "write_status", {"phase": "Failed"}),
    ("any/no-bmc-fails", st_(""), ob(), {"host": dataclasses.replace(HOST, bmc_address="")}, "write_status", {"phase": "Failed"}),
    ("any/no-credentials-fails", st_(""), ob(), {"host": dataclasses.replace(HOST, credentials_name="")}, "write_status", {"phase": "Failed"}),
    ("any/power-failed", st_("Running"), ob(power_failed=True), {}, "write_status", {"phase": "Failed"}),
    ("any/unsupported-strategy", st_(""), ob(), {"strategy": RemediationStrategy("Reprovision")}, "none", {"reason": "UnsupportedStrategy"}),
    ("new/starts-running", st_("", last=None), ob(), {}, "write_status", {"phase": "Running", "last_remediated": NOW, "retry_count": 0}),
    ("running/adds-finalizer", st_(), ob(has_finalizer=False), {}, "add_finalizer", {"extravars.finalizer": FINALIZER}),
    ("running/power-unknown-powers-off", st_(), ob(), {}, "power", {"extravars.state": "off", "extravars.credentials_name": "host-1-bmc"}),
    ("running/power-on-powers-off", st_(), ob(power=ON), {}, "power", {"extravars.state": "off"}),
    ("running/off-reading-of-other-node", st_(), ob(power=OFF_OTHER), {}, "power", {"extravars.state": "off"}),
    ("running/verified-off-taints", st_(), ob(power=OFF), {}, "taint_out_of_service", {"fence": OFF, "extravars.node": NODE}),
    ("running/rate-limited-waits", st_(), ob(power=OFF, release_hold=HOLD), {}, "wait", {"seconds": 2.5, "reason": "ReleaseRateLimited"}),
    ("running/not-looked-waits", st_(), ob(power=OFF, taint_present=True), {}, "wait", {"seconds": 5.0, "reason": "WaitNodeDrained"}),
    ("running/wait-drain", st_(), ob(power=OFF, taint_present=True, left_on_node=PODS_LEFT), {}, "wait", {"seconds": 5.0, "reason": "WaitNodeDrained"}),
    ("running/wait-detach", st_(), ob(power=OFF, taint_present=True, left_on_node=VA_LEFT), {}, "wait", {"seconds": 5.0, "reason": "WaitForDetach"}),
    ("running/drained-waiting", st_(), ob(power=OFF, taint_present=True, left_on_node=LeftOnNode()), {}, "write_status", {"phase": "Waiting"}),
    ("running/no-node-waiting", st_(), ob(power=OFF_OTHER, node=None), {}, "write_status", {"phase": "Waiting"}),
    ("running/node-gone-waiting", st_(), ob(power=OFF, node_exists=False), {}, "write_status", {"phase": "Waiting"}),
    ("waiting/power-unknown-powers-on", st_("Waiting"), ob(taint_present=True), {}, "power", {"extravars.state": "on"}),
    ("waiting/power-off-powers-on", st_("Waiting"), ob(power=OFF, taint_present=True), {}, "power", {"extravars.state": "on"}),
    ("waiting/ready-untaints", st_("Waiting"), ob(power=ON, node_ready=True, taint_present=True), {}, "untaint_out_of_service", {}),
    ("waiting/ready-removes-finalizer", st_("Waiting"), ob(power=ON, node_ready=True), {}, "remove_finalizer", {"extravars.name": "m3r-1"}),
    ("waiting/done", st_("Waiting"), ob(power=ON, node_ready=True, has_finalizer=False), {}, "none", {"reason": "RemediationDone"}),
    ("waiting/not-ready-waits", st_("Waiting", last=NOW - 298), ob(power=ON, taint_present=True), {}, "wait", {"seconds": 2.0}),
    ("waiting/not-ready-polls", st_("Waiting"), ob(power=ON), {}, "wait", {"seconds": 5.0}),
    ("waiting/timeout-retries", st_("Waiting", retry=1, last=NOW - 300), ob(power=ON, taint_present=True), {}, "write_status",
     {"phase": "Running", "retry_count": 2, "last_remediated": NOW}),
    ("waiting/limit-marks-machine", st_("Waiting", retry=2, last=NOW - 300), ob(power=ON), {}, "set_owner_remediated",
     {"extravars.machine": "machine-1", "extravars.condition": {"type": "OwnerRemediated", "status": "False", "reason": "WaitingForRemediation", "severity": "Warning"}}),
    ("waiting/limit-then-deleting", st_("Waiting", retry=2, last=NOW - 300), ob(power=ON, owner_remediated_false=True), {}, "write_status",
     {"phase": "Deleting machine", "retry_count": 2}),
    ("waiting/no-retry-limit-no-retry", st_("Waiting", last=NOW - 300), ob(power=ON), {"strategy": RemediationStrategy(retry_limit=0, timeout_seconds=300)},
     "set_owner_remediated", {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("status", "obs", "kw", "kind", "expect"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_transition_table(
    status: Metal3RemediationStatus, obs: Metal3Observations, kw: dict, kind: str, expect: dict
) -> None:
    action = go(status, obs, **kw)
    assert action.kind == kind, action
    new = Metal3RemediationStatus.from_dict(action.status) if kind == "write_status" else None
    for key, value in expect.items():
        if key.startswith("extravars."):
            assert action.extravars[key.split(".", 1)[1]] == value
        elif new is not None and hasattr(new, key):
            assert getattr(new, key) == value, key
        else:
            assert getattr(action, key) == value, key


def test_every_phase_has_a_row() -> None:
    assert {r[1].phase for r in ROWS} == set(PHASES)


def test_power_extravars_carry_references_only() -> None:
    action = go(st_(), ob())
    assert action.playbook == "bmh_power.yml"
    assert action.extravars == {
        "host": "host-1",
        "namespace": "metal3",
        "bmc_address": "ipmi://127.0.0.1:9001",
        "credentials_name": "host-1-bmc",
        "disable_certificate_verification": False,
        "state": "off",
        "node": NODE,
    }


@pytest.mark.parametrize("insecure", [True, False])
def test_redfish_host_certificate_setting_is_passed_on(insecure: bool) -> None:
    bmh = {
        "metadata": {"name": "h", "namespace": "metal3"},
        "spec": {
            "online": True,
            "bmc": {
                "address": "redfish+https://10.0.0.5/redfish/v1/Systems/1",
                "credentialsName": "h-bmc",
                "disableCertificateVerification": insecure,
            },
        },
    }
    host = HostRef.from_object(bmh)
    assert host.disable_certificate_verification is insecure and host.can_be_powered
    bad = {
        **bmh,
        "spec": {**bmh["spec"], "bmc": {**bmh["spec"]["bmc"], "disableCertificateVerification": "yes"}},
    }
    with pytest.raises(Metal3Error, match="disableCertificateVerification"):
        HostRef.from_object(bad)


def test_exhaustive_sweep() -> None:
    """Every discrete combination: deterministic, releases only with a verified power-off of the
    node, retries bounded by retryLimit, phases only move along upstream's edges."""
    edges = {("", "Running"), ("Running", "Waiting"), ("Waiting", "Running"), ("Waiting", "Deleting machine")}
    n = 0
    for phase, retry, last, power, node, exists, ready, taint, left, fin, owner, failed, hold in itertools.product(
        PHASES, (0, 1, 2), (NOW - 10, NOW - 300), (None, OFF, ON, OFF_OTHER), (NODE, None),
        (True, False), (True, False), (True, False), (None, LeftOnNode(), PODS_LEFT, VA_LEFT), (True, False),
        (True, False), (False, True), (None, HOLD),
    ):  # fmt: skip
        n += 1
        status = st_(phase, retry, last)
        obs = ob(power=power, node=node, node_exists=exists, node_ready=ready, taint_present=taint,
                 left_on_node=left, has_finalizer=fin, owner_remediated_false=owner, power_failed=failed,
                 release_hold=hold)  # fmt: skip
        action = go(status, obs)
        assert action == go(status, obs)
        if action.releases_workloads:
            assert node is not None and power is not None and power.verifies(node) and action.fence is power
            assert phase == "Running" and hold is None
        if action.kind == "power" and action.extravars["state"] == "on" and node is not None and exists:
            # safe return: never powered on while the taint has not released the node
            assert phase == "Waiting" or (left is not None and left.empty), (phase, left)
        if (phase, action.kind) == ("Running", "write_status") and node is not None and exists:
            new_phase = Metal3RemediationStatus.from_dict(action.status).phase
            assert new_phase != "Waiting" or (taint and left is not None and left.empty)
        if action.kind == "write_status":
            new = Metal3RemediationStatus.from_dict(action.status)
            assert new != status
            assert new.phase == "Failed" or (phase, new.phase) in edges
            assert new.retry_count <= STRATEGY.retry_limit
    assert n > 50_000


# --- simulated world -----------------------------------------------------------------------
@dataclass
class HostWorld:
    revive_on_retry: int | None  # the node comes back Ready after power-on in this attempt
    power_on: bool = True
    ever_off: bool = False
    node_ready: bool = False
    taint: bool = False
    drained: bool = False
    finalizer: bool = False
    owner_remediated_false: bool = False


def simulate(
    world: HostWorld, strategy: RemediationStrategy, crashes: tuple[int, ...] = ()
) -> tuple[Metal3RemediationStatus, HostWorld, str]:
    persisted = Metal3RemediationStatus()
    now = T0
    power: FenceReading | None = None
    for i in range(5000):
        obs = Metal3Observations(
            now=now, node=NODE, node_ready=world.node_ready, taint_present=world.taint,
            left_on_node=LeftOnNode() if world.drained else PODS_LEFT,
            power=power, has_finalizer=world.finalizer, owner_remediated_false=world.owner_remediated_false,
        )  # fmt: skip
        action = go(persisted, obs, strategy)
        crash = crashes[i] if i < len(crashes) else 0
        if action.kind == "none":
            return persisted, world, action.reason
        if action.kind == "write_status":
            if crash != 2:
                persisted = Metal3RemediationStatus.from_dict(action.status)
        elif action.kind == "power":
            world.power_on = action.extravars["state"] == "on"
            world.ever_off |= not world.power_on
            if world.power_on and world.revive_on_retry == persisted.retry_count:
                world.node_ready = True
            power = FenceReading(NODE, not world.power_on, "power_off", "BareMetalHost/metal3/host-1", now)
        elif action.kind == "taint_out_of_service":
            assert world.ever_off and not world.power_on, "released workloads of a powered host"
            world.taint = True
        elif action.kind == "untaint_out_of_service":
            world.taint = False
        elif action.kind == "add_finalizer":
            world.finalizer = True
        elif action.kind == "remove_finalizer":
            world.finalizer = False
        elif action.kind == "set_owner_remediated":
            world.owner_remediated_false = True
        elif action.kind == "wait":
            now += action.seconds
            world.drained = world.taint
        else:
            raise AssertionError(action)
        if crash:
            power = None
    raise AssertionError("did not settle")


m3_worlds = st.builds(HostWorld, revive_on_retry=st.one_of(st.none(), st.integers(0, 3)))
strategies = st.builds(
    RemediationStrategy, retry_limit=st.integers(0, 3), timeout_seconds=st.integers(1, 400)
)


@settings(max_examples=150, deadline=None)
@given(world=m3_worlds, strategy=strategies)
def test_settles_with_bounded_retries(world: HostWorld, strategy: RemediationStrategy) -> None:
    status, end, reason = simulate(world, strategy)
    assert status.retry_count <= strategy.retry_limit
    if world.revive_on_retry is not None and world.revive_on_retry <= strategy.retry_limit:
        assert (status.phase, reason, end.taint, end.finalizer) == (
            "Waiting",
            "RemediationDone",
            False,
            False,
        )
        assert status.retry_count == world.revive_on_retry
    else:
        assert (status.phase, end.owner_remediated_false) == ("Deleting machine", True)
        assert status.retry_count == strategy.retry_limit


@settings(max_examples=150, deadline=None)
@given(
    world=m3_worlds,
    strategy=strategies,
    crashes=st.lists(st.sampled_from([0, 0, 1, 2]), max_size=60).map(tuple),
)
def test_resume_after_crash_reaches_the_same_final_state(
    world: HostWorld, strategy: RemediationStrategy, crashes: tuple[int, ...]
) -> None:
    clean = simulate(dataclasses.replace(world), strategy)
    crashed = simulate(dataclasses.replace(world), strategy, crashes)
    assert (crashed[0].phase, crashed[0].retry_count, crashed[2]) == (
        clean[0].phase,
        clean[0].retry_count,
        clean[2],
    )
    assert dataclasses.astuple(crashed[1]) == dataclasses.astuple(clean[1])


# --- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300s", 300),
        ("5m", 300),
        ("5m0s", 300),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("100ms", 0.1),
        ("0", 0),
        (".5s", 0.5),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "-5s", "5 m", "five minutes", "1d"])
def test_parse_duration_errors_name_the_field(text: str) -> None:
    with pytest.raises(FieldError, match=r"^m3r spec.strategy.timeout: .* is not a duration"):
        parse_duration(text, "m3r spec.strategy.timeout")


def test_strategy_from_spec() -> None:
    spec = {"strategy": {"type": "Reboot", "retryLimit": 2, "timeout": "5m0s"}}
    assert RemediationStrategy.from_spec(spec, "x") == RemediationStrategy("Reboot", 2, 300.0)
    assert RemediationStrategy.from_spec({}, "x") == RemediationStrategy()
    with pytest.raises(Metal3Error, match=r"Metal3Remediation ns/a spec.strategy.retryLimit: -1"):
        RemediationStrategy.from_spec({"strategy": {"retryLimit": -1}}, "Metal3Remediation ns/a")
    with pytest.raises(Metal3Error, match=r"spec.strategy.timeout: 'soon'"):
        RemediationStrategy.from_spec({"strategy": {"timeout": "soon"}}, "Metal3Remediation ns/a")
    with pytest.raises(Metal3Error, match=r"spec.strategy: must be an object"):
        RemediationStrategy.from_spec({"strategy": "Reboot"}, "Metal3Remediation ns/a")


def test_status_round_trip() -> None:
    s = Metal3RemediationStatus("Waiting", 2, T0)
    assert s.to_dict() == {"phase": "Waiting", "retryCount": 2, "lastRemediated": "2023-11-14T22:13:20Z"}
    assert Metal3RemediationStatus.from_dict(s.to_dict()) == s
    assert Metal3RemediationStatus.from_dict(None) == Metal3RemediationStatus()
    with pytest.raises(ValueError, match="status.phase 'Done'"):
        Metal3RemediationStatus.from_dict({"phase": "Done"})


def test_host_from_baremetalhost() -> None:
    bmh = {
        "metadata": {"name": "host-1", "namespace": "metal3"},
        "spec": {
            "online": True,
            "bmc": {"address": "ipmi://127.0.0.1:9001", "credentialsName": "host-1-bmc"},
        },
    }
    assert HostRef.from_object(bmh) == HOST
    assert not HostRef.from_object({"metadata": {"name": "h"}, "spec": {"online": True}}).can_be_powered
    with pytest.raises(Metal3Error, match="without metadata.name"):
        HostRef.from_object({"spec": {}})
    with pytest.raises(Metal3Error, match="BareMetalHost metal3/h: spec.bmc.address"):
        HostRef.from_object({"metadata": {"name": "h", "namespace": "metal3"}, "spec": {"online": "yes"}})


# --- opt-in ----------------------------------------------------------------------------------
def test_annotation_decides_when_present() -> None:
    everything = LabelSelector()
    assert opted_in({"annotations": {OPT_IN_ANNOTATION: "true"}}, None)
    assert opted_in({"annotations": {OPT_IN_ANNOTATION: "TRUE"}}, None)
    assert not opted_in({"annotations": {OPT_IN_ANNOTATION: "false"}}, everything)
    assert not opted_in({}, None)
    assert opted_in({}, everything)
    with pytest.raises(Metal3Error, match=r"ns/a: annotation remediation.noderemedy.io/runner='yes'"):
        opted_in({"name": "a", "namespace": "ns", "annotations": {OPT_IN_ANNOTATION: "yes"}}, None)


def test_selector_semantics() -> None:
    sel = parse_label_selector(
        {
            "matchLabels": {"cluster": "lab"},
            "matchExpressions": [
                {"key": "role", "operator": "In", "values": ["worker", "infra"]},
                {"key": "tier", "operator": "NotIn", "values": ["gold"]},
                {"key": "noderemedy", "operator": "Exists"},
                {"key": "skip", "operator": "DoesNotExist"},
            ],
        },
        "ConfigMap noderemedy-runner key metal3RemediationSelector",
    )
    good = {"cluster": "lab", "role": "worker", "noderemedy": ""}
    assert opted_in({"labels": good}, sel)
    assert opted_in({"labels": {**good, "tier": "silver"}}, sel)
    for bad in ({**good, "cluster": "prod"}, {**good, "role": "db"}, {**good, "tier": "gold"}, {**good, "skip": "1"},
                {k: v for k, v in good.items() if k != "noderemedy"}, {k: v for k, v in good.items() if k != "role"}):  # fmt: skip
        assert not opted_in({"labels": bad}, sel), bad


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("role=worker", "a label selector is an object"),
        ({"matchLabel": {}}, r"unknown label selector fields \['matchLabel'\]"),
        ({"matchLabels": {"a": 1}}, "matchLabels must map strings to strings"),
        ({"matchExpressions": [{"operator": "Exists"}]}, r"matchExpressions\[0\]: needs a string key"),
        ({"matchExpressions": [{"key": "a", "operator": "Has"}]}, "operator 'Has' not one of"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "operator In needs values"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "operator Exists takes no values",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            "values must be a list of strings",
        ),
    ],
)
def test_selector_errors_name_the_source(data: Any, problem: str) -> None:
    with pytest.raises(FieldError, match=r"^ConfigMap noderemedy-runner key sel: .*" + problem):
        parse_label_selector(data, "ConfigMap noderemedy-runner key sel")
