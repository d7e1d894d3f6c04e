"""The runner's one list-then-watch loop.

:class:`Informer` lists a collection (raw JSON, no model deserialisation), hands the items to
``on_reset``, then watches from the list's resourceVersion and hands every change to
``on_event(type, object)``. It relists after any error and after 410 Gone, waiting 1 s, or
``missing_retry`` seconds when the resource type does not exist (a CRD not installed).

kubernetes 37 ``Watch.stream(..., deserialize=False)`` quirks: it does not track the
resourceVersion (``Watch.resource_version`` keeps the one passed in), so it is taken from each
event's object here; and an ERROR event raises KeyError ('raw_object') instead of an
ApiException -- handled as any error: relist.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch

from noderemedy_runner.kube.errors import NotFound, classify

log = logging.getLogger("noderemedy_runner.kube.informer")

#: (connect, read) seconds of the list request.
LIST_TIMEOUT = (10.0, 120.0)
#: (connect, read) seconds of a watch request; the server ends the watch after WATCH_SECONDS.
WATCH_TIMEOUT = (10.0, 60.0)
WATCH_SECONDS = 30


class Informer:
    """List then watch ``list_call`` (a ``list_*`` method of an API from
    :func:`noderemedy_runner.kube.client.api`, its positional arguments bound) until ``stop``.

    ``synced`` is set after the first list; ``missing`` while the resource type does not exist
    (its list answered 404: a CRD not installed, so there is nothing of it); ``errors`` counts
    relists after failures, and
    ``on_error`` (if given) is called at each, before the wait and the relist: a cache built from
    the events may have missed some until ``on_reset`` is called again.
    """

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        on_reset: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        missing_retry: float = 30.0,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.list_call = list_call
        self.on_reset = on_reset
        self.on_event = on_event
        self.missing_retry = missing_retry
        self.on_error = on_error
        self.synced = threading.Event()
        self.missing = threading.Event()
        self.errors = 0

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set (checked at least every ``WATCH_SECONDS``)."""
        missing_logged = False
        while not stop.is_set():
            try:
                resp = self.list_call(_preload_content=False, _request_timeout=LIST_TIMEOUT)
                doc = json.loads(resp.data)
                rv = doc["metadata"]["resourceVersion"]
                self.on_reset(doc.get("items") or [])
                self.missing.clear()
                self.synced.set()
                missing_logged = False
                self._watch(rv, stop)
            except NotFound:
                self.missing.set()
                if not missing_logged:
                    log.info(
                        "%s: the resource type is not installed; looking again every %g s",
                        self.name,
                        self.missing_retry,
                    )
                    missing_logged = True
                stop.wait(self.missing_retry)
            except Exception as exc:  # any failure of the stream: relist
                self.errors += 1
                if self.on_error is not None:
                    self.on_error()
                log.warning("%s watch: %s; relisting", self.name, classify(exc, f"watch {self.name}"))
                stop.wait(1.0)

    def _watch(self, rv: str, stop: threading.Event) -> None:
        w: Any = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            while not stop.is_set():
                for ev in w.stream(
                    self.list_call,
                    resource_version=rv,
                    timeout_seconds=WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                    _request_timeout=WATCH_TIMEOUT,  # a hung connection must not stop the loop
                ):
                    kind, obj = ev.get("type"), ev.get("object") or {}
                    if kind == "ERROR":
                        return  # 410 Gone or another error: relist
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if kind != "BOOKMARK":
                        self.on_event(str(kind), obj)
                    if stop.is_set():
                        return
        finally:
            w.stop()


__all__ = ["Informer"]
