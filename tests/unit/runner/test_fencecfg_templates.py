"""Fence configuration parser (node remedy seed format), the fence method templates: every error
of a template (through the node's ConfigMap too), the properties format, credentials refused and
never echoed, the cloud default configuration, and the AWS, kdump and VMware templates."""

from __future__ import annotations

import string
from typing import Any

import pytest
from _fencecfg_helpers import CM, NODE, seed_config, seed_templates
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.config.fence import (
    FenceConfigError,
    parse_fence_config,
    parse_properties,
    parse_template,
)

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
