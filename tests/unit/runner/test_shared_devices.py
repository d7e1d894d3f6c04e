"""Which runs of a batch share one module call on their PDU or FC switch (pure): same device,
state, Secret, namespace and options; only the first method; only ``fence_step.yml``."""

from __future__ import annotations

from typing import Any

from noderemedy_runner.shared_devices import SHARED_PLAYBOOK, shared_device, shared_key


def method(plug: str | None, **over: Any) -> dict[str, Any]:
    base = {
        "name": f"pdu-off-{plug}", "module": "noderemedy.core.pdu_outlet", "device_type": "pdu",
        "model": "apc", "profile": "apc_rpdu", "address": "127.0.0.1:24010", "ipaddr": "127.0.0.1",
        "ipport": 24010, "plug": plug, "action": "off", "state": "off", "options": {},
        "template": f"fence-template-{plug}", "secret_name": "pdu-credentials",
    }  # fmt: skip
    return {**base, **over}


def run(*methods: dict[str, Any], namespace: str = "noderemedy") -> dict[str, Any]:
    return {"node": "n", "namespace": namespace, "methods": list(methods)}


def test_one_device_one_key_whatever_the_plug_name_and_template() -> None:
    a = shared_key(SHARED_PLAYBOOK, run(method("1")))
    b = shared_key(SHARED_PLAYBOOK, run(method("2")))
    assert a and a == b


def test_another_state_secret_namespace_port_or_option_is_another_key() -> None:
    base = shared_key(SHARED_PLAYBOOK, run(method("1")))
    others = [
        run(method("1", state="on", action="on")),
        run(method("1", secret_name="other")),
        run(method("1"), namespace="elsewhere"),
        run(method("1", ipport=24011, address="127.0.0.1:24011")),
        run(method("1", options={"snmp_version": "3"})),
    ]
    keys = {shared_key(SHARED_PLAYBOOK, r) for r in others}
    assert base not in keys and len(keys) == len(others)


def test_no_key_for_other_playbooks_devices_without_plugs_or_no_methods() -> None:
    assert shared_key("fence_verify.yml", run(method("1"))) == ""
    assert shared_key(SHARED_PLAYBOOK, run(method(None, device_type="ipmi"))) == ""
    assert shared_key(SHARED_PLAYBOOK, run(method(""))) == ""
    assert shared_key(SHARED_PLAYBOOK, run()) == ""
    assert shared_key(SHARED_PLAYBOOK, {"methods": "not a list"}) == ""


def test_only_the_first_method_counts() -> None:
    ipmi = method(None, device_type="ipmi", module="noderemedy.core.ipmi_power")
    assert shared_key(SHARED_PLAYBOOK, run(ipmi, method("1"))) == ""
    assert shared_key(SHARED_PLAYBOOK, run(method("1"), ipmi)) == shared_key(
        SHARED_PLAYBOOK, run(method("1"))
    )


def test_the_largest_group_of_two_or_more_gets_one_call_with_each_hosts_plug() -> None:
    by_host = {
        "nf-c": run(method("3")),
        "nf-a": run(method("1")),
        "nf-b": run(method("2")),
        "nf-x": run(method("9", secret_name="other")),
        "nf-i": run(method(None, device_type="ipmi")),
    }
    shared = shared_device(SHARED_PLAYBOOK, by_host)
    assert shared is not None
    assert shared["hosts"] == ["nf-a", "nf-b", "nf-c"]
    assert shared["plugs"] == ["1", "2", "3"]
    assert shared["method"]["device_type"] == "pdu" and shared["method"]["state"] == "off"
    assert not {"plug", "name", "template"} & set(shared["method"])


def test_a_single_host_gets_the_call_and_nothing_shareable_gets_none() -> None:
    alone = shared_device(SHARED_PLAYBOOK, {"nf-a": run(method("1"))})
    assert alone is not None and alone["hosts"] == ["nf-a"] and alone["plugs"] == ["1"]
    # two devices' worth of one host each: the group whose key sorts first
    split = shared_device(SHARED_PLAYBOOK, {"nf-a": run(method("1")), "nf-b": run(method("2", state="on"))})
    assert split is not None and len(split["hosts"]) == 1
    assert shared_device(SHARED_PLAYBOOK, {}) is None
    assert shared_device("fence_verify.yml", {"nf-a": run(method("1")), "nf-b": run(method("2"))}) is None


def test_integer_plugs_are_given_as_strings() -> None:
    shared = shared_device(SHARED_PLAYBOOK, {"nf-a": run(method(1)), "nf-b": run(method(2))})  # type: ignore[arg-type]
    assert shared is not None and shared["plugs"] == ["1", "2"]
