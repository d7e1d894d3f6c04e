"""The drain's event loop (``Drainer._remove_all``) against an in-memory API: evictions in parallel,
deletions seen through the watch's notifications, the list fallback when the watch is down, 429
retries and the timeout. No network: ``request`` (of ``_drain.drainer``, and of ``_kube`` for the
node's read) and ``PodWatch`` of ``_drain.drainer`` are replaced."""

from __future__ import annotations

import threading

import pytest

from ansible_collections.noderemedy.core.plugins.module_utils import _kube
from ansible_collections.noderemedy.core.plugins.module_utils._drain import Drainer, DrainError, DrainOptions
from ansible_collections.noderemedy.core.plugins.module_utils._drain import drainer as _drainer
from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError

NODE = "n1"


class FakeWatch:
    """Stands in for :class:`_drain.watch.PodWatch`: the fake API reports deletions to it."""

    def __init__(self, api: FakeApi, healthy: bool, notify) -> None:
        self.api, self.healthy, self.notify = api, healthy, notify
        self._lock = threading.Lock()
        self._new: set[str] = set()

    def start(self) -> None:
        self.api.watches.append(self)

    def stop(self) -> None:
        self.healthy = False

    def deleted(self, uid: str) -> None:
        if not self.healthy:
            return
        with self._lock:
            self._new.add(uid)
        self.notify()

    def take(self):
        with self._lock:
            new, self._new = self._new, set()
        return new, {}


class FakeApi:
    """Pods on node ``n1``; an eviction deletes the pod after ``lag`` seconds (like a kubelet), or
    is refused with 429 ``refuse[name]`` times first, or never completes if ``name`` is in ``stuck``."""

    def __init__(self, names: list[str], lag: float = 0.01) -> None:
        self.pods = {
            f"uid-{n}": {
                "metadata": {
                    "name": n,
                    "namespace": "ns",
                    "uid": f"uid-{n}",
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}],
                },
                "spec": {"nodeName": NODE},
                "status": {"phase": "Running"},
            }
            for n in names
        }
        self.lag = lag
        self.refuse: dict[str, int] = {}
        self.stuck: set[str] = set()
        self.lists = 0
        self.evictions = 0
        self.watches: list[FakeWatch] = []
        self.lock = threading.Lock()

    def _delete(self, uid: str) -> None:
        with self.lock:
            self.pods.pop(uid, None)
        for w in self.watches:
            w.deleted(uid)

    def request(self, client, method, path, *, query=None, body=None, content_type=None, timeout=None):
        if path == f"/api/v1/nodes/{NODE}":
            return {"metadata": {"name": NODE}, "spec": {}}
        if path == "/api/v1":
            return {"resources": [{"name": "pods/eviction"}]}
        if path == "/api/v1/pods":
            with self.lock:
                self.lists += 1
                return {"metadata": {"resourceVersion": "7"}, "items": list(self.pods.values())}
        if method == "POST" and path.endswith("/eviction"):
            name = body["metadata"]["name"]
            uid = body["deleteOptions"]["preconditions"]["uid"]
            with self.lock:
                self.evictions += 1
                if self.refuse.get(name, 0) > 0:
                    self.refuse[name] -= 1
                    raise KubeError(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        "too_many_requests",
                        429,
                    )
                if uid not in self.pods:
                    raise KubeError("not found", "not_found", 404)
            if name not in self.stuck:
                threading.Timer(self.lag, self._delete, (uid,)).start()
            return {"kind": "Status", "status": "Success"}
        raise AssertionError(f"unexpected request {method} {path}")


@pytest.fixture
def api(monkeypatch):
    def make(names, watch_healthy: bool = True, **kw) -> FakeApi:
        fake = FakeApi(names, **kw)
        monkeypatch.setattr(_drainer, "request", fake.request)
        monkeypatch.setattr(_kube, "request", fake.request)
        monkeypatch.setattr(
            _drainer,
            "PodWatch",
            lambda client, node, rv, timeout, notify=None: FakeWatch(fake, watch_healthy, notify),
        )
        return fake

    return make


def test_deletions_are_seen_through_the_watch_without_listing_again(api):
    fake = api([f"p{i}" for i in range(40)])
    result = Drainer(None, NODE, DrainOptions(timeout=30), max_workers=8).drain()
    assert len(result.evicted) == 40 and not result.pending
    assert fake.evictions == 40
    assert fake.lists == 1  # the list the filters ran on; the watch did the rest


def test_without_a_watch_the_node_is_listed_until_the_pods_are_gone(api):
    fake = api(["a", "b", "c"], watch_healthy=False, lag=0.2)
    result = Drainer(None, NODE, DrainOptions(timeout=30, poll_interval=0.05)).drain()
    assert sorted(result.evicted) == ["ns/a", "ns/b", "ns/c"]
    assert fake.lists >= 2


def test_429_is_retried_after_the_retry_delay(api):
    fake = api(["a", "b"])
    fake.refuse["a"] = 2
    result = Drainer(None, NODE, DrainOptions(timeout=30, retry_delay=0.05)).drain()
    assert sorted(result.evicted) == ["ns/a", "ns/b"]
    assert result.retries == 2 and fake.evictions == 4


def test_timeout_names_the_pod_still_terminating_and_uncordons(api):
    fake = api(["a", "b"])
    fake.stuck.add("b")
    with pytest.raises(DrainError) as err:
        Drainer(None, NODE, DrainOptions(timeout=0.5, poll_interval=0.05)).drain()
    exc = err.value
    assert exc.reason == "timeout"
    assert "ns/b (evicted, still terminating)" in exc.message
    assert exc.result.evicted == ["ns/a"]
    assert exc.result.pending == [{"pod": "ns/b", "reason": "evicted, still terminating"}]
    assert "uncordoned again" in exc.message


def test_pdb_blocking_until_the_timeout_is_reported_as_refused(api):
    fake = api(["a"])
    fake.refuse["a"] = 10_000
    with pytest.raises(DrainError) as err:
        Drainer(None, NODE, DrainOptions(timeout=0.4, retry_delay=0.1)).drain()
    assert err.value.reason == "timeout"
    assert err.value.result.pending[0]["reason"].startswith("eviction refused, retried until the end")
    assert err.value.result.retries >= 2
