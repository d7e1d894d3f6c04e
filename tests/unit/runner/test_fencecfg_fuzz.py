"""Fence configuration parser (node remedy seed format), fuzzing: any input raises only
FenceConfigError, and generated valid configurations parse to what was written."""

from __future__ import annotations

import string
from typing import Any

from _fencecfg_helpers import CM, NODE, seed_config, seed_templates
from hypothesis import given, settings
from hypothesis import strategies as st

from noderemedy_runner.config.fence import (
    PDU_MODELS,
    FenceConfigError,
    parse_fence_config,
    required_templates,
)

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
