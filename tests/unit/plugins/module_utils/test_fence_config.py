"""Fencing configuration and mapping logic with no network: IPMI/SNMP option validation, PDU
profile detection and OIDs, Cisco MDS port mapping, error classification, and the argspecs
against their doc fragments and module docs (1:1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.noderemedy.core.plugins.module_utils import (
    _aws,
    _fc_switch,
    _fence,
    _ipmi,
    _kdump,
    _kube,
    _pdu,
    _redfish,
    _secret,
    _snmp,
    _vmware,
)
from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    AuthError,
    FenceConfigError,
    PrivilegeError,
    RejectedError,
    UnreachableError,
)

ROOT = Path(__file__).resolve().parents[4]

IPMI_OK = {"ipaddr": "127.0.0.1", "username": "admin", "password": "s3cret"}


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"cipher": 0}, "cipher"),
        ({"cipher": 1}, "cipher"),
        ({"cipher": 8}, "cipher"),
        ({"password": ""}, "password"),
        ({"username": ""}, "username"),
        ({"ipaddr": ""}, "ipaddr"),
        ({"ipport": 0}, "ipport"),
        ({"privlvl": "root"}, "privlvl"),
    ],
)
def test_ipmi_bad_input_names_the_field(override: dict, field: str) -> None:
    with pytest.raises(FenceConfigError, match=f"^{field}:") as err:
        _ipmi.IpmiDriver(**{**IPMI_OK, **override})
    assert "s3cret" not in str(err.value)


def test_ipmi_cipher_zero_message_says_why() -> None:
    with pytest.raises(FenceConfigError, match="no authentication"):
        _ipmi.IpmiDriver(**{**IPMI_OK, "cipher": 0})


def test_ipmi_driver_keeps_credentials_as_bytes_and_out_of_evidence() -> None:
    drv = _ipmi.IpmiDriver(**IPMI_OK, ipport=24100)
    # bytes: pyghmi's session cache matches bytes only
    assert isinstance(drv._username, bytes) and isinstance(drv._password, bytes)
    evidence = drv.evidence(None)
    assert evidence["target"] == "127.0.0.1:24100" and evidence["plugs"] == ["chassis"]
    assert "s3cret" not in repr(evidence) and "admin" not in repr(evidence)


@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("Incorrect password provided", AuthError),
        ("Unauthorized name in RAKP2", AuthError),
        ("Invalid RAKP4 integrity code (wrong Kg?)", AuthError),
        ("Unauthorized role or privilege level requested in RAKP2", PrivilegeError),
        (
            "Insufficient resources to create new session (wait for existing sessions to timeout)",
            UnreachableError,
        ),
        ("Invalid authentication algorithm", RejectedError),
        ("No Cipher suite match with proposed security algorithms", RejectedError),
        ("None", _fence.DeviceTimeoutError),  # pyghmi gave up after its retries met silence
        ("Session no longer connected", _fence.DeviceTimeoutError),
    ],
)
def test_ipmi_login_errors_are_classified(text: str, cls: type) -> None:
    err = _ipmi.classify_login_error(text, "127.0.0.1:623")
    assert err.__class__ is cls  # the exact class, not a subclass
    assert str(err).startswith("127.0.0.1:623: ")


def test_ipmi_cipher_table_matches_pyghmi_hash_ids() -> None:
    # pyghmi session.py: attemptedhash 1 -> SHA-1 (suite 3), 256 -> SHA-256 (suite 17)
    assert _ipmi.CIPHER_SUITES == {3: 1, 17: 256}
    assert _ipmi.CHASSIS_CONTROL == {"off": 0, "on": 1, "cycle": 2}  # IPMI v2.0 table 28-4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"snmp_version": "2c"}, "community"),
        ({"snmp_version": "1", "community": ""}, "community"),
        ({"snmp_version": "3"}, "username"),
        ({"snmp_version": "3", "username": "fence", "password": "short"}, "password"),
        (
            {
                "snmp_version": "3",
                "username": "fence",
                "password": "authkey123",
                "snmp_sec_level": "authPriv",
            },
            "snmp_priv_passwd",
        ),
        (
            {"snmp_version": "3", "username": "fence", "password": "authkey123", "snmp_auth_prot": "SHA1"},
            "snmp_auth_prot",
        ),
        (
            {
                "snmp_version": "3",
                "username": "u",
                "password": "authkey123",
                "snmp_priv_passwd": "privkey123",
                "snmp_priv_prot": "BLOWFISH",
            },
            "snmp_priv_prot",
        ),
        ({"snmp_version": "4", "community": "c"}, "snmp_version"),
        ({"community": "c", "snmp_timeout": 0}, "snmp_timeout"),
        ({"community": "c", "snmp_retries": -1}, "snmp_retries"),
        ({"community": "c", "ipport": 70000}, "ipport"),
    ],
)
def test_snmp_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(FenceConfigError, match=f"^{field}:") as err:
        _snmp.SnmpClient("127.0.0.1", **kwargs)
    for secret in ("authkey123", "privkey123"):
        assert secret not in str(err.value)


def test_snmp_v3_security_level_defaults_from_the_keys() -> None:
    priv = _snmp.SnmpClient(
        "h", snmp_version="3", username="u", password="authkey123", snmp_priv_passwd="privkey123"
    )
    auth = _snmp.SnmpClient("h", snmp_version="3", username="u", password="authkey123")
    none = _snmp.SnmpClient("h", snmp_version="3", username="u")
    assert priv._auth.security_level == "authPriv"
    assert auth._auth.security_level == "authNoPriv"
    assert none._auth.security_level == "noAuthNoPriv"


@pytest.mark.parametrize(
    ("oid", "norm"), [(".1.3.6.1", "1.3.6.1"), ("1.3.6.1.2.1.1.2.0", "1.3.6.1.2.1.1.2.0")]
)
def test_normalize_oid(oid: str, norm: str) -> None:
    assert _snmp.normalize_oid(oid) == norm


@pytest.mark.parametrize("bad", ["", ".", "1.3.x", "SNMPv2-MIB::sysObjectID.0"])
def test_normalize_oid_rejects_names(bad: str) -> None:
    with pytest.raises(FenceConfigError):
        _snmp.normalize_oid(bad)


@pytest.mark.parametrize(
    ("sys_oid", "profile"),
    [
        (".1.3.6.1.4.1.318.1.3.4.5", "apc_rpdu"),
        ("1.3.6.1.4.1.318.1.3.4.6", "apc_ms6"),
        ("1.3.6.1.4.1.318.1.3.4.2", "apc_ms"),  # unknown APC -> fence_apc_snmp's ApcMS fallback
        ("1.3.6.1.4.1.534.6.6.6", "eaton_managed"),
        ("1.3.6.1.4.1.20677.1", "eaton_switched"),
        ("1.3.6.1.4.1.20677.2", "eaton_switched"),
    ],
)
def test_detect_profile_like_fence_agents(sys_oid: str, profile: str) -> None:
    assert _pdu.detect_profile(sys_oid).name == profile


def test_detect_profile_unknown_vendor_is_none() -> None:
    assert _pdu.detect_profile("1.3.6.1.4.1.9.1.1") is None


def test_profile_oids_are_fence_agents_oids() -> None:
    rpdu = _pdu.PROFILES["apc_rpdu"]
    assert rpdu.status_oid.format(n=3) == "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.3"
    assert rpdu.control_oid.format(n=3) == "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.3"
    assert (rpdu.state_on, rpdu.state_off, rpdu.turn_on, rpdu.turn_off) == (1, 2, 1, 2)
    eaton = _pdu.PROFILES["eaton_managed"]
    assert (eaton.state_on, eaton.state_off, eaton.index_offset) == (1, 0, -1)
    sw = _pdu.PROFILES["eaton_switched"]
    assert sw.control_oid.format(n=2 + sw.control_offset) == "1.3.6.1.4.1.20677.2.6.2.3.0"


def test_generic_profile_builds_templates_and_defaults() -> None:
    prof = _pdu.generic_profile(".1.3.6.1.4.1.99.1.3", None, None, 1, 0)
    assert prof.status_oid.format(n=7) == "1.3.6.1.4.1.99.1.3.7"
    assert prof.control_oid == prof.status_oid
    assert (prof.turn_on, prof.turn_off) == (1, 0)
    templ = _pdu.generic_profile(
        "1.3.6.1.4.1.99.{n}.0", "1.3.6.1.4.1.99.2.{n}", "1.3.6.1.4.1.99.9", 1, 2, 5, 6
    )
    assert templ.status_oid.format(n=4) == "1.3.6.1.4.1.99.4.0"
    assert (templ.turn_on, templ.turn_off, templ.names_oid) == (5, 6, "1.3.6.1.4.1.99.9")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((None, None), "status_oid"),
        (("ifTable", None), "status_oid"),
        (("1.3.6.1", "x.y"), "control_oid"),
        (("1.3.6.1", None, "names"), "names_oid"),
        (("1.3.6.1", None, None, 1, 1), "status_on / status_off"),
        (("1.3.6.1", None, None, 1, 2, 3, 3), "control_on / control_off"),
    ],
)
def test_generic_profile_bad_input_names_the_field(args: tuple, field: str) -> None:
    with pytest.raises(FenceConfigError, match=f"^{field}"):
        _pdu.generic_profile(*args)


@pytest.mark.parametrize(("port", "index"), [("fc1/1", "22.0"), ("fc1/3", "22.2"), ("FC2/10", "23.9")])
def test_cisco_port_index_as_fence_cisco_mds(port: str, index: str) -> None:
    assert _fc_switch.cisco_port_index(port) == index


@pytest.mark.parametrize("port", ["fc1", "eth1/1", "fc1/0", "1/3"])
def test_cisco_port_index_rejects_mangled_names(port: str) -> None:
    with pytest.raises(FenceConfigError, match="^plug:"):
        _fc_switch.cisco_port_index(port)


def test_fc_driver_unknown_profile_names_the_field() -> None:
    client = _snmp.SnmpClient("127.0.0.1", community="c")
    with pytest.raises(FenceConfigError, match="^profile:"):
        _fc_switch.FcSwitchDriver(client, ["1"], profile="brocade")


# -- argspecs vs documentation ---------------------------------------------------------------------


def _fragment(name: str) -> dict:
    """The YAML of doc fragment ``name`` as modules name it: ``fence`` (``DOCUMENTATION``) or
    ``fence.ipmi`` (attribute ``IPMI`` of ``doc_fragments/fence.py``)."""
    file, attr = name.split(".", 1) if "." in name else (name, "documentation")
    path = ROOT / "plugins" / "doc_fragments" / f"{file}.py"
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)  # our own file
    return yaml.safe_load(getattr(ns["ModuleDocFragment"], attr.upper()))


def _module_doc(name: str) -> dict:
    path = ROOT / "plugins" / "modules" / f"{name}.py"
    ns: dict = {}
    source = path.read_text()
    start = source.index("DOCUMENTATION")
    end = re.search(r"\n(?:import|from) ", source[start:])
    assert end is not None, f"{name}: no import after the docs"
    exec(source[start : start + end.start()], ns)  # docs only
    return {k: yaml.safe_load(ns[k]) for k in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


def _same(spec: dict, doc: dict, name: str) -> None:
    assert spec.get("type", "str") == doc.get("type", "str"), name
    assert bool(spec.get("required")) == bool(doc.get("required")), name
    if "default" in spec:
        assert doc.get("default") == spec["default"], name
    else:
        assert "default" not in doc, name
    assert sorted(map(str, spec.get("choices", []))) == sorted(map(str, doc.get("choices", []))), name
    assert sorted(spec.get("aliases", [])) == sorted(doc.get("aliases", [])), name


@pytest.mark.parametrize(
    ("fragment", "spec"),
    [
        ("fence", {**_fence.FENCE_ARG_SPEC, **_secret.CREDENTIALS_SECRET_ARGSPEC}),
        ("fence.ipmi", _ipmi.IPMI_ARG_SPEC),
        ("fence.snmp", _snmp.SNMP_ARG_SPEC),
        ("fence.redfish", _redfish.REDFISH_ARG_SPEC),
        ("fence.aws", _aws.AWS_ARG_SPEC),
        ("fence.vmware", _vmware.VMWARE_ARG_SPEC),
        ("fence.kdump", _kdump.KDUMP_ARG_SPEC),
        ("kube", _kube.KUBE_AUTH_ARGSPEC),
        ("kube.node", _kube.NODE_ARGSPEC),
    ],
)
def test_doc_fragment_is_one_to_one_with_its_argspec(fragment: str, spec: dict) -> None:
    doc = _fragment(fragment)["options"]
    assert sorted(doc) == sorted(spec)
    for name, opt in spec.items():
        _same(opt, doc[name], name)


@pytest.mark.parametrize(
    ("fragment", "spec"),
    [
        ("ipmi", _ipmi.IPMI_ARG_SPEC),
        ("snmp", _snmp.SNMP_ARG_SPEC),
        ("redfish", _redfish.REDFISH_ARG_SPEC),
        ("aws", _aws.AWS_ARG_SPEC),
        ("vmware", _vmware.VMWARE_ARG_SPEC),
    ],
)
def test_no_log_only_on_secrets(fragment: str, spec: dict) -> None:
    secrets = {"password", "community", "snmp_priv_passwd", "secret_key"}
    assert {k for k, v in spec.items() if v.get("no_log")} == secrets & set(spec)
    assert not spec.get("username", {}).get("no_log")
    for name in secrets & set(spec):
        assert spec[name].get("fallback"), f"{name}: credentials take an environment fallback"


@pytest.mark.parametrize(
    ("module", "fragments", "extra"),
    [
        ("ipmi_power", ["fence.ipmi", "fence"], "ipmi_power"),
        ("pdu_outlet", ["fence.snmp", "fence"], "pdu_outlet"),
        ("fc_port", ["fence.snmp", "fence"], "fc_port"),
        ("redfish_power", ["fence.redfish", "fence"], "redfish_power"),
        ("aws_instance_power", ["fence.aws", "fence"], "aws_instance_power"),
        ("vmware_vm_power", ["fence.vmware", "fence"], "vmware_vm_power"),
    ],
)
def test_module_docs_match_argspec(module: str, fragments: list[str], extra: str) -> None:
    import importlib

    mod = importlib.import_module(f"ansible_collections.noderemedy.core.plugins.modules.{module}")
    docs = _module_doc(module)
    doc = docs["DOCUMENTATION"]
    assert doc["module"] == module
    for frag in fragments:
        assert f"noderemedy.core.{frag}" in doc["extends_documentation_fragment"]
    assert "ansible.builtin.action_common_attributes" in doc["extends_documentation_fragment"]
    # check mode, diff mode and the platform: the fence fragment's support, the module's details
    attributes = {**_fragment("fence")["attributes"], **doc["attributes"]}
    assert set(attributes) >= {"check_mode", "diff_mode", "platform"}
    assert sorted(doc["options"]) == sorted(mod.MODULE_ARG_SPEC)
    for name, opt in mod.MODULE_ARG_SPEC.items():
        _same(opt, doc["options"][name], name)
    assert {"fence", "error"} <= set(docs["RETURN"])
    assert set(docs["RETURN"]["fence"]["contains"]) == {
        "verified",
        "method",
        "target",
        "plugs",
        "state",
        "verified_at",
    }


def test_runtime_yml_groups_the_fencing_modules() -> None:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"]
    assert set(runtime["action_groups"]["fencing"]) >= {
        "ipmi_power",
        "pdu_outlet",
        "fc_port",
        "redfish_power",
        "aws_instance_power",
        "vmware_vm_power",
    }


def test_snmp_engines_are_shared_per_credential_set_only() -> None:
    a = _snmp.SnmpClient("127.0.0.1", community="alpha-community")
    b = _snmp.SnmpClient("127.0.0.2", 1161, community="alpha-community")
    c = _snmp.SnmpClient("127.0.0.1", community="other-community")
    v3a = _snmp.SnmpClient(
        "h", snmp_version="3", username="u", password="authkey123", snmp_priv_passwd="privkey123"
    )
    v3b = _snmp.SnmpClient(
        "h", snmp_version="3", username="u", password="authkey123", snmp_priv_passwd="privkey124"
    )
    assert a._key == b._key, "same credentials, other agent: one engine"
    assert len({a._key, c._key, v3a._key, v3b._key}) == 4, "other credentials: other engine"
    for client, secret in ((a, "alpha-community"), (v3a, "privkey123")):
        assert secret not in client._key


# -- the drivers added for Redfish, EC2, vSphere and kdump: bad input, pure helpers ---------------


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        ("aws:///us-east-1a/i-0123456789abcdef0", ("us-east-1a", "i-0123456789abcdef0")),
        ("aws:///i-0123456789abcdef0", ("", "i-0123456789abcdef0")),
    ],
)
def test_aws_provider_id_maps_to_zone_and_instance(provider_id: str, expected: tuple) -> None:
    assert _aws.instance_from_provider_id(provider_id) == expected
    assert _aws.region_of_zone(expected[0]) == ("us-east-1" if expected[0] else "")


@pytest.mark.parametrize(
    "bad", ["", "gce://p/z/vm", "aws:///us-east-1a/vm-1", "aws://us-east-1a/i-0123456789abcdef0/x"]
)
def test_aws_provider_id_refuses_other_forms(bad: str) -> None:
    with pytest.raises(FenceConfigError, match="^provider_id:"):
        _aws.instance_from_provider_id(bad)


def test_new_drivers_refuse_bad_input_before_any_request() -> None:
    with pytest.raises(FenceConfigError, match="^password:"):
        _redfish.RedfishDriver("127.0.0.1", "admin", "")
    with pytest.raises(FenceConfigError, match="^systems_uri:"):
        _redfish.RedfishDriver("127.0.0.1", "admin", "pw", systems_uri="redfish/v1/Systems/1")
    with pytest.raises(FenceConfigError, match="^ipport:"):
        _redfish.RedfishDriver("127.0.0.1", "admin", "pw", ipport=70000)
    with pytest.raises(FenceConfigError, match="^region:"):
        _aws.AwsInstanceDriver("i-0123456789abcdef0", None)
    with pytest.raises(FenceConfigError, match="^endpoint_url:"):
        _aws.AwsInstanceDriver("i-0123456789abcdef0", "us-east-1", endpoint_url="127.0.0.1:4566")
    with pytest.raises(FenceConfigError, match="^plug:"):
        _vmware.VmwareVmDriver("vc", "u", "p", "")
    with pytest.raises(FenceConfigError, match="^timeout:"):
        _kdump.KdumpListener(["127.0.0.1"], timeout=0)


def test_redfish_and_vmware_targets_and_tls_choices() -> None:
    drv = _redfish.RedfishDriver("::1", "admin", "pw", ssl=False)
    assert (drv.target, drv.base_url, drv.verify) == ("[::1]:80", "http://[::1]:80", False)
    drv = _redfish.RedfishDriver("bmc", "admin", "pw", ca_path="/etc/ca.crt")
    assert (drv.target, drv.verify) == ("bmc:443", "/etc/ca.crt")
    assert (
        _aws.AwsInstanceDriver("i-0123456789abcdef0", "eu-west-1").target == "ec2.eu-west-1.amazonaws.com:443"
    )


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        (bytes.fromhex("402a301b01000000"), True),  # what fence_kdump_send sends on x86
        (bytes.fromhex("1b302a4000000001"), True),  # big-endian sender
        (bytes.fromhex("402a301b02000000"), False),  # unknown version
        (bytes.fromhex("efbeadde01000000"), False),  # another magic number
        (bytes.fromhex("402a301b0100000000"), False),  # wrong size
    ],
)
def test_kdump_message_format(data: bytes, ok: bool) -> None:
    assert _kdump.is_kdump_message(data) is ok


# -- the connection checks the drivers share (_fence.check_address, require_login...) -----------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _ipmi.IpmiDriver(**{**IPMI_OK, "ipaddr": ""}), "ipaddr: the BMC address is required"),
        (lambda: _ipmi.IpmiDriver(**IPMI_OK, ipport=65536), "ipport: 65536 is not a UDP port"),
        (lambda: _snmp.SnmpClient("", community="c"), "ipaddr: the device address is required"),
        (lambda: _snmp.SnmpClient("h", 0, community="c"), "ipport: 0 is not a UDP port"),
        (lambda: _redfish.RedfishDriver("", "admin", "pw"), "ipaddr: the BMC address is required"),
        (
            lambda: _redfish.RedfishDriver("bmc", "admin", "pw", ipport=0),
            "ipport: 0 is not a TCP port (1-65535)",
        ),
        (
            lambda: _vmware.VmwareVmDriver("", "u", "p", "vm"),
            "ipaddr: the vCenter or ESXi address is required",
        ),
        (
            lambda: _vmware.VmwareVmDriver("vc", "u", "p", "vm", ipport=70000),
            "ipport: 70000 is not a TCP port (1-65535)",
        ),
        (
            lambda: _vmware.VmwareVmDriver("vc", None, "p", "vm"),
            "username: required (option, environment or credentials_secret)",
        ),
        (
            lambda: _redfish.RedfishDriver("bmc", "admin", None),
            "password: required (option, environment or credentials_secret)",
        ),
    ],
)
def test_address_and_login_checks_name_the_field(make, message: str) -> None:
    with pytest.raises(FenceConfigError) as err:
        make()
    assert str(err.value) == message


def test_close_quietly_skips_none_and_swallows_errors() -> None:
    closed: list[str] = []
    _fence.close_quietly(None, closed.append)
    _fence.close_quietly("session", closed.append)
    _fence.close_quietly("broken", lambda _h: 1 / 0)
    assert closed == ["session"]


def test_library_require_names_the_missing_library() -> None:
    _fence.Library("present").require()
    with pytest.raises(FenceConfigError, match="^the Python library sushy is required$"):
        _fence.Library("sushy", "Traceback ...").require()


def test_library_block_keeps_an_import_error_and_lets_others_through() -> None:
    with _fence.Library("absent") as absent:
        import noderemedy_no_such_library  # type: ignore[import-not-found]  # noqa: F401
    assert not absent.present
    assert "ModuleNotFoundError: No module named 'noderemedy_no_such_library'" in (absent.import_error or "")
    with pytest.raises(FenceConfigError, match="^the Python library absent is required$"):
        absent.require()
    with _fence.Library("json") as present:
        import json  # noqa: F401
    assert present.present
    with pytest.raises(ValueError), _fence.Library("broken"):
        int("not a number")


class _ExitModule:
    """What ``_fence_module.exit_power`` uses of an ``AnsibleModule``: ``_diff`` and ``exit_json``."""

    def __init__(self, diff: bool) -> None:
        self._diff = diff
        self.out: dict = {}

    def exit_json(self, **out) -> None:
        self.out = out


@pytest.mark.parametrize("diff_mode", [False, True])
def test_exit_power_shows_the_power_or_the_modules_own_diff(diff_mode: bool) -> None:
    from ansible_collections.noderemedy.core.plugins.module_utils._fence_module import exit_power

    drv = _fence.FenceDriver("pdu:161", ["1", "2"])
    res = _fence.FenceResult("off", True, {"1": "on", "2": "off"}, {"1": "off", "2": "off"}, 0.5, 1, 1.0)
    power, own = _ExitModule(diff_mode), _ExitModule(diff_mode)
    exit_power(power, drv, res)
    exit_power(own, drv, res, ({"outlets": res.before}, {"outlets": res.after}), profile="apc_rpdu")
    assert power.out["power_state_before"] == "on" and power.out["power_state"] == "off"
    assert own.out["profile"] == "apc_rpdu" and own.out["fence"]["verified"] is True
    if diff_mode:
        assert power.out["diff"] == {"before": {"power": "on"}, "after": {"power": "off"}}
        assert own.out["diff"] == {"before": {"outlets": res.before}, "after": {"outlets": res.after}}
    else:
        assert "diff" not in power.out and "diff" not in own.out
