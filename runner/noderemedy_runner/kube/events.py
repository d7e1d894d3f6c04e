"""The runner's one core/v1 Event recorder.

Events follow medik8s: component ``noderemedy-runner``, messages prefixed ``[remediation] ``
(at most 1024 characters), ``Normal`` or ``Warning``, CamelCase reasons. Events of cluster-scoped
objects (Nodes, NodeFences) go to namespace ``default``, as the kubelet's do. Recording is best
effort, as client-go's recorder: a failure is logged and never raised.

Two ways to write, one recorder: in the background (``asynchronous=True``: the detector, whose
fencing must never wait for an Event) or in the calling thread (the reconcilers, whose Events
must be in the API before the next status change is).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from noderemedy_runner.kube.client import api
from noderemedy_runner.kube.errors import Conflict, KubeError

log = logging.getLogger("noderemedy_runner.kube.events")

#: ``source.component`` / ``reportingComponent`` of every Event.
COMPONENT = "noderemedy-runner"
#: medik8s prefix of remediation Event messages.
EVENT_PREFIX = "[remediation] "
#: Events namespace of cluster-scoped objects (the core API puts their events in "default").
CLUSTER_EVENTS_NAMESPACE = "default"


def reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ``involvedObject`` of a whole object (``apiVersion``, ``kind``, ``metadata``), or of a
    reference dict already in that shape (``kind``, ``name``, ...); empty fields dropped."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        ref = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
    else:
        ref = dict(obj)
    return {k: str(v) for k, v in ref.items() if v}


class EventRecorder:
    """Writes Events on objects for ``identity`` (``reportingInstance``).

    Args:
        api_client: the runner's ApiClient.
        identity: this replica's identity (at most 128 characters are kept).
        enabled: False records nothing (dry run).
        asynchronous: write from a background thread (:meth:`flush` waits for it).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        identity: str = COMPONENT,
        *,
        enabled: bool = True,
        asynchronous: bool = False,
    ) -> None:
        self.core = api(api_client, client.CoreV1Api)
        self.identity = identity[:128]
        self.enabled = enabled
        self.asynchronous = asynchronous
        self._q: queue.Queue[dict[str, Any]] = queue.Queue()
        if asynchronous:
            threading.Thread(target=self._loop, name="events", daemon=True).start()

    def record(
        self,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        action: str = "",
        once_key: str = "",
    ) -> None:
        """Record an Event on ``obj`` (a whole object or a reference, see :func:`reference`);
        ``type_`` Normal or Warning. Never raises.

        ``once_key`` (a DNS-label-safe string) records the Event at most once for that key: its
        name is ``<object name>.<once_key>``, and a second create with the same name is refused by
        the API server (409 AlreadyExists) and dropped, so a runner that died after recording it
        and its successor record it once between them."""
        if not self.enabled:
            return
        involved = reference(obj)
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = involved.get("namespace") or CLUSTER_EVENTS_NAMESPACE
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{involved.get('name', 'object')}.{once_key or uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": (EVENT_PREFIX + message)[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "action": action or reason,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if self.asynchronous:
            self._q.put(body)
        else:
            self._write(body)

    def _write(self, body: dict[str, Any]) -> None:
        raw: Any = body  # the client takes a JSON dict as it takes a model
        try:
            self.core.create_namespaced_event(body["metadata"]["namespace"], raw)
        except Conflict:  # an Event recorded once (``once_key``) is there already
            log.info("event %s %s: already recorded", body.get("reason"), body["metadata"]["name"])
        except KubeError as exc:
            log.warning("event %s not written: %s", body.get("reason"), exc)

    def _loop(self) -> None:
        while True:
            body = self._q.get()
            try:
                self._write(body)
            finally:
                self._q.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued Event was written (or failed); False after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self._q.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._q.unfinished_tasks


__all__ = ["CLUSTER_EVENTS_NAMESPACE", "COMPONENT", "EVENT_PREFIX", "EventRecorder", "reference"]
