"""Fixtures of the integration tests that drive the lab's API server and the runner.

* ``api``: the lab's admin ApiClient with every CRD under ``deploy/crds/`` installed (created, or
  replaced when present) and Established -- once per module;
* ``namespace``: a fresh namespace for a runner (Leases, status ConfigMap); NodeFences deleted after;
* ``runners``: the :class:`~runner_harness.Runner` objects a test starts; those still alive are
  stopped after it;
* ``powered_on``: the lab, every node powered on and Ready again after the test;
* ``remediation_image``: the remediation pod image built from this checkout (``./dev image``),
  once per test run for every pytest-xdist worker (``./dev test`` builds it beside the tests from
  their start, :data:`RUN_ID_ENV`);
* ``monitor_image``: that image imported into the real node lab-real-0's containerd, once per
  session: the startup-monitor static pods of every module run from it.

The lab itself (``lab``, ``lab_kube``) comes from the ``noderemedy_lab`` pytest plugin, and
``run_playbook`` from ``tests/conftest.py``.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner_harness import CRD_DIR, Runner, delete_nodefences

from noderemedy_lab.realnode import import_image

ROOT = Path(__file__).resolve().parents[2]
#: The environment variable naming the test run for :func:`remediation_image` in place of
#: pytest-xdist's ``testrun_uid``: ``./dev test`` sets it and builds the image under that name in
#: the background from the run's start (its first static check), so that the tests that need the
#: image, from minutes into the run, find it built instead of building it while they wait.
RUN_ID_ENV = "NODEREMEDY_TEST_RUN_ID"
#: The real node whose containerd :func:`monitor_image` imports the remediation pod image into.
MONITOR_NODE = "lab-real-0"

#: Seconds of tests per file (the lab start-ups of its first test included), measured with
#: ``--durations=0`` on this machine, for the files that take longest: the scheduling hint of
#: :func:`pytest_collection_modifyitems`. Each is the file's seconds with a lab already up, plus
#: its first test's start-up when that starts real nodes. Files that use the real nodes are marked;
#: the lab's real nodes start in the first such file a worker runs. A file not listed counts
#: :data:`SECONDS_PER_TEST` per test when it is an integration test, 0 otherwise (most unit test
#: files take a few seconds; the two listed run exhaustive sweeps of the state machines).
FILE_SECONDS = {
    "test_runner_e2e.py": 414,
    "test_runner_e2e_faults.py": 152,  # its four tests, split from test_runner_e2e.py (junit of a CI run)
    # real nodes (measured with test_static_pod_monitor_pod.py, ./dev test -n 1, load average 8)
    "test_static_pod_role_defaults.py": 375,
    "test_static_pod_apiserver_node.py": 487,  # real nodes (measured alone, 2026-11, a loaded machine)
    "test_demo.py": 188,  # the demo on its own lab; the image built before by ./dev test's image check
    "test_molecule.py": 384,
    "test_runner_in_cluster.py": 377,  # real nodes
    "test_real_node_fencing.py": 306,  # real nodes
    "test_runner_safe_return.py": 263,
    # its own lab with 3 real nodes (its start-up included, the run's image build not), -n 0, a
    # loaded machine
    "test_runner_in_cluster_back_to_back.py": 200,
    "test_static_pod_kubelet.py": 160,  # real nodes
    "test_static_pod_monitor_pod.py": 135,  # real nodes
    "test_runner_e2e_devices.py": 196,
    "test_runner_finalizer.py": 153,
    "test_node_drain.py": 132,
    "test_runner_sigterm.py": 131,
    "test_runner_remedy_pods.py": 112,  # real nodes
    "test_fencing_pdu.py": 112,
    "test_fencing_fc.py": 111,
    "test_static_pod_module.py": 106,
    "test_static_pod_fallback.py": 102,
    "test_runner_restart.py": 101,
    "test_lab_kube.py": 101,
    "test_real_nodes.py": 97,  # real nodes
    "test_runner_guards.py": 73,
    "test_watcher_detection.py": 67,
    "test_runner_stop.py": 55,
    "test_nodefence_sweep.py": 99,  # tests/unit/runner: the NodeFence machine's exhaustive sweeps
    "test_executor.py": 38,  # tests/unit/runner
}
#: The estimate for a test of an integration file :data:`FILE_SECONDS` does not list, seconds.
SECONDS_PER_TEST = 6


def estimated_seconds(path: Path, tests: int) -> float:
    """Seconds the tests of the file ``path`` (``tests`` of them) are expected to take: its entry in
    :data:`FILE_SECONDS`, else :data:`SECONDS_PER_TEST` per test for an integration file, else 0."""
    if path.name in FILE_SECONDS:
        return FILE_SECONDS[path.name]
    return tests * SECONDS_PER_TEST if "integration" in path.parts else 0.0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, order the files by :func:`estimated_seconds`, longest first (the tests
    inside a file keep their order; files of the same estimate keep theirs): ``./dev test``
    distributes whole files in this order (``--dist loadfile --no-loadscope-reorder``), so each
    worker takes the longest file left when it frees up, and no long file starts last to finish
    alone. (pytest-xdist's own order for loadfile, by number of tests, sent the one-test demo out
    last.) Without xdist the order is the lab plugin's: tests that use the real nodes last.

    A worker may so run tests written for the kwok nodes after its real nodes joined the cluster (as
    pytest-xdist's order by number of tests already had it): they address the kwok nodes by name
    (``lab.info["nodes"]``) or by their ``type=kwok`` label (the watcher tests' ``nodeSelector``).
    """
    if not hasattr(config, "workerinput"):
        return
    tests = Counter(item.path for item in items)
    items.sort(key=lambda item: -estimated_seconds(item.path, tests[item.path]))


def _install(ext: client.ApiextensionsV1Api, body: dict, source: str) -> bool:
    """Create the CRD ``body``, or replace the one there; False while one of the same name is
    still being deleted (a module's teardown may delete the CRDs without waiting)."""
    name = body["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(body)
        return True
    except ApiException as exc:
        if exc.status != 409:
            raise AssertionError(f"{source} rejected by the API server: {exc.body}") from exc
    try:
        current = ext.read_custom_resource_definition(name)
        if current.metadata.deletion_timestamp is not None:
            return False
        ext.replace_custom_resource_definition(
            name,
            {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resource_version}},
        )
    except ApiException as exc:
        if exc.status in (404, 409):  # gone or changed meanwhile: try again
            return False
        raise AssertionError(f"{source} rejected by the API server: {exc.body}") from exc
    return True


@pytest.fixture(scope="module")
def api(lab_kube: Any) -> client.ApiClient:
    """The lab's admin ApiClient, with every CRD under deploy/crds/ installed and Established (per
    module: a module may delete them, as test_deploy.py's teardown does with the kustomization)."""
    api_client = lab_kube.api_client()
    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for path in sorted(CRD_DIR.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        names.append(body["metadata"]["name"])
        wait_for(lambda body=body, path=path: _install(ext, body, path.name), 120, f"{path.name} installed")

    def established(name: str) -> bool:
        conds = {
            c.type: c.status for c in (ext.read_custom_resource_definition(name).status.conditions or [])
        }
        return conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"

    for name in names:
        wait_for(lambda n=name: established(n), 60, f"CRD {name} Established")
    return api_client


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace for the runner (Leases, status ConfigMap); NodeFences (cluster-scoped)
    deleted before and after."""
    name = f"nr-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(api)
    delete_nodefences(api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    delete_nodefences(api)
    core.delete_namespace(name)


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    """Runners started by a test; every one still alive is stopped afterwards."""
    started: list[Runner] = []
    yield started
    for r in started:
        if r.alive():
            r.stop()


@pytest.fixture
def powered_on(lab_kube: Any) -> Iterator[Any]:
    """The lab, with every node powered on and Ready again after the test."""
    yield lab_kube
    for node in lab_kube.info["nodes"]:
        lab_kube.power_on(node)
    lab_kube.wait_nodes(lab_kube.info["nodes"], "True", 90)


@pytest.fixture(scope="session")
def remediation_image(testrun_uid: str) -> dict[str, Any]:
    """The remediation pod image built from this checkout by ``./dev image``, as its
    ``build/image/image.json`` (``image``, ``archive``, ``size_bytes``, ``build_s``).

    Built once per test run: the xdist workers share ``build/``, so the first one builds under an
    exclusive lock on ``build/.image.lock`` and stamps ``build/image/.testrun`` with the run's id
    (``$NODEREMEDY_TEST_RUN_ID`` when set, else pytest-xdist's ``testrun_uid``); the others wait for
    the lock and reuse that build. ``./dev test`` builds it so before the tests ask (its static
    check ``image``, first of the background chain, holding the lock from the run's start): a test
    then waits for what is left of that build at most. A failed build fails the test, never skips it.
    """
    run_id = os.environ.get(RUN_ID_ENV) or testrun_uid
    build = ROOT / "build"
    build.mkdir(exist_ok=True)
    stamp = build / "image" / ".testrun"
    with (build / ".image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.is_file() or stamp.read_text() != run_id:
            out = subprocess.run(
                [str(ROOT / "dev"), "image"],
                capture_output=True,
                text=True,
                timeout=1800,
                cwd=ROOT,
                check=False,
            )
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
            stamp.write_text(run_id)
        doc: dict[str, Any] = json.loads((build / "image" / "image.json").read_text())
    return doc


@pytest.fixture(scope="session")
def monitor_image(lab_real: Any, remediation_image: dict[str, Any]) -> str:
    """The remediation pod image (built from this checkout), imported into the containerd of
    :data:`MONITOR_NODE`; its name. Once per session (the node's containerd keeps it for the
    session): the modules whose startup-monitor static pods run from it share the import, which
    takes seconds on an idle machine and more than 30 s on a busy one."""
    info = lab_real.info["real_nodes"][MONITOR_NODE]
    import_image(info["containerd_socket"], Path(remediation_image["archive"]), "remediation pod image")
    return str(remediation_image["image"])
