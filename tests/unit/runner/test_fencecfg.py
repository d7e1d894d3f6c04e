"""Fence configuration parser (node remedy seed format): good input, every error, and fuzzing."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.config.fence import (
    PDU_MODELS,
    FenceConfigError,
    config_map_name,
    parse_fence_config,
    parse_properties,
    parse_template,
    required_templates,
)
from noderemedy_runner.machines.actions import Action

NODE = "worker-1"
CM = "fence-config-worker-1"


def seed_config() -> dict[str, str]:
    """The seed's bare-metal example, for node worker-1."""
    return {
        "config.properties": (
            f"node_name={NODE}\nisolation=fc-off\npower_management=eaton-off eaton-on\nrecovery=fc-on\n"
        ),
        "fence-method-fc-on": "template=fence-method-template-fc-switch\nplug=2\naction=on",
        "fence-method-fc-off": "template=fence-method-template-fc-switch\nplug=2\naction=off",
        "fence-method-eaton-on": "template=fence-method-template-eaton-pdu\nplug=1\naction=on",
        "fence-method-eaton-off": "template=fence-method-template-eaton-pdu\nplug=1\naction=off",
    }


def seed_templates() -> dict[str, dict[str, str]]:
    return {
        "fence-method-template-fc-switch": {
            "template.properties": "type=fc\naddress=127.0.0.1:16011\nsecret=fc-switch-credentials\n"
        },
        "fence-method-template-eaton-pdu": {
            "template.properties": "# the rack PDU\ntype=pdu\nmodel=eaton\naddress=snmp://127.0.0.1:16013\nsecret=eaton-pdu\n"
        },
    }


def test_seed_example_parses_into_ordered_steps() -> None:
    cfg = parse_fence_config(CM, seed_config(), seed_templates(), node=NODE)
    assert cfg.node == NODE and cfg.configmap == CM == config_map_name(NODE)
    assert [m.name for m in cfg.isolation] == ["fc-off"]
    assert [m.name for m in cfg.power_management] == ["eaton-off", "eaton-on"]
    assert [(m.action, m.plug) for m in cfg.power_management] == [("off", "1"), ("on", "1")]
    assert [m.name for m in cfg.methods("Recovery")] == ["fc-on"]
    pdu = cfg.power_management[0].template
    assert (pdu.device_type, pdu.model, pdu.address, pdu.secret_name) == (
        "pdu",
        "eaton",
        "snmp://127.0.0.1:16013",
        "eaton-pdu",
    )
    assert pdu.module == "noderemedy.core.pdu_outlet"
    assert cfg.isolation[0].template.module == "noderemedy.core.fc_port"
    assert cfg.secret_names() == {"fc-switch-credentials", "eaton-pdu"}
    assert required_templates(CM, seed_config()) == {
        "fence-method-template-fc-switch",
        "fence-method-template-eaton-pdu",
    }


def test_method_extravars_are_references_only() -> None:
    cfg = parse_fence_config(CM, seed_config(), seed_templates())
    ev = cfg.isolation[0].to_extravars()
    assert ev == {
        "name": "fc-off",
        "module": "noderemedy.core.fc_port",
        "device_type": "fc",
        "model": "ifmib",
        "profile": "ifmib",
        "address": "127.0.0.1:16011",
        "ipaddr": "127.0.0.1",
        "ipport": 16011,
        "plug": "2",
        "action": "off",
        "state": "disabled",
        "options": {},
        "template": "fence-method-template-fc-switch",
        "secret_name": "fc-switch-credentials",
    }
    pdu = cfg.power_management[0].to_extravars()
    assert (pdu["profile"], pdu["ipaddr"], pdu["ipport"], pdu["state"]) == ("auto", "127.0.0.1", 16013, "off")
    Action(kind="run_step", extravars={"methods": [ev]})  # passes the references-only check


def test_ipmi_template_and_seed_agent_names() -> None:
    data = {
        "config.properties": f"node_name={NODE}\nisolation=\npower_management=bmc-off,bmc-on\nrecovery=",
        "fence-method-bmc-off": "template=fence-method-template-bmc\naction=off",
        "fence-method-bmc-on": "template=fence-method-template-bmc\naction=on",
    }
    templates = {
        "fence-method-template-bmc": {
            "template.properties": "agent_name=fence_ipmilan\nipaddr=127.0.0.1\nipport=9001\nsecret=bmc-1"
        }
    }
    cfg = parse_fence_config(CM, data, templates)
    assert cfg.isolation == () and cfg.recovery == ()
    bmc = cfg.power_management[0]
    assert (bmc.plug, bmc.template.device_type, bmc.template.address, bmc.template.module) == (
        None,
        "ipmi",
        "127.0.0.1:9001",
        "noderemedy.core.ipmi_power",
    )
    assert (bmc.template.ipaddr, bmc.template.ipport, bmc.template.profile, bmc.state) == (
        "127.0.0.1",
        9001,
        None,
        "off",
    )
    apc = parse_template(
        "fence-method-template-apc",
        {"template.properties": "agent_name=fence_apc_snmp\naddress=[::1]:161\nsecret=apc"},
    )
    assert (apc.device_type, apc.model, apc.address, apc.ipaddr, apc.ipport) == (
        "pdu",
        "auto",
        "[::1]:161",
        "::1",
        161,
    )
    fc = parse_template(
        "fence-method-template-sw",
        {"template.properties": "agent_name=fence_ifmib\naddress=sw1.example\nsecret=sw"},
    )
    assert (fc.device_type, fc.profile, fc.ipport) == ("fc", "ifmib", None)
    mds = parse_template(
        "fence-method-template-mds",
        {
            "template.properties": "agent_name=fence_cisco_mds\naddress=10.0.0.1\nsecret=sw\nsnmp_version=3\nsnmp_sec_level=authPriv"
        },
    )
    assert (mds.profile, mds.options) == (
        "cisco_mds",
        (("snmp_sec_level", "authPriv"), ("snmp_version", "3")),
    )
    generic = parse_template(
        "fence-method-template-g",
        {
            "template.properties": "type=pdu\nmodel=generic\nstatus_oid=.1.3.6.1.4.1.9.1\nstatus_on=1\naddress=pdu\nsecret=g"
        },
    )
    assert (generic.profile, dict(generic.options)) == (
        "generic",
        {"status_oid": ".1.3.6.1.4.1.9.1", "status_on": "1"},
    )


CONFIG_ERRORS: list[tuple[str, Any, str | None, str]] = [
    # (configmap name, data, key named in the error, problem substring)
    ("fence-config-", seed_config(), None, "named fence-config-<node>"),
    ("nodefence-worker-1", seed_config(), None, "named fence-config-<node>"),
    (CM, ["not", "a", "dict"], None, "data must be a mapping"),
    (CM, {}, "config.properties", "missing"),
    (CM, {**seed_config(), "extra": "x"}, "extra", "unexpected key"),
    (CM, {**seed_config(), "config.properties": 7}, "config.properties", "must be a string"),
    (
        CM,
        {**seed_config(), "config.properties": "node_name worker-1"},
        "config.properties",
        "line 1: expected key=value",
    ),
    (
        CM,
        {**seed_config(), "config.properties": "node_name=a\nnode_name=b"},
        "config.properties",
        "already set on line 1",
    ),
    (CM, {**seed_config(), "config.properties": "=x"}, "config.properties", "malformed property name"),
    (
        CM,
        {**seed_config(), "config.properties": "isolation=\npower_management=\nrecovery="},
        "config.properties",
        "missing node_name=",
    ),
    (
        CM,
        {
            **seed_config(),
            "config.properties": "node_name=worker-2\nisolation=\npower_management=\nrecovery=",
        },
        "config.properties",
        "does not match",
    ),
    (
        CM,
        {**seed_config(), "config.properties": f"node_name={NODE}\nisolation=\npower_management="},
        "config.properties",
        "missing recovery=",
    ),
    (
        CM,
        {
            **seed_config(),
            "config.properties": f"node_name={NODE}\nisolation=FC_OFF\npower_management=\nrecovery=",
        },
        "config.properties",
        "method name 'FC_OFF'",
    ),
    (
        CM,
        {
            **seed_config(),
            "config.properties": f"node_name={NODE}\nisolation=\npower_management=\nrecovery=\nfencing=x",
        },
        "config.properties",
        "unknown properties ['fencing']",
    ),
    (
        CM,
        {
            **seed_config(),
            "config.properties": f"node_name={NODE}\npassword=hunter2\nisolation=\npower_management=\nrecovery=",
        },
        "config.properties",
        "credential",
    ),
    (
        CM,
        {k: v for k, v in seed_config().items() if k != "fence-method-fc-on"},
        "fence-method-fc-on",
        "listed in recovery=",
    ),
    (
        CM,
        {**seed_config(), "fence-method-fc-on": "plug=2\naction=on"},
        "fence-method-fc-on",
        "missing template=",
    ),
    (
        CM,
        {**seed_config(), "fence-method-fc-on": "template=fc-switch\nplug=2\naction=on"},
        "fence-method-fc-on",
        "is not a ConfigMap name",
    ),
    (
        CM,
        {**seed_config(), "fence-method-fc-on": "template=fence-method-template-fc-switch\nplug=2"},
        "fence-method-fc-on",
        "missing action=",
    ),
    (
        CM,
        {
            **seed_config(),
            "fence-method-fc-on": "template=fence-method-template-fc-switch\naction=on\nport=2",
        },
        "fence-method-fc-on",
        "unknown properties ['port']",
    ),
    (
        CM,
        {
            **seed_config(),
            "fence-method-fc-on": "template=fence-method-template-fc-switch\naction=on\nplug=2\nlogin=admin",
        },
        "fence-method-fc-on",
        "credential",
    ),
    (
        CM,
        {
            **seed_config(),
            "fence-method-fc-on": "template=fence-method-template-fc-switch\naction=reboot\nplug=2",
        },
        "fence-method-fc-on",
        "not supported by fc devices",
    ),
    (
        CM,
        {**seed_config(), "fence-method-fc-on": "template=fence-method-template-fc-switch\naction=on"},
        "fence-method-fc-on",
        "missing plug= (port of",
    ),
    (
        CM,
        {**seed_config(), "fence-method-eaton-on": "template=fence-method-template-eaton-pdu\naction=on"},
        "fence-method-eaton-on",
        "missing plug= (outlet of",
    ),
    (
        CM,
        {
            **seed_config(),
            "fence-method-fc-on": "template=fence-method-template-fc-switch\naction=on\nplug=2 3",
        },
        "fence-method-fc-on",
        "not an outlet/port",
    ),
    (
        CM,
        {**seed_config(), "fence-method-fc-on": "template=fence-method-template-nope\naction=on\nplug=2"},
        "fence-method-fc-on",
        "'fence-method-template-nope' not found",
    ),
]


@pytest.mark.parametrize(
    ("address", "ssl", "port"),
    [
        ("bmc-0.example.com", "true", None),
        ("https://10.0.0.5:8443", "true", 8443),
        ("redfish://10.0.0.5", "true", None),
        ("redfish+https://10.0.0.5:443", "true", 443),
        ("redfish+http://10.0.0.5:8000", "false", 8000),
        ("http://[::1]:8000", "false", 8000),
    ],
)
def test_redfish_template_schemes_decide_tls(address: str, ssl: str, port: int | None) -> None:
    t = parse_template(
        "fence-method-template-rf",
        {"template.properties": f"type=redfish\naddress={address}\nsecret=rf\nssl_insecure=true"},
    )
    assert (t.device_type, t.module, t.ipport) == ("redfish", "noderemedy.core.redfish_power", port)
    assert dict(t.options) == {"ssl": ssl, "ssl_insecure": "true"}
    seed = parse_template(
        "fence-method-template-rf",
        {"template.properties": f"agent_name=fence_redfish\naddress={address}\nsecret=rf"},
    )
    assert seed.device_type == "redfish"


def test_redfish_template_refuses_other_schemes_and_bad_uris() -> None:
    with pytest.raises(FenceConfigError, match="scheme 'ipmi' not one of"):
        parse_template(
            "fence-method-template-rf", {"template.properties": "type=redfish\naddress=ipmi://h\nsecret=rf"}
        )
    with pytest.raises(FenceConfigError, match="redfish_uri='redfish/v1' is not an absolute path"):
        parse_template(
            "fence-method-template-rf",
            {"template.properties": "type=redfish\naddress=h\nsecret=rf\nredfish_uri=redfish/v1"},
        )


def test_redfish_plug_is_optional_a_system_uri_or_an_id() -> None:
    data = {
        "config.properties": f"node_name={NODE}\nisolation=\npower_management=a,b,c\nrecovery=",
        "fence-method-a": "template=fence-method-template-rf\naction=off",
        "fence-method-b": "template=fence-method-template-rf\naction=reboot\nplug=/redfish/v1/Systems/1",
        "fence-method-c": "template=fence-method-template-rf\naction=on\nplug=System.Embedded.1",
    }
    templates = {"fence-method-template-rf": {"template.properties": "type=redfish\naddress=h\nsecret=rf"}}
    cfg = parse_fence_config(CM, data, templates)
    assert [(m.plug, m.state) for m in cfg.power_management] == [
        (None, "off"),
        ("/redfish/v1/Systems/1", "reboot"),
        ("System.Embedded.1", "on"),
    ]
    bad = {**data, "fence-method-a": "template=fence-method-template-rf\naction=off\nplug=a b"}
    with pytest.raises(FenceConfigError, match="not a system URI"):
        parse_fence_config(CM, bad, templates)


@pytest.mark.parametrize(("configmap", "data", "key", "problem"), CONFIG_ERRORS)
def test_config_errors_name_configmap_key_and_problem(
    configmap: str, data: Any, key: str | None, problem: str
) -> None:
    with pytest.raises(FenceConfigError) as info:
        parse_fence_config(configmap, data, seed_templates())
    err = info.value
    assert (err.configmap, err.key) == (configmap, key)
    assert problem in err.problem
    assert str(err).startswith(f"ConfigMap {configmap!r}" + (f" key {key!r}" if key else ""))


def test_wrong_node_for_configmap() -> None:
    with pytest.raises(FenceConfigError, match="is not the fence configuration of node 'worker-2'"):
        parse_fence_config(CM, seed_config(), seed_templates(), node="worker-2")


def test_plug_on_ipmi_is_an_error() -> None:
    data = {
        "config.properties": f"node_name={NODE}\nisolation=\npower_management=bmc-off\nrecovery=",
        "fence-method-bmc-off": "template=fence-method-template-bmc\naction=off\nplug=1",
    }
    templates = {
        "fence-method-template-bmc": {
            "template.properties": "type=ipmi\naddress=ipmi://127.0.0.1:9001\nsecret=bmc"
        }
    }
    with pytest.raises(FenceConfigError, match="key 'fence-method-bmc-off': plug= does not apply to ipmi"):
        parse_fence_config(CM, data, templates)


TEMPLATE_ERRORS: list[tuple[str, Any, str | None, str]] = [
    ("fc-switch", {"template.properties": "type=fc"}, None, "start with 'fence-method-template-'"),
    ("fence-method-template-x", "type=fc", None, "data must be a mapping"),
    ("fence-method-template-x", {}, "template.properties", "missing"),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nsecret=s", "other": ""},
        "other",
        "unexpected key",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "address=a\nsecret=s"},
        "template.properties",
        "missing type=",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=wsman\naddress=a\nsecret=s"},
        "template.properties",
        "type='wsman' not one of",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\nagent_name=fence_brocade\naddress=a\nsecret=s"},
        "template.properties",
        "not both",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "agent_name=fence_xvm\naddress=a\nsecret=s"},
        "template.properties",
        "agent_name='fence_xvm'",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=pdu\nmodel=cyberpower\naddress=a\nsecret=s"},
        "template.properties",
        "model='cyberpower'",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\nmodel=eaton\naddress=a\nsecret=s"},
        "template.properties",
        "model='eaton' not one of ['ifmib', 'cisco-mds'] for type=fc",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=ipmi\nmodel=eaton\naddress=a\nsecret=s"},
        "template.properties",
        "model= does not apply to type=ipmi",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=pdu\nmodel=generic\naddress=a\nsecret=s"},
        "template.properties",
        "model=generic needs status_oid=",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=pdu\nstatus_oid=.1.3.6\naddress=a\nsecret=s"},
        "template.properties",
        "status_oid= applies to model=generic only",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=pdu\nmodel=generic\nstatus_oid=1.3.x\naddress=a\nsecret=s"},
        "template.properties",
        "status_oid='1.3.x' is not a dotted OID",
    ),
    (
        "fence-method-template-x",
        {
            "template.properties": "type=pdu\nmodel=generic\nstatus_oid=.1.3.6\nstatus_on=on\naddress=a\nsecret=s"
        },
        "template.properties",
        "status_on='on' is not an integer",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=ipmi\ncipher=5\naddress=a\nsecret=s"},
        "template.properties",
        "cipher='5' is not one of ['3', '17']",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=ipmi\nsnmp_version=2c\naddress=a\nsecret=s"},
        "template.properties",
        "unknown properties ['snmp_version'] for type=ipmi",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\nsnmp_version=4\naddress=a\nsecret=s"},
        "template.properties",
        "snmp_version='4' is not one of",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\nsnmp_priv_passwd=x\naddress=a\nsecret=s"},
        "template.properties",
        "credentials belong in the Secret",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\nsecret=s"},
        "template.properties",
        "missing address=",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=\nsecret=s"},
        "template.properties",
        "address= is empty",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a b\nsecret=s"},
        "template.properties",
        "is not host[:port]",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a:70000\nsecret=s"},
        "template.properties",
        "port 70000 not in 1..65535",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nipaddr=b\nsecret=s"},
        "template.properties",
        "not both",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a"},
        "template.properties",
        "missing secret=",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nsecret=Not_A_Name"},
        "template.properties",
        "not a valid Secret name",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nsecret=s\npassword=hunter2"},
        "template.properties",
        "credentials belong in the Secret",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nsecret=s\nusername=admin"},
        "template.properties",
        "credential",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nsecret=s\ncommunity=private"},
        "template.properties",
        "credential",
    ),
    (
        "fence-method-template-x",
        {"template.properties": "type=fc\naddress=a\nsecret=s\nvlan=3"},
        "template.properties",
        "unknown properties ['vlan']",
    ),
]


@pytest.mark.parametrize(("configmap", "data", "key", "problem"), TEMPLATE_ERRORS)
def test_template_errors_name_configmap_key_and_problem(
    configmap: str, data: Any, key: str | None, problem: str
) -> None:
    with pytest.raises(FenceConfigError) as info:
        parse_template(configmap, data)
    assert (info.value.configmap, info.value.key) == (configmap, key)
    assert problem in info.value.problem


def test_template_error_surfaces_through_config_with_the_template_name() -> None:
    templates = seed_templates()
    templates["fence-method-template-eaton-pdu"] = {
        "template.properties": "type=pdu\naddress=a\nsecret=s\npassword=hunter2"
    }
    with pytest.raises(FenceConfigError) as info:
        parse_fence_config(CM, seed_config(), templates)
    assert info.value.configmap == "fence-method-template-eaton-pdu"
    assert "hunter2" not in str(info.value)


def test_properties_comments_blank_lines_and_spaces() -> None:
    text = "# comment\n! also a comment\n\n  a = 1 \r\nb=x=y\nc=\n"
    assert parse_properties(text, "cm", "k") == {"a": "1", "b": "x=y", "c": ""}


@settings(max_examples=200, deadline=None)
@given(
    target=st.sampled_from(["config.properties", "fence-method-fc-off", "template"]),
    key=st.sampled_from(["password", "passwd", "community", "snmp_priv_passwd", "Password", "username"]),
    sep=st.sampled_from(["=", " = ", " ", ":", "\t"]),
    secret=st.text(alphabet=string.ascii_letters + string.digits + "!@#%^&*", min_size=4, max_size=20),
    line=st.integers(0, 5),
)
def test_credentials_are_refused_and_never_echoed(
    target: str, key: str, sep: str, secret: str, line: int
) -> None:
    """Invariant 5: a credential written into a fence ConfigMap is refused, and the error (which
    ends up in logs and events) does not contain its value, however it was written."""
    marker = f"S3CR3T{secret}"
    data, templates = seed_config(), seed_templates()
    tname = "fence-method-template-eaton-pdu"
    holder = templates[tname] if target == "template" else data
    k = "template.properties" if target == "template" else target
    lines = holder[k].splitlines()
    lines.insert(min(line, len(lines)), f"{key}{sep}{marker}")
    holder[k] = "\n".join(lines)
    with pytest.raises(FenceConfigError) as info:
        parse_fence_config(CM, data, templates)
    assert info.value.configmap in (CM, tname)
    assert marker not in str(info.value)


# --- fuzzing -------------------------------------------------------------------------------

printable = st.text(alphabet=string.printable, max_size=60)
prop_lines = st.lists(
    st.one_of(
        printable,
        st.builds(
            lambda k, v: f"{k}={v}",
            st.sampled_from(
                ["node_name", "isolation", "power_management", "recovery", "template", "plug", "action", "x"]
            ),
            printable,
        ),
    ),
    max_size=8,
).map("\n".join)
any_value = st.one_of(prop_lines, st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=2))
data_keys = st.one_of(
    st.sampled_from(["config.properties", "fence-method-fc-off", "fence-method-a", "template.properties"]),
    st.text(max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(
    configmap=st.one_of(st.just(CM), st.text(max_size=30)),
    data=st.one_of(st.dictionaries(data_keys, any_value, max_size=5), any_value),
    templates=st.dictionaries(
        st.one_of(st.just("fence-method-template-fc-switch"), st.text(max_size=30)),
        st.one_of(st.dictionaries(data_keys, any_value, max_size=3), any_value),
        max_size=3,
    ),
)
def test_fuzz_parser_raises_only_fence_config_errors(configmap: str, data: Any, templates: Any) -> None:
    try:
        cfg = parse_fence_config(configmap, data, templates)
    except FenceConfigError as err:
        assert err.problem
        assert err.configmap == configmap or err.configmap in templates
        assert str(err).startswith(f"ConfigMap {err.configmap!r}")
    else:
        assert cfg.configmap == configmap
        assert cfg.node == configmap[len("fence-config-") :]


@settings(max_examples=300, deadline=None)
@given(
    node=st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z"),
    mutations=st.lists(
        st.tuples(st.sampled_from(sorted(seed_config())), st.integers(0, 200), printable), max_size=3
    ),
)
def test_fuzz_mutated_seed_config_raises_only_fence_config_errors(node: str, mutations: list) -> None:
    data = seed_config()
    data["config.properties"] = data["config.properties"].replace(NODE, node)
    for key, pos, text in mutations:
        data[key] = data[key][:pos] + text + data[key][pos:]
    try:
        cfg = parse_fence_config(f"fence-config-{node}", data, seed_templates())
    except FenceConfigError as err:
        assert err.configmap in (f"fence-config-{node}", *seed_templates())
    else:
        assert cfg.node == node


method_names = st.from_regex(r"\A[a-z][a-z0-9-]{0,10}[a-z0-9]\Z")
device = st.sampled_from(["ipmi", "pdu", "fc"])


@st.composite
def valid_configs(draw: st.DrawFn) -> tuple[str, dict[str, str], dict[str, dict[str, str]], dict[str, Any]]:
    node = draw(st.from_regex(r"\A[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?\Z"))
    names = draw(st.lists(method_names, min_size=1, max_size=6, unique=True))
    templates: dict[str, dict[str, str]] = {}
    data: dict[str, str] = {}
    expected: dict[str, Any] = {}
    for i, name in enumerate(names):
        dtype = draw(device)
        tname = f"fence-method-template-t{i}"
        model = {
            "pdu": draw(st.sampled_from(PDU_MODELS)),
            "fc": draw(st.sampled_from(["ifmib", "cisco-mds"])),
            "ipmi": None,
        }[dtype]
        port = draw(st.integers(1, 65535))
        lines = [f"type={dtype}", f"address=127.0.0.{i}:{port}", f"secret=cred-{i}"]
        if model:
            lines.append(f"model={model}")
        if model == "generic":
            lines.append("status_oid=.1.3.6.1.4.1.318.1.1.4.4.2.1.3")
        templates[tname] = {"template.properties": "\n".join(draw(st.permutations(lines)))}
        action = draw(st.sampled_from(["on", "off"] if dtype == "fc" else ["on", "off", "reboot"]))
        plug = None if dtype == "ipmi" else str(draw(st.integers(1, 48)))
        mlines = [f"template={tname}", f"action={action}"] + ([f"plug={plug}"] if plug else [])
        data[f"fence-method-{name}"] = "\n".join(draw(st.permutations(mlines)))
        expected[name] = (dtype, model, f"127.0.0.{i}:{port}", f"cred-{i}", plug, action)
    steps = {
        k: draw(st.lists(st.sampled_from(names), max_size=4))
        for k in ("isolation", "power_management", "recovery")
    }
    used = {n for ns in steps.values() for n in ns}
    data = {k: v for k, v in data.items() if k[len("fence-method-") :] in used}
    sep = draw(st.sampled_from([" ", ",", ", ", "  "]))
    props = [f"node_name={node}"] + [f"{k}={sep.join(v)}" for k, v in steps.items()]
    data["config.properties"] = "\n".join(draw(st.permutations(props)))
    expected["__steps__"] = steps
    return node, data, templates, expected


@settings(max_examples=200, deadline=None)
@given(valid_configs())
def test_generated_valid_configs_parse_to_what_was_written(case: tuple) -> None:
    node, data, templates, expected = case
    cfg = parse_fence_config(f"fence-config-{node}", data, templates, node=node)
    steps = expected["__steps__"]
    assert [m.name for m in cfg.isolation] == steps["isolation"]
    assert [m.name for m in cfg.power_management] == steps["power_management"]
    assert [m.name for m in cfg.recovery] == steps["recovery"]
    for step in ("Isolation", "PowerManagement", "Recovery"):
        for m in cfg.methods(step):  # type: ignore[arg-type]
            t = m.template
            assert (t.device_type, t.model, t.address, t.secret_name, m.plug, m.action) == expected[m.name]
    assert required_templates(f"fence-config-{node}", data) == {
        m.template.configmap
        for s in ("Isolation", "PowerManagement", "Recovery")
        for m in cfg.methods(s)  # type: ignore[arg-type]
    }


def test_cloud_default_configuration_follows_the_seed() -> None:
    from noderemedy_runner.config.fence import CloudDefaults, cloud_default_config

    cfg = cloud_default_config(NODE, "aws:///us-east-1a/i-0123456789abcdef0", CloudDefaults("aws-creds"))
    steps = [
        (m.name, m.template.device_type, m.action, m.state)
        for s in ("Isolation", "PowerManagement", "Recovery")
        for m in cfg.methods(s)
    ]  # type: ignore[arg-type]
    assert steps == [
        ("mark-unschedulable", "node", "off", "cordon"),
        ("restart-instance", "aws", "reboot", "reboot"),
        ("mark-unschedulable", "node", "on", "uncordon"),
    ]
    power = cfg.power_management[0].to_extravars()
    assert power["module"] == "noderemedy.core.aws_instance_power" and power["secret_name"] == "aws-creds"
    assert (
        power["options"] == {"provider_id": "aws:///us-east-1a/i-0123456789abcdef0"}
        and power["address"] == ""
    )
    assert cfg.isolation[0].to_extravars()["module"] == "noderemedy.core.node_drain"
    assert cfg.secret_names() == frozenset({"aws-creds"})
    lab = cloud_default_config(
        NODE, "aws:///us-east-1a/i-0123456789abcdef0", CloudDefaults("c", "http://127.0.0.1:24016")
    )
    assert (lab.power_management[0].template.ipaddr, lab.power_management[0].template.ipport) == (
        "127.0.0.1",
        24016,
    )


@pytest.mark.parametrize(
    "provider_id", ["", "gce://project/zone/vm-1", "openstack:///uuid", "azure:///subscriptions/x"]
)
def test_cloud_default_refuses_nodes_of_providers_without_a_driver(provider_id: str) -> None:
    from noderemedy_runner.config.fence import CloudDefaults, cloud_default_config

    with pytest.raises(FenceConfigError, match="covers providers \\['aws'\\] only"):
        cloud_default_config(NODE, provider_id, CloudDefaults("c"))


def test_aws_template_endpoint_region_and_instance_plug() -> None:
    t = parse_template(
        "fence-method-template-ec2", {"template.properties": "type=aws\nsecret=aws\nregion=eu-west-1"}
    )
    assert (t.device_type, t.address, dict(t.options)) == ("aws", "", {"region": "eu-west-1"})
    t = parse_template(
        "fence-method-template-ec2",
        {"template.properties": "agent_name=fence_aws\naddress=http://127.0.0.1:4566\nsecret=aws"},
    )
    assert (t.ipaddr, t.ipport) == ("127.0.0.1", 4566)
    with pytest.raises(FenceConfigError, match="http\\(s\\)://host"):
        parse_template(
            "fence-method-template-ec2", {"template.properties": "type=aws\naddress=127.0.0.1\nsecret=aws"}
        )
    with pytest.raises(FenceConfigError, match="region"):
        parse_template(
            "fence-method-template-ec2", {"template.properties": "type=aws\nsecret=aws\nregion=moon"}
        )
    data = {
        "config.properties": f"node_name={NODE}\nisolation=\npower_management=stop\nrecovery=",
        "fence-method-stop": "template=fence-method-template-ec2\naction=off\nplug=node-1",
    }
    tmpl = {"fence-method-template-ec2": {"template.properties": "type=aws\nsecret=aws"}}
    with pytest.raises(FenceConfigError, match="not an EC2 instance id"):
        parse_fence_config(CM, data, tmpl)


def test_kdump_template_needs_no_secret_and_waits_before_power() -> None:
    data = {
        "config.properties": f"node_name={NODE}\nisolation=kdump\npower_management=bmc-off\nrecovery=",
        "fence-method-kdump": "template=fence-method-template-kdump\naction=off",
        "fence-method-bmc-off": "template=fence-method-template-bmc\naction=off",
    }
    templates = {
        "fence-method-template-kdump": {"template.properties": "agent_name=fence_kdump\ntimeout=30"},
        "fence-method-template-bmc": {"template.properties": "type=ipmi\naddress=127.0.0.1:623\nsecret=bmc"},
    }
    cfg = parse_fence_config(CM, data, templates)
    kdump = cfg.isolation[0].to_extravars()
    assert (kdump["module"], kdump["state"], kdump["secret_name"], kdump["options"]) == (
        "noderemedy.core.kdump_wait",
        "wait",
        "",
        {"timeout": "30"},
    )
    assert cfg.secret_names() == frozenset({"bmc"})
    bad = {**data, "fence-method-kdump": "template=fence-method-template-kdump\naction=on"}
    with pytest.raises(FenceConfigError, match="action='on' not supported by kdump"):
        parse_fence_config(CM, bad, templates)


def test_vmware_template_and_vm_plug() -> None:
    t = parse_template(
        "fence-method-template-vc",
        {
            "template.properties": "agent_name=fence_vmware_soap\naddress=vc.example.com\nsecret=vc\nssl_insecure=true"
        },
    )
    assert (t.device_type, t.module, t.ipaddr, dict(t.options)) == (
        "vmware",
        "noderemedy.core.vmware_vm_power",
        "vc.example.com",
        {"ssl_insecure": "true"},
    )
    data = {
        "config.properties": f"node_name={NODE}\nisolation=\npower_management=vm-off,vm-on\nrecovery=",
        "fence-method-vm-off": "template=fence-method-template-vc\naction=off",
        "fence-method-vm-on": "template=fence-method-template-vc\naction=on\nplug=4223a0e5-0a1b-4f3e-9e1c-a1b2c3d4e5f6",
    }
    cfg = parse_fence_config(
        CM, data, {"fence-method-template-vc": {"template.properties": "type=vmware\naddress=vc\nsecret=vc"}}
    )
    assert [(m.plug, m.state) for m in cfg.power_management] == [
        (None, "off"),
        ("4223a0e5-0a1b-4f3e-9e1c-a1b2c3d4e5f6", "on"),
    ]


# --- fencing levels ('|', Pacemaker's topology) ----------------------------------------------
def levels_config(power: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    data = seed_config()
    data["config.properties"] = data["config.properties"].replace(
        "power_management=eaton-off eaton-on", f"power_management={power}"
    )
    data["fence-method-ipmi-off"] = "template=fence-method-template-bmc\naction=off"
    data["fence-method-ipmi-on"] = "template=fence-method-template-bmc\naction=on"
    templates = seed_templates()
    templates["fence-method-template-bmc"] = {
        "template.properties": "type=ipmi\naddress=127.0.0.1:623\nsecret=bmc\n"
    }
    return data, templates


def test_levels_parse_in_order_and_an_old_file_is_one_level() -> None:
    data, templates = levels_config("ipmi-off ipmi-on | eaton-off eaton-on")
    cfg = parse_fence_config(CM, data, templates, NODE)
    names = [[m.name for m in lv] for lv in cfg.levels("PowerManagement")]
    assert names == [["ipmi-off", "ipmi-on"], ["eaton-off", "eaton-on"]]
    assert [m.name for m in cfg.power_management] == ["ipmi-off", "ipmi-on"]  # level 1
    assert [m.name for m in cfg.methods("PowerManagement", 2)] == ["eaton-off", "eaton-on"]
    assert cfg.methods("PowerManagement", 3) == ()
    assert cfg.secret_names() == {"bmc", "eaton-pdu", "fc-switch-credentials"}
    old = parse_fence_config(CM, seed_config(), seed_templates(), NODE)
    assert len(old.levels("PowerManagement")) == 1 and old.fallback_levels == {}
    compact, _ = levels_config("ipmi-off,ipmi-on|eaton-off,eaton-on")
    assert parse_fence_config(CM, compact, templates, NODE) == cfg


@pytest.mark.parametrize(
    ("power", "isolation", "recovery", "key", "problem"),
    [
        ("ipmi-off ipmi-on |", "fc-off", "fc-on", "config.properties", "power_management=: level 2 has no methods"),
        ("| ipmi-off", "fc-off", "fc-on", "config.properties", "power_management=: level 1 has no methods"),
        ("ipmi-off | ipmi-off", "fc-off", "fc-on", "config.properties", "power_management=: level 2 repeats an earlier level"),
        ("ipmi-off", "fc-off", "fc-on | fc-on", "config.properties", "recovery=: fencing levels ('|') apply to isolation= and power_management= only"),
        ("ipmi-off | pdu-b-off", "fc-off", "fc-on", "fence-method-pdu-b-off", "missing (method 'pdu-b-off' is listed in power_management=)"),
        ("ipmi-off", "fc-off | Bad", "fc-on", "config.properties", "isolation=: method name 'Bad' is not lowercase"),
    ],
)  # fmt: skip
def test_level_errors_name_configmap_key_and_problem(
    power: str, isolation: str, recovery: str, key: str, problem: str
) -> None:
    data, templates = levels_config(power)
    data["config.properties"] = (
        data["config.properties"]
        .replace("isolation=fc-off", f"isolation={isolation}")
        .replace("recovery=fc-on", f"recovery={recovery}")
    )
    with pytest.raises(FenceConfigError) as err:
        parse_fence_config(CM, data, templates, NODE)
    assert (err.value.configmap, err.value.key) == (CM, key)
    assert problem in err.value.problem


def test_fenced_storage_names_the_storage_behind_the_fc_ports() -> None:
    data = seed_config()
    data["config.properties"] += (
        "fenced_storage=csi:san.example.com, storageclass:gold hostpath:/mnt/san fc\n"
    )
    cfg = parse_fence_config(CM, data, seed_templates(), node=NODE)
    assert cfg.fenced_storage == (
        {"csi_driver": "san.example.com"},
        {"storage_class": "gold"},
        {"host_path": "/mnt/san"},
        {"fc": "true"},
    )
    assert (
        parse_fence_config(CM, seed_config(), seed_templates()).fenced_storage == ()
    )  # none: nothing released


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("nfs:server", "entry 'nfs:server' is not csi:<driver>"),
        ("csi:", "entry 'csi:' is not"),
        ("hostpath:relative/dir", "a hostpath is an absolute directory"),
        ("hostpath:/", "a hostpath is an absolute directory"),
        ("fc:x", "entry 'fc:x' is not"),
    ],
)
def test_fenced_storage_errors_name_the_entry(value: str, names: str) -> None:
    data = seed_config()
    data["config.properties"] += f"fenced_storage={value}\n"
    with pytest.raises(FenceConfigError) as info:
        parse_fence_config(CM, data, seed_templates())
    assert CM in str(info.value) and "config.properties" in str(info.value) and names in str(info.value)
