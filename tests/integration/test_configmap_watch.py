"""The runner's ConfigMap cache against the lab's API server: a list, then a watch that keeps the
fence configurations current, and reads that go to the API only for a name it does not hold."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kube_helpers import namespace as kube_namespace
from kube_helpers import wait_for
from kubernetes import client

from noderemedy_runner.kube.configmaps import ConfigMapCache
from noderemedy_runner.kube.resources import KubeIO

pytestmark = [pytest.mark.lab, pytest.mark.kube]


@pytest.fixture
def namespace(lab_kube: Any) -> Iterator[str]:
    with kube_namespace(lab_kube, "cm", wait=False) as name:
        yield name


class _CountingCore:
    """The KubeIO's own CoreV1 access, counting its ConfigMap reads (not a stand-in: every call
    goes to the lab's API server)."""

    def __init__(self, core: Any) -> None:
        self.core, self.reads = core, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.core, name)

    def read_namespaced_config_map(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self.core.read_namespaced_config_map(*args, **kwargs)


def test_the_cache_follows_the_namespace_and_reads_only_what_it_lacks(lab_kube: Any, namespace: str) -> None:
    api = lab_kube.api_client()
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "fence-config-a"}, "data": {"k": "1"}})
    kube = KubeIO(api)
    counting = _CountingCore(kube.core)
    kube.core = counting
    cache = ConfigMapCache(api, namespace)
    kube.configmaps = cache
    # not listed yet: read from the API
    assert kube.get_configmap_data(namespace, "fence-config-a") == {"k": "1"} and counting.reads == 1
    stop = threading.Event()
    thread = threading.Thread(target=cache.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert cache.informer.synced.wait(30), "the namespace was never listed"
        assert kube.get_configmap_data(namespace, "fence-config-a") == {"k": "1"}
        assert counting.reads == 1, "a held ConfigMap was read from the API"
        # the watch brings a change, a new ConfigMap and a deletion
        core.patch_namespaced_config_map("fence-config-a", namespace, {"data": {"k": "2"}})
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "fence-method-template-t"}})
        wait_for(lambda: cache.data("fence-config-a") == {"k": "2"}, 30, "the change seen by the watch")
        wait_for(lambda: cache.data("fence-method-template-t") == {}, 30, "the new ConfigMap seen")
        assert kube.get_configmap_data(namespace, "fence-method-template-t") == {}
        reads = counting.reads
        core.delete_namespaced_config_map("fence-config-a", namespace)
        wait_for(lambda: cache.data("fence-config-a") is None, 30, "the deletion seen by the watch")
        # a name it does not hold is read from the API: gone there too
        assert kube.get_configmap_data(namespace, "fence-config-a") is None
        assert counting.reads == reads + 1
        # another namespace is not the cache's: read from the API
        assert kube.get_configmap_data("kube-system", "no-such-configmap") is None
        assert counting.reads == reads + 2
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
