"""Fence configuration parser (node remedy seed format), the node's ConfigMap: good input (the
seed's example, the references a run gets, the seed's agent names, Redfish plugs and schemes) and
every error of the ConfigMap and its methods. The templates are in test_fencecfg_templates.py,
fuzzing in test_fencecfg_fuzz.py, fencing levels and the fenced storage in
test_fencecfg_levels.py."""

from __future__ import annotations

from typing import Any

import pytest
from _fencecfg_helpers import CM, NODE, seed_config, seed_templates

from noderemedy_runner.config.fence import (
    FenceConfigError,
    config_map_name,
    parse_fence_config,
    parse_template,
    required_templates,
)
from noderemedy_runner.machines.actions import Action


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
