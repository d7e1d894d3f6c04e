"""The filter ``noderemedy.core.taint_removals``: which hosts of an out_of_service_taint.yml run ask
for the taint's removal, as node_release entries. Pure logic, no network; the playbook's one call
against the lab: tests/integration/test_out_of_service_taint_batch.py."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.noderemedy.core.plugins.filter.taint_removals import FilterModule, taint_removals


def test_only_the_hosts_asking_for_absent_are_listed_in_their_order_each_node_once() -> None:
    hv = {
        "a": {"node": "n-a", "state": "absent"},
        "b": {"node": "n-b"},
        "c": {"node": "n-c", "state": "present"},
        "d": {"node": "n-d", "state": "absent"},
        "e": {"node": "n-a", "state": "absent"},
    }
    assert taint_removals(["d", "a", "b", "c", "e"], hv) == [{"name": "n-d"}, {"name": "n-a"}]
    assert taint_removals([], hv) == []
    assert FilterModule().filters()["taint_removals"] is taint_removals


def test_a_removal_without_a_node_or_a_host_list_that_is_not_a_list_is_an_error() -> None:
    with pytest.raises(AnsibleFilterError, match="host 'x' has no node"):
        taint_removals(["x"], {"x": {"state": "absent"}})
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        taint_removals("a", {"a": {"node": "n-a", "state": "absent"}})
