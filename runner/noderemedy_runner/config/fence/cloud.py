"""The node remedy seed's default cloud configuration, for a cloud node without
``fence-config-<node>``: cordon, restart the instance, uncordon."""

from __future__ import annotations

from dataclasses import dataclass

from noderemedy_runner.config.fence.devices import DeviceType
from noderemedy_runner.config.fence.model import (
    FenceConfig,
    FenceConfigError,
    FenceMethod,
    FenceTemplate,
    config_map_name,
)
from noderemedy_runner.config.fence.templates import _parse_address


@dataclass(frozen=True)
class CloudDefaults:
    """Where the seed's default cloud configuration gets its credentials and endpoint.

    ``secret_name``: the one Secret (in the runner's namespace) with the cloud credentials (AWS:
    keys ``access_key``, ``secret_key``); ``endpoint_url``: an EC2-compatible endpoint instead of
    AWS's own (None: AWS).
    """

    secret_name: str
    endpoint_url: str | None = None


#: ``spec.providerID`` scheme → the device type whose module fences such a node. Providers the
#: node remedy seed names without a tested driver here (gce, openstack, azure, vsphere) are
#: refused with a clear error (docs/fencing.md says what a user needs instead).
CLOUD_PROVIDERS: dict[str, DeviceType] = {"aws": "aws"}
#: The seed's default cloud configuration: method name, step, action.
CLOUD_DEFAULT_METHODS = (
    ("mark-unschedulable", "isolation", "off"),
    ("restart-instance", "power_management", "reboot"),
    ("mark-unschedulable", "recovery", "on"),
)


def cloud_default_config(node: str, provider_id: str, cloud: CloudDefaults) -> FenceConfig:
    """The node remedy seed's default configuration for a cloud node without ``fence-config-<node>``.

    ``isolation=mark-unschedulable`` (cordon), ``power_management=restart-instance`` (stop,
    verified, then start: the ``aws`` module's ``reboot``), ``recovery=mark-unschedulable`` (undone:
    uncordon). The provider is the scheme of the Node's ``spec.providerID`` (``aws:///zone/i-...``);
    credentials come from ``cloud.secret_name``.

    Raises:
        FenceConfigError: (ConfigMap ``fence-config-<node>``, key None) for a node without a
            providerID, or of a provider with no driver here, naming it.
    """
    name = config_map_name(node)
    scheme = provider_id.split("://", 1)[0] if "://" in provider_id else ""
    if scheme not in CLOUD_PROVIDERS:
        what = f"spec.providerID {provider_id!r}" if provider_id else "no spec.providerID"
        raise FenceConfigError(
            name,
            None,
            f"not found, and node {node!r} has {what}: the default cloud configuration covers "
            f"providers {sorted(CLOUD_PROVIDERS)} only",
        )
    dtype = CLOUD_PROVIDERS[scheme]
    endpoint = cloud.endpoint_url or ""
    host, port = _parse_address(endpoint, name) if endpoint else ("", None)
    template = FenceTemplate(
        configmap="(default cloud configuration)",
        device_type=dtype,
        model=None,
        address=endpoint,
        secret_name=cloud.secret_name,
        ipaddr=host,
        ipport=port,
        options=(("provider_id", provider_id),),
    )
    node_template = FenceTemplate("(default cloud configuration)", "node", None, "", "")
    steps: dict[str, list[FenceMethod]] = {"isolation": [], "power_management": [], "recovery": []}
    for method, step, action in CLOUD_DEFAULT_METHODS:
        tmpl = template if method == "restart-instance" else node_template
        steps[step].append(FenceMethod(method, tmpl, None, action))
    return FenceConfig(
        name,
        node,
        tuple(steps["isolation"]),
        tuple(steps["power_management"]),
        tuple(steps["recovery"]),
    )
