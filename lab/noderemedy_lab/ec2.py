"""The lab's EC2 endpoint: moto's server on 127.0.0.1 (HTTP), one instance per node.

Started on demand (:meth:`noderemedy_lab.lab.Lab.ensure_peer`) through
:mod:`noderemedy_lab.moto_lab` (timed ``stopping``/``pending`` transitions, the lab's power hook).
:func:`configure` then, while moto still accepts unsigned requests, creates with boto3: the IAM
user ``fencer`` (``ec2:DescribeInstances``, ``ec2:StopInstances``, ``ec2:StartInstances``) and
``viewer`` (``ec2:DescribeInstances`` only), each with an access key; one running instance per node
in ``us-east-1a`` tagged ``Name=<node>``; and ``stuck-0``, tagged to ignore stop and start. Then it
turns moto's request authentication on (``POST /moto-api/reset-auth`` with ``0``, moto's
documented switch): from there on every request is signed with a key of an IAM user and checked
against that user's policy. With the control plane, each Node gets ``spec.providerID
aws:///us-east-1a/<instance-id>`` (the AWS cloud provider's form).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from .config import LabConfig
from .procs import ComponentError, Proc, Supervisor, prepare_peer, tcp_listening

#: Seconds a stop or start takes in the lab (moto: none; EC2: tens of seconds).
POWER_DELAY = 0.5
READY_TIMEOUT = 60.0
REGION = "us-east-1"
ZONE = "us-east-1a"
STUCK = "stuck-0"
_POLICIES = {
    "fencer": ["ec2:DescribeInstances", "ec2:StopInstances", "ec2:StartInstances"],
    "viewer": ["ec2:DescribeInstances"],
}


def start_peer(
    sup: Supervisor, cfg: LabConfig, base: Path, node_names: list[str], power_hook: list[str] | None
) -> tuple[dict, Proc]:
    """Start moto's server (process ``ec2``) on ``cfg.port("moto")``; :func:`configure` fills it.

    Raises ComponentError ``ec2`` for a taken port or a missing moto.
    """
    try:
        import moto  # noqa: F401
    except ImportError as exc:
        raise ComponentError("ec2", "moto is not installed: pip install 'moto[server,ec2]'") from exc
    port = cfg.port("moto")
    run_dir = prepare_peer(port, "ec2", base / "ec2")
    env = {
        "NODEREMEDY_POWER_DELAY": str(POWER_DELAY),
        "NODEREMEDY_POWER_HOOK": json.dumps(power_hook or []),
        "NODEREMEDY_HOOK_SYSTEMS": json.dumps(node_names),
        "MOTO_ALLOW_NONEXISTENT_REGION": "false",
    }
    proc = sup.start(
        "ec2",
        [sys.executable, "-m", "noderemedy_lab.moto_lab", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        cwd=run_dir,
    )
    endpoint = {"endpoint_url": f"http://127.0.0.1:{port}", "port": port, "region": REGION, "zone": ZONE}
    return endpoint, proc


def ready(endpoint: dict) -> bool:
    """moto accepts TCP connections."""
    return tcp_listening(endpoint["port"])


def _client(endpoint: dict, service: str, key: str = "setup", secret: str = "setup") -> Any:
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint["endpoint_url"],
        region_name=endpoint["region"],
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


def configure(endpoint: dict, lab: Any) -> dict:
    """Create the IAM users and instances, turn authentication on, set the nodes' providerID.

    Returns the endpoint with ``credentials`` ``{"fencer"|"viewer": {"access_key", "secret_key"}}``,
    ``instances`` ``{node: instance id}``, ``provider_ids`` ``{node: "aws:///zone/id"}`` and
    ``stuck`` (the instance id that ignores stop/start). Raises ComponentError ``ec2``.
    """
    iam = _client(endpoint, "iam")
    creds: dict[str, dict[str, str]] = {}
    for user, actions in _POLICIES.items():
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        }
        iam.put_user_policy(UserName=user, PolicyName=f"{user}-ec2", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        creds[user] = {"access_key": key["AccessKeyId"], "secret_key": key["SecretAccessKey"]}
    ec2 = _client(endpoint, "ec2")
    images = ec2.describe_images(Owners=["amazon"])["Images"]
    if not images:
        raise ComponentError("ec2", "moto offers no AMI to start instances from")
    image = sorted(i["ImageId"] for i in images)[0]
    instances: dict[str, str] = {}
    for name in [*lab.info["nodes"], STUCK]:
        tags = [{"Key": "Name", "Value": name}]
        if name == STUCK:
            tags.append({"Key": "noderemedy-lab/ignore-power", "Value": "true"})
        out = ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType="t3.micro",
            Placement={"AvailabilityZone": endpoint["zone"]},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        instances[name] = out["Instances"][0]["InstanceId"]
    req = urllib.request.Request(
        f"{endpoint['endpoint_url']}/moto-api/reset-auth",
        data=b"0",
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(req, timeout=10) as rsp:  # noqa: S310 - the lab's own loopback endpoint
        if rsp.status != 200:
            raise ComponentError("ec2", f"moto refused to turn authentication on: HTTP {rsp.status}")
    stuck = instances.pop(STUCK)
    provider_ids = {node: f"aws:///{endpoint['zone']}/{iid}" for node, iid in instances.items()}
    if lab.kubeconfig is not None:
        for node, pid in provider_ids.items():
            patch = json.dumps({"spec": {"providerID": pid}})
            out = lab.kubectl("patch", "node", node, "--type", "merge", "-p", patch)
            if out.returncode != 0:
                raise ComponentError("ec2", f"cannot set spec.providerID of {node}: {out.stderr.strip()}")
    return {
        **endpoint,
        "credentials": creds,
        "instances": instances,
        "provider_ids": provider_ids,
        "stuck": stuck,
    }
