"""Helpers shared by the integration tests that talk to the lab's API server and BMCs."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from noderemedy_lab import pki
from noderemedy_lab.workload import statefulset as statefulset  # the tests take it from here


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); AssertionError naming
    ``what`` and the last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


#: kubectl resource name -> (API class, read, list namespaced, list cluster-wide) of the kubernetes
#: client, for the reads :func:`kjson` serves itself
_RESOURCES = {
    "node": ("CoreV1Api", "read_node", None, "list_node"),
    "pod": ("CoreV1Api", "read_namespaced_pod", "list_namespaced_pod", "list_pod_for_all_namespaces"),
    "pdb": ("PolicyV1Api", "read_namespaced_pod_disruption_budget", None, None),
    "volumeattachment": ("StorageV1Api", "read_volume_attachment", None, "list_volume_attachment"),
}
_FLAGS = {"-n": "namespace", "-l": "label_selector", "--field-selector": "field_selector"}


def _api_read(api_client: Any, args: tuple[str, ...]) -> Any:
    """The response (not decoded) of ``kubectl get KIND [NAME] [-n NS] [-A] [-l SEL]
    [--field-selector SEL]`` through ``api_client``; None for anything else."""
    from kubernetes import client

    words: list[str] = []
    opts: dict[str, str] = {}
    it = iter(args)
    for arg in it:
        if arg in _FLAGS:
            opts[_FLAGS[arg]] = next(it, "")
        elif arg == "-A":
            opts["all"] = "1"
        elif arg.startswith("-"):
            return None
        else:
            words.append(arg)
    call = {"_preload_content": False, "_request_timeout": 30}
    if len(words) not in (2, 3) or words[0] != "get" or words[1].rstrip("s") not in _RESOURCES:
        return None
    cls, read, list_ns, list_all = _RESOURCES[words[1].rstrip("s")]
    api = getattr(client, cls)(api_client)
    ns = opts.pop("namespace", None)
    everywhere = opts.pop("all", None)
    if len(words) == 3:
        if opts:
            return None
        namespaced = ("namespaced" in read) and [ns or "default"] or []
        return getattr(api, read)(words[2], *namespaced, **call)
    if ns and not everywhere and list_ns:
        return getattr(api, list_ns)(ns, **opts, **call)
    if list_all and (everywhere or list_ns is None):
        return getattr(api, list_all)(**opts, **call)
    return None


def kjson(lab: Any, *args: str) -> dict:
    """``kubectl <args> -o json``, decoded; fails the test on an error.

    Reads of the kinds in ``_RESOURCES`` go through the lab's API client, since
    tests poll them in loops and a kubectl process per poll costs CPU the peers need; anything else
    runs the lab's kubectl."""
    from kubernetes.client.exceptions import ApiException

    try:
        resp = _api_read(lab.api_client(), args)
    except ApiException as exc:
        raise AssertionError(f"kubectl {' '.join(args)}: {exc.status} {exc.reason}: {exc.body}") from exc
    if resp is not None:
        return json.loads(resp.data)
    out = lab.kubectl(*args, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def apply(lab: Any, tmp: Path, *docs: dict) -> None:
    """``kubectl apply`` of ``docs`` (one v1 List written under ``tmp``); fails the test on an error."""
    path = tmp / f"m-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(docs)}))
    out = lab.kubectl("apply", "-f", str(path))
    assert out.returncode == 0, out.stderr


@contextmanager
def namespace(lab: Any, prefix: str, wait: bool = True) -> Iterator[str]:
    """A fresh namespace ``<prefix>-<8 hex>``; deleted after the block (``wait``: until gone, so
    no pod of one test is left on a node for the next)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert lab.kubectl("create", "namespace", name).returncode == 0
    try:
        yield name
    finally:
        lab.kubectl("delete", "namespace", name, "--timeout=90s" if wait else "--wait=false")


def fence_task(lab: Any, node: str) -> dict:
    """A task powering ``node`` off through its real BMC with noderemedy.core.ipmi_power
    (verified by read-back), named ``fence``."""
    bmc = lab.info["devices"]["bmcs"][node]
    return {
        "name": "fence",
        "noderemedy.core.ipmi_power": {
            "ipaddr": bmc["host"],
            "ipport": bmc["port"],
            "username": bmc["username"],
            "password": bmc["password"],
            "cipher": bmc["cipher"],
            "state": "off",
        },
        "ignore_errors": True,
    }


def identity(lab: Any, tmp_path: Path, user: str) -> Path:
    """A kubeconfig for a client certificate of ``user`` minted from the lab CA (no RBAC rights)."""
    pki_dir = Path(lab.info["kube"]["pki"])
    work = tmp_path / "pki"
    work.mkdir(exist_ok=True)
    for f in ("ca.crt", "ca.key"):
        (work / f).write_bytes((pki_dir / f).read_bytes())
    pki.issue_client_cert(work, user, user)
    return pki.write_kubeconfig(tmp_path / f"{user}.kubeconfig", lab.info["kube"]["server"], work, user)
