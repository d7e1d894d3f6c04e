"""Parser for the node remedy seed's fence configuration: ConfigMap ``data`` dicts → typed objects.

Format (node remedy seed, "Bare-metal configmaps"; DESIGN.md "NodeFence")::

    # ConfigMap fence-config-<node>
    data:
      config.properties: |
        node_name=<node>
        isolation=fc-off                 # ordered method names, space or comma separated
        power_management=eaton-off eaton-on
        recovery=fc-on
        # fencing levels (Pacemaker's topology): ``|`` separates ordered alternatives
        # power_management=ipmi-off ipmi-on | pdu-a-off pdu-b-off pdu-a-on pdu-b-on
        # optional: the storage behind the node's fc ports, whose pods a storage-only fence
        # releases (csi:<driver> storageclass:<name> hostpath:<dir> fc; FENCED_STORAGE_KINDS)
        # fenced_storage=csi:san.example.com hostpath:/mnt/san
      fence-method-fc-off: |
        template=fence-method-template-fc-switch
        plug=2
        action=off

    # ConfigMap fence-method-template-<name>
    data:
      template.properties: |
        type=pdu                         # ipmi | redfish | pdu | fc (or the seed's agent_name=fence_...)
        model=eaton                      # pdu: auto | apc-rpdu | apc-ms | apc-ms6 | eaton |
                                         #      eaton-managed | eaton-switched | generic
                                         # fc: ifmib | cisco-mds; ipmi, redfish: none
        address=127.0.0.1:16013          # host[:port] or scheme://host[:port]; redfish: https://
                                         # (default), http://, redfish://, redfish+http(s)://
        secret=eaton-pdu-credentials     # the Secret holding the credentials (its *name*)
        snmp_version=2c                  # optional non-secret device options, per type
                                         # (DEVICE_OPTIONS), passed to the module as they are

Credentials never live in these ConfigMaps: ``password=``, ``username=``, ``community=`` and the
like are rejected with a pointer to ``secret=``. The parsed result carries Secret *names* only.
A vmware method's ``plug=`` is the VM's name or UUID (default: the node's name). A kdump method (``type=kdump``, the listening side of ``fence_kdump``; ``address=`` optional,
the listen address and port; no ``secret=``) waits for the node's kdump message: ``action=off``
only, ``plug=`` the node's address (default: its name). A redfish method's ``plug=`` is optional: the system's URI or its Id/Name (without it, the BMC's
only system). Device types map to modules: ``ipmi`` → ``noderemedy.core.ipmi_power``,
``redfish`` → ``noderemedy.core.redfish_power``, ``pdu`` →
``noderemedy.core.pdu_outlet``, ``fc`` → ``noderemedy.core.fc_port``; ``model`` maps to the
module's ``profile`` (:data:`MODEL_PROFILES`) and a method's ``action`` to the module's
``state`` (:data:`ACTION_STATES`: fc ``off``/``on`` are ``disabled``/``enabled``).

Every problem raises :class:`FenceConfigError` naming the ConfigMap, the key and what is wrong.
"""

from __future__ import annotations

from noderemedy_runner.config.fence.cloud import (
    CLOUD_DEFAULT_METHODS,
    CLOUD_PROVIDERS,
    CloudDefaults,
    cloud_default_config,
)
from noderemedy_runner.config.fence.devices import (
    ACTION_STATES,
    DEVICE_ACTIONS,
    DEVICE_MODULES,
    DEVICE_OPTIONS,
    MODEL_PROFILES,
    NODE_MODULES,
    PDU_MODELS,
    REDFISH_SCHEMES,
    SEED_AGENTS,
    DeviceType,
)
from noderemedy_runner.config.fence.model import (
    CONFIG_KEY,
    CONFIG_PREFIX,
    LEVEL_SEPARATOR,
    METHOD_PREFIX,
    STEP_KEYS,
    TEMPLATE_KEY,
    TEMPLATE_PREFIX,
    FenceConfig,
    FenceConfigError,
    FenceMethod,
    FenceTemplate,
    Level,
    config_map_name,
)
from noderemedy_runner.config.fence.node_config import (
    FENCED_STORAGE_KINDS,
    parse_fence_config,
    parse_fenced_storage,
    required_templates,
)
from noderemedy_runner.config.fence.properties import (
    parse_properties,
)
from noderemedy_runner.config.fence.templates import (
    parse_template,
)

__all__ = [
    "ACTION_STATES",
    "CLOUD_DEFAULT_METHODS",
    "CLOUD_PROVIDERS",
    "CONFIG_KEY",
    "CONFIG_PREFIX",
    "CloudDefaults",
    "DEVICE_ACTIONS",
    "DEVICE_MODULES",
    "DEVICE_OPTIONS",
    "DeviceType",
    "FENCED_STORAGE_KINDS",
    "FenceConfig",
    "FenceConfigError",
    "FenceMethod",
    "FenceTemplate",
    "LEVEL_SEPARATOR",
    "Level",
    "METHOD_PREFIX",
    "MODEL_PROFILES",
    "NODE_MODULES",
    "PDU_MODELS",
    "REDFISH_SCHEMES",
    "SEED_AGENTS",
    "STEP_KEYS",
    "TEMPLATE_KEY",
    "TEMPLATE_PREFIX",
    "cloud_default_config",
    "config_map_name",
    "parse_fence_config",
    "parse_fenced_storage",
    "parse_properties",
    "parse_template",
    "required_templates",
]
