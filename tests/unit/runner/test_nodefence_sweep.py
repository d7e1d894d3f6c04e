"""NodeFence state machine: an exhaustive sweep of the discrete input space (every status ×
observation; with one fencing level, with two, and with every start held) that checks the
invariants of every decision, and an admin's stop and an admin's confirmation that the machine is
down (a stop never leads to a device action nor a release, swept the same way)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from _nodefence_helpers import (
    CONFIG,
    LEVELS,
    NOT_FENCED,
    NOW,
    OTHER_NODE,
    POLICY,
    VERIFIED,
    cond,
    cstat,
    observe,
    run_ref,
    status,
    written,
)
from nodefence_world import NAME, NODE

from noderemedy_runner.config.fence import FenceConfig
from noderemedy_runner.machines.conditions import find_condition
from noderemedy_runner.machines.guards import Hold
from noderemedy_runner.machines.nodefence import (
    PHASES,
    NodeFenceObservations,
    NodeFenceStatus,
    StepResult,
    decide,
    is_stopped,
    is_terminal,
    run_ident,
    step_segments,
)
from noderemedy_runner.machines.release import LeftOnNode, RateHold

# --- exhaustive sweep over the discrete input space ----------------------------------------
NOTHING_LEFT = LeftOnNode()
SOMETHING_LEFT = LeftOnNode(("app/db-0",), ("csi-1",))
RATE_HOLD = RateHold("12 pods released in the last 60 s; limit 10 per minute", 30.0)
ALLOWED_EDGES = {
    ("New", "New"), ("New", "Running"), ("New", "Done"), ("New", "Final"), ("New", "Error"),
    ("Running", "Running"), ("Running", "Done"), ("Running", "Error"),
    ("Done", "Done"), ("Done", "Final"), ("Done", "Error"),
    ("Error", "Error"), ("Error", "New"),
    ("Final", "Final"),
}  # fmt: skip


#: The phase in which a run of each step is committed (New runs Isolation, Running runs
#: PowerManagement, Done runs Recovery); other combinations are unreachable.
RUN_PHASE = {"Isolation": "New", "PowerManagement": "Running", "Recovery": "Done"}


def _sweep(
    config: FenceConfig = CONFIG, places: tuple[tuple[int, int], ...] = ((1, 0),)
) -> list[tuple[NodeFenceStatus, NodeFenceObservations]]:
    """Every discrete status × observation; a committed run at each (level, segment) of ``places``
    (of the step's levels that exist in ``config``)."""
    cases = []
    for phase, step, run_kind, retries, restarts, fv, ltt, (level, segment) in itertools.product(
        PHASES,
        ("Isolation", "PowerManagement", "Recovery"),
        ("none", "pending", "backoff"),
        (0, POLICY.step_retries),
        (0, POLICY.max_restarts),
        (None, "True", "False"),
        (NOW - 1, NOW - 10_000),
        places,
    ):
        run = None
        if run_kind == "none" and (level, segment) != places[0]:
            continue
        if run_kind != "none":
            if RUN_PHASE[step] != phase:
                continue  # a committed run of step X exists only in the phase that runs X
            if segment >= len(step_segments(config.methods(step, level))):  # type: ignore[arg-type]
                continue
            run = run_ref(
                step, retries, restarts, NOW + 5 if run_kind == "backoff" else NOW, segment, level, config
            )
        conds = () if fv is None else (cond("FenceVerified", fv),)
        s = status(phase, step, retries=retries, restarts=restarts, current_run=run, conditions=conds,
                   last_transition_time=ltt)  # fmt: skip
        ident = run.ident if run else "none"
        lefts = (None, NOTHING_LEFT, SOMETHING_LEFT) if phase == "Done" else (None,)
        holds = (None, RATE_HOLD) if phase in ("Running", "Done") else (None,)
        for ready, taint, fence, result, left, hold in itertools.product(
            (False, True),
            (False, True),
            (None, VERIFIED, NOT_FENCED, OTHER_NODE),
            (
                None,
                StepResult(ident, True, fence=VERIFIED),
                StepResult(ident, False),
                StepResult("stale", True),
            ),
            lefts,
            holds,
        ):
            obs = observe(
                node_ready=ready, taint_present=taint, fence=fence, result=result, left_on_node=left,
                release_hold=hold,
            )  # fmt: skip
            cases.append((s, obs))
    return cases


def test_exhaustive_sweep_invariants() -> None:
    """For every combination: deterministic; releases only with a verified fence of this node;
    status writes change the status, round-trip, follow an allowed edge, and keep counters bounded."""
    cases = _sweep()
    assert len(cases) > 10_000
    kinds = _check_sweep(cases, CONFIG)
    assert kinds == {
        "write_status",
        "run_step",
        "verify_fence",
        "taint_out_of_service",
        "untaint_out_of_service",
        "wait",
        "none",
    }


def test_exhaustive_sweep_with_fencing_levels() -> None:
    """The same invariants with two levels (IPMI, then the PDU) and runs at every (level, segment);
    besides: a run moves to another level only from a level's first segment (nothing of the
    abandoned level was switched back on), and only one level further or back to level 1."""
    cases = _sweep(LEVELS, ((1, 0), (1, 1), (2, 0), (2, 1)))
    assert len(cases) > 10_000
    moves = set()
    for s, obs in cases:
        action = decide(NAME, s, obs, LEVELS, POLICY)
        if action.kind != "write_status" or s.current_run is None:
            continue
        new = written(action)
        if new.current_run is not None and new.current_run.level != s.current_run.level:
            assert s.current_run.segment == 0 and new.current_run.segment == 0
            assert new.current_run.level in (s.current_run.level + 1, 1)
            moves.add((s.current_run.level, new.current_run.level))
    assert moves == {(1, 2), (2, 1)}
    _check_sweep(cases, LEVELS)


def _check_sweep(cases: list[tuple[NodeFenceStatus, NodeFenceObservations]], config: FenceConfig) -> set[str]:
    kinds: set[str] = set()
    for s, obs in cases:
        action = decide(NAME, s, obs, config, POLICY)
        kinds.add(action.kind)
        assert action == decide(NAME, s, obs, config, POLICY)
        if action.releases_workloads:
            assert obs.fence is not None and obs.fence.licenses_taint(NODE) and action.fence is obs.fence
            assert s.status in ("Running", "Done") and s.current_run is None
        if obs.release_hold is not None:  # the rate limit holds every release, never the fencing
            assert not action.releases_workloads and not action.extravars.get("release_workloads")
        # safe return: recovery starts and the taint goes only once nothing is left on the node
        starts_recovery = (
            action.kind == "write_status"
            and s.current_run is None
            and (new_run := written(action).current_run) is not None
            and new_run.step == "Recovery"
        )
        if starts_recovery or action.kind == "untaint_out_of_service":
            assert not obs.taint_present or (obs.left_on_node is not None and obs.left_on_node.empty)
        if action.kind == "write_status":
            new = written(action)
            assert new != s
            assert new.to_dict() == dict(action.status)  # type: ignore[arg-type]
            assert (s.status, new.status) in ALLOWED_EDGES
            assert 0 <= new.retries <= POLICY.step_retries
            assert 0 <= new.restarts <= POLICY.max_restarts
            if new.current_run is not None:
                assert new.current_run.attempt == new.retries and new.current_run.step == new.step
                run = new.current_run
                assert 1 <= run.level <= run.levels == max(1, len(config.levels(run.step)))
                assert run.segment < run.segments == len(step_segments(config.methods(run.step, run.level)))
        if action.kind == "wait":
            assert action.seconds > 0
    return kinds


def test_exhaustive_sweep_with_every_start_held() -> None:
    """With both fencing steps held (maintenance, quorum, limits), no Isolation or PowerManagement
    run is ever committed or newly started, and a release still needs a verified fence."""
    hold = Hold("EtcdQuorumGuard", "held")
    for s, obs in _sweep():
        held_obs = replace(obs, start_holds={"Isolation": hold, "PowerManagement": hold})
        action = decide(NAME, s, held_obs, CONFIG, POLICY)
        if action.kind == "write_status" and s.current_run is None:
            new = written(action)
            assert new.current_run is None or new.current_run.step == "Recovery", (s, action)
        if action.kind == "run_step":
            assert s.current_run is not None and action.ident == s.current_run.ident
        if action.releases_workloads:
            assert obs.fence is not None and obs.fence.licenses_taint(NODE)


# --- stop by an admin ------------------------------------------------------------------------
def test_a_stopped_nodefence_lists_its_fences_and_does_nothing_more() -> None:
    jobs = (run_ident(NAME, 0, "Isolation", 0), run_ident(NAME, 0, "PowerManagement", 0))
    s = status("Running", "PowerManagement", jobs=jobs, current_run=run_ref("PowerManagement", segment=1))
    action = decide(NAME, s, observe(stop_requested=True, taint_present=True), CONFIG, POLICY)
    stopped = written(action)
    assert action.reason == "StoppedByAdmin" and stopped.status == "Error" and stopped.current_run is None
    message = find_condition(stopped.conditions, "Processing").message  # type: ignore[union-attr]
    assert "fc-off (fence-method-template-fc plug 3), pdu-off (fence-method-template-pdu plug 5)" in message
    assert "out-of-service taint is on the node" in message
    assert cstat(stopped, "Succeeded") == ("False", "StoppedByAdmin")
    assert is_terminal(stopped, POLICY) and is_stopped(stopped)
    # nothing more, whatever is observed, while the stop stands and the node is not Ready
    for obs in (observe(stop_requested=True), observe(stop_requested=True, fence=VERIFIED),
                observe(stop_requested=True, now=NOW + 10_000)):  # fmt: skip
        assert decide(NAME, stopped, obs, CONFIG, POLICY).kind == "none"
    # the node is Ready again: Final (a later failure gets a new NodeFence)
    final = written(decide(NAME, stopped, observe(stop_requested=True, node_ready=True), CONFIG, POLICY))
    assert final.status == "Final" and cstat(final, "Succeeded") == ("False", "StoppedByAdmin")
    # the admin clears the stop: it starts over from New
    again = written(decide(NAME, stopped, observe(), CONFIG, POLICY))
    assert again.status == "New" and cstat(again, "Processing") == ("True", "StopCleared")
    assert not is_stopped(again)


def test_a_stop_never_leads_to_a_device_action_or_a_release() -> None:
    for s, obs in _sweep():
        action = decide(NAME, s, replace(obs, stop_requested=True), CONFIG, POLICY)
        assert action.kind in ("write_status", "none", "wait"), (s, action)
        if action.kind == "write_status":
            new = written(action)
            assert new.current_run is None


# --- an admin confirms the machine is down (stonith_admin --confirm) ---------------------------
@pytest.mark.parametrize("phase", ["New", "Running", "Done"])
def test_an_admin_confirmation_releases_without_a_device_then_waits_for_the_node(phase: str) -> None:
    s = status(phase, "PowerManagement" if phase == "Done" else "Isolation", last_transition_time=NOW - 10)
    action = decide(NAME, s, observe(down_confirmed=True), CONFIG, POLICY)
    assert action.kind == "taint_out_of_service" and action.fence is not None
    assert (action.fence.kind, action.fence.node, action.fence.fenced) == ("admin_confirmed", NODE, True)
    after = decide(NAME, s, observe(down_confirmed=True, taint_present=True), CONFIG, POLICY)
    if phase == "Done":
        assert after.kind == "wait"  # already waiting for the node
    else:
        new = written(after)
        assert new.status == "Done" and cstat(new, "Processing") == ("True", "FenceConfirmedByAdmin")
    # never while a run is committed (it finishes first), nor for a Ready node
    running = status(phase, current_run=run_ref()) if phase == "New" else None
    if running is not None:
        assert decide(NAME, running, observe(down_confirmed=True), CONFIG, POLICY).kind == "run_step"
    assert not decide(
        NAME, s, observe(down_confirmed=True, node_ready=True), CONFIG, POLICY
    ).releases_workloads
