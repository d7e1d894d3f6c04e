"""Safe return and the release rate limit, end to end against the lab (docs/concepts.md "Safe
return", "Release rate").

Safe return (KEP-2268: "make sure the taint is only removed after detach is finished"): a pod with
a CSI volume runs on lab-node-1; the real attach/detach controller of the lab's
kube-controller-manager creates its ``storage.k8s.io/v1`` VolumeAttachment, which the stand-in
external attacher of ``test_node_taint_volumes.py`` marks attached (the lab has no CSI driver). The
test puts its own finalizer on that VolumeAttachment, so the detach the out-of-service taint starts
cannot finish. The runner fences the node (FC port down, then an IPMI power cycle), releases its
workloads, and the node comes back Ready; while the VolumeAttachment exists the taint stays, the
NodeFence says what it waits for, and the FC switch's own SET log shows the port was never set up
again. The test then removes its finalizer; the VolumeAttachment goes, Recovery sets the port up,
the taint goes and the NodeFence ends Final.

Release rate: two nodes fail at once with ``--max-pods-released-per-minute`` one below their pods
together, each fenced by its FC port and a power-off that holds; the first node's workloads are
released, the second waits with ``WorkloadsReleased=False`` (``ReleaseRateLimited``) while its
fencing goes on, and is released once the first release has left the one-minute window.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (  # noqa: F401 - fixtures are used by name
    DEAD,
    M3,
    NF,
    OOS,
    SPARE,
    FenceNamespace,
    Runner,
    conds,
    dead,
    events_of,
    fence_config,
    fence_ns,
    get_nf,
    metal3_ns,
    metal3_objects,
    nodefence,
    oos_on,
    runner,
)
from kube_helpers import apply, kjson, wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_node_taint_volumes import ADC_ANNOTATION, StandInAttacher
from test_runner_guards import device_log, processing

from noderemedy_runner.machines.release import old_pods

pytestmark = [pytest.mark.lab, pytest.mark.kube]

DRIVER = "return.test.noderemedy.io"
HOLD = "test.noderemedy.io/hold-detach"


def fc_sets(lab: Any, node: str) -> list[tuple[float, int]]:
    """(time, written ifAdminStatus: 1 up, 2 down) of every SET of the node's FC port."""
    return [(float(row[0]), int(row[2])) for row in device_log(lab, node)[1]]


@pytest.fixture
def csi_volume(lab_kube: Any, api: client.ApiClient, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A namespace with a claim ``data`` bound to a CSI PersistentVolume of a CSIDriver with
    ``attachRequired``, the attach/detach annotation on lab-node-1 and the stand-in attacher
    running. Yields ``(namespace, pv)``; afterwards the test's finalizer is dropped from any
    VolumeAttachment still holding it and everything is deleted."""
    lab, storage = lab_kube, client.StorageV1Api(api)
    ns = f"ret-{uuid.uuid4().hex[:8]}"
    pv = f"pv-{ns}"
    lab.kubectl("create", "namespace", ns, check=True)
    lab.kubectl("annotate", "--overwrite", "node", DEAD, f"{ADC_ANNOTATION}=true", check=True)
    apply(
        lab,
        tmp_path,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": DRIVER},
            "spec": {"attachRequired": True, "podInfoOnMount": False},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": {"namespace": ns, "name": "data"},
                "csi": {"driver": DRIVER, "volumeHandle": f"vol-{ns}"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data", "namespace": ns},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    attacher = StandInAttacher(lab.kubeconfig, DRIVER)
    attacher.start()
    try:
        yield ns, pv
    finally:
        for va in storage.list_volume_attachment().items:
            if HOLD in (va.metadata.finalizers or []):
                storage.patch_volume_attachment(va.metadata.name, {"metadata": {"finalizers": None}})
        lab.kubectl("delete", "namespace", ns, "--timeout=90s")
        try:
            wait_for(
                lambda: (
                    not [
                        v
                        for v in storage.list_volume_attachment().items
                        if v.spec.source.persistent_volume_name == pv
                    ]
                ),
                90,
                f"the VolumeAttachments of {pv} gone",
            )
        finally:
            attacher.stop.set()
            attacher.join(5)
            lab.kubectl("delete", "pv", pv, "--wait=false")
            lab.kubectl("delete", "csidriver", DRIVER, "--wait=false")
            lab.kubectl("annotate", "node", DEAD, f"{ADC_ANNOTATION}-")


def db_pod_attached(core: client.CoreV1Api, storage: client.StorageV1Api, ns: str, pv: str) -> str:
    """Create pod ``db`` on lab-node-1 (up) with claim ``data`` of ``csi_volume``; wait until the
    attach/detach controller's VolumeAttachment of ``pv`` on the node is attached and return its
    name, with the test's finalizer put on it (the detach the taint starts cannot finish)."""
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "db"},
            "spec": {
                "nodeName": DEAD,
                "containers": [
                    {
                        "name": "db",
                        "image": "registry.invalid/db:1",
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/db"}],
                    }
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            },
        },
    )
    va = wait_for(
        lambda: next(
            (
                v
                for v in storage.list_volume_attachment().items
                if v.spec.source.persistent_volume_name == pv
                and v.spec.node_name == DEAD
                and v.status
                and v.status.attached
            ),
            None,
        ),
        120,
        f"a VolumeAttachment of {pv} on {DEAD}, attached",
    )
    storage.patch_volume_attachment(va.metadata.name, {"metadata": {"finalizers": [HOLD]}})
    return str(va.metadata.name)


@pytest.mark.timeout(600)
def test_taint_and_storage_fence_stay_until_the_volume_attachment_is_gone(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
    csi_volume: tuple[str, str],
) -> None:
    lab, core, storage = lab_kube, client.CoreV1Api(api), client.StorageV1Api(api)
    co = client.CustomObjectsApi(api)
    ns, pv = csi_volume
    lab.power_on(DEAD)  # the pod and its volume first go to the node while it is up
    lab.wait_nodes([DEAD], "True", 120)
    va_name = db_pod_attached(core, storage, ns, pv)
    lab.power_off(DEAD)
    lab.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    sets_before = fc_sets(lab, DEAD)

    name = f"nf-ret-{uuid.uuid4().hex[:6]}"
    runner()
    nodefence(co, name, DEAD)
    waiting = (
        "the out-of-service taint stays and recovery waits until the old pods of node "
        f"{DEAD} are gone and its volumes detached: 0 pod(s), 1 VolumeAttachment(s) ({va_name}) left"
    )
    obj = wait_for(
        lambda: (o := get_nf(co, name)) and processing(o) == ("True", "WaitingForDetach", waiting) and o,
        300,
        "the NodeFence waiting for the VolumeAttachment (its pod gone, the node Ready again)",
    )
    st = obj["status"]
    assert (st["status"], st["step"]) == ("Done", "PowerManagement") and not st.get("currentRun"), st
    assert not [j for j in st["jobs"] if "-recovery-" in j], st["jobs"]
    assert lab.node_ready([DEAD])[DEAD] == "True"  # back, and still tainted
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("db", ns)
    assert gone.value.status == 404  # released: the pod is gone from the API ...
    held = storage.read_volume_attachment(va_name)
    assert held.metadata.deletion_timestamp is not None  # ... the detach started, and cannot finish
    # The port went down (Isolation) and nothing set it up since.
    new_sets = fc_sets(lab, DEAD)[len(sets_before) :]
    assert new_sets and new_sets[0][1] == 2 and all(v == 2 for _t, v in new_sets), new_sets

    # While the VolumeAttachment stays, so do the taint and the storage fence, over several of the
    # runner's looks (every 5 s): polled, each poll checked.
    deadline = time.monotonic() + 16
    looks = 0
    while time.monotonic() < deadline:
        o = get_nf(co, name)
        assert processing(o)[1] == "WaitingForDetach" and o["status"]["step"] == "PowerManagement", o[
            "status"
        ]
        assert oos_on(core, DEAD), "the out-of-service taint went before the detach finished"
        assert all(v == 2 for _t, v in fc_sets(lab, DEAD)[len(sets_before) :]), "the FC port came up early"
        looks += 1
        time.sleep(0.5)
    assert looks >= 10
    reasons = [e.reason for e in events_of(api, obj)]
    assert reasons.count("WaitingForDetach") == 1, reasons  # said once, not at every look

    # The detach finishes: recovery runs, then the taint goes.
    released_at = time.time()
    storage.patch_volume_attachment(va_name, {"metadata": {"finalizers": None}})
    final = wait_for(
        lambda: (o := get_nf(co, name)) and (o.get("status") or {}).get("status") in ("Final", "Error") and o,
        180,
        "the NodeFence recovered",
    )
    st = final["status"]
    assert st["status"] == "Final" and st["jobs"][-1] == f"{name}-r0-recovery-a0", st
    assert conds(final)["Succeeded"]["status"] == "True"
    assert not oos_on(core, DEAD)
    ups = [(t, v) for t, v in fc_sets(lab, DEAD)[len(sets_before) :] if v == 1]
    assert ups and all(t > released_at for t, _v in ups), (ups, released_at)  # up only after the detach
    with pytest.raises(ApiException) as va_gone:
        storage.read_volume_attachment(va_name)
    assert va_gone.value.status == 404
    node_events = [e.reason for e in events_of(api, client.CoreV1Api(api).read_node(DEAD).to_dict())]
    assert "WaitingForDetach" in node_events  # kubectl describe node says why the taint stays
    print(
        f"\nFIGURE safe return: waited with {waiting!r}; FC SETs after the fence {fc_sets(lab, DEAD)[len(sets_before) :]}"
    )


# --- the release rate limit ----------------------------------------------------------------------------
@pytest.fixture
def two_dead(lab_kube: Any) -> Iterator[list[str]]:
    """lab-node-0 and lab-node-1 powered on (for their pods to start), later powered off by the
    test; afterwards taints removed, powered on, Ready."""
    nodes = [SPARE, DEAD]
    yield nodes
    for node in nodes:
        lab_kube.kubectl("taint", "node", node, f"{OOS}-")
        lab_kube.power_on(node)
    lab_kube.wait_nodes(nodes, "True", 120)


@pytest.mark.timeout(600)
def test_release_rate_limit_holds_the_second_release_not_its_fencing(
    lab_kube: Any,
    api: client.ApiClient,
    fence_ns: FenceNamespace,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    two_dead: list[str],
) -> None:
    lab, core, co = lab_kube, client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = two_dead
    ns = f"rate-{uuid.uuid4().hex[:8]}"
    lab.kubectl("create", "namespace", ns, check=True)
    tag = uuid.uuid4().hex[:6]
    names = {n: f"nf-rate-{i}-{tag}" for i, n in enumerate(nodes)}
    for node in nodes:  # the power fence holds (no power-on step): the nodes stay down until the test
        port = lab.info["devices"]["fc_ports"][node]  # powers them on, so both releases must happen
        fence_ns.put("config_map", fence_config(node, port, "fc-off", "ipmi-off", "fc-on"))
    try:
        lab.power_on(SPARE)
        lab.power_on(DEAD)
        lab.wait_nodes(nodes, "True", 120)
        for node in nodes:
            for i in range(2):
                core.create_namespaced_pod(
                    ns,
                    {
                        "metadata": {"name": f"app-{node}-{i}"},
                        "spec": {
                            "nodeName": node,
                            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
                        },
                    },
                )

        # what each release will count: the pods the taint evicts from the node (any namespace)
        def counts() -> dict[str, int]:
            return {
                n: len(
                    old_pods(
                        kjson(lab, "get", "pods", "-A", "--field-selector", f"spec.nodeName={n}")["items"],
                        n,
                        None,
                    )
                )
                for n in nodes
            }

        # Either release fits alone, both do not, with a limit of 3: each node has its own two pods,
        # and at most one more (another test's, from a namespace deleted without waiting, which may
        # go before the runner counts). A limit set from counts with more such pods would let both
        # releases fit once they had gone.
        limit = 3
        wait_for(
            lambda: all(2 <= c <= limit for c in counts().values()),
            120,
            f"2 to {limit} pods the taint evicts on each of {nodes}",
        )
        for node in nodes:
            lab.power_off(node)
        lab.wait_nodes(nodes, {"False", "Unknown"}, 120)
        runner("--max-pods-released-per-minute", str(limit))
        for node in nodes:
            nodefence(co, names[node], node)
        seen: dict[str, dict[str, Any]] = {n: {} for n in nodes}

        def tick() -> bool:
            for node in nodes:
                o = get_nf(co, names[node])
                c = conds(o).get("WorkloadsReleased") or {}
                s = seen[node]
                tainted = oos_on(core, node)
                if tainted and "taint_at" not in s:
                    s["taint_at"] = time.time()
                    s["jobs_at_taint"] = list((o.get("status") or {}).get("jobs") or [])
                if c.get("reason") == "ReleaseRateLimited":  # (written back as Released just after the taint)
                    s.setdefault("limited_at", time.time())
                    s["untainted_while_limited"] = s.get("untainted_while_limited", 0) + (not tainted)
            return all("taint_at" in s for s in seen.values())

        wait_for(tick, 300, "both nodes released", interval=0.2)
        first, second = sorted(nodes, key=lambda n: seen[n]["taint_at"])
        assert "limited_at" not in seen[first], seen
        assert seen[second]["limited_at"] < seen[second]["taint_at"], seen
        assert seen[second]["untainted_while_limited"] > 10, seen  # the condition held for many polls
        # its fencing did not wait: its power fence (ipmi-off) had run and been read back before
        # its release, while the first node's release had gone with its Isolation run
        assert f"{names[second]}-r0-power-management-a0" in seen[second]["jobs_at_taint"], seen
        assert f"{names[first]}-r0-power-management-a0" not in seen[first]["jobs_at_taint"], seen
        obj = wait_for(
            lambda: (
                (o := get_nf(co, names[second]))
                and (conds(o).get("WorkloadsReleased") or {}).get("reason") == "Released"
                and o
            ),
            60,
            f"{second}: WorkloadsReleased=True",
        )
        assert conds(obj)["WorkloadsReleased"]["status"] == "True"
        ev = [e for e in events_of(api, obj) if e.reason == "ReleaseRateLimited"]
        assert len(ev) == 1 and f"limit {limit} per minute" in ev[0].message, [e.message for e in ev]
        order = [e.reason for e in events_of(api, obj)]
        assert order.index("ReleaseRateLimited") < order.index("OutOfServiceTaintAdded"), order
        assert not (conds(get_nf(co, names[first])).get("WorkloadsReleased"))
        for node in nodes:  # the nodes come back: recovery, the taint goes, Final
            lab.power_on(node)
        for node in nodes:
            wait_for(
                lambda n=node: (get_nf(co, names[n]).get("status") or {}).get("status") in ("Final", "Error"),
                240,
                f"{node}'s NodeFence resting",
            )
            assert get_nf(co, names[node])["status"]["status"] == "Final"
    finally:
        for node in nodes:
            fence_ns.standard(node)
            try:
                co.delete_cluster_custom_object(*NF, names[node])
            except ApiException as exc:
                if exc.status != 404:
                    raise
        lab.kubectl("delete", "namespace", ns, "--wait=false")


# --- Metal3Remediation: the power-on waits for the detach ----------------------------------------------
@pytest.mark.timeout(600)
def test_metal3_powers_the_host_on_only_after_the_volume_attachment_is_gone(
    lab_kube: Any,
    api: client.ApiClient,
    metal3_ns: str,  # noqa: F811
    runner: Callable[..., Runner],  # noqa: F811
    dead: str,  # noqa: F811
    csi_volume: tuple[str, str],
) -> None:
    """A Metal3Remediation (Reboot strategy) of a dead node whose pod held a CSI volume: the host is
    powered off and read back off, the node tainted, the pod released; while its VolumeAttachment
    stays (the test's finalizer), the BMC's own power log shows no power-on and the remediation
    says once why it waits. Once the detach finishes, the host is powered on and the remediation
    ends (node Ready, taint and finalizer gone)."""
    lab, core, storage = lab_kube, client.CoreV1Api(api), client.StorageV1Api(api)
    co = client.CustomObjectsApi(api)
    ns, pv = csi_volume
    lab.power_on(DEAD)
    lab.wait_nodes([DEAD], "True", 120)
    va_name = db_pod_attached(core, storage, ns, pv)
    lab.power_off(DEAD)
    lab.wait_nodes([DEAD], {"False", "Unknown"}, 120)
    since = time.time()
    metal3_objects(
        lab, api, metal3_ns, "machine-r", DEAD, DEAD, {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}}
    )  # fmt: skip

    def m3r() -> dict:
        return co.get_namespaced_custom_object(*M3[:2], metal3_ns, M3[2], "machine-r")  # type: ignore[no-any-return]

    runner()
    obj = wait_for(
        lambda: (o := m3r()) and "WaitForDetach" in [e.reason for e in events_of(api, o)] and o,
        300,
        "the Metal3Remediation waiting for the VolumeAttachment",
    )
    message = next(e.message for e in events_of(api, obj) if e.reason == "WaitForDetach")
    assert f"1 VolumeAttachment(s) ({va_name})" in message and "0 pod(s)" in message, message
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("db", ns)
    assert gone.value.status == 404  # released: the pod is gone from the API, its detach held
    # over several of the runner's looks (every 5 s): still Running, tainted, never powered on
    deadline = time.monotonic() + 12
    looks = 0
    while time.monotonic() < deadline:
        assert (m3r().get("status") or {}).get("phase") == "Running"
        assert oos_on(core, DEAD), "the taint went before the detach finished"
        assert "1" not in power_sets(lab, DEAD, since), "the host was powered on before the detach"
        looks += 1
        time.sleep(0.5)
    assert looks >= 10
    assert [e.reason for e in events_of(api, m3r())].count("WaitForDetach") == 1  # said once

    released_at = time.time()
    storage.patch_volume_attachment(va_name, {"metadata": {"finalizers": None}})

    def done() -> dict | None:
        o = m3r()
        finished = (o.get("status") or {}).get("phase") == "Waiting" and not o["metadata"].get("finalizers")
        return o if finished and lab.node_ready([DEAD])[DEAD] == "True" and not oos_on(core, DEAD) else None

    wait_for(done, 240, "the Metal3Remediation done (powered on, node Ready, untainted)")
    ons = [at for at, value in power_rows(lab, DEAD, since) if value == "1"]
    assert ons and all(at > released_at for at in ons), (ons, released_at)
    print(f"\nFIGURE metal3 safe return: waited with {message!r}; BMC sets {power_sets(lab, DEAD, since)}")


def power_rows(lab: Any, node: str, since: float) -> list[tuple[float, str]]:
    """(epoch, ``0``/``1``) of the BMC's power sets since ``since``, from its chassis-control log."""
    path = Path(lab.info["devices"]["bmcs"][node]["power_log"])
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(float(at), value) for at, value in rows if float(at) >= since]


def power_sets(lab: Any, node: str, since: float) -> list[str]:
    """The BMC's power sets (``0``/``1``) since ``since``."""
    return [value for _at, value in power_rows(lab, node, since)]
