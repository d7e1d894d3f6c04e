"""The fencing devices the fence ConfigMaps may name: their types, the collection module that
drives each, the models (``model=`` → the module's ``profile``), the actions each supports and the
module ``state`` each maps to, the non-secret options a template may set, the seed's fence-agents
``agent_name=`` values and the redfish address schemes."""

from __future__ import annotations

import re
from typing import Literal

DeviceType = Literal["ipmi", "redfish", "aws", "vmware", "kdump", "pdu", "fc", "node"]

DEVICE_MODULES: dict[str, str] = {
    "ipmi": "noderemedy.core.ipmi_power",
    "redfish": "noderemedy.core.redfish_power",
    "aws": "noderemedy.core.aws_instance_power",
    "vmware": "noderemedy.core.vmware_vm_power",
    "kdump": "noderemedy.core.kdump_wait",
    "pdu": "noderemedy.core.pdu_outlet",
    "fc": "noderemedy.core.fc_port",
}
#: Methods that act on the Node object, not a device (the seed's ``mark-unschedulable``); only the
#: default cloud configuration uses them. A method's ``action`` off/on is cordon/uncordon.
NODE_MODULES: dict[str, str] = {"node": "noderemedy.core.node_drain"}
#: ``model=`` per device type → the module's ``profile`` option (first entry: the default).
#: ``eaton`` is fence_eaton_snmp's behaviour: detect managed/switched by sysObjectID (``auto``).
MODEL_PROFILES: dict[str, dict[str, str]] = {
    "ipmi": {},
    "redfish": {},
    "aws": {},
    "vmware": {},
    "kdump": {},
    "pdu": {
        "auto": "auto",
        "apc-rpdu": "apc_rpdu",
        "apc-ms": "apc_ms",
        "apc-ms6": "apc_ms6",
        "eaton": "auto",
        "eaton-managed": "eaton_managed",
        "eaton-switched": "eaton_switched",
        "generic": "generic",
    },
    "fc": {"ifmib": "ifmib", "cisco-mds": "cisco_mds"},
}
PDU_MODELS = tuple(MODEL_PROFILES["pdu"])
DEVICE_ACTIONS: dict[str, tuple[str, ...]] = {
    "ipmi": ("on", "off", "reboot"),
    "redfish": ("on", "off", "reboot"),
    "aws": ("on", "off", "reboot"),
    "vmware": ("on", "off", "reboot"),
    "kdump": ("off",),
    "pdu": ("on", "off", "reboot"),
    "fc": ("on", "off"),
}
#: A method's ``action`` → the module's ``state``.
ACTION_STATES: dict[str, dict[str, str]] = {
    "ipmi": {"on": "on", "off": "off", "reboot": "reboot"},
    "redfish": {"on": "on", "off": "off", "reboot": "reboot"},
    "aws": {"on": "on", "off": "off", "reboot": "reboot"},
    "vmware": {"on": "on", "off": "off", "reboot": "reboot"},
    "kdump": {"off": "wait"},
    "node": {"off": "cordon", "on": "uncordon"},
    "pdu": {"on": "on", "off": "off", "reboot": "reboot"},
    "fc": {"on": "enabled", "off": "disabled"},
}
_SNMP_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "snmp_version": ("1", "2c", "3"),
    "snmp_sec_level": ("noAuthNoPriv", "authNoPriv", "authPriv"),
    "snmp_auth_prot": ("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512"),
    "snmp_priv_prot": ("DES", "AES", "AES192", "AES256"),
}
_INT = ("<integer>",)
_OID = ("<oid>",)
_URI = ("<uri>",)
_REGION = ("<region>",)
_URI_RE = re.compile(r"^/[A-Za-z0-9_.~!$&'()*+,;=:@%/-]*$")
_OID_RE = re.compile(r"^\.?[0-9]+(\.[0-9]+)+$")
#: Non-secret device options a template may set, per type, with their allowed values (``_INT``:
#: an integer, ``_OID``: a dotted OID, ``_BOOL``: true/false). Names are the modules' options.
DEVICE_OPTIONS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "ipmi": {"cipher": ("3", "17"), "privlvl": ("callback", "user", "operator", "administrator")},
    "redfish": {"ssl_insecure": ("true", "false"), "redfish_uri": _URI},
    "aws": {"region": _REGION},
    "vmware": {"ssl_insecure": ("true", "false")},
    "kdump": {"family": ("auto", "ipv4", "ipv6"), "timeout": _INT},
    "pdu": {
        **_SNMP_OPTIONS,
        "status_oid": _OID,
        "control_oid": _OID,
        "names_oid": _OID,
        "status_on": _INT,
        "status_off": _INT,
        "control_on": _INT,
        "control_off": _INT,
    },
    "fc": {**_SNMP_OPTIONS, "verify_oper_status": ("true", "false")},
}
_GENERIC_ONLY = (
    "status_oid",
    "control_oid",
    "names_oid",
    "status_on",
    "status_off",
    "control_on",
    "control_off",
)
#: The seed's fence-agents ``agent_name=`` values and the (type, model) they stand for.
SEED_AGENTS: dict[str, tuple[str, str | None]] = {
    "fence_ipmilan": ("ipmi", None),
    "fence_redfish": ("redfish", None),
    "fence_aws": ("aws", None),
    "fence_vmware_soap": ("vmware", None),
    "fence_kdump": ("kdump", None),
    "fence_apc_snmp": ("pdu", "auto"),
    "fence_eaton_snmp": ("pdu", "eaton"),
    "fence_ifmib": ("fc", "ifmib"),
    "fence_brocade": ("fc", "ifmib"),  # driven through the switch's IF-MIB, not fence_brocade's telnet
    "fence_cisco_mds": ("fc", "cisco-mds"),
}
#: Address schemes of a redfish template → HTTPS (Metal3's BareMetalHost ``spec.bmc.address``
#: schemes, plus plain ``https``/``http``); no scheme means HTTPS.
REDFISH_SCHEMES: dict[str, bool] = {
    "https": True,
    "redfish": True,
    "redfish+https": True,
    "http": False,
    "redfish+http": False,
}
