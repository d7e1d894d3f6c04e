"""Actions: the taint cannot exist without a verified fence; extravars carry references only."""

from __future__ import annotations

import pytest

from noderemedy_runner.machines.actions import (
    Action,
    ActionError,
    FenceReading,
    taint_out_of_service,
    untaint_out_of_service,
    wait,
    write_status,
)

T0 = 1_700_000_000.0


def test_taint_requires_a_verified_fence_of_that_node() -> None:
    ok = FenceReading("worker-1", True, "power_off", "pdu-off", T0)
    action = taint_out_of_service("worker-1", ok)
    assert action.releases_workloads
    assert action.extravars["node"] == "worker-1"
    assert action.extravars["state"] == "present" and action.extravars["fence_max_age"] == 60
    assert "taint_key" not in action.extravars  # the playbook's vars file names the taint
    assert action.playbook == "out_of_service_taint.yml"
    with pytest.raises(ActionError, match="invariant 1"):
        taint_out_of_service("worker-2", ok)
    with pytest.raises(ActionError, match="invariant 1"):
        taint_out_of_service("worker-1", FenceReading("worker-1", False, "power_off", "pdu-off", T0))
    with pytest.raises(ActionError, match="invariant 1"):
        Action(kind="taint_out_of_service", extravars={"node": "worker-1"})


def test_untaint_is_not_a_release() -> None:
    action = untaint_out_of_service("worker-1")
    assert not action.releases_workloads
    assert action.extravars["state"] == "absent"


@pytest.mark.parametrize("key", ["password", "snmp_community", "bmc_Password", "token"])
def test_secret_looking_extravars_are_refused_at_any_depth(key: str) -> None:
    with pytest.raises(ActionError, match="references only"):
        Action(kind="run_step", extravars={key: "x"})
    with pytest.raises(ActionError, match=r"extravars\.methods\[0\]"):
        Action(kind="run_step", extravars={"methods": [{key: "x"}]})


def test_wait_and_write_status_validate() -> None:
    assert wait(3, "R").seconds == 3.0
    with pytest.raises(ActionError, match="must be > 0"):
        wait(0, "R")
    assert write_status({"status": "New"}, "R").status == {"status": "New"}
    with pytest.raises(ActionError, match="without a status"):
        Action(kind="write_status")


def test_fence_reading_validates() -> None:
    with pytest.raises(ValueError, match="kind"):
        FenceReading("n", True, "magic", "m", T0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without a node"):
        FenceReading("", True, "power_off", "m", T0)
