"""``noderemedy.core.aws_instance_power`` and the EC2 driver against the lab's EC2 endpoint (moto).

The peer is moto's server (started on demand by the ``ec2_peer`` fixture) with request
authentication on: every call is signed with an IAM user's key and checked against its policy.
Every change is confirmed by a second client (boto3 with the ``viewer`` user's read-only key) and,
with the control plane, by the node's power label that the endpoint's power hook sets.
"""

from __future__ import annotations

import json
import socket
import time

import boto3
import pytest
from fencing_support import (
    assert_failed_unfenced,
    assert_no_secrets,
    assert_quartet,
    quartet_tasks,
)

from ansible_collections.noderemedy.core.plugins.module_utils._aws import AwsInstanceDriver
from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    AuthError,
    FenceConfigError,
    NotFoundError,
    PrivilegeError,
    VerifyError,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError
from ansible_collections.noderemedy.core.plugins.module_utils._taint import validate_fence_evidence

pytestmark = pytest.mark.lab
MODULE = "noderemedy.core.aws_instance_power"
NODE = "lab-node-0"


def viewer_state(ep: dict, instance: str) -> str:
    """The instance's state as a read-only IAM user sees it (boto3, a client we did not write)."""
    v = ep["credentials"]["viewer"]
    ec2 = boto3.client(
        "ec2",
        endpoint_url=ep["endpoint_url"],
        region_name=ep["region"],
        aws_access_key_id=v["access_key"],
        aws_secret_access_key=v["secret_key"],
    )
    out = ec2.describe_instances(InstanceIds=[instance])
    return out["Reservations"][0]["Instances"][0]["State"]["Name"]


def driver(ep: dict, node: str = NODE, user: str = "fencer", **kw) -> AwsInstanceDriver:
    c = ep["credentials"][user]
    return AwsInstanceDriver(
        ep["instances"][node],
        ep["region"],
        access_key=c["access_key"],
        secret_key=c["secret_key"],
        endpoint_url=ep["endpoint_url"],
        **{"poll_interval": 0.05, **kw},
    )


def args(ep: dict, state: str, node: str = NODE, **extra) -> dict:
    c = ep["credentials"]["fencer"]
    return {
        "provider_id": ep["provider_ids"][node],
        "access_key": c["access_key"],
        "secret_key": c["secret_key"],
        "endpoint_url": ep["endpoint_url"],
        "state": state,
        "poll_interval": 0.05,
        "power_timeout": 10,
        **extra,
    }


def probe(ep: dict, name: str, node: str = NODE) -> dict:
    v = ep["credentials"]["viewer"]
    script = (
        "import boto3,sys;"
        f"c=boto3.client('ec2',endpoint_url='{ep['endpoint_url']}',region_name='{ep['region']}',"
        f"aws_access_key_id='{v['access_key']}',aws_secret_access_key=sys.stdin.read().strip());"
        f"print(c.describe_instances(InstanceIds=['{ep['instances'][node]}'])"
        "['Reservations'][0]['Instances'][0]['State']['Name'])"
    )
    return {
        "name": name,
        "ansible.builtin.command": {"argv": ["python3", "-c", script], "stdin": v["secret_key"]},
        "changed_when": False,
    }


@pytest.fixture()
def play(run_playbook):
    return run_playbook


@pytest.fixture()
def ec2(lab, ec2_peer):
    """The EC2 endpoint with lab-node-0's instance running, before and after the test."""
    driver(ec2_peer).run("on")
    yield ec2_peer
    driver(ec2_peer).run("on")


def test_off_quartet_confirmed_by_a_read_only_user(lab, ec2, play) -> None:
    res = play(quartet_tasks(MODULE, args(ec2, "off"), lambda n: probe(ec2, n)))
    assert_quartet(res, ["running", "stopped", "stopped"])
    check1, apply1 = res.task("check1"), res.task("apply1")
    assert (
        check1["changed"] is True
        and check1["power_state_before"] == "on"
        and check1["fence"]["verified"] is False
    )
    assert check1["diff"] == {"before": {"power": "on"}, "after": {"power": "off"}}
    assert apply1["instance_id"] == ec2["instances"][NODE]
    assert apply1["verify_seconds"] >= 0.4, "the endpoint takes 0.5 s to stop: the read-back waited"
    fence = apply1["fence"]
    assert fence["verified"] is True and fence["method"] == "aws" and fence["state"] == "off"
    assert fence["plugs"] == [ec2["instances"][NODE]] and fence["verified_at"] > 0
    assert res.task("apply2")["changed"] is False and res.task("apply2")["fence"]["verified"] is True
    for name in ("check1", "apply1", "check2", "apply2"):
        assert_no_secrets(res.task(name), ec2["credentials"]["fencer"]["secret_key"])


def test_on_quartet(lab, ec2, play) -> None:
    driver(ec2).run("off")
    res = play(quartet_tasks(MODULE, args(ec2, "on"), lambda n: probe(ec2, n)))
    assert_quartet(res, ["stopped", "running", "running"])
    assert res.task("apply1")["fence"]["verified"] is False


def test_restart_instance_is_stop_verified_then_start(lab, ec2, play) -> None:
    res = play([{"name": "reboot", MODULE: args(ec2, "reboot")}])
    out = res.task("reboot")
    assert out.get("failed") is not True, out
    assert out["power_state_before"] == "on" and out["power_state"] == "on"
    assert out["fence"]["verified"] is True
    assert viewer_state(ec2, ec2["instances"][NODE]) == "running"


def test_status_and_transitions(lab, ec2) -> None:
    drv = driver(ec2)
    drv.open()
    try:
        drv.set_state(drv.plugs[0], "off")
        during = drv._run("status", check_mode=False)
    finally:
        drv.close()
    assert during.state_after == "powering_off" and drv.evidence(during)["verified"] is False
    assert driver(ec2).run("off").after == {ec2["instances"][NODE]: "off"}
    res = driver(ec2).run("status")
    assert res.changed is False and driver(ec2).evidence(res)["verified"] is True


def test_node_name_reads_the_provider_id(lab_kube, ec2, play) -> None:
    task = {k: v for k, v in args(ec2, "status").items() if k != "provider_id"}
    env = {"K8S_AUTH_KUBECONFIG": str(lab_kube.kubeconfig)}
    res = play([{"name": "status", MODULE: {**task, "node": NODE}, "environment": env}])
    out = res.task("status")
    assert out.get("failed") is not True, out
    assert out["instance_id"] == ec2["instances"][NODE] and out["power_state"] == "on"


def test_power_follows_into_the_node_heartbeat(lab_kube, ec2) -> None:
    def label() -> str | None:
        out = lab_kube.kubectl("get", "node", "lab-node-2", "-o", "json")
        return json.loads(out.stdout)["metadata"]["labels"].get("lab.noderemedy.io/power")

    driver(ec2, node="lab-node-2").run("off")
    assert label() == "off"
    driver(ec2, node="lab-node-2").run("on")
    assert label() == "on"


# ------------------------------------------------------------------------------------ faults
def test_wrong_secret_key_is_an_auth_error(lab, ec2, play) -> None:
    res = play([{"name": "bad", MODULE: args(ec2, "off", secret_key="not-the-key"), "ignore_errors": True}])
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "auth" and "AuthFailure" in out["msg"]
    assert "not-the-key" not in json.dumps(out)
    assert viewer_state(ec2, ec2["instances"][NODE]) == "running"
    c = ec2["credentials"]["fencer"]
    with pytest.raises(AuthError):
        AwsInstanceDriver(
            ec2["instances"][NODE],
            ec2["region"],
            "AKIAIOSFODNN7EXAMPLE",
            c["secret_key"],
            ec2["endpoint_url"],
        ).run("status")


def test_read_only_user_is_refused_the_stop(lab, ec2) -> None:
    with pytest.raises(PrivilegeError, match="StopInstances"):
        driver(ec2, user="viewer").run("off")
    assert viewer_state(ec2, ec2["instances"][NODE]) == "running"


def test_unknown_instance_and_bad_input(lab, ec2) -> None:
    with pytest.raises(NotFoundError):
        AwsInstanceDriver(
            "i-0123456789abcdef0",
            ec2["region"],
            access_key=ec2["credentials"]["fencer"]["access_key"],
            secret_key=ec2["credentials"]["fencer"]["secret_key"],
            endpoint_url=ec2["endpoint_url"],
        ).run("status")
    with pytest.raises(FenceConfigError, match="^plug:"):
        AwsInstanceDriver("lab-node-0", ec2["region"])
    with pytest.raises(FenceConfigError, match="give both or neither"):
        AwsInstanceDriver(ec2["instances"][NODE], ec2["region"], access_key="AKIA")


def test_nothing_listening_is_unreachable(lab, ec2, play) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = play(
        [
            {
                "name": "bad",
                MODULE: args(ec2, "off", endpoint_url=f"http://127.0.0.1:{port}"),
                "ignore_errors": True,
            }
        ]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "unreachable"


def test_an_instance_that_accepts_stop_and_keeps_running_fails(lab, ec2, play) -> None:
    c = ec2["credentials"]["fencer"]
    drv = AwsInstanceDriver(
        ec2["stuck"], ec2["region"], c["access_key"], c["secret_key"], ec2["endpoint_url"], power_timeout=1,
        poll_interval=0.05,
    )  # fmt: skip
    with pytest.raises(VerifyError, match="not verified off within power_timeout=1s"):
        drv.run("off")
    task = {k: v for k, v in args(ec2, "off", power_timeout=2).items() if k != "provider_id"}
    res = play(
        [
            {
                "name": "bad",
                MODULE: {**task, "plug": ec2["stuck"], "region": ec2["region"]},
                "ignore_errors": True,
            }
        ]
    )
    out = assert_failed_unfenced(res, "bad")
    assert out["error"] == "verify" and "not verified off within power_timeout=2s" in out["msg"], out["msg"]
    with pytest.raises(KubeError, match="fence_evidence.verified: must be true"):
        validate_fence_evidence(out["fence"], 300, time.time())
    assert viewer_state(ec2, ec2["stuck"]) == "running"


def test_credentials_from_the_environment(lab, ec2, play) -> None:
    task = {k: v for k, v in args(ec2, "status").items() if k not in ("access_key", "secret_key")}
    c = ec2["credentials"]["fencer"]
    env = {"AWS_ACCESS_KEY_ID": c["access_key"], "AWS_SECRET_ACCESS_KEY": c["secret_key"]}
    res = play([{"name": "status", MODULE: task, "environment": env}])
    out = res.task("status")
    assert out.get("failed") is not True, out
    assert_no_secrets(out, c["secret_key"])
