# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Degraded signal: while a revision has fallen back (a retry of it pending, or not retried),
the node says so where an admin and the alerts look, until a revision is marked good.

The OpenShift enhancement's user story: "as an administrator I want to be notified when a revision
was not rolled out". On OpenShift the operator sets its ClusterOperator Degraded; here there is no
operator, so the monitor writes to the Node it runs on, through the client configuration it was
given (``kubeconfig`` or ``host``):

* a node condition ``<Operand>StaticPodDegraded`` (``kube-apiserver`` gives
  ``KubeApiserverStaticPodDegraded``), ``True`` with the fallback reason and a message naming the
  revisions and ``retry-at`` (or that the revision is not retried); ``False`` (reason ``RevisionMarkedGood``) once a revision is marked
  good. A condition of its own stays until changed: the kubelet updates only the condition types
  it owns (as with node-problem-detector's), ``kubectl describe node`` lists it and
  kube-state-metrics exports it as ``kube_node_status_condition`` (the alert
  ``NoderemedyStaticPodDegraded`` in ``deploy/monitoring/prometheusrule.yaml``);
* an Event on the Node (``Warning StaticPodFallback``, ``Normal StaticPodRevisionGood``) in
  namespace ``default``, where the kubelet puts the node's own Events.

Best effort, as the API server may be the one that just fell back: :meth:`NodeSignal.report`
returns False when the API server does not answer, and the caller tries again later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from ansible_collections.noderemedy.core.plugins.module_utils._static_pod.vocabulary import (
    FALLBACK_FOR_REVISION,
    FALLBACK_REASON,
    RETRY_AT,
)

#: Reason of the condition once a revision is marked good.
MARKED_GOOD = "RevisionMarkedGood"
EVENT_FALLBACK = "StaticPodFallback"
EVENT_GOOD = "StaticPodRevisionGood"


def condition_type(operand: str) -> str:
    """The node condition of ``operand``: ``kube-apiserver`` -> ``KubeApiserverStaticPodDegraded``."""
    return "".join(part[:1].upper() + part[1:] for part in operand.split("-") if part) + "StaticPodDegraded"


def degraded_state(
    operand: str, res: dict[str, Any], live_annotations: dict[str, Any]
) -> dict[str, Any] | None:
    """What the node should show after a monitor round ``res`` (pure).

    Returns ``{"status": "True"|"False", "reason", "message", "event_type", "event_reason"}`` or None
    (nothing to say: the live manifest is no fallback and no revision was marked good). Degraded
    is ``True`` while the live manifest is a fallback (``live_annotations``); its message gives
    ``retry-at`` while a retry is pending, else says that the revision is not retried.
    """
    if res.get("action") == "mark_good":
        rev = res.get("revision")
        return {
            "status": "False",
            "reason": MARKED_GOOD,
            "message": f"{operand} revision {rev} is ready and marked last-known-good",
            "event_type": "Normal",
            "event_reason": EVENT_GOOD,
        }
    failed = live_annotations.get(FALLBACK_FOR_REVISION)
    retry_at = live_annotations.get(RETRY_AT)
    if failed is None:
        return None
    then = (
        f"it is rolled out again at {retry_at}" if retry_at else "it is not retried: install a fixed revision"
    )
    reason = str(live_annotations.get(FALLBACK_REASON) or res.get("reason") or "Fallback")
    target = res.get("fallback_revision")
    to = f" to revision {target}" if target is not None else ""
    detail = res.get("message") or ""
    return {
        "status": "True",
        "reason": reason,
        "message": f"{operand} revision {failed} fell back{to} ({reason}: {detail}); {then}"[:1024],
        "event_type": "Warning",
        "event_reason": EVENT_FALLBACK,
    }


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class NodeSignal:
    """Writes the Degraded condition and Events of one operand on one Node.

    Args:
        client_factory: returns a ``kubernetes.client.ApiClient`` (:func:`._kube.get_api_client`);
            called once, lazily.
        node_name: the Node (the kubelet's name for it).
        operand: e.g. ``kube-apiserver``.
        request_timeout: seconds per request.
        clock: epoch seconds (for the condition's and Event's times).
    """

    def __init__(
        self,
        client_factory: Callable[[], Any],
        node_name: str,
        operand: str,
        request_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._factory = client_factory
        self._client: Any = None
        self.node_name = node_name
        self.operand = operand
        self.request_timeout = request_timeout
        self.clock = clock
        self.last_error = ""
        #: the last report failed in a way that trying again cannot fix (no such Node, forbidden,
        #: a bad client configuration)
        self.gave_up = False

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        from ansible_collections.noderemedy.core.plugins.module_utils._kube import request

        if self._client is None:
            self._client = self._factory()
        return request(self._client, method, path, timeout=self.request_timeout, **kwargs)

    def report(self, state: dict[str, Any]) -> bool:
        """Set the condition to ``state`` (:func:`degraded_state`) and post its Event.

        A ``False`` state is written only over a ``True`` condition (a node that never degraded
        gets no condition, a cleared one no second Event). Returns True when done (or nothing to do), False when the API
        server did not answer or refused (``last_error`` says why; ``gave_up`` when trying again
        cannot help: no such Node, forbidden, a bad client configuration); never raises.
        """
        from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError

        ctype = condition_type(self.operand)
        path = f"/api/v1/nodes/{quote(self.node_name, safe='')}"
        try:
            node = self._request("GET", path)
            current = next(
                (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == ctype),
                None,
            )
            if state["status"] == "False" and (current is None or current.get("status") == "False"):
                return True  # never degraded, or cleared already: nothing to say
            same = current is not None and all(
                current.get(k) == state[k] for k in ("status", "reason", "message")
            )
            if same:
                return True
            now = _rfc3339(self.clock())
            changed = current is None or current.get("status") != state["status"]
            condition = {
                "type": ctype,
                "status": state["status"],
                "reason": state["reason"],
                "message": state["message"],
                "lastHeartbeatTime": now,
                "lastTransitionTime": now if changed else current.get("lastTransitionTime", now),
            }
            self._request(
                "PATCH",
                path + "/status",
                body={"status": {"conditions": [condition]}},
                content_type="application/strategic-merge-patch+json",
            )
            meta = node.get("metadata") or {}
            self._request(
                "POST",
                "/api/v1/namespaces/default/events",
                body={
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"generateName": f"{self.node_name}.", "namespace": "default"},
                    "involvedObject": {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.node_name,
                        "uid": meta.get("uid", ""),
                    },
                    "type": state["event_type"],
                    "reason": state["event_reason"],
                    "message": state["message"],
                    "source": {"component": "noderemedy-static-pod-monitor", "host": self.node_name},
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )
        except KubeError as exc:
            self.last_error = str(exc)
            self.gave_up = exc.reason in ("not_found", "forbidden", "invalid")
            return False
        except Exception as exc:  # best effort: the API server may be the operand that just fell back
            self.last_error = f"{type(exc).__name__}: {exc}"
            return False
        return True


def live_annotations(layout: Any) -> dict[str, Any]:
    """The live manifest's annotations (empty when it cannot be read)."""
    try:
        return dict(
            layout.read_pod(layout.live_manifest, "live manifest")["metadata"].get("annotations") or {}
        )
    except Exception:  # StaticPodError, a manifest without metadata: nothing to report from
        return {}


def report_until(
    signal: NodeSignal,
    state: dict[str, Any],
    within: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Report ``state`` through ``signal``, trying every ``interval`` seconds for up to ``within``
    seconds (after a fallback the last-known-good API server takes a while to serve again); not
    again after an error that trying again cannot fix (:attr:`NodeSignal.gave_up`).

    Returns the result's ``degraded`` entry: ``{"condition", "status", "reason", "reported",
    "error"?}``.
    """
    end = clock() + within
    while True:
        ok = signal.report(state)
        if ok or signal.gave_up or clock() >= end:
            break
        sleep(max(0.0, min(interval, end - clock())))
    out = {
        "condition": condition_type(signal.operand),
        "status": state["status"],
        "reason": state["reason"],
        "reported": ok,
    }
    if not ok:
        out["error"] = signal.last_error
    return out
