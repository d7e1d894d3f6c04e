"""Fence configuration parser (node remedy seed format): fencing levels ('|', Pacemaker's
topology) and their errors, and the fenced storage behind the FC ports (fenced_storage=) and its
errors."""

from __future__ import annotations

import pytest
from _fencecfg_helpers import CM, NODE, seed_config, seed_templates

from noderemedy_runner.config.fence import FenceConfigError, parse_fence_config


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
