"""The fence device check loop: validate every fence ConfigMap at startup and whenever one changes,
and read every fence device with a read-only ``status`` call every ``interval`` seconds
(Pacemaker's monitor operation). Decisions are :mod:`noderemedy_runner.machines.health`'s; this module
does the I/O: list the runner namespace's ConfigMaps, run ``playbooks/fence_device_check.yml``
through the executor (the fencing modules read their Secrets themselves, so no credential passes
through here), record Events and metrics.

Events (message prefixed ``[remediation]``): ``FenceConfigInvalid`` (Warning) on the ConfigMap
the parser refuses, with its message (ConfigMap, key, problem), and ``FenceConfigValid`` when it
is fixed; ``FenceAuthFailed`` / ``FenceDeviceUnreachable`` / ``FenceDeviceError`` (Warning) on the
device's template ConfigMap and on every Node it fences when a device turns unhealthy, and
``FenceDeviceHealthy`` when it recovers.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from noderemedy_runner import logs
from noderemedy_runner.config.fence import CONFIG_PREFIX, TEMPLATE_PREFIX
from noderemedy_runner.executor import Executor
from noderemedy_runner.kube.client import api as kapi
from noderemedy_runner.kube.resources import KubeIO
from noderemedy_runner.machines.actions import Action
from noderemedy_runner.machines.health import (
    CONFIG_INVALID,
    DeviceCheck,
    DeviceHealth,
    HealthObserver,
    NullHealthObserver,
    changed,
    devices_to_check,
    results_for,
    validate_namespace,
)

log = logging.getLogger(__name__)

#: The playbook of the check run.
PLAYBOOK = "fence_device_check.yml"
#: Seconds a device may take to answer one status read (the modules' ``power_timeout``).
CHECK_POWER_TIMEOUT = 5.0
#: Seconds after startup before the first device read (at most; ``interval`` if shorter): a
#: runner that starts because nodes fail fences them first.
STARTUP_DELAY = 30.0


def list_fence_configmaps(api: client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    """Every ConfigMap of ``namespace`` named ``fence-config-*`` or ``fence-method-template-*``:
    name → ``{"data", "resourceVersion", "uid"}``. Errors propagate (:class:`~noderemedy_runner.kube.errors.KubeError`)."""
    resp = kapi(api, client.CoreV1Api).list_namespaced_config_map(namespace, _preload_content=False)
    out: dict[str, dict[str, Any]] = {}
    for item in json.loads(resp.data).get("items") or []:  # type: ignore[attr-defined]
        meta = item.get("metadata") or {}
        name = str(meta.get("name", ""))
        if name.startswith((CONFIG_PREFIX, TEMPLATE_PREFIX)):
            out[name] = {
                "data": item.get("data") or {},
                "resourceVersion": meta.get("resourceVersion"),
                "uid": meta.get("uid"),
            }
    return out


def _configmap_ref(namespace: str, name: str, uid: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
    }


class DeviceChecker:
    """Validates the fence ConfigMaps and reads the fence devices of ``namespace``.

    Args:
        api: the kubernetes ApiClient.
        kube: for Events and Nodes (:class:`~noderemedy_runner.kube.resources.KubeIO`).
        executor: runs the check playbook (one run reads every device).
        namespace: the runner's namespace (fence ConfigMaps and Secrets).
        interval: seconds between device reads (a changed ConfigMap triggers one at once).
        observer: metrics.
        clock: monotonic seconds (injectable).
    """

    def __init__(
        self,
        api: client.ApiClient,
        kube: KubeIO,
        executor: Executor,
        *,
        namespace: str,
        interval: float,
        observer: HealthObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"device check interval {interval} must be > 0 seconds")
        self.api, self.kube, self.executor = api, kube, executor
        self.namespace, self.interval = namespace, interval
        self.observer: HealthObserver = observer or NullHealthObserver()
        self.clock = clock
        self.versions: dict[str, Any] = {}
        self.invalid: dict[str, str] = {}
        self.health: dict[tuple[str, str], DeviceHealth] = {}
        self.next_check = clock() + min(interval, STARTUP_DELAY)
        self._validated = False
        self._stop: threading.Event | None = None  # set by run(): cancels a check in flight
        self._configs: dict[str, Any] = {}

    def validate(self) -> tuple[dict[str, dict[str, Any]], bool]:
        """List and validate the fence ConfigMaps; Events for those that turned invalid or valid.
        Returns (the ConfigMaps, whether any changed since the last call)."""
        cms = list_fence_configmaps(self.api, self.namespace)
        versions = {n: c["resourceVersion"] for n, c in cms.items()}
        moved = versions != self.versions
        self.versions = versions
        if not moved:
            return cms, False
        result = validate_namespace({n: c["data"] for n, c in cms.items()})
        for name, c in cms.items():
            err = result.errors.get(name)
            self.observer.fence_config_checked(name, err is None)
            ref = _configmap_ref(self.namespace, name, c["uid"])
            if err is not None and self.invalid.get(name) != str(err):
                log.warning("fence configuration invalid: %s", err)
                self.kube.event(ref, "Warning", CONFIG_INVALID, str(err))
            elif err is None and name in self.invalid:
                self.kube.event(ref, "Normal", "FenceConfigValid", f"ConfigMap {name!r} is valid again")
        self.invalid = {n: str(e) for n, e in result.errors.items() if n in cms}
        self._configs = dict(result.configs)
        return cms, True

    def check_devices(
        self, cms: dict[str, dict[str, Any]], cancel: threading.Event | None = None
    ) -> tuple[DeviceHealth, ...]:
        """Read every device once (one playbook run); Events for devices whose health changed.
        ``cancel`` (the runner stopping) ends the run at once; a canceled check changes and
        reports nothing and returns the health known before it."""
        checks = devices_to_check(self._configs)
        if not checks:
            return ()
        outcome = self.executor.run(
            self._action(checks),
            kind="FenceDeviceCheck",
            name=self.namespace,
            ident=f"device-check-{int(time.time() * 1000)}",
            cancel=cancel,
            priority=1_000_000,  # after every remediation's runs
        )
        if outcome.status == "canceled":
            return tuple(self.health.values())
        run_error = "" if outcome.modules else f"check run {outcome.status}: {outcome.summary()}"
        results = [(m.ok, m.error, m.msg) for m in outcome.modules]
        found = results_for(checks, results, run_error)
        for h in found:
            t = h.check.method.template
            self.observer.fence_device_checked(h.check.template, h.check.plug or "", t.device_type, h.reason)
        for h in changed(self.health, found):
            self._report(h, cms)
        self.health = {h.check.key: h for h in found}
        return found

    def _action(self, checks: tuple[DeviceCheck, ...]) -> Action:
        return Action(
            kind="verify_fence",
            playbook=PLAYBOOK,
            extravars={
                "namespace": self.namespace,
                "power_timeout": CHECK_POWER_TIMEOUT,
                "methods": [c.to_extravars() for c in checks],
            },
            reason="FenceDeviceCheck",
        )

    def _report(self, h: DeviceHealth, cms: dict[str, dict[str, Any]]) -> None:
        type_ = "Normal" if h.healthy else "Warning"
        message = h.describe()
        (log.info if h.healthy else log.warning)("fence device %s", message)
        uid = (cms.get(h.check.template) or {}).get("uid")
        self.kube.event(_configmap_ref(self.namespace, h.check.template, uid), type_, h.reason, message)
        for node in h.check.nodes:
            obj = self.kube.get_node(node)
            if obj is not None:
                self.kube.event({**obj, "apiVersion": "v1", "kind": "Node"}, type_, h.reason, message)

    def once(self) -> None:
        """Validate; read the devices when ``interval`` passed or a ConfigMap changed since the
        last validation, and only while the executor runs nothing else (remediations first).
        Log lines name the resource ``FenceDeviceCheck/<namespace>``."""
        with logs.scope(resource=f"FenceDeviceCheck/{self.namespace}"):
            self._once()

    def _once(self) -> None:
        cms, moved = self.validate()
        now = self.clock()
        if moved and self._validated:
            self.next_check = min(self.next_check, now)
        self._validated = True
        if now >= self.next_check and self.executor.in_flight == 0:
            self.next_check = now + self.interval
            self.check_devices(cms, self._stop)

    def run(self, stop: threading.Event, poll: float = 5.0) -> None:
        """Loop until ``stop``: :meth:`once` every ``poll`` seconds (API errors logged, retried).
        A check run in flight when ``stop`` is set is canceled."""
        self._stop = stop
        while not stop.is_set():
            try:
                self.once()
            except Exception as exc:  # noqa: BLE001 - API unreachable etc.: keep checking
                log.warning("fence device check: %s: %s", type(exc).__name__, exc)
            stop.wait(min(poll, self.interval))


__all__ = ["DeviceChecker", "list_fence_configmaps"]
