"""The lab's Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
and kwok simulating the nodes, all on 127.0.0.1 with per-lab certificates.

Node lifecycle in the lab (the heart of it): each node ``lab-node-<i>`` carries the label
``lab.noderemedy.io/power=on``. kwok manages (initialises, heartbeats with Leases, runs pods on)
only nodes with that label (``--manage-nodes-with-label-selector``). The node's BMC power hook
(:mod:`noderemedy_lab.devices`) relabels the node ``off`` when its power goes off, so kwok stops
renewing its Lease and the real node lifecycle controller turns it NotReady after
``--node-monitor-grace-period``; on power-on the label returns to ``on``, kwok's ``node-initialize``
stage (Ready != True) sets it Ready again.
"""

from __future__ import annotations

import ssl
import urllib.request
from importlib import resources
from pathlib import Path

import yaml

from . import pki
from .config import HOLD_CONDITIONS_ANNOTATION, POWER_LABEL, LabConfig
from .procs import ComponentError, Supervisor, require_port_free, tcp_listening

#: Controllers the lab's kube-controller-manager runs ("*" = every default-on controller, which
#: includes node-lifecycle, taint-eviction, pod-garbage-collector, statefulset, daemonset,
#: replicaset, deployment, disruption, persistentvolume-attach-detach, serviceaccount-token...).
CONTROLLERS = "*"


def node_stages(heartbeat_seconds: float = 20.0) -> list[dict]:
    """kwok's default node Stages (``data/kwok-node-stages.yaml``: node-initialize, node-heartbeat),
    each played only on a node whose power label is ``on``.

    kwok's ``--manage-nodes-with-label-selector`` alone does not stop the node-heartbeat Stage: it
    has ``immediateNextStage``, so kwok plays it again on each heartbeat PATCH's result, and a node
    powered off turned Ready again 20-45 s after the node lifecycle controller marked it NotReady
    (seen as ``Patch node`` lines for a powered-off node in kwok's log, every ~22 s). With the
    label in the Stage's selector the result of that PATCH (label ``off``) matches no Stage and the
    loop ends. A heartbeat already scheduled when the power goes off still plays once (kwok checks
    the selector when it schedules, not when it plays), so node-heartbeat's delay is
    ``heartbeat_seconds`` plus a jitter of 1.25 times it (:attr:`LabConfig.node_heartbeat_seconds`).
    Neither Stage is played on a node annotated
    :data:`~noderemedy_lab.config.HOLD_CONDITIONS_ANNOTATION` (:mod:`noderemedy_lab.conditions`):
    its status stays as a test writes it, Ready=False included (node-initialize would turn it
    True again)."""
    path = Path(str(resources.files("noderemedy_lab") / "data" / "kwok-node-stages.yaml"))
    stages = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for stage in stages:
        stage["spec"].setdefault("selector", {}).setdefault("matchLabels", {})[POWER_LABEL] = "on"
        stage["spec"]["selector"].setdefault("matchExpressions", []).append(
            {"key": f'.metadata.annotations["{HOLD_CONDITIONS_ANNOTATION}"]', "operator": "DoesNotExist"}
        )
        if stage["metadata"]["name"] == "node-heartbeat":
            stage["spec"]["delay"] = {
                "durationMilliseconds": int(heartbeat_seconds * 1000),
                "jitterDurationMilliseconds": int(heartbeat_seconds * 1250),
            }
    return stages


def kwok_workers(nodes: int) -> int:
    """kwok's workers for node Leases and for node Stages (heartbeats) in a lab of ``nodes`` kwok
    nodes: kwok's default 4, one per 20 nodes beyond 80 (50 for 1,000 nodes)."""
    return max(4, nodes // 20)


def _https_ok(url: str, pki_dir: Path) -> bool:
    ctx = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
    ctx.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
    with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:  # lab https on loopback
        return resp.status == 200


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def apiserver_args(cfg: LabConfig, binaries: dict[str, Path], pki_dir: Path, etcd_url: str) -> list[str]:
    """The exact kube-apiserver argv the lab uses (StorageVersion API and server identity on; with
    real nodes also the Node authorizer, NodeRestriction and a client certificate for kubelets)."""
    return [
        str(binaries["kube-apiserver"]),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={cfg.port('kube-apiserver')}",
        f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
        f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
        f"--client-ca-file={pki_dir / 'ca.crt'}",
        f"--service-account-key-file={pki_dir / 'sa.pub'}",
        f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc",
        "--service-cluster-ip-range=10.96.0.0/16",
        # Node: the real nodes' kubelets (system:node:<name>) get exactly their own node's rights
        *(
            ["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"]
            if cfg.real_nodes
            else ["--authorization-mode=RBAC"]
        ),
        *(
            [
                f"--kubelet-client-certificate={pki_dir / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki_dir / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP",
            ]
            if cfg.real_nodes
            else []
        ),
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "--feature-gates=StorageVersionAPI=true,APIServerIdentity=true",
        "--runtime-config=internal.apiserver.k8s.io/v1alpha1=true",
        *cfg.extra_apiserver_args,
    ]


def _serving_flags(kubeconfig: Path, port: int) -> list[str]:
    """The flags kube-controller-manager and kube-scheduler share: one kubeconfig for the API,
    authentication and authorization, their HTTPS health port ``port`` on 127.0.0.1, and no leader
    election (one instance of each)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--leader-elect=false",
    ]


def node_manifest(name: str) -> dict:
    """A kwok node as the lab creates it: schedulable, no taints, powered on, 110 pods allocatable."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "topology.kubernetes.io/zone": "lab",
                POWER_LABEL: "on",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
        },
        "status": {"allocatable": resources, "capacity": resources},
    }


def start_kube(sup: Supervisor, cfg: LabConfig, binaries: dict[str, Path], node_names: list[str]) -> dict:
    """Start the control plane and kwok, create the nodes, wait until every node is Ready.

    Returns the ``info["kube"]`` dict (kubeconfig, server, etcd, pki, binaries, apiserver_args).
    Raises ComponentError naming the component that failed; the caller stops ``sup``.
    """
    root = cfg.workdir / "kube"
    pki_dir = root / "pki"
    pki.generate(pki_dir)
    if cfg.real_nodes:
        # the apiserver's identity towards the real kubelets (logs, exec, port-forward)
        pki.issue_client_cert(
            pki_dir, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"
        )
    for comp in ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        require_port_free(cfg.port(comp), comp)

    etcd_url = f"http://127.0.0.1:{cfg.port('etcd')}"
    sup.start(
        "etcd",
        [
            str(binaries["etcd"]),
            "--name=lab",
            f"--data-dir={root / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{cfg.port('etcd-peer')}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{cfg.port('etcd-peer')}",
            f"--initial-cluster=lab=http://127.0.0.1:{cfg.port('etcd-peer')}",
            "--listen-metrics-urls=",
            "--log-level=warn",
            "--quota-backend-bytes=4294967296",
            "--unsafe-no-fsync=true",
        ],
        ready=lambda: _http_ok(f"{etcd_url}/health"),
        timeout=30,
    )

    server = f"https://127.0.0.1:{cfg.port('kube-apiserver')}"
    args = apiserver_args(cfg, binaries, pki_dir, etcd_url)
    sup.start("kube-apiserver", args, ready=lambda: _https_ok(f"{server}/readyz", pki_dir), timeout=90)

    kubeconfigs = {
        stem: pki.write_kubeconfig(root / f"{stem}.kubeconfig", server, pki_dir, stem)
        for stem in ("admin", "kube-controller-manager", "kube-scheduler", "kwok")
    }

    _create_nodes(kubeconfigs["admin"], node_names)

    sup.start(
        "kube-controller-manager",
        [
            str(binaries["kube-controller-manager"]),
            *_serving_flags(kubeconfigs["kube-controller-manager"], cfg.port("kube-controller-manager")),
            f"--controllers={CONTROLLERS}",
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={pki_dir / 'ca.crt'}",
            "--use-service-account-credentials=true",
            f"--node-monitor-grace-period={cfg.node_monitor_grace_period}s",
            "--node-monitor-period=2s",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--concurrent-statefulset-syncs=10",
            "--concurrent-gc-syncs=40",
        ],
        ready=lambda: tcp_listening(cfg.port("kube-controller-manager")),
        timeout=60,
    )
    sup.start(
        "kube-scheduler",
        [
            str(binaries["kube-scheduler"]),
            *_serving_flags(kubeconfigs["kube-scheduler"], cfg.port("kube-scheduler")),
        ],
        ready=lambda: tcp_listening(cfg.port("kube-scheduler")),
        timeout=60,
    )
    kwok_cfg = root / "kwok.yaml"
    kwok_cfg.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                    "kind": "KwokConfiguration",
                    # kwok plays pod stages (start, delete) 4 at a time by default; a kubelet has one
                    # worker per pod, so a drained node's pods go away together, as on a real node.
                    # Node Leases and heartbeats: 4 workers by default, each renewal one PUT; 1,000
                    # nodes renew 100 Leases a second, and with the API server at 100-200 ms a
                    # request under load 4 workers fell behind the grace period: about 450 healthy
                    # nodes turned NotReady at once. One worker per 20 nodes keeps up.
                    "options": {
                        "nodeLeaseDurationSeconds": cfg.node_lease_seconds,
                        "nodeLeaseParallelism": kwok_workers(cfg.nodes),
                        "nodePlayStageParallelism": kwok_workers(cfg.nodes),
                        "podPlayStageParallelism": 16,
                    },
                },
                *node_stages(cfg.node_heartbeat_seconds),
            ]
        )
    )
    sup.start(
        "kwok",
        [
            str(binaries["kwok"]),
            f"--config={kwok_cfg}",
            f"--kubeconfig={kubeconfigs['kwok']}",
            f"--manage-nodes-with-label-selector={POWER_LABEL}=on",
            f"--server-address=127.0.0.1:{cfg.port('kwok')}",
            "--cidr=10.244.0.1/16",
            "--node-ip=127.0.0.1",
        ],
        ready=lambda: _http_ok(f"http://127.0.0.1:{cfg.port('kwok')}/healthz"),
        timeout=60,
    )
    return {
        "kubeconfig": str(kubeconfigs["admin"]),
        "server": server,
        "etcd": etcd_url,
        "pki": str(pki_dir),
        "binaries": {k: str(v) for k, v in binaries.items()},
        "apiserver_args": args,
    }


def _client(kubeconfig: Path):
    """A new ``kubernetes.client.ApiClient`` for ``kubeconfig``."""
    from kubernetes import config as kconfig

    return kconfig.new_client_from_config(str(kubeconfig))


def _create_nodes(kubeconfig: Path, names: list[str]) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = client.CoreV1Api(_client(kubeconfig))
    for name in names:
        try:
            api.create_node(node_manifest(name))
        except ApiException as exc:
            if exc.status != 409:
                raise ComponentError(
                    "kube-apiserver", f"cannot create node {name}: {exc.status} {exc.reason}"
                ) from exc


def node_ready(api_client, names: list[str]) -> dict[str, str]:
    """Ready condition status ('True', 'False', 'Unknown', or 'missing') of each node in ``names``,
    read with ``api_client`` (a ``kubernetes.client.ApiClient``)."""
    from kubernetes import client

    api = client.CoreV1Api(api_client)
    found = {n.metadata.name: n for n in api.list_node(_request_timeout=10).items}
    out = {}
    for name in names:
        node = found.get(name)
        conds = {c.type: c.status for c in (node.status.conditions or [])} if node and node.status else {}
        out[name] = conds.get("Ready", "missing") if node else "missing"
    return out


def probe_components(cfg: LabConfig, info: dict) -> dict[str, str]:
    """Health of each control-plane component: name -> 'ok' or a short error."""
    pki_dir = Path(info["pki"])
    checks = {
        "etcd": lambda: _http_ok(f"{info['etcd']}/health"),
        "kube-apiserver": lambda: _https_ok(f"{info['server']}/readyz", pki_dir),
        "kube-controller-manager": lambda: tcp_listening(cfg.port("kube-controller-manager")),
        "kube-scheduler": lambda: tcp_listening(cfg.port("kube-scheduler")),
        "kwok": lambda: _http_ok(f"http://127.0.0.1:{cfg.port('kwok')}/healthz"),
    }
    out = {}
    for name, check in checks.items():
        try:
            out[name] = "ok" if check() else "unhealthy"
        except Exception as exc:  # status reporting: any failure is "not ok"
            out[name] = f"down ({exc.__class__.__name__})"
    return out
