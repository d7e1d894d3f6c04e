"""Fan-out against the lab: several kwok nodes fail at once, and one ``ansible-playbook`` run serves
their NodeFences' runs of the same playbook (``noderemedy-runner --batch-window``), with the real
playbooks, ipmi_sim BMCs and the snmpd FC switch.

Each NodeFence still gets its own result: Final with its own verified fence (every BMC's own power
log: one cut, one restore), its own Events. A BMC of the batch that never answers fails only its
own NodeFence, and the others are released and recovered meanwhile. A BMC of the batch that lies
(answers the power-off as done, its power stays on) never gets its node the out-of-service taint,
and the others are tainted while its run still waits on its read-back. A runner killed with -9, or
stopped with SIGTERM, while the batch of power cuts is in flight, then restarted on the same data
dir, brings every NodeFence to Final with no second power cycle at any BMC.

The nodes fail hung: kwok stops their heartbeat (the lab's power label says off) while their BMCs
still read on, so the power-management step really cuts and restores each BMC's power.
"""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    OTHER,
    SPARE,
    FenceNamespace,
    conds,
    events_of,
    events_with,
    fence_config,
    fence_ns,
    get_nf,
    nodefence,
    oos_on,
    runner,
)
from kube_helpers import wait_for
from kubernetes import client
from runner_harness import Runner
from test_runner_restart import collapse, in_flight, power_sets

from noderemedy_lab import bmc as lab_bmc
from noderemedy_lab.config import POWER_LABEL

pytestmark = [pytest.mark.lab, pytest.mark.kube]

NF = ("remediation.noderemedy.io", "v1alpha1", "nodefences")
NODES = (DEAD, OTHER, SPARE)
#: a window wide enough that the three NodeFences' runs, asked for within it, share one run; and
#: no idle start, which would start the first of them at once, on its own
WINDOW = ["--batch-window", "1", "--no-idle-start"]
_BATCH = re.compile(r"^batch (\S+): (\S+) for (\d+) hosts")
_CANCELED = re.compile(r"^run (\S+): canceled in ")


def bmc_log(lab: Any, node: str, since: float = 0.0) -> list[int]:
    """Every power command ``node``'s BMC answered as done since the epoch time ``since``
    (``0`` off, ``1`` on), the ones a lying BMC did not carry out included
    (:func:`noderemedy_lab.bmc.power_sets` with ``with_ignored``)."""
    path = lab.info["devices"]["bmcs"][node]["power_log"]
    return [value for at, value in lab_bmc.power_sets(path, with_ignored=True) if at >= since]


def ended(r: Runner, ident: str) -> bool:
    """Whether runner ``r`` has logged the end of the run ``ident`` (``run <ident>: <status> in``)."""
    return bool(r.logged(rf"^run {re.escape(ident)}: \S+ in "))


def batch_of(r: Runner, ident: str) -> set[str]:
    """The batches (their ids, the ``batch`` field of the run's start line) that ran ``ident``."""
    return {
        str(line["batch"])
        for line in r.logged(rf"^run {re.escape(ident)}: \S+\.yml for ")
        if line.get("batch")
    }


def power_offs(names: dict[str, str]) -> dict[str, str]:
    """Node -> the ident of its NodeFence's first power-off run (``names``: node -> NodeFence)."""
    return {node: f"{name}-r0-power-management-a0" for node, name in names.items()}


def failed_run_events(api: client.ApiClient, nf: dict, timeout: float) -> list[Any]:
    """The NodeFence ``nf``'s own Events of a failed or timed-out fence run (``FenceAgentFailed``,
    ``FenceAgentTimedOut``), waited for up to ``timeout`` seconds."""
    name = nf["metadata"]["name"]
    return list(
        wait_for(
            lambda: [e for e in events_of(api, nf) if e.reason in ("FenceAgentFailed", "FenceAgentTimedOut")],
            timeout,
            f"a failed run of {name} in its own Events",
        )
    )


def fence_step_starts(r: Runner) -> dict[str, int]:
    """Run ident -> how many times runner ``r`` started it with ``fence_step.yml`` (its log's
    ``run <ident>: fence_step.yml for ...`` lines, over every start of the process)."""
    starts: dict[str, int] = {}
    for line in r.lines():
        m = re.match(r"^run (\S+): fence_step\.yml for ", str(line.get("msg", "")))
        if m:
            starts[m.group(1)] = starts.get(m.group(1), 0) + 1
    return starts


def all_ended(
    co: client.CustomObjectsApi, core: client.CoreV1Api, names: dict[str, str], what: str
) -> tuple[dict[str, dict], set[str]]:
    """:func:`watch_until` every NodeFence of ``names`` is Final or Error (300 s at most)."""
    return watch_until(
        co, core, names, lambda o: all(status_of(x) in ("Final", "Error") for x in o.values()), 300, what
    )


def batches(runners: list[Runner], playbook: str = "fence_step.yml") -> list[int]:
    """The hosts of every batch run of ``playbook`` the runners started, in order."""
    out = []
    for r in runners:
        for line in r.lines():
            m = _BATCH.match(str(line.get("msg", "")))
            if m and m.group(2) == playbook:
                out.append(int(m.group(3)))
    return out


@pytest.fixture
def hung_nodes(lab_kube: Any, api: client.ApiClient) -> Iterator[tuple[str, ...]]:
    """Every kwok node of the lab hung with its power on; afterwards each is powered on, its taint
    removed, Ready, and the test's NodeFences deleted."""
    for node in NODES:
        out = lab_kube.kubectl("label", "node", node, f"{POWER_LABEL}=off", "--overwrite")
        assert out.returncode == 0, out.stderr
    lab_kube.wait_nodes(list(NODES), {"False", "Unknown"}, 120)
    yield NODES
    co = client.CustomObjectsApi(api)
    for obj in co.list_cluster_custom_object(*NF)["items"]:
        if obj["metadata"].get("finalizers"):
            co.patch_cluster_custom_object(*NF, obj["metadata"]["name"], {"metadata": {"finalizers": None}})
        co.delete_cluster_custom_object(*NF, obj["metadata"]["name"])
    for node in NODES:
        lab_kube.kubectl("taint", "node", node, "node.kubernetes.io/out-of-service-")
        lab_kube.power_on(node)
        lab_kube.kubectl("label", "node", node, f"{POWER_LABEL}=on", "--overwrite")
    lab_kube.wait_nodes(list(NODES), "True", 120)


def create_all(co: client.CustomObjectsApi, tag: str, nodes: tuple[str, ...]) -> dict[str, str]:
    """A NodeFence per node, created back to back; returns node -> NodeFence name."""
    names = {node: f"nf-{tag}-{node}-{uuid.uuid4().hex[:4]}" for node in nodes}
    for node, name in names.items():
        nodefence(co, name, node)
    return names


def watch_until(
    co: client.CustomObjectsApi,
    core: client.CoreV1Api,
    names: dict[str, str],
    done: Callable[[dict[str, dict]], bool],
    timeout: float,
    what: str,
) -> tuple[dict[str, dict], set[str]]:
    """Poll the NodeFences until ``done(node -> object)``; returns them and the nodes seen tainted."""
    tainted: set[str] = set()

    def check() -> dict[str, dict] | None:
        objs = {node: get_nf(co, name) for node, name in names.items()}
        tainted.update(node for node in names if oos_on(core, node))
        return objs if done(objs) else None

    return wait_for(check, timeout, what), tainted


def status_of(obj: dict) -> str:
    return str((obj.get("status") or {}).get("status"))


@pytest.mark.timeout(420)
def test_three_nodes_failing_at_once_share_each_run_and_each_ends_final_with_its_own_fence(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung_nodes: tuple[str, ...],
) -> None:
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    since, started = time.time(), time.monotonic()
    r = runner(*WINDOW)
    names = create_all(co, "fan", hung_nodes)
    objs, tainted = watch_until(
        co, core, names, lambda o: all(status_of(x) in ("Final", "Error") for x in o.values()), 300,
        "every NodeFence of the batch Final",
    )  # fmt: skip
    elapsed = time.monotonic() - started
    for node, obj in objs.items():
        assert status_of(obj) == "Final" and conds(obj)["Succeeded"]["status"] == "True", (
            node,
            obj["status"],
        )
        assert collapse(power_sets(lab_kube, node, since)) == ["0", "1"], (
            node,
            power_sets(lab_kube, node, since),
        )
        assert power_sets(lab_kube, node, since).count("0") == 1, "one power cut per node"
        assert conds(obj)["Succeeded"]["reason"] == "RemediationFinished", (node, conds(obj))
        # its own run results and its own release, in its own Events
        reasons = {e.reason for e in events_with(api, obj, "FenceAgentSucceeded", "OutOfServiceTaintAdded")}
        assert "FenceAgentFailed" not in reasons and "OutOfServiceTaintRefused" not in reasons, (
            node,
            reasons,
        )
        added = [e.message for e in events_of(api, obj) if e.reason == "OutOfServiceTaintAdded"]
        # on its own node, with its own run's verified fence
        assert added and all(f"node {node} " in m and f"run {names[node]}-" in m for m in added), (
            node,
            added,
        )
    assert tainted == set(hung_nodes) and not any(oos_on(core, n) for n in hung_nodes)
    sizes = batches([r])
    runs = len(r.logged(r"^run \S+: fence_step\.yml for "))
    assert max(sizes) == len(hung_nodes), sizes  # one ansible-playbook run served all three at once
    # their FC ports, on one switch, were disabled (isolation) and enabled (recovery) in one call each
    shared = [str(x["msg"]) for x in r.logged(r"^batch \S+: one fc call for the plugs of ")]
    assert any(": one fc call for the plugs of 3 hosts (" in m for m in shared), shared
    assert sum(sizes) == runs and len(sizes) < runs, (sizes, runs)
    print(
        f"\nFIGURE fan-out {len(hung_nodes)} hung nodes: all Final in {elapsed:.1f} s; fence_step.yml: "
        f"{runs} runs in {len(sizes)} ansible-playbook processes (hosts per batch {sizes})"
    )


@pytest.mark.timeout(420)
def test_a_bmc_of_the_batch_that_never_answers_fails_only_its_own_nodefence(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung_nodes: tuple[str, ...],
) -> None:
    """SPARE's fence configuration points its IPMI method at a UDP port that never answers: its
    host in the batch waits until its run is killed at the deadline, while the others' results
    are delivered from their own events as they come; they are released and recovered."""
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # bound, never answers
    silent.bind(("127.0.0.1", 0))
    fence_ns.template(
        "fence-method-template-ipmi-silent",
        f"type=ipmi\naddress=127.0.0.1:{silent.getsockname()[1]}\nsecret=bmc-{SPARE}\ncipher=3\n",
    )
    port = lab_kube.info["devices"]["fc_ports"][SPARE]
    fence_ns.put(
        "config_map",
        fence_config(SPARE, port, "", "ipmi-off ipmi-on", "", ipmi="fence-method-template-ipmi-silent"),
    )
    try:
        since = time.time()
        r = runner(*WINDOW, "--run-deadline", "30")
        names = create_all(co, "mute", hung_nodes)
        good = [n for n in hung_nodes if n != SPARE]
        objs, tainted = watch_until(
            co, core, names, lambda o: all(status_of(o[n]) == "Final" for n in good), 300,
            "the NodeFences of the answering BMCs Final",
        )  # fmt: skip
        bad = get_nf(co, names[SPARE])
        assert status_of(bad) != "Final" and SPARE not in tainted and not oos_on(core, SPARE), bad["status"]
        assert failed_run_events(api, bad, 60), bad["status"]
        assert power_sets(lab_kube, SPARE, since) == [], "SPARE's real BMC was never asked"
        for node in good:
            assert collapse(power_sets(lab_kube, node, since)) == ["0", "1"], node
            assert node in tainted and conds(objs[node])["Succeeded"]["status"] == "True"
        # the silent host was in a batch with the others' power-management runs
        assert max(batches([r])) >= 2, batches([r])
    finally:
        silent.close()
        fence_ns.standard(SPARE)


@pytest.mark.timeout(480)
def test_kill9_mid_batch_every_nodefence_ends_final_without_a_second_power_cycle(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung_nodes: tuple[str, ...],
) -> None:
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    since = time.time()
    r = runner(*WINDOW)
    names = create_all(co, "k9", hung_nodes)
    pm_off = power_offs(names)

    def batch_in_flight() -> bool:
        return sum(in_flight(r, ident) for ident in pm_off.values()) >= 2

    wait_for(batch_in_flight, 240, "a batch of power cuts in flight")
    r.kill9()
    r.start()
    objs, tainted = all_ended(co, core, names, "every NodeFence Final after the kill")
    starts = fence_step_starts(r)
    for node, obj in objs.items():
        sets = power_sets(lab_kube, node, since)
        assert status_of(obj) == "Final", (node, obj["status"])
        assert collapse(sets) == ["0", "1"] and sets.count("0") <= 2 and sets.count("1") <= 2, (node, sets)
        assert node in tainted
    assert all(n <= 2 for n in starts.values()), starts  # at most one replay of a segment
    print(
        f"\nFIGURE kill -9 mid-batch: BMC sets {[power_sets(lab_kube, n, since) for n in hung_nodes]}, "
        f"fence_step runs started {sorted(starts.values())}"
    )


@pytest.mark.timeout(480)
def test_sigterm_mid_batch_every_nodefence_ends_final_without_a_second_power_cycle(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung_nodes: tuple[str, ...],
) -> None:
    """The runner gets SIGTERM while a batch of power cuts is in flight and one of its hosts' BMCs
    already reads off: the batch is canceled (every host's segment with it) and the runner exits 0.
    Started again on the same data dir, it replays each interrupted segment once: a BMC already off
    reads back off and is sent nothing more, so each BMC's own log shows one cut and one restore,
    at most one set repeated (a segment canceled between its set and its record), and no second
    power cycle."""
    co = client.CustomObjectsApi(api)
    since = time.time()
    r = runner(*WINDOW)
    names = create_all(co, "term", hung_nodes)
    pm_off = power_offs(names)

    def batch_in_flight_one_cut() -> bool:
        busy = [node for node, ident in pm_off.items() if in_flight(r, ident)]
        return len(busy) >= 2 and any("0" in power_sets(lab_kube, node, since) for node in busy)

    wait_for(
        batch_in_flight_one_cut, 240, "a batch of power cuts in flight, one BMC already off", interval=0.1
    )
    code = r.stop(timeout=60)
    assert code == 0, r.log_path.read_text()[-3000:]
    canceled = {str(m.group(1)) for ln in r.lines() if (m := _CANCELED.match(str(ln.get("msg", ""))))}
    assert canceled & set(pm_off.values()), (canceled, pm_off)  # the batch of power cuts, canceled
    cut = {node: power_sets(lab_kube, node, since) for node in hung_nodes}
    r.start()
    objs, tainted = all_ended(co, client.CoreV1Api(api), names, "every NodeFence Final after the SIGTERM")
    starts = fence_step_starts(r)
    for node, obj in objs.items():
        sets = power_sets(lab_kube, node, since)
        assert status_of(obj) == "Final" and conds(obj)["Succeeded"]["status"] == "True", (
            node,
            obj["status"],
        )
        assert collapse(sets) == ["0", "1"], (node, sets)  # no second power cycle
        assert len(sets) - len(collapse(sets)) <= 1, (node, sets)  # at most one repeated set
        assert node in tainted
    # the canceled segments were replayed once each, nothing else twice
    assert all(starts.get(ident) == 2 for ident in canceled), (canceled, starts)
    assert all(n == 1 for ident, n in starts.items() if ident not in canceled), starts
    print(
        f"\nFIGURE SIGTERM mid-batch: {len(canceled)} power-off runs canceled; BMC sets at the stop {cut}, "
        f"at the end {[power_sets(lab_kube, n, since) for n in hung_nodes]}"
    )


@pytest.mark.timeout(480)
def test_a_bmc_of_the_batch_that_lies_never_gets_the_taint_and_the_others_are_released_meanwhile(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    hung_nodes: tuple[str, ...],
) -> None:
    """SPARE's BMC lies (``Lab.bmc_mode(SPARE, "lies")``): it answers every power command as done and
    its power stays on, so its power-off's read-back never shows off (``ipmi_power`` gives up after
    ``power_timeout``). Its node never gets the out-of-service taint and its NodeFence is not Final;
    the others' power cuts ran in the same batch, and each of them was tainted before SPARE's
    power-off run ended: nobody waited for the liar. They end Final with their own fence.

    Last in this module: the lying BMC leaves ``ignored`` entries in SPARE's power log (read with
    :func:`bmc_log`; :func:`power_sets` leaves them out)."""
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    since = time.time()
    lab_kube.bmc_mode(SPARE, "lies")
    # a batch starts once its 3 hosts are in (full), or 5 s after its first: the three power-offs
    # share one even when their isolation runs end more than WINDOW apart (seen: 1.7 s under load)
    r = runner("--batch-window", "5", "--no-idle-start", "--batch-size", str(len(hung_nodes)))
    try:
        names = create_all(co, "lies", hung_nodes)
        good = [n for n in hung_nodes if n != SPARE]
        liar_off = power_offs(names)[SPARE]
        before_liar: dict[str, bool] = {}  # good node -> its taint first seen before the liar's run ended
        liar_tainted: list[bool] = []

        def good_final() -> dict[str, dict] | None:
            for node in good:
                if node not in before_liar and oos_on(core, node):
                    before_liar[node] = not ended(r, liar_off)  # read after the taint: the order holds
            liar_tainted.append(oos_on(core, SPARE))
            objs = {node: get_nf(co, name) for node, name in names.items()}
            return objs if all(status_of(objs[n]) == "Final" for n in good) else None

        objs = wait_for(good_final, 300, "the NodeFences of the truthful BMCs Final", interval=0.1)
        liar = get_nf(co, names[SPARE])
        failed = failed_run_events(api, liar, 120)
        liar_tainted.append(oos_on(core, SPARE))
        log = bmc_log(lab_kube, SPARE, since)
        r.stop(timeout=60)  # before the BMC tells the truth again: no later run may cut it
    finally:
        lab_kube.bmc_mode(SPARE, "normal")
    liar = get_nf(co, names[SPARE])
    assert status_of(liar) != "Final", liar["status"]
    assert not any(liar_tainted) and not oos_on(core, SPARE), "a taint without a verified power-off"
    assert not [e for e in events_of(api, liar) if e.reason == "OutOfServiceTaintAdded"]
    assert 0 in log and power_sets(lab_kube, SPARE, since) == [], log  # answered, never done
    for node in good:
        assert conds(objs[node])["Succeeded"]["status"] == "True", (node, objs[node]["status"])
        assert collapse(power_sets(lab_kube, node, since)) == ["0", "1"], node
        assert before_liar.get(node) is True, (node, before_liar)
    shared = [n for n in good if batch_of(r, liar_off) & batch_of(r, power_offs(names)[n])]
    assert shared, "the liar's power-off ran in a batch of its own"
    print(
        f"\nFIGURE lying BMC in a batch: {failed[0].reason} on {names[SPARE]} ({failed[0].message[:120]}); "
        f"{SPARE}'s power log {log}; {', '.join(shared)} shared its power-off batch and were tainted first"
    )
