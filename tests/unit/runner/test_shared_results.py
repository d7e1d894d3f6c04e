"""What one shared device call settles for each host of a batch (playbooks/fence_step.yml's first
play: the filter ``shared_step`` and one ``node_release`` call, run once for the play): their
play-wide job events become each host's own evidence, release and end
(``shared_results.served_events``), read as a run of its own would be (``outcomes``,
``batches.ends_host``). Pure, no network; the same through a real ``ansible-playbook`` on the lab:
tests/integration/test_fence_step_shared_release.py."""

from __future__ import annotations

from typing import Any

from noderemedy_runner.batch_hosts import host_outcome
from noderemedy_runner.batches import ends_host
from noderemedy_runner.outcomes import (
    RELEASE_MODULE,
    SHARED_RELEASE_MODULE,
    evidence_from_events,
    release_from_events,
)
from noderemedy_runner.shared_results import SERVED_FACT, served_events

OOS = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
FENCE = {"verified": True, "method": "pdu", "target": "127.0.0.1:1161", "state": "off", "verified_at": 5.0}
NODE_HOSTS = {"n-a": "nf-a", "n-b": "nf-b", "n-c": "nf-c"}


def event(
    res: dict[str, Any], kind: str = "runner_on_ok", action: str = SHARED_RELEASE_MODULE
) -> dict[str, Any]:
    return {
        "event": kind,
        "uuid": "u1",
        "event_data": {"host": "nf-a", "resolved_action": action, "res": res},
    }


def served(*entries: dict[str, Any]) -> dict[str, Any]:
    return event({"ansible_facts": {SERVED_FACT: list(entries)}}, action="ansible.builtin.set_fact")


def entry(host: str, node: str, plug: str, release: bool) -> dict[str, Any]:
    evidence = {**FENCE, "plugs": [plug]}
    return {
        "host": host,
        "node": node,
        "reading": {"fenced": True, "kind": "power_off", "source": "pdu-off"},
        "evidence": evidence,
        "release": {"name": node, "fence_evidence": evidence} if release else None,
    }


RELEASED = {
    "changed": True,
    "nodes": [
        {
            "node": "n-a",
            "changed": True,
            "taints": [OOS],
            "added": [OOS],
            "removed": [],
            "deleted_pods": ["db/db-0"],
        },
        {
            "node": "n-b",
            "failed": True,
            "changed": False,
            "reason": "conflict",
            "msg": "node n-b: Ready is True",
        },
        {"node": "n-x", "changed": True, "taints": [OOS], "added": [OOS], "removed": []},
    ],
}


def test_each_host_gets_its_own_evidence_then_its_own_release_and_is_done_at_its_own_entry() -> None:
    first = served_events(served(entry("nf-a", "n-a", "1", True), entry("nf-b", "n-b", "2", True),
                                 entry("nf-c", "n-c", "3", False)), NODE_HOSTS)  # fmt: skip
    assert first is not None
    # nf-c releases nothing: done at once; nf-a and nf-b wait for the release call
    assert [(h, ends_host(e)) for h, e in first] == [
        ("nf-a", None),
        ("nf-b", None),
        ("nf-c", None),
        ("nf-c", "done"),
    ]
    second = served_events(event(RELEASED), NODE_HOSTS)
    assert second is not None
    assert [(h, ends_host(e)) for h, e in second] == [
        ("nf-a", None),
        ("nf-a", "done"),
        ("nf-b", None),
        ("nf-b", "done"),
    ]
    per_host: dict[str, list[dict[str, Any]]] = {}
    for h, e in [*first, *second]:
        assert e["event_data"]["host"] == h
        per_host.setdefault(h, []).append(e)
    assert len({e["uuid"] for es in per_host.values() for e in es}) == 8, "every event has its own uuid"

    a = host_outcome("run-a", "nf-a", per_host["nf-a"], "done", None, 1.0)
    assert (
        a.succeeded and a.release is not None and a.release.added and a.release.deleted_pods == ("db/db-0",)
    )
    assert a.evidence is not None and a.evidence.fenced and a.evidence.fence["plugs"] == ["1"]
    b = release_from_events(per_host["nf-b"])
    assert b is not None and not b.added and b.message == "conflict: node n-b: Ready is True"
    c = host_outcome("run-c", "nf-c", per_host["nf-c"], "done", None, 1.0)
    assert c.succeeded and c.release is None and c.evidence is not None and c.evidence.kind == "power_off"


def test_a_claimed_fence_without_verified_evidence_reads_as_no_fence() -> None:
    bad = {**entry("nf-a", "n-a", "1", False), "evidence": {**FENCE, "verified": "yes"}}
    events = served_events(served(bad), NODE_HOSTS)
    assert events is not None
    got = evidence_from_events([e for _, e in events])
    assert got is not None and not got.fenced and got.fence == {}


def test_a_release_call_without_per_node_results_is_no_host_s_and_other_events_are_left_alone() -> None:
    assert (
        served_events(event({"failed": True, "msg": "no kubeconfig"}, "runner_on_failed"), NODE_HOSTS) == []
    )
    assert served_events(event({"skipped": True}, "runner_on_skipped"), NODE_HOSTS) == []
    assert served_events(event({"taints": [OOS]}, action=RELEASE_MODULE), NODE_HOSTS) is None
    assert (
        served_events(event({"ansible_facts": {"other": 1}}, action="ansible.builtin.set_fact"), NODE_HOSTS)
        is None
    )
    assert served_events(served(), NODE_HOSTS) == []
