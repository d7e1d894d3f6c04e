# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""AWS EC2 instance power fencing with boto3.

Behaviour follows fence-agents ``fence_aws``: *off* is ``StopInstances`` with ``Force=True`` (the
instance gets no chance to flush or shut down), *on* is ``StartInstances``, a reboot is off
(verified) then on, and the state is read back with ``DescribeInstances``
(``Reservations[].Instances[].State.Name``). EC2 instance states (EC2 API reference,
``InstanceState``): ``running`` is on, ``stopped`` is off; ``stopping`` and ``pending`` are
transitions, never final; ``shutting-down`` and ``terminated`` are reported as they are (the
instance can never be started again, and ``fence_aws`` too treats them as neither on nor off).

Differences from ``fence_aws`` 4.12 (on purpose): no call to the instance metadata service
(``fence_aws`` asks 169.254.169.254 for its *own* instance before every stop and skips the stop
when that fails, so it cannot fence from outside EC2), and ``endpoint_url`` for EC2-compatible
endpoints. A Node maps to its instance by ``spec.providerID`` ``aws:///<zone>/<instance-id>``
(:func:`instance_from_provider_id`).

Errors are classified once, here: AuthFailure and signature errors -> ``auth``;
UnauthorizedOperation / AccessDenied -> ``privilege``; InvalidInstanceID.* -> ``not_found``; no
connection -> ``unreachable``; any other EC2 error -> ``rejected``.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.module_utils.basic import env_fallback

from ansible_collections.noderemedy.core.plugins.module_utils import _fence

with _fence.Library("boto3") as BOTO3_LIBRARY:
    import boto3
    from botocore import exceptions as botocore_exc
    from botocore.config import Config as BotoConfig

#: EC2 connection options; documented 1:1 by ``doc_fragments/fence.py`` ``AWS``. Names are fence_aws's
#: (``--region``, ``--access-key``, ``--secret-key``, ``--plug``) plus ``endpoint_url``.
AWS_ARG_SPEC: dict[str, dict[str, Any]] = {
    "region": {"type": "str", "fallback": (env_fallback, ["AWS_REGION", "AWS_DEFAULT_REGION"])},
    "access_key": {
        "type": "str",
        "no_log": False,  # an access key ID identifies, the secret key authenticates
        "aliases": ["aws_access_key_id"],
        "fallback": (env_fallback, ["AWS_ACCESS_KEY_ID"]),
    },
    "secret_key": {
        "type": "str",
        "no_log": True,
        "aliases": ["aws_secret_access_key"],
        "fallback": (env_fallback, ["AWS_SECRET_ACCESS_KEY"]),
    },
    "endpoint_url": {"type": "str", "fallback": (env_fallback, ["AWS_ENDPOINT_URL_EC2", "AWS_ENDPOINT_URL"])},
    "plug": {"type": "str", "aliases": ["instance_id"]},
    "provider_id": {"type": "str"},
    "node": {"type": "str"},
}

#: EC2 ``InstanceState.Name`` -> the driver's state.
INSTANCE_STATES = {
    "running": _fence.ON,
    "stopped": _fence.OFF,
    "stopping": "powering_off",
    "pending": "powering_on",
    "shutting-down": "terminated",
    "terminated": "terminated",
}

_INSTANCE_ID_RE = re.compile(r"^i-[0-9a-f]{8,17}$")
_PROVIDER_ID_RE = re.compile(r"^aws://(?:/(?P<zone>[a-z0-9-]*))?/(?P<id>i-[0-9a-f]{8,17})$")
_AUTH_CODES = {
    "AuthFailure",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
}
_PRIVILEGE_CODES = {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException"}


def instance_from_provider_id(provider_id: str) -> tuple[str, str]:
    """``aws:///<zone>/<instance-id>`` (Node ``spec.providerID``, as the AWS cloud provider writes
    it; ``aws:///<instance-id>`` too) -> (zone or '', instance id).

    Raises:
        FenceConfigError: naming ``provider_id`` when it is not that form.
    """
    m = _PROVIDER_ID_RE.match(provider_id or "")
    if not m:
        raise _fence.FenceConfigError(f"provider_id: {provider_id!r} is not aws:///<zone>/<instance-id>")
    return m.group("zone") or "", m.group("id")


def provider_id_of_node(name: str, kubeconfig: Any = None, context: str | None = None) -> str:
    """The ``spec.providerID`` of Node ``name``, read from the Kubernetes API (one GET).

    Kubernetes access as ``credentials_secret`` (``_secret.kube_auth_from_env``). Raises
    FenceConfigError naming ``node`` when the Node cannot be read or has no providerID.
    """
    from urllib.parse import quote  # noqa: PLC0415

    from ansible_collections.noderemedy.core.plugins.module_utils._kube import (  # noqa: PLC0415
        KubeError,
        get_api_client,
        request,
    )
    from ansible_collections.noderemedy.core.plugins.module_utils._secret import (  # noqa: PLC0415
        kube_auth_from_env,
    )

    try:
        client = get_api_client(kube_auth_from_env(kubeconfig, context))
        node = request(client, "GET", f"/api/v1/nodes/{quote(name, safe='')}") or {}
    except KubeError as exc:
        raise _fence.FenceConfigError(f"node: cannot read Node {name!r}: {exc.message}") from None
    provider_id = (node.get("spec") or {}).get("providerID")
    if not provider_id:
        raise _fence.FenceConfigError(f"node: Node {name!r} has no spec.providerID")
    return str(provider_id)


def region_of_zone(zone: str) -> str:
    """The region of an availability zone name (``us-east-1a`` -> ``us-east-1``); '' for ''."""
    return re.sub(r"[a-z]$", "", zone) if zone else ""


class AwsInstanceDriver(_fence.FenceDriver):
    """Power of one EC2 instance (the single plug: its instance id).

    Args:
        instance_id: ``i-...``.
        region: the instance's region.
        access_key / secret_key: an IAM access key (both, or neither for boto3's own chain:
            environment, shared config, instance role).
        endpoint_url: an EC2-compatible endpoint instead of AWS's (``http(s)://host:port``).
        Timing options: see :class:`~._fence.FenceDriver` (``power_timeout`` also bounds each
        API call).
    Raises:
        FenceConfigError: a malformed instance id, no region, half a key pair, bad timing values.
    """

    method = "aws"

    def __init__(
        self,
        instance_id: str,
        region: str | None,
        access_key: str | None = None,
        secret_key: str | None = None,
        endpoint_url: str | None = None,
        **timing: Any,
    ) -> None:
        if not instance_id or not _INSTANCE_ID_RE.match(instance_id):
            raise _fence.FenceConfigError(f"plug: {instance_id!r} is not an EC2 instance id (i-...)")
        if not region:
            raise _fence.FenceConfigError("region: required (option, AWS_REGION, or the zone of provider_id)")
        if bool(access_key) != bool(secret_key):
            raise _fence.FenceConfigError("access_key, secret_key: give both or neither")
        if endpoint_url is not None and not re.match(r"^https?://[^/\s]+/?$", endpoint_url):
            raise _fence.FenceConfigError(f"endpoint_url: {endpoint_url!r} is not http(s)://host[:port]")
        target = (endpoint_url or f"https://ec2.{region}.amazonaws.com").split("://", 1)[1].rstrip("/")
        super().__init__(target if ":" in target else f"{target}:443", [instance_id], **timing)
        self.instance_id = instance_id
        self.region = region
        self.endpoint_url = endpoint_url
        self._access_key = access_key
        self._secret_key = secret_key
        self._ec2: Any = None

    def _classify(self, exc: Exception, doing: str) -> _fence.FenceError:
        if isinstance(exc, botocore_exc.ClientError):
            err = exc.response.get("Error", {})
            code, message = err.get("Code", ""), err.get("Message", "")
            text = f"{doing}: {code}: {message}"
            if code in _AUTH_CODES:
                return _fence.AuthError(f"{text} (wrong access key or secret key)", self.target)
            if code in _PRIVILEGE_CODES:
                return _fence.PrivilegeError(text, self.target)
            if code.startswith("InvalidInstanceID"):
                return _fence.NotFoundError(text, self.target)
            return _fence.RejectedError(text, self.target)
        if isinstance(exc, botocore_exc.NoCredentialsError):
            return _fence.FenceConfigError("access_key, secret_key: no AWS credentials found")
        if isinstance(exc, (botocore_exc.BotoCoreError, OSError)):
            return _fence.UnreachableError(f"{doing}: cannot reach EC2 ({type(exc).__name__})", self.target)
        return _fence.RejectedError(f"{doing}: {exc}", self.target)

    def open(self) -> None:
        """Create the EC2 client (no request yet)."""
        BOTO3_LIBRARY.require()
        config = BotoConfig(
            connect_timeout=self.connect_timeout,
            read_timeout=self.power_timeout,
            retries={"total_max_attempts": 2, "mode": "standard"},
        )
        try:
            self._ec2 = boto3.session.Session().client(
                "ec2",
                region_name=self.region,
                endpoint_url=self.endpoint_url,
                aws_access_key_id=self._access_key or None,
                aws_secret_access_key=self._secret_key or None,
                config=config,
            )
        except botocore_exc.BotoCoreError as exc:
            raise _fence.FenceConfigError(f"region: {exc}") from None

    def close(self) -> None:
        """Close the client's connection pool."""
        client, self._ec2 = self._ec2, None
        _fence.close_quietly(client, lambda c: c.close())

    def get_state(self, plug: str) -> str:
        """``DescribeInstances``: ``on``, ``off``, ``powering_off``, ``powering_on``, ``terminated``."""
        try:
            out = self._ec2.describe_instances(InstanceIds=[self.instance_id])
        except Exception as exc:  # noqa: BLE001 - classified
            raise self._classify(exc, "DescribeInstances") from None
        found = [i for r in out.get("Reservations", []) for i in r.get("Instances", [])]
        if not found:
            raise _fence.NotFoundError(f"no instance {self.instance_id} in {self.region}", self.target)
        return INSTANCE_STATES.get(found[0]["State"]["Name"], "unknown")

    def set_state(self, plug: str, state: str) -> None:
        """``StopInstances`` with ``Force=True`` (off) or ``StartInstances`` (on)."""
        try:
            if state == _fence.OFF:
                self._ec2.stop_instances(InstanceIds=[self.instance_id], Force=True)
            else:
                self._ec2.start_instances(InstanceIds=[self.instance_id])
        except Exception as exc:  # noqa: BLE001 - classified
            raise self._classify(exc, "StopInstances" if state == _fence.OFF else "StartInstances") from None
