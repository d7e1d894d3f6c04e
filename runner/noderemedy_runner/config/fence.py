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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from noderemedy_runner.vocabulary import Step

DeviceType = Literal["ipmi", "redfish", "aws", "vmware", "kdump", "pdu", "fc", "node"]

CONFIG_PREFIX = "fence-config-"
METHOD_PREFIX = "fence-method-"
TEMPLATE_PREFIX = "fence-method-template-"
CONFIG_KEY = "config.properties"
TEMPLATE_KEY = "template.properties"

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

#: Separator of fencing levels in a step's method list (``isolation=a | b``).
LEVEL_SEPARATOR = "|"
#: config.properties keys → NodeFence step.
STEP_KEYS: dict[str, Step] = {
    "isolation": "Isolation",
    "power_management": "PowerManagement",
    "recovery": "Recovery",
}
_CREDENTIAL_KEYS = (
    "password",
    "passwd",
    "username",
    "login",
    "user",
    "community",
    "auth_key",
    "priv_key",
    "snmp_priv_passwd",
)
_TEMPLATE_KEYS = ("name", "type", "agent_name", "model", "address", "ipaddr", "ipport", "secret")
_METHOD_KEYS = ("template", "plug", "action")

_PROP_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_METHOD_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
_PLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")
_ADDRESS_RE = re.compile(
    r"^(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?/?$"
)


class FenceConfigError(ValueError):
    """A fence ConfigMap that cannot be used.

    Attributes: ``configmap`` (its name), ``key`` (the data key, or None for the object itself),
    ``problem`` (what is wrong). ``str()`` reads ``ConfigMap 'x' key 'y': problem``.
    """

    def __init__(self, configmap: str, key: str | None, problem: str) -> None:
        self.configmap = configmap
        self.key = key
        self.problem = problem
        where = f"ConfigMap {configmap!r}" + (f" key {key!r}" if key is not None else "")
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class FenceTemplate:
    """A ``fence-method-template-<name>`` ConfigMap: one fencing device.

    ``configmap`` is the template's ConfigMap name, ``device_type`` ipmi/pdu/fc, ``model`` the
    device family as written (pdu/fc; None for ipmi), ``address`` host[:port] or
    scheme://host[:port] as written, ``ipaddr``/``ipport`` the host and port parsed from it
    (``ipport`` None: the module's default, 623 for IPMI, 161 for SNMP), ``secret_name`` the
    Secret (same namespace) with the device's credentials, ``options`` non-secret module options
    (:data:`DEVICE_OPTIONS`) as sorted (name, value) pairs.
    """

    configmap: str
    device_type: DeviceType
    model: str | None
    address: str
    secret_name: str
    ipaddr: str = ""
    ipport: int | None = None
    options: tuple[tuple[str, str], ...] = ()

    @property
    def module(self) -> str:
        """FQCN of the collection module that drives this device type."""
        return DEVICE_MODULES.get(self.device_type) or NODE_MODULES[self.device_type]

    @property
    def profile(self) -> str | None:
        """The module's ``profile`` option for ``model`` (None for ipmi)."""
        return None if self.model is None else MODEL_PROFILES[self.device_type][self.model]


@dataclass(frozen=True)
class FenceMethod:
    """A ``fence-method-<name>`` entry: ``action`` (on/off/reboot) on ``plug`` of ``template``'s
    device (``plug`` is None for ipmi, whose BMC is per host)."""

    name: str
    template: FenceTemplate
    plug: str | None
    action: str

    @property
    def state(self) -> str:
        """The module's ``state`` for ``action`` (fc: ``disabled`` for off, ``enabled`` for on)."""
        return ACTION_STATES[self.template.device_type][self.action]

    def to_extravars(self) -> dict[str, Any]:
        """The method as executor extravars: references only (Secret *name*, never its data).

        Shape: ``name``, ``module`` (FQCN), ``device_type``, ``model``, ``profile``, ``address``,
        ``ipaddr``, ``ipport``, ``plug``, ``action`` (seed), ``state`` (module), ``options``
        (dict of non-secret module options), ``template`` and ``secret_name``.
        """
        t = self.template
        return {
            "name": self.name,
            "module": t.module,
            "device_type": t.device_type,
            "model": t.model,
            "profile": t.profile,
            "address": t.address,
            "ipaddr": t.ipaddr,
            "ipport": t.ipport,
            "plug": self.plug,
            "action": self.action,
            "state": self.state,
            "options": dict(t.options),
            "template": t.configmap,
            "secret_name": t.secret_name,
        }


Level = tuple[FenceMethod, ...]


@dataclass(frozen=True)
class FenceConfig:
    """A parsed ``fence-config-<node>`` ConfigMap: the ordered methods of each step.

    ``isolation``, ``power_management`` and ``recovery`` are each step's first fencing level
    (all its methods when the step has one level). ``fallback_levels`` maps a step
    (``Isolation``/``PowerManagement``) to its further levels, in order: Pacemaker's fencing
    topology, where level *n+1* is tried only when level *n* failed (docs/fence-config.md).
    ``fenced_storage``: the volume matchers of ``fenced_storage=`` (:func:`parse_fenced_storage`),
    the storage a storage-only fence of this node cuts off; () releases nothing on such a fence.
    """

    configmap: str
    node: str
    isolation: Level
    power_management: Level
    recovery: Level
    fallback_levels: Mapping[Step, tuple[Level, ...]] = field(default_factory=dict)
    fenced_storage: tuple[Mapping[str, str], ...] = ()

    def methods(self, step: Step, level: int = 1) -> Level:
        """The ordered methods of ``level`` (1-based, Pacemaker's numbering) of ``step``; ``()``
        for a level the step does not have."""
        levels = self.levels(step)
        return levels[level - 1] if 1 <= level <= len(levels) else ()

    def levels(self, step: Step) -> tuple[Level, ...]:
        """Every level of ``step`` in order (``()`` for a step with no methods)."""
        first = {
            "Isolation": self.isolation,
            "PowerManagement": self.power_management,
            "Recovery": self.recovery,
        }[step]
        return ((first,) if first else ()) + tuple(self.fallback_levels.get(step, ()))

    def all_methods(self) -> tuple[FenceMethod, ...]:
        """Every method of every level of every step, each once, in order of appearance."""
        seen: dict[str, FenceMethod] = {}
        for step in STEP_KEYS.values():
            for level in self.levels(step):
                for m in level:
                    seen.setdefault(m.name, m)
        return tuple(seen.values())

    def secret_names(self) -> frozenset[str]:
        """Names of every Secret the configuration refers to (for RBAC checks and pre-flight)."""
        return frozenset(m.template.secret_name for m in self.all_methods() if m.template.secret_name)


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


def config_map_name(node: str) -> str:
    """``fence-config-<node>``, the seed's per-node ConfigMap name."""
    return CONFIG_PREFIX + node


def parse_properties(text: Any, configmap: str, key: str) -> dict[str, str]:
    """Parse ``key=value`` lines (a simple Java-properties subset) into a dict.

    Blank lines and lines starting with ``#`` or ``!`` are skipped; whitespace around keys and
    values is dropped. Raises :class:`FenceConfigError` for a non-string value, a line without
    ``=``, an empty or malformed key, or a key given twice (with both line numbers). Messages
    name lines by number and never echo a malformed line (it may hold a credential).
    """
    if not isinstance(text, str):
        raise FenceConfigError(configmap, key, f"value must be a string, got {type(text).__name__}")
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            # the line is not echoed: it may be a credential written without '=' (invariant 5)
            raise FenceConfigError(configmap, key, f"line {lineno}: expected key=value (no '=' found)")
        prop, _, value = line.partition("=")
        prop = prop.strip()
        if not _PROP_KEY_RE.match(prop):
            raise FenceConfigError(
                configmap, key, f"line {lineno}: malformed property name (letters, digits, '_', '.', '-')"
            )
        if prop in seen:
            raise FenceConfigError(configmap, key, f"line {lineno}: {prop}= already set on line {seen[prop]}")
        seen[prop] = lineno
        out[prop] = value.strip()
    return out


def _method_list(value: str, configmap: str, prop: str) -> tuple[str, ...]:
    names = tuple(n for n in re.split(r"[\s,]+", value) if n)
    for name in names:
        if not _METHOD_NAME_RE.match(name):
            raise FenceConfigError(
                configmap, CONFIG_KEY, f"{prop}=: method name {name!r} is not lowercase [a-z0-9-_.]"
            )
    return names


def _level_lists(value: str, configmap: str, prop: str) -> tuple[tuple[str, ...], ...]:
    """``a b | c d`` → ``(("a", "b"), ("c", "d"))``; ``""`` → ``()`` (no methods)."""
    if LEVEL_SEPARATOR not in value:
        names = _method_list(value, configmap, prop)
        return (names,) if names else ()
    if prop == "recovery":
        raise FenceConfigError(
            configmap,
            CONFIG_KEY,
            "recovery=: fencing levels ('|') apply to isolation= and power_management= only "
            "(recovery undoes the fence, it has no alternatives)",
        )
    levels = tuple(_method_list(part, configmap, prop) for part in value.split(LEVEL_SEPARATOR))
    for i, names in enumerate(levels, start=1):
        if not names:
            raise FenceConfigError(configmap, CONFIG_KEY, f"{prop}=: level {i} has no methods")
    for i, names in enumerate(levels, start=1):
        if not any(levels[j] == names for j in range(i - 1)):
            continue
        raise FenceConfigError(configmap, CONFIG_KEY, f"{prop}=: level {i} repeats an earlier level")
    return levels


def _reject_credentials(props: Mapping[str, str], configmap: str, key: str) -> None:
    for prop in props:
        if prop.lower() in _CREDENTIAL_KEYS:
            raise FenceConfigError(
                configmap,
                key,
                f"{prop}= is a credential: credentials belong in the Secret named by secret= "
                "(a ConfigMap is readable by anyone who can read the namespace)",
            )


def _reject_unknown(props: Mapping[str, str], allowed: tuple[str, ...], configmap: str, key: str) -> None:
    unknown = sorted(set(props) - set(allowed))
    if unknown:
        raise FenceConfigError(configmap, key, f"unknown properties {unknown}; allowed: {list(allowed)}")


def _parse_address(address: str, configmap: str) -> tuple[str, int | None]:
    m = _ADDRESS_RE.match(address)
    if not m:
        raise FenceConfigError(
            configmap, TEMPLATE_KEY, f"address={address!r} is not host[:port] or scheme://host[:port]"
        )
    port = m.group("port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"address={address!r}: port {port} not in 1..65535")
    return m.group("host").strip("[]"), None if port is None else int(port)


def _device_options(
    props: Mapping[str, str], dtype: str, model: str | None, configmap: str
) -> tuple[tuple[str, str], ...]:
    allowed = DEVICE_OPTIONS[dtype]
    out: list[tuple[str, str]] = []
    for key in sorted(set(props) - set(_TEMPLATE_KEYS)):
        if key not in allowed:
            raise FenceConfigError(
                configmap,
                TEMPLATE_KEY,
                f"unknown properties [{key!r}] for type={dtype}; allowed: {list(_TEMPLATE_KEYS) + sorted(allowed)}",
            )
        value = props[key]
        choices = allowed[key]
        if key in _GENERIC_ONLY and model != "generic":
            raise FenceConfigError(configmap, TEMPLATE_KEY, f"{key}= applies to model=generic only")
        if choices == _INT:
            ok = value.isdigit()
        elif choices == _OID:
            ok = bool(_OID_RE.match(value))
        elif choices == _URI:
            ok = bool(_URI_RE.match(value))
        elif choices == _REGION:
            ok = bool(re.match(r"^[a-z]{2}(-[a-z]+)+-[0-9]$", value))
        else:
            ok = choices is None or value in choices
        if not ok:
            want = (
                "an integer"
                if choices == _INT
                else "a dotted OID"
                if choices == _OID
                else "an absolute path (/...)"
                if choices == _URI
                else "a region name (us-east-1)"
                if choices == _REGION
                else f"one of {list(choices or ())}"
            )
            raise FenceConfigError(configmap, TEMPLATE_KEY, f"{key}={value!r} is not {want}")
        out.append((key, value))
    if model == "generic" and "status_oid" not in props:
        raise FenceConfigError(configmap, TEMPLATE_KEY, "model=generic needs status_oid=")
    return tuple(out)


def parse_template(configmap: str, data: Any) -> FenceTemplate:
    """Parse a ``fence-method-template-<name>`` ConfigMap's ``data``.

    Required: ``type=`` (ipmi|pdu|fc) or the seed's ``agent_name=`` (see :data:`SEED_AGENTS`),
    ``address=`` (or the seed's ``ipaddr=`` with optional ``ipport=``), ``secret=`` (a Secret
    name). ``model=`` for pdu and fc (:data:`MODEL_PROFILES`; default ``auto`` / ``ifmib``).
    Optional non-secret device options per :data:`DEVICE_OPTIONS`. Raises
    :class:`FenceConfigError` for anything else, and for credentials.
    """
    if not configmap.startswith(TEMPLATE_PREFIX) or len(configmap) == len(TEMPLATE_PREFIX):
        raise FenceConfigError(configmap, None, f"template ConfigMap names start with {TEMPLATE_PREFIX!r}")
    if not isinstance(data, Mapping):
        raise FenceConfigError(configmap, None, f"data must be a mapping, got {type(data).__name__}")
    if TEMPLATE_KEY not in data:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"missing; data keys are {sorted(map(str, data))}")
    extra = sorted(str(k) for k in data if k != TEMPLATE_KEY)
    if extra:
        raise FenceConfigError(configmap, extra[0], f"unexpected key; a template holds only {TEMPLATE_KEY}")
    props = parse_properties(data[TEMPLATE_KEY], configmap, TEMPLATE_KEY)
    _reject_credentials(props, configmap, TEMPLATE_KEY)

    seed_model: str | None = None
    if "type" in props and "agent_name" in props:
        raise FenceConfigError(configmap, TEMPLATE_KEY, "give type= or agent_name=, not both")
    if "type" in props:
        dtype = props["type"]
        if dtype not in DEVICE_MODULES:
            raise FenceConfigError(
                configmap, TEMPLATE_KEY, f"type={dtype!r} not one of {sorted(DEVICE_MODULES)}"
            )
    elif "agent_name" in props:
        agent = props["agent_name"]
        if agent not in SEED_AGENTS:
            raise FenceConfigError(
                configmap, TEMPLATE_KEY, f"agent_name={agent!r} not one of {sorted(SEED_AGENTS)}"
            )
        dtype, seed_model = SEED_AGENTS[agent]
    else:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"missing type= (one of {sorted(DEVICE_MODULES)})")

    models = MODEL_PROFILES[dtype]
    model: str | None = None
    if models:
        model = props.get("model") or seed_model or next(iter(models))
        if model not in models:
            raise FenceConfigError(
                configmap, TEMPLATE_KEY, f"model={model!r} not one of {list(models)} for type={dtype}"
            )
    elif "model" in props:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"model= does not apply to type={dtype}")
    options = _device_options(props, dtype, model, configmap)

    if "address" in props and ("ipaddr" in props or "ipport" in props):
        raise FenceConfigError(configmap, TEMPLATE_KEY, "give address= or ipaddr=/ipport=, not both")
    if "address" in props:
        address = props["address"]
    elif "ipaddr" in props:
        address = props["ipaddr"] + (f":{props['ipport']}" if props.get("ipport") else "")
    elif dtype in ("aws", "kdump"):
        address = ""  # aws: AWS's own regional endpoint; kdump: listen on every address, port 7410
    else:
        raise FenceConfigError(configmap, TEMPLATE_KEY, "missing address= (host[:port] of the device)")
    if not address and dtype not in ("aws", "kdump"):
        raise FenceConfigError(configmap, TEMPLATE_KEY, "address= is empty")
    host, port = _parse_address(address, configmap) if address else ("", None)
    if dtype == "aws" and address and not re.match(r"^https?://", address):
        raise FenceConfigError(
            configmap, TEMPLATE_KEY, f"address={address!r}: an EC2 endpoint is http(s)://host[:port]"
        )
    if dtype == "redfish":
        scheme = address.split("://", 1)[0] if "://" in address else "https"
        if scheme not in REDFISH_SCHEMES:
            raise FenceConfigError(
                configmap,
                TEMPLATE_KEY,
                f"address={address!r}: scheme {scheme!r} not one of {sorted(REDFISH_SCHEMES)}",
            )
        options = tuple(sorted((*options, ("ssl", "true" if REDFISH_SCHEMES[scheme] else "false"))))

    secret = props.get("secret", "")
    if not secret and dtype == "kdump":  # the kdump protocol has no credentials
        return FenceTemplate(configmap, dtype, model, address, "", host, port, options)  # type: ignore[arg-type]
    if not secret:
        raise FenceConfigError(
            configmap, TEMPLATE_KEY, "missing secret= (name of the Secret with the credentials)"
        )
    if not _DNS_SUBDOMAIN_RE.match(secret) or len(secret) > 253:
        raise FenceConfigError(configmap, TEMPLATE_KEY, f"secret={secret!r} is not a valid Secret name")
    return FenceTemplate(configmap, dtype, model, address, secret, host, port, options)  # type: ignore[arg-type]


#: ``fenced_storage=`` entry kinds -> the key of the volume matcher they give (``node_taint``'s
#: ``fenced_storage`` option): a CSI driver, a StorageClass, a hostPath directory (and what is
#: under it), and ``fc`` for the in-tree Fibre Channel volume source (``spec.fc``).
FENCED_STORAGE_KINDS = {"csi": "csi_driver", "storageclass": "storage_class", "hostpath": "host_path"}
_FENCED_STORAGE_NAME_RE = re.compile(r"^[A-Za-z0-9/][A-Za-z0-9._/-]{0,252}$")


def parse_fenced_storage(value: str, configmap: str) -> tuple[Mapping[str, str], ...]:
    """``fenced_storage=`` (space or comma separated ``csi:<driver>``, ``storageclass:<name>``,
    ``hostpath:<absolute dir>``, ``fc``) → the volume matchers (``{"csi_driver": ...}``,
    ``{"storage_class": ...}``, ``{"host_path": ...}``, ``{"fc": "true"}``), in order. They
    describe the storage the node reaches only through its fc ports, so a storage-only fence may
    release the pods using it (docs/concepts.md "What a fence releases"). Raises
    :class:`FenceConfigError` naming the entry."""
    out: list[Mapping[str, str]] = []
    for entry in (e for e in re.split(r"[\s,]+", value) if e):
        kind, sep, name = entry.partition(":")
        if entry == "fc":
            out.append({"fc": "true"})
            continue
        if not sep or kind not in FENCED_STORAGE_KINDS or not _FENCED_STORAGE_NAME_RE.match(name):
            raise FenceConfigError(
                configmap,
                CONFIG_KEY,
                f"fenced_storage=: entry {entry!r} is not csi:<driver>, storageclass:<name>, "
                "hostpath:<absolute dir> or fc",
            )
        if kind == "hostpath" and (not name.startswith("/") or name == "/"):
            raise FenceConfigError(
                configmap,
                CONFIG_KEY,
                f"fenced_storage=: {entry!r}: a hostpath is an absolute directory, not /",
            )
        out.append({FENCED_STORAGE_KINDS[kind]: name})
    return tuple(out)


@dataclass(frozen=True)
class _RawConfig:
    node: str
    steps: dict[str, tuple[tuple[str, ...], ...]]
    methods: dict[str, dict[str, str]]
    fenced_storage: tuple[Mapping[str, str], ...] = ()


def _parse_raw(configmap: str, data: Any, node: str | None) -> _RawConfig:
    if not configmap.startswith(CONFIG_PREFIX) or len(configmap) == len(CONFIG_PREFIX):
        raise FenceConfigError(
            configmap, None, f"fence configuration ConfigMaps are named {CONFIG_PREFIX}<node>"
        )
    name_node = configmap[len(CONFIG_PREFIX) :]
    if node is not None and node != name_node:
        raise FenceConfigError(configmap, None, f"is not the fence configuration of node {node!r}")
    if not isinstance(data, Mapping):
        raise FenceConfigError(configmap, None, f"data must be a mapping, got {type(data).__name__}")
    if CONFIG_KEY not in data:
        raise FenceConfigError(configmap, CONFIG_KEY, f"missing; data keys are {sorted(map(str, data))}")
    for key in data:
        if key != CONFIG_KEY and not (isinstance(key, str) and key.startswith(METHOD_PREFIX)):
            raise FenceConfigError(
                configmap, str(key), f"unexpected key; expected {CONFIG_KEY} or {METHOD_PREFIX}<name>"
            )
    props = parse_properties(data[CONFIG_KEY], configmap, CONFIG_KEY)
    _reject_credentials(props, configmap, CONFIG_KEY)
    _reject_unknown(props, ("node_name", *STEP_KEYS, "fenced_storage"), configmap, CONFIG_KEY)
    if "node_name" not in props:
        raise FenceConfigError(configmap, CONFIG_KEY, "missing node_name=")
    if props["node_name"] != name_node:
        raise FenceConfigError(
            configmap,
            CONFIG_KEY,
            f"node_name={props['node_name']!r} does not match the ConfigMap's node {name_node!r}",
        )
    steps: dict[str, tuple[tuple[str, ...], ...]] = {}
    for prop in STEP_KEYS:
        if prop not in props:
            raise FenceConfigError(configmap, CONFIG_KEY, f"missing {prop}= (leave it empty for no methods)")
        steps[prop] = _level_lists(props[prop], configmap, prop)
    methods: dict[str, dict[str, str]] = {}
    for name in (n for levels in steps.values() for level in levels for n in level):
        if name in methods:
            continue
        key = METHOD_PREFIX + name
        if key not in data:
            using = [p for p, ls in steps.items() if any(name in level for level in ls)]
            raise FenceConfigError(
                configmap, key, f"missing (method {name!r} is listed in {', '.join(using)}=)"
            )
        mprops = parse_properties(data[key], configmap, key)
        _reject_credentials(mprops, configmap, key)
        _reject_unknown(mprops, _METHOD_KEYS, configmap, key)
        tmpl = mprops.get("template", "")
        if not tmpl:
            raise FenceConfigError(configmap, key, f"missing template= ({TEMPLATE_PREFIX}<name>)")
        if not tmpl.startswith(TEMPLATE_PREFIX) or not _DNS_SUBDOMAIN_RE.match(tmpl) or len(tmpl) > 253:
            raise FenceConfigError(
                configmap, key, f"template={tmpl!r} is not a ConfigMap name {TEMPLATE_PREFIX}<name>"
            )
        if not mprops.get("action"):
            raise FenceConfigError(configmap, key, "missing action=")
        methods[name] = mprops
    return _RawConfig(
        name_node, steps, methods, parse_fenced_storage(props.get("fenced_storage", ""), configmap)
    )


def required_templates(configmap: str, data: Any, node: str | None = None) -> frozenset[str]:
    """Names of the template ConfigMaps a ``fence-config-<node>`` refers to (to fetch them).

    Raises :class:`FenceConfigError` exactly as :func:`parse_fence_config` does for this ConfigMap.
    """
    raw = _parse_raw(configmap, data, node)
    return frozenset(m["template"] for m in raw.methods.values())


def parse_fence_config(
    configmap: str,
    data: Any,
    templates: Mapping[str, Any],
    node: str | None = None,
) -> FenceConfig:
    """Parse a ``fence-config-<node>`` ConfigMap's ``data`` with its templates' ``data``.

    ``templates`` maps template ConfigMap names to their ``data`` (at least those of
    :func:`required_templates`). ``node``, if given, must be the ConfigMap's node.
    Raises :class:`FenceConfigError` (which ConfigMap, which key, what is wrong) for: a wrong
    name, unknown keys, malformed properties, a missing or mismatched ``node_name``, a step
    naming a method with no ``fence-method-<name>`` entry, a missing template, an action the
    device type does not support (ipmi/pdu: on, off, reboot; fc: on, off), a plug on an ipmi
    method or a missing plug on a pdu/fc method, and credentials anywhere.
    """
    raw = _parse_raw(configmap, data, node)
    parsed_templates: dict[str, FenceTemplate] = {}
    methods: dict[str, FenceMethod] = {}
    for name, mprops in raw.methods.items():
        key = METHOD_PREFIX + name
        tname = mprops["template"]
        if tname not in parsed_templates:
            if tname not in templates:
                raise FenceConfigError(configmap, key, f"template ConfigMap {tname!r} not found")
            parsed_templates[tname] = parse_template(tname, templates[tname])
        template = parsed_templates[tname]
        action = mprops["action"]
        allowed = DEVICE_ACTIONS[template.device_type]
        if action not in allowed:
            raise FenceConfigError(
                configmap,
                key,
                f"action={action!r} not supported by {template.device_type} devices {list(allowed)}",
            )
        plug: str | None = mprops.get("plug") or None
        if template.device_type == "ipmi":
            if plug is not None:
                raise FenceConfigError(configmap, key, "plug= does not apply to ipmi (the BMC is per host)")
        elif template.device_type == "vmware":
            # optional: the VM's name or UUID; without it, the VM named after the node
            if plug is not None and not _PLUG_RE.match(plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not a VM name or UUID")
        elif template.device_type == "kdump":
            # optional: the node's host name or address the message comes from (default: the node)
            if plug is not None and not _PLUG_RE.match(plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not a host name or address")
        elif template.device_type == "aws":
            # optional: the instance id; without it, the one in the Node's spec.providerID
            if plug is not None and not re.match(r"^i-[0-9a-f]{8,17}$", plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not an EC2 instance id (i-...)")
        elif template.device_type == "redfish":
            # optional: the system's URI, or its Id/Name/UUID; without it, the BMC's only system
            if plug is not None and not (_URI_RE.match(plug) or _PLUG_RE.match(plug)):
                raise FenceConfigError(
                    configmap, key, f"plug={plug!r} is not a system URI (/redfish/v1/Systems/...) or Id"
                )
        else:
            if plug is None:
                raise FenceConfigError(
                    configmap,
                    key,
                    f"missing plug= ({'outlet' if template.device_type == 'pdu' else 'port'} of {tname})",
                )
            if not _PLUG_RE.match(plug):
                raise FenceConfigError(configmap, key, f"plug={plug!r} is not an outlet/port name or number")
        methods[name] = FenceMethod(name, template, plug, action)
    steps = {
        prop: tuple(tuple(methods[n] for n in level) for level in levels)
        for prop, levels in raw.steps.items()
    }
    fallback = {STEP_KEYS[prop]: levels[1:] for prop, levels in steps.items() if len(levels) > 1}
    first = {prop: levels[0] if levels else () for prop, levels in steps.items()}
    return FenceConfig(
        configmap,
        raw.node,
        first["isolation"],
        first["power_management"],
        first["recovery"],
        fallback,
        raw.fenced_storage,
    )
