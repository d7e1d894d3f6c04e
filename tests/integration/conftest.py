"""Fixtures of the integration tests that drive the lab's API server and the runner.

* ``api``: the lab's admin ApiClient with every CRD under ``deploy/crds/`` installed (created, or
  replaced when present) and Established -- once per module;
* ``namespace``: a fresh namespace for a runner (Leases, status ConfigMap); NodeFences deleted after;
* ``runners``: the :class:`~runner_harness.Runner` objects a test starts; those still alive are
  stopped after it;
* ``powered_on``: the lab, every node powered on and Ready again after the test;
* ``remediation_image``: the remediation pod image built from this checkout (``./dev image``),
  once per test run for every pytest-xdist worker.

The lab itself (``lab``, ``lab_kube``) comes from the ``noderemedy_lab`` pytest plugin, and
``run_playbook`` from ``tests/conftest.py``.
"""

from __future__ import annotations

import fcntl
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_helpers import wait_for
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from runner_harness import CRD_DIR, Runner, delete_nodefences

ROOT = Path(__file__).resolve().parents[2]

#: The longest test files (seconds of tests per file, measured with ``--durations=0`` under 2
#: workers), longest first. pytest-xdist's ``--dist loadfile`` hands files out in collection order,
#: so these go first: the longest file then starts at once instead of last and finishing alone.
LONGEST_FIRST = [
    "test_demo.py",  # 406 s (the image fixture's ./dev image, then the whole demo)
    "test_runner_e2e.py",  # 395 s
    "test_molecule.py",  # 281 s
    "test_node_drain.py",  # 153 s
    "test_fencing_pdu.py",  # 112 s
    "test_fencing_fc.py",  # 111 s
    "test_static_pod_module.py",  # 106 s
    "test_static_pod_fallback.py",  # 102 s
    "test_lab_kube.py",  # 101 s
    "test_watcher_detection.py",  # 67 s
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Collect the files of :data:`LONGEST_FIRST` first, in that order (the tests inside a file
    keep theirs; the other files follow as collected)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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
    exclusive lock on ``build/.image.lock`` and stamps ``build/image/.testrun`` with the run's id;
    the others wait for the lock and reuse that build. A failed build fails the test, never skips it.
    """
    build = ROOT / "build"
    build.mkdir(exist_ok=True)
    stamp = build / "image" / ".testrun"
    with (build / ".image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.is_file() or stamp.read_text() != testrun_uid:
            out = subprocess.run(
                [str(ROOT / "dev"), "image"],
                capture_output=True,
                text=True,
                timeout=1800,
                cwd=ROOT,
                check=False,
            )
            assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
            stamp.write_text(testrun_uid)
        doc: dict[str, Any] = json.loads((build / "image" / "image.json").read_text())
    return doc
