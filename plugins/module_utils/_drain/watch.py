# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One watch on the node's pods that records which UIDs were deleted (the drain waits on it
instead of polling each pod, as kubectl does).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any


class PodWatch(threading.Thread):
    """Watch the node's pods from a resourceVersion and record which UIDs were deleted.

    One streaming request (``watch=true``, field selector ``spec.nodeName``) instead of listing
    every pod again and again: the API server sends one event per change. ``healthy`` turns
    False if the stream fails or ends (e.g. ``410 Gone``); the caller then lists instead.

    Args:
        client: ``kubernetes.client.ApiClient``.
        node: the node's name.
        resource_version: where to start (from the LIST the drain decided on), so no event is missed.
        timeout: seconds the server keeps the watch open.
        notify: called (from the watch's thread) after each event that marks a pod deleted or
            terminating, and once when the stream ends, so the caller need not poll.
    """

    def __init__(
        self,
        client: Any,
        node: str,
        resource_version: str,
        timeout: float,
        notify: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name=f"watch-pods-{node}", daemon=True)
        self.notify = notify or (lambda: None)
        self.client = client
        self.node = node
        self.resource_version = resource_version
        self.timeout = max(1, int(timeout))
        self.deleted: set[str] = set()
        self.deletion_timestamps: dict[str, str] = {}
        self.healthy = bool(resource_version)
        self.started_streaming = threading.Event()
        self._new_deleted: set[str] = set()
        self._new_stamps: dict[str, str] = {}
        self._response: Any = None
        self._lock = threading.Lock()

    def snapshot(self) -> tuple[set[str], dict[str, str]]:
        """``(deleted UIDs, {uid: deletionTimestamp})`` seen so far (copies)."""
        with self._lock:
            return set(self.deleted), dict(self.deletion_timestamps)

    def take(self) -> tuple[set[str], dict[str, str]]:
        """Like :meth:`snapshot`, but only what was seen since the previous ``take`` (cheap to
        call after every event; the caller accumulates)."""
        with self._lock:
            deleted, stamps = self._new_deleted, self._new_stamps
            self._new_deleted, self._new_stamps = set(), {}
        return deleted, stamps

    def run(self) -> None:
        try:
            params = self.client.param_serialize(
                "GET",
                "/api/v1/pods",
                query_params=[
                    ("watch", "true"),
                    ("fieldSelector", f"spec.nodeName={self.node}"),
                    ("resourceVersion", self.resource_version),
                    ("timeoutSeconds", self.timeout),
                ],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.client.call_api(*params, _request_timeout=(5.0, float(self.timeout + 30)))
            self._response = response.response
            if response.status != 200:
                return
            self.started_streaming.set()
            pending = b""
            for chunk in self._response.stream(amt=None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip() and not self._event(json.loads(line)):
                        return
        except Exception:  # any failure means: fall back to listing
            return
        finally:
            self.healthy = False
            self.started_streaming.set()
            self.notify()

    def _event(self, event: dict[str, Any]) -> bool:
        kind = event.get("type")
        if kind == "ERROR":
            return False
        meta = (event.get("object") or {}).get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return True
        with self._lock:
            if kind == "DELETED":
                self.deleted.add(uid)
                self._new_deleted.add(uid)
            elif (
                meta.get("deletionTimestamp")
                and self.deletion_timestamps.get(uid) != meta["deletionTimestamp"]
            ):
                self.deletion_timestamps[uid] = meta["deletionTimestamp"]
                self._new_stamps[uid] = meta["deletionTimestamp"]
            else:
                return True
        self.notify()
        return True

    def stop(self) -> None:
        """End the stream without waiting: ``shutdown()`` interrupts the thread's blocking read
        (``close()`` would wait for it, holding the reader's lock, until the server ends the watch)."""
        self.healthy = False
        response = self._response
        shutdown = getattr(response, "shutdown", None)  # urllib3 >= 2.3
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # a stream that is already gone
                pass
