"""Fence configuration and device health (pure part): validation of a namespace's fence
ConfigMaps, one check per device and plug, classification of module results, what is news."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from noderemedy_runner.machines.health import (
    AUTH_FAILED,
    DEVICE_ERROR,
    HEALTHY,
    UNREACHABLE,
    HealthObserver,
    changed,
    classify,
    devices_to_check,
    results_for,
    validate_namespace,
)
from noderemedy_runner.metrics import Metrics


def node_config(
    node: str, power: str = "ipmi-off ipmi-on | pdu-off pdu-on", outlet: str = "3"
) -> dict[str, str]:
    return {
        "config.properties": f"node_name={node}\nisolation=fc-off\npower_management={power}\nrecovery=fc-on",
        "fence-method-fc-off": "template=fence-method-template-fc\nplug=fc1/1\naction=off",
        "fence-method-fc-on": "template=fence-method-template-fc\nplug=fc1/1\naction=on",
        "fence-method-ipmi-off": f"template=fence-method-template-bmc-{node}\naction=off",
        "fence-method-ipmi-on": f"template=fence-method-template-bmc-{node}\naction=on",
        "fence-method-pdu-off": f"template=fence-method-template-pdu\nplug={outlet}\naction=off",
        "fence-method-pdu-on": f"template=fence-method-template-pdu\nplug={outlet}\naction=on",
    }


def namespace() -> dict[str, dict[str, str]]:
    return {
        "fence-config-w1": node_config("w1"),
        "fence-config-w2": node_config("w2", outlet="4"),
        "fence-method-template-bmc-w1": {"template.properties": "type=ipmi\naddress=10.0.0.1\nsecret=bmc-w1"},
        "fence-method-template-bmc-w2": {"template.properties": "type=ipmi\naddress=10.0.0.2\nsecret=bmc-w2"},
        "fence-method-template-pdu": {"template.properties": "type=pdu\naddress=10.0.1.1\nsecret=pdu"},
        "fence-method-template-fc": {"template.properties": "type=fc\naddress=10.0.2.1\nsecret=fc"},
        "unrelated": {"x": "y"},
    }


def test_a_namespace_validates_and_every_device_and_plug_is_checked_once() -> None:
    result = validate_namespace(namespace())
    assert result.errors == {} and sorted(result.configs) == ["w1", "w2"]
    checks = devices_to_check(result.configs)
    assert [(c.template, c.plug, c.nodes) for c in checks] == [
        ("fence-method-template-bmc-w1", None, ("w1",)),
        ("fence-method-template-bmc-w2", None, ("w2",)),
        ("fence-method-template-fc", "fc1/1", ("w1", "w2")),  # one port shared: one read
        ("fence-method-template-pdu", "3", ("w1",)),  # level 2 devices are checked too
        ("fence-method-template-pdu", "4", ("w2",)),
    ]
    extravars = checks[3].to_extravars()
    assert extravars["action"] == "status" and extravars["secret_name"] == "pdu" and extravars["plug"] == "3"
    assert "password" not in str(extravars) and "community" not in str(extravars)


def test_invalid_configmaps_are_reported_by_name_key_and_problem_and_the_rest_still_checked() -> None:
    cms = namespace()
    cms["fence-config-w2"] = {
        **node_config("w2"),
        "config.properties": "node_name=w3\nisolation=\npower_management=\nrecovery=",
    }
    cms["fence-method-template-pdu"] = {
        "template.properties": "type=pdu\naddress=10.0.1.1\nsecret=pdu\npassword=x"
    }
    result = validate_namespace(cms)
    assert sorted(result.errors) == ["fence-config-w1", "fence-config-w2", "fence-method-template-pdu"]
    w2 = result.errors["fence-config-w2"]
    assert (w2.configmap, w2.key) == ("fence-config-w2", "config.properties")
    assert "node_name='w3' does not match the ConfigMap's node 'w2'" in str(w2)
    pdu = result.errors["fence-method-template-pdu"]
    assert (pdu.configmap, pdu.key) == ("fence-method-template-pdu", "template.properties")
    assert "x" not in pdu.problem.replace("ConfigMap", "")  # the credential's value is never echoed
    # w1 uses the broken template: its error names the template ConfigMap
    assert result.errors["fence-config-w1"].configmap == "fence-method-template-pdu"
    assert result.configs == {}


def test_module_results_are_classified_by_error_class() -> None:
    check = devices_to_check(validate_namespace(namespace()).configs)[0]
    assert classify(check, True, "", "").reason == HEALTHY
    assert classify(check, False, "auth", "RAKP 2: unauthorized name").reason == AUTH_FAILED
    assert classify(check, False, "privilege", "USER level").reason == AUTH_FAILED
    assert classify(check, False, "unreachable", "no answer").reason == UNREACHABLE
    assert classify(check, False, "timeout", "no answer in 5 s").reason == UNREACHABLE
    assert classify(check, False, "not_found", "no outlet 9").reason == DEVICE_ERROR
    h = classify(check, False, "auth", "refused")
    assert h.message == "auth: refused" and not h.healthy
    assert h.describe() == "fence-method-template-bmc-w1 (ipmi 10.0.0.1) fencing node(s) w1: auth: refused"


def test_results_pair_in_order_and_missing_results_are_errors() -> None:
    checks = devices_to_check(validate_namespace(namespace()).configs)
    found = results_for(checks, [(True, "", ""), (False, "auth", "no")], "check run failed")
    assert [h.reason for h in found] == [HEALTHY, AUTH_FAILED, DEVICE_ERROR, DEVICE_ERROR, DEVICE_ERROR]
    assert found[2].message == "check run failed"


def test_only_changes_are_news() -> None:
    checks = devices_to_check(validate_namespace(namespace()).configs)
    first = results_for(checks, [(True, "", "")] * 4 + [(False, "unreachable", "gone")])
    assert [h.check.key for h in changed({}, first)] == [("fence-method-template-pdu", "4")]
    old = {h.check.key: h for h in first}
    assert changed(old, first) == ()
    second = results_for(checks, [(False, "auth", "bad")] + [(True, "", "")] * 4)
    assert [(h.check.key[0], h.reason) for h in changed(old, second)] == [
        ("fence-method-template-bmc-w1", AUTH_FAILED),
        ("fence-method-template-pdu", HEALTHY),  # recovered
    ]


def test_metrics_record_device_and_config_health() -> None:
    m = Metrics(CollectorRegistry())
    assert isinstance(m, HealthObserver)
    m.fence_device_checked("fence-method-template-bmc-w1", "", "ipmi", AUTH_FAILED)
    m.fence_device_checked("fence-method-template-pdu", "3", "pdu", HEALTHY)
    m.fence_config_checked("fence-config-w1", False)
    text = m.exposition().decode()
    assert (
        'noderemedy_fence_device_healthy{device_type="ipmi",plug="",template="fence-method-template-bmc-w1"} 0.0'
        in text
    )
    assert (
        'noderemedy_fence_device_healthy{device_type="pdu",plug="3",template="fence-method-template-pdu"} 1.0'
        in text
    )
    assert (
        'noderemedy_fence_device_checks_total{plug="",reason="FenceAuthFailed",template="fence-method-template-bmc-w1"} 1.0'
        in text
    )
    assert 'noderemedy_fence_config_valid{configmap="fence-config-w1"} 0.0' in text
    m.remediation_started("NodeFence", "nf", "w1")
    assert 'noderemedy_node_remediations_total{kind="NodeFence",node="w1"} 1.0' in m.exposition().decode()
