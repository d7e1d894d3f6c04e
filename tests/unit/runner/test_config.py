"""The remedy Configuration parser: the seed's own example parses, defaults are as documented,
and every malformed field is refused with an error naming it."""

from __future__ import annotations

import re
import textwrap

import pytest

from noderemedy_runner.config.remedy import (
    ConfigError,
    IntOrPercent,
    Remedy,
    default_configuration,
    parse_configmap,
    parse_configurations,
    parse_selector_string,
)

#: The node remedy seed's example (February 2018), verbatim apart from indentation.
SEED = """
apiVersion: node-remedy/v1alpha
kind: Configuration
nodeSelector: type=compute
thresholdConfigs:
- nodeConditionType: Ready
  nodeConditionStatus: false
  nodeConditionPeriod: 5s
  remedy1:
   - name: repair
   - period: 3m
  remedy2:
   - name: terminate
   - clean-resourece: true
  recovery:
   - name: recovery
- nodeConditionType: DiskPressure
  nodeConditionStatus: true
  nodeConditionPeriod: 10m
  remedy1:
   - name: storage-fence
   - clean-resourece: true
  recovery:
   - name: recovery
remedyConfigs:
- name: repair
  podTemplate:
   spec:
    containers:
    - name: repair
      image: IMAGE:VERSION
"""


def one(text: str):
    return parse_configurations(textwrap.dedent(text), "test.yaml").configurations[0]


def test_seed_example_parses() -> None:
    cs = parse_configurations(SEED, "seed.yaml")
    cfg = cs.configurations[0]
    assert cfg.name == "configuration-0"
    assert cfg.selects({"type": "compute"}) and not cfg.selects({"type": "storage"})
    ready, disk = cfg.thresholds
    assert (ready.condition_type, ready.statuses, ready.period) == ("Ready", frozenset({"False"}), 5.0)
    repair, terminate = ready.chain()
    assert (repair.name, repair.period, repair.pod) == ("repair", 180.0, True)
    assert repair.template() == {"spec": {"containers": [{"name": "repair", "image": "IMAGE:VERSION"}]}}
    # terminate has no podTemplate: the fence flow, which releases on its verified fence
    assert terminate == Remedy("terminate", None, True)
    assert ready.recovery == (Remedy("recovery"),)
    assert (disk.condition_type, disk.statuses, disk.period) == ("DiskPressure", frozenset({"True"}), 600.0)
    assert cs.warnings == ()
    assert cfg.remedy_config("repair") is not None and cfg.remedy_config("terminate") is None


def test_defaults_are_documented_ones() -> None:
    cfg = default_configuration().configurations[0]
    assert cfg.node_selector is None
    (th,) = cfg.thresholds
    assert (th.condition_type, th.statuses, th.period) == ("Ready", frozenset({"False", "Unknown"}), 300.0)
    assert cfg.storm_guard.min_healthy == IntOrPercent(51, True)
    assert cfg.storm_guard.cooldown == 300.0 and cfg.storm_guard.enabled


def test_storm_guard_forms() -> None:
    base = "apiVersion: remediation.noderemedy.io/v1alpha1\nkind: Configuration\n"
    assert one(
        base + "stormGuard: {maxUnhealthy: 40%, cooldown: 1m}"
    ).storm_guard.max_unhealthy == IntOrPercent(40, True)
    assert one(base + "stormGuard: {maxUnhealthy: 2}").storm_guard.max_unhealthy == IntOrPercent(2)
    assert one(base + "stormGuard: {minHealthy: '3'}").storm_guard.min_healthy == IntOrPercent(3)
    assert one(base + 'stormGuard: {unhealthyRange: "[1-3]"}').storm_guard.unhealthy_range == (1, 3)
    assert one(base + "stormGuard: {maxUnhealthy: 40%, cooldown: 1m}").storm_guard.cooldown == 60.0
    assert not one(base + "stormGuard: {enabled: false}").storm_guard.enabled


def test_statuses_list_and_integer_period() -> None:
    cfg = one(
        """
        apiVersion: node-remedy/v1alpha
        kind: Configuration
        metadata: {name: workers}
        nodeSelector: {matchLabels: {role: worker}}
        thresholdConfigs:
        - {nodeConditionType: Ready, nodeConditionStatus: [False, unknown], nodeConditionPeriod: 30}
        """
    )
    assert cfg.name == "workers"
    assert cfg.thresholds[0].statuses == frozenset({"False", "Unknown"})
    assert cfg.thresholds[0].period == 30.0
    assert cfg.thresholds[0].remedies == ((Remedy("fence"),),)


def test_selector_string_syntax() -> None:
    sel = parse_selector_string("type=compute,zone in (a, b),!excluded,env!=dev,gpu", "t")
    assert sel.matches({"type": "compute", "zone": "a", "gpu": "1"})
    assert not sel.matches({"type": "compute", "zone": "c", "gpu": "1"})
    assert not sel.matches({"type": "compute", "zone": "a", "gpu": "1", "excluded": ""})
    assert not sel.matches({"type": "compute", "zone": "a", "gpu": "1", "env": "dev"})
    assert not sel.matches({"type": "compute", "zone": "a"})


def test_configmap_and_multiple_documents_first_match_wins() -> None:
    doc = (
        "apiVersion: node-remedy/v1alpha\nkind: Configuration\nmetadata: {name: gpu}\nnodeSelector: gpu=true\n"
        "---\napiVersion: node-remedy/v1alpha\nkind: Configuration\nmetadata: {name: rest}\n"
    )
    cs = parse_configmap(
        {"metadata": {"namespace": "ns", "name": "cm"}, "data": {"remedy.yaml": doc, "other": "x"}}
    )
    assert [c.name for c in cs.configurations] == ["gpu", "rest"]
    assert cs.for_node({"gpu": "true"}).name == "gpu"  # type: ignore[union-attr]
    assert cs.for_node({}).name == "rest"  # type: ignore[union-attr]


HEAD = "apiVersion: node-remedy/v1alpha\nkind: Configuration\nmetadata: {name: w}\n"


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (
            "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionStatus: false, nodeConditionPeriod: soon}",
            "thresholdConfigs[0].nodeConditionPeriod",
        ),
        (
            "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionStatus: maybe, nodeConditionPeriod: 5s}",
            "thresholdConfigs[0].nodeConditionStatus",
        ),
        (
            "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionStatus: true, nodeConditionPeriod: 5s}",
            "Ready=True is a healthy node",
        ),
        (
            "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionPeriod: 5s}",
            "thresholdConfigs[0].nodeConditionStatus: required",
        ),
        (
            "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionStatus: false, nodeConditionPeriod: 5s, remedy1: [{nme: x}]}",
            "thresholdConfigs[0].remedy1[0]: unknown fields ['nme']",
        ),
        (
            "thresholdConfigs:\n- {nodeConditionType: Ready, nodeConditionStatus: false, nodeConditionPeriod: 5s, colour: red}",
            "unknown fields ['colour']",
        ),
        ("thresholdConfigs: []", "thresholdConfigs: a non-empty list"),
        ("stormGuard: {maxUnhealthy: 140%}", "stormGuard.maxUnhealthy: '140%' is over 100%"),
        ("stormGuard: {maxUnhealthy: lots}", "stormGuard.maxUnhealthy"),
        ("stormGuard: {maxUnhealthy: 1, minHealthy: 2}", "set only one of"),
        ('stormGuard: {unhealthyRange: "[3-1]"}', "stormGuard.unhealthyRange"),
        ("stormGuard: {cooldown: -5}", "stormGuard.cooldown"),
        ("stormGuard: {maxUnhealthy: 1, coolDown: 5s}", "unknown fields ['coolDown']"),
        ("nodeSelector: 'type=,,x'", "nodeSelector"),
        ("nodeSelector: {matchLabel: {a: b}}", "nodeSelector: unknown label selector fields"),
        ("pauseRequests: [1]", "pauseRequests"),
        ("nodeselector: x", "unknown fields ['nodeselector']"),
    ],
)
def test_bad_field_is_named(body: str, names: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_configurations(HEAD + body, "remedy.yaml")
    assert names in str(err.value)
    assert str(err.value).startswith("remedy.yaml: Configuration w")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("", "no Configuration document"),
        ("kind: Configuration\napiVersion: v9\n", ".apiVersion: 'v9'"),
        ("kind: Config\napiVersion: node-remedy/v1alpha\n", ".kind: 'Config'"),
        ("a: [", "not YAML"),
        (HEAD + "---\n" + HEAD, "metadata.name used twice"),
        ("- 1\n", "a Configuration is a map"),
    ],
)
def test_bad_document(text: str, names: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_configurations(text, "remedy.yaml")
    assert names in str(err.value)


def test_configmap_without_yaml_keys() -> None:
    with pytest.raises(ConfigError, match="ConfigMap ns/cm: no data key ending in .yaml"):
        parse_configmap({"metadata": {"namespace": "ns", "name": "cm"}, "data": {"x": "y"}})


def test_missing_file_named(tmp_path) -> None:
    from noderemedy_runner.config.remedy import load

    with pytest.raises(ConfigError, match="nope.yaml: cannot read it"):
        load(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="expected configmap:<namespace>/<name>"):
        load("configmap:justname")


REMEDIES = """
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {name: workers}
thresholdConfigs:
- nodeConditionType: Ready
  nodeConditionStatus: [False, Unknown]
  nodeConditionPeriod: 10s
  remedy1: [{name: repair, period: 20s}]
  remedy2: [{name: terminate}]
remedyConfigs:
%s
"""


def remedy_doc(configs: str) -> str:
    return REMEDIES % textwrap.indent(textwrap.dedent(configs).strip(), "")


def test_remedy_chain_escalates_pod_remedies_into_the_fence_flow() -> None:
    cs = parse_configurations(
        remedy_doc("""
        - name: repair
          podTemplate: {spec: {containers: [{name: r, image: busybox, command: [sh, -c, exit 0]}]}}
        - name: terminate
          executor: job
        """),
        "r.yaml",
    )
    (th,) = cs.configurations[0].thresholds
    repair, terminate = th.chain()
    assert repair.pod and repair.period == 20.0 and repair.executor is None
    assert not terminate.pod and terminate.executor == "job"
    assert [e["name"] for e in (r.chain_entry() for r in th.chain())] == ["repair", "terminate"]
    assert repair.chain_entry() == {
        "name": "repair", "period": 20.0, "cleanResources": False, "pod": True, "executor": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("configs", "field"),
    [
        ("- {name: repair, podTemplate: {spec: {}}}", "remedyConfigs[0].podTemplate.spec.containers"),
        ("- {name: repair, podTemplate: {spec: {containers: [{name: r}]}}}", "spec.containers[0].image"),
        ("- {name: repair, podTemplate: [1]}", "remedyConfigs[0].podTemplate"),
        ("- {name: repair, podTemplate: {specs: {}}}", "remedyConfigs[0].podTemplate: unknown fields"),
        (
            "- {name: repair, podTemplate: {spec: {restartPolicy: Always, containers: [{name: r, image: b}]}}}",
            "podTemplate.spec.restartPolicy",
        ),
        ("- {name: repair, executor: ssh}", "remedyConfigs[0].executor"),
        (
            "- {name: repair, executor: job, podTemplate: {spec: {containers: [{name: r, image: b}]}}}",
            "remedyConfigs[0].executor",
        ),
        ("- {name: Repair}", "remedyConfigs[0].name"),
        ("- {name: repair}\n- {name: repair}", "remedyConfigs[1].name"),
        ("- {name: repair, image: b}", "remedyConfigs[0]: unknown fields"),
    ],
)
def test_bad_remedy_configs_name_the_field(configs: str, field: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(field)):
        parse_configurations(remedy_doc(configs), "r.yaml")


def test_a_remedy_after_the_fence_flow_is_refused() -> None:
    text = remedy_doc("- {name: terminate, podTemplate: {spec: {containers: [{name: t, image: b}]}}}")
    # repair has no podTemplate: the fence flow, which ends the chain; terminate would never run
    with pytest.raises(ConfigError, match=r"thresholdConfigs\[0\]: remedy 'terminate' comes after 'repair'"):
        parse_configurations(text, "r.yaml")


def test_unused_remedy_configs_are_warned_about() -> None:
    cs = parse_configurations(
        remedy_doc("""
        - name: repair
          podTemplate: {spec: {containers: [{name: r, image: b}]}}
        - name: spare
          podTemplate: {spec: {containers: [{name: s, image: b}]}}
        """),
        "r.yaml",
    )
    assert any("['spare'] are named by no remedyN list" in w for w in cs.warnings), cs.warnings
