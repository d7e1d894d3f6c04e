"""cluster-api in the lab: its own controller manager, its real CRDs and webhooks, a stand-in provider.

:class:`CapiCluster` runs cluster-api's controller manager (built from ``sigs.k8s.io/cluster-api``
at :data:`~noderemedy_lab.config.CLUSTER_API_VERSION`, :func:`noderemedy_lab.build.build_cluster_api`)
out of cluster against the lab's kube-apiserver. The lab cluster is both the management and the
workload cluster: the Cluster ``lab`` has the ``lab-kubeconfig`` Secret (data key ``value``, as
cluster-api's ``util/secret`` reads it) holding the lab's admin kubeconfig, so the Machine controller
finds the lab's Nodes by ``spec.providerID`` and the MachineHealthCheck judges their conditions.

What cluster-api's ``core/config`` deploys, the lab installs the same way, pointed at the manager on
127.0.0.1 (``url`` client configs instead of the in-cluster Service, a lab CA instead of
cert-manager):

* the CRDs of ``core/config/crd/bases`` with the conversion webhook of ``crd/patches/webhook_in_*``
  (``/convert``), so v1beta1 clients (the runner reads Machines as v1beta1) and v1beta2 storage
  meet through cluster-api's own conversion;
* ``core/config/webhook/manifests.yaml``: the Mutating and Validating webhook configurations,
  named ``capi-…`` as its kustomization's ``namePrefix`` does;
* the manager serving them with a certificate from :func:`noderemedy_lab.pki.issue_device_pki`.

The stand-in providers (``data/capi-lab-provider.yaml``): ``LabMachine`` stands in for CAPM3's
Metal3Machine (an infrastructure machine for an existing lab node), ``LabCluster`` for the Cluster's
infrastructure, ``LabControlPlane`` for the lab's control plane, which runs on no Node. Their controller is this module's ``main`` (process
``capi-lab-provider``): it copies each LabMachine's Node ``spec.providerID`` (setting
``noderemedy-lab://<node>`` on a Node that has none) and marks it provisioned, and marks the
LabCluster provisioned and the LabControlPlane initialized (cluster-api's v1beta2 provider
contracts).

:meth:`CapiCluster.stop` undoes all of it on the cluster (webhook configurations, objects, CRDs), so
the modules that run after it install the reduced CRD copies of ``deploy/crds/`` again.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .config import CLUSTER_API_VERSION, KUBERNETES_VERSION
from .procs import ComponentError, tail

#: The Cluster, its namespace and the group/versions the lab creates objects in.
CLUSTER = "lab"
NAMESPACE = "lab-capi"
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = "v1beta2"
LAB_INFRA = ("infrastructure.lab.noderemedy.io", "v1alpha1", "labmachines", "LabMachine")
LAB_CP = ("controlplane.lab.noderemedy.io", "v1alpha1", "labcontrolplanes", "LabControlPlane")
LAB_CLUSTER = ("infrastructure.lab.noderemedy.io", "v1alpha1", "labclusters", "LabCluster")
CAPI_MACHINE = (CAPI_GROUP, CAPI_VERSION, "machines", "Machine")
CAPI_CLUSTER = (CAPI_GROUP, CAPI_VERSION, "clusters", "Cluster")

#: providerID the lab gives a Node that has none (Node.spec.providerID can be set once).
PROVIDER_PREFIX = "noderemedy-lab://"
#: cluster-api's feature gates: only what the MachineHealthCheck flow needs (no MachinePool,
#: ClusterClass topology, Runtime SDK or MachineSet preflight checks).
FEATURE_GATES = "MachinePool=false,ClusterTopology=false,RuntimeSDK=false,MachineSetPreflightChecks=false"
#: Seconds to wait for the manager's /readyz (its webhook server started, caches synced).
READY_TIMEOUT = 180.0


def _ref(resource: tuple[str, str, str, str], name: str) -> dict[str, str]:
    """A v1beta2 contract reference (``apiGroup``, ``kind``, ``name``) to the object ``name`` of
    ``resource`` (group, version, plural, kind)."""
    return {"apiGroup": resource[0], "kind": resource[3], "name": name}


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def crd_documents(config_dir: Path, webhook_url: str, ca_bundle: str) -> list[dict]:
    """cluster-api's CRDs as ``core/config/crd`` deploys them: every file its kustomization lists
    under ``resources``, each with the conversion webhook of its ``webhook_in_*`` patch, pointed at
    ``webhook_url + "/convert"`` (a url client config) with ``ca_bundle`` (base64 PEM).

    Raises ComponentError (``cluster-api``) if the kustomization names no CRD."""
    crd = config_dir / "crd"
    kust = yaml.safe_load((crd / "kustomization.yaml").read_text())
    patched = set()
    for patch in kust.get("patches") or []:
        body = yaml.safe_load((crd / patch["path"]).read_text())
        if ((body.get("spec") or {}).get("conversion") or {}).get("strategy") == "Webhook":
            patched.add(body["metadata"]["name"])
    docs = []
    for res in kust.get("resources") or []:
        doc = yaml.safe_load((crd / res).read_text())
        if doc["metadata"]["name"] in patched:
            doc["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {"url": webhook_url + "/convert", "caBundle": ca_bundle},
                },
            }
        docs.append(doc)
    if not docs:
        raise ComponentError("cluster-api", f"no CRD listed in {crd / 'kustomization.yaml'}")
    return docs


def webhook_documents(config_dir: Path, webhook_url: str, ca_bundle: str) -> list[dict]:
    """``core/config/webhook/manifests.yaml`` with each webhook's Service client config replaced by
    ``webhook_url + path`` and ``ca_bundle``, the configurations named ``capi-<name>`` (the
    ``namePrefix`` of ``core/config/default``)."""
    docs = [d for d in yaml.safe_load_all((config_dir / "webhook" / "manifests.yaml").read_text()) if d]
    for doc in docs:
        doc["metadata"]["name"] = "capi-" + doc["metadata"]["name"]
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": webhook_url + path, "caBundle": ca_bundle}
    return docs


class CapiCluster:
    """cluster-api's controller manager and the Cluster ``lab`` on a started lab.

    Args:
        lab: a started :class:`~noderemedy_lab.lab.Lab` with its control plane.
        namespace: where the Cluster, its Machines and the stand-in objects live (the manager
            watches only it, ``--namespace``).

    Attributes once started: ``info`` (``{"namespace", "cluster", "version", "webhook_url",
    "manager_log", "provider_log"}``).
    """

    def __init__(self, lab: Any, namespace: str = NAMESPACE) -> None:
        self.lab = lab
        self.namespace = namespace
        self.info: dict[str, Any] = {}
        self._docs: list[dict] = []
        self._hooks: list[dict] = []

    # ------------------------------------------------------------------ start / stop
    def start(self, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Build the manager if missing, install the CRDs, webhooks and stand-in providers, start
        the manager and the providers' controller, and create the Cluster with its kubeconfig Secret
        and LabControlPlane; returns once the Cluster's control plane is initialized.

        Raises ComponentError naming the component (``cluster-api``, ``capi-manager``,
        ``capi-lab-provider``); what was started is stopped and undone first."""
        from .build import cluster_api_module_dir, ensure_binaries
        from .pki import issue_device_pki

        say = progress or (lambda line: None)
        lab, cfg = self.lab, self.lab.config
        sup = lab.supervisor
        if lab.kubeconfig is None or sup is None:
            raise ComponentError("cluster-api", "the lab runs without its control plane")
        binary = ensure_binaries(say, node=False, vcsim=False, capi=True)["cluster-api"]
        config_dir = cluster_api_module_dir() / "core" / "config"
        run_dir = cfg.workdir / "capi"
        run_dir.mkdir(parents=True, exist_ok=True)
        tls = issue_device_pki(run_dir / "tls", "capi-webhook-service")
        url = f"https://127.0.0.1:{cfg.port('capi-webhook')}"
        ca = _b64(tls["ca"])
        self._docs = crd_documents(config_dir, url, ca)
        self._hooks = webhook_documents(config_dir, url, ca)
        provider = yaml.safe_load_all((Path(__file__).parent / "data" / "capi-lab-provider.yaml").read_text())
        self._docs += [d for d in provider if d]
        self.info = {
            "namespace": self.namespace,
            "cluster": CLUSTER,
            "version": CLUSTER_API_VERSION,
            "webhook_url": url,
        }
        try:
            say(f"cluster-api v{CLUSTER_API_VERSION}: {len(self._docs)} CRDs, webhooks on {url}")
            (run_dir / "crds.yaml").write_text(yaml.safe_dump_all(self._docs, sort_keys=False))
            for doc in self._docs:
                self._wait(
                    lambda doc=doc: self._install_crd(doc), 120, f"CRD {doc['metadata']['name']} installed"
                )
            for doc in self._docs:
                self._wait_established(doc["metadata"]["name"])
            self._apply(run_dir / "webhooks.yaml", self._hooks)
            self._namespace()
            health = cfg.port("capi-health")
            argv = [
                str(binary),
                "--leader-elect=false",
                f"--namespace={self.namespace}",
                f"--feature-gates={FEATURE_GATES}",
                f"--webhook-port={cfg.port('capi-webhook')}",
                f"--webhook-cert-dir={tls['cert'].parent}",
                f"--webhook-cert-name={tls['cert'].name}",
                f"--webhook-key-name={tls['key'].name}",
                f"--health-addr=127.0.0.1:{health}",
                f"--diagnostics-address=127.0.0.1:{cfg.port('capi-metrics')}",
                "--insecure-diagnostics=true",
            ]
            say("starting cluster-api's controller manager")
            # controller-runtime reads KUBECONFIG (ctrl.GetConfigOrDie)
            proc = sup.start("capi-manager", argv, env={"KUBECONFIG": str(lab.kubeconfig)}, cwd=run_dir)
            self.info["manager_log"] = str(proc.log)
            sup.wait_ready(proc, lambda: _http_ok(f"http://127.0.0.1:{health}/readyz"), READY_TIMEOUT)
            prov = sup.start(
                "capi-lab-provider",
                [
                    sys.executable,
                    "-m",
                    "noderemedy_lab.capi",
                    "--kubeconfig",
                    str(lab.kubeconfig),
                    "--namespace",
                    self.namespace,
                ],
                cwd=run_dir,
            )
            self.info["provider_log"] = str(prov.log)
            self._cluster()
            self._wait(self._control_plane_initialized, 120, "the Cluster's ControlPlaneInitialized")
        except BaseException:
            self.stop()
            raise
        return self.info

    def stop(self) -> None:
        """Stop the manager and the providers' controller, then remove from the cluster what
        :meth:`start` added: the webhook configurations, every object of the namespace (finalizers
        dropped: nothing reconciles them any more, and no lab Node is touched), the namespace and
        the CRDs. Idempotent."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        sup = self.lab.supervisor
        if sup is not None:
            for name in ("capi-lab-provider", "capi-manager"):
                sup.stop(name)
                # gone for good: the lab's teardown checks only what it still runs
                sup.procs.pop(name, None)
        if self.lab.kubeconfig is None:
            return
        api = self.lab.api_client()
        for hook in self._hooks:
            self.lab.kubectl("delete", "--ignore-not-found", "--wait=false",
                             f"{hook['kind'].lower()}/{hook['metadata']['name']}")  # fmt: skip
        co = client.CustomObjectsApi(api)
        kinds = [
            (d["spec"]["group"], next(v["name"] for v in d["spec"]["versions"] if v.get("storage")),
             d["spec"]["names"]["plural"])
            for d in self._docs
            if d["spec"]["scope"] == "Namespaced"
        ]  # fmt: skip
        # and what cluster-api created from the scenarios' templates (a runner's finalizer)
        kinds.append(("infrastructure.cluster.x-k8s.io", "v1beta1", "metal3remediations"))
        for group, version, plural in kinds:
            try:
                items = co.list_namespaced_custom_object(group, version, self.namespace, plural)["items"]
            except ApiException:
                continue
            for obj in items:
                if obj["metadata"].get("finalizers"):
                    try:
                        co.patch_namespaced_custom_object(
                            group, version, self.namespace, plural, obj["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                        )  # fmt: skip
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
        for doc in self._docs:
            self.lab.kubectl("delete", "--ignore-not-found", "--wait=false", f"crd/{doc['metadata']['name']}")
        self.lab.kubectl("delete", "--ignore-not-found", "--wait=false", f"namespace/{self.namespace}")
        self._hooks, self._docs = [], []

    # ------------------------------------------------------------------ objects
    def add_machine(self, node: str, labels: dict[str, str] | None = None, timeout: float = 60) -> str:
        """A Machine (v1beta2) named after lab node ``node`` with its LabMachine, labelled
        ``labels``; returns the Machine's name once its ``status.nodeRef`` names the node.

        The Machine carries ``metal3.io/BareMetalHost: <namespace>/<node>`` (the runner's way to
        its host) and cluster-api's annotations that keep the Machine controller from draining the
        node or waiting for its volumes should the Machine ever be deleted. ComponentError after
        ``timeout`` seconds."""
        from kubernetes import client

        co = client.CustomObjectsApi(self.lab.api_client())
        self._create(co, LAB_INFRA, {"name": node}, {"nodeName": node})
        annotations = {
            "metal3.io/BareMetalHost": f"{self.namespace}/{node}",
            "machine.cluster.x-k8s.io/exclude-node-draining": "",
            "machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach": "",
        }
        self._create(
            co,
            CAPI_MACHINE,
            {"name": node, "labels": labels or {}, "annotations": annotations},
            {
                "clusterName": CLUSTER,
                "version": f"v{KUBERNETES_VERSION}",
                "bootstrap": {"dataSecretName": f"{CLUSTER}-bootstrap"},
                "infrastructureRef": _ref(LAB_INFRA, node),
            },
        )
        self._wait(lambda: self.node_ref(node) == node, timeout, f"Machine {node}'s nodeRef")
        return node

    def machine(self, name: str) -> dict[str, Any]:
        """The Machine ``name`` as cluster-api stores it (v1beta2)."""
        from kubernetes import client

        co = client.CustomObjectsApi(self.lab.api_client())
        obj: dict[str, Any] = co.get_namespaced_custom_object(
            CAPI_GROUP, CAPI_VERSION, self.namespace, "machines", name
        )
        return obj

    def node_ref(self, name: str) -> str | None:
        """The name in Machine ``name``'s ``status.nodeRef`` (None until set)."""
        ref = (self.machine(name).get("status") or {}).get("nodeRef") or {}
        return ref.get("name")

    def _cluster(self) -> None:
        from kubernetes import client

        api = self.lab.api_client()
        core = client.CoreV1Api(api)
        labels = {"cluster.x-k8s.io/cluster-name": CLUSTER}
        core.create_namespaced_secret(
            self.namespace,
            {"metadata": {"name": f"{CLUSTER}-kubeconfig", "labels": labels}, "type": "cluster.x-k8s.io/secret",
             "data": {"value": base64.b64encode(self_contained(Path(self.lab.kubeconfig))).decode()}},
        )  # fmt: skip
        # the Machines name their bootstrap data directly (no bootstrap provider): the nodes exist
        core.create_namespaced_secret(
            self.namespace,
            {"metadata": {"name": f"{CLUSTER}-bootstrap", "labels": labels}, "type": "cluster.x-k8s.io/secret",
             "stringData": {"value": "", "format": "cloud-config"}},
        )  # fmt: skip
        co = client.CustomObjectsApi(api)
        self._create(co, LAB_CP, {"name": CLUSTER}, {})
        endpoint = {"host": "127.0.0.1", "port": self.lab.config.port("kube-apiserver")}
        self._create(co, LAB_CLUSTER, {"name": CLUSTER}, {"controlPlaneEndpoint": endpoint})
        self._create(
            co,
            CAPI_CLUSTER,
            {"name": CLUSTER},
            {
                "controlPlaneEndpoint": endpoint,
                "infrastructureRef": _ref(LAB_CLUSTER, CLUSTER),
                "controlPlaneRef": _ref(LAB_CP, CLUSTER),
            },
        )

    def _create(
        self, co: Any, resource: tuple[str, str, str, str], metadata: dict[str, Any], spec: dict[str, Any]
    ) -> None:
        """Create a custom object of ``resource`` (group, version, plural, kind) in the lab's
        namespace with ``metadata`` and ``spec``, through ``co`` (a ``CustomObjectsApi``); the
        client's ApiException when the apiserver refuses it."""
        group, version, plural, kind = resource
        co.create_namespaced_custom_object(
            group, version, self.namespace, plural,
            {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": metadata, "spec": spec},
        )  # fmt: skip

    def _control_plane_initialized(self) -> bool:
        from kubernetes import client

        co = client.CustomObjectsApi(self.lab.api_client())
        obj = co.get_namespaced_custom_object(CAPI_GROUP, CAPI_VERSION, self.namespace, "clusters", CLUSTER)
        conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
        return conds.get("ControlPlaneInitialized") == "True" and conds.get("InfrastructureReady") == "True"

    # ------------------------------------------------------------------ helpers
    def _apply(self, path: Path, docs: list[dict]) -> None:
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        out = self.lab.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path), timeout=120)
        if out.returncode != 0:
            raise ComponentError("cluster-api", f"kubectl apply {path.name}: {out.stderr.strip()}")

    def _install_crd(self, doc: dict) -> bool:
        """Create the CRD ``doc``, or replace the one of that name (the reduced copy of
        ``deploy/crds/`` a test module installed: replaced whole, not merged); False while one of
        that name is still being deleted, or changed meanwhile."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        ext = client.ApiextensionsV1Api(self.lab.api_client())
        try:
            ext.create_custom_resource_definition(doc, _request_timeout=30)
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise ComponentError("cluster-api", f"CRD {doc['metadata']['name']}: {exc.body}") from exc
        current = ext.read_custom_resource_definition(doc["metadata"]["name"], _request_timeout=30)
        if current.metadata.deletion_timestamp is not None:
            return False
        body = {**doc, "metadata": {**doc["metadata"], "resourceVersion": current.metadata.resource_version}}
        try:
            ext.replace_custom_resource_definition(doc["metadata"]["name"], body, _request_timeout=30)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise ComponentError("cluster-api", f"CRD {doc['metadata']['name']}: {exc.body}") from exc
        return True

    def _namespace(self) -> None:
        out = self.lab.kubectl("create", "namespace", self.namespace)
        if out.returncode != 0 and "AlreadyExists" not in out.stderr:
            raise ComponentError("cluster-api", f"namespace {self.namespace}: {out.stderr.strip()}")

    def _wait_established(self, name: str) -> None:
        def established() -> bool:
            out = self.lab.kubectl(
                "get", f"crd/{name}", "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}"
            )
            return out.stdout.strip() == "True"

        self._wait(established, 60, f"CRD {name} Established")

    def _wait(self, ok: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if ok():
                    return
            except Exception as exc:  # noqa: BLE001 - not there yet; the last error is reported
                last = str(exc)
            else:
                last = ""
            if time.monotonic() > deadline:
                log = self.info.get("manager_log")
                detail = f"; manager log {log}:\n{tail(Path(log), 20)}" if log else ""
                raise ComponentError("cluster-api", f"{what}: not after {timeout:.0f} s {last}{detail}")
            time.sleep(0.25)


def self_contained(kubeconfig: Path) -> bytes:
    """``kubeconfig`` with every certificate and key file inlined (``…-data`` keys), as the
    ``<cluster>-kubeconfig`` Secret of a workload cluster carries it (read by cluster-api's
    ClusterCache from the Secret, not from the lab's files)."""
    doc = yaml.safe_load(kubeconfig.read_text())
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in doc.get(section) or []:
            body = entry[key]
            for field in ("certificate-authority", "client-certificate", "client-key"):
                if field in body:
                    body[f"{field}-data"] = _b64(Path(body.pop(field)))
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


# ---------------------------------------------------------------------- the stand-in providers
def reconcile_once(api: Any, namespace: str) -> list[str]:
    """One pass of the stand-in providers' controller over ``namespace``; returns what it did.

    LabMachine: its Node (``spec.nodeName``) gets ``spec.providerID`` ``noderemedy-lab://<node>``
    if it has none; the LabMachine gets the Node's providerID in ``spec.providerID`` and
    ``status.initialization.provisioned: true``. A missing Node is written to ``status.message``.
    LabControlPlane: ``status.initialization.controlPlaneInitialized: true``; LabCluster:
    ``status.initialization.provisioned: true``.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    done = []
    group, version, plural, _ = LAB_INFRA
    for obj in co.list_namespaced_custom_object(group, version, namespace, plural, _request_timeout=10)[
        "items"
    ]:
        name, spec = obj["metadata"]["name"], obj.get("spec") or {}
        status = obj.get("status") or {}
        if spec.get("providerID") and (status.get("initialization") or {}).get("provisioned"):
            continue
        node_name = spec["nodeName"]
        try:
            node = core.read_node(node_name, _request_timeout=10)
        except ApiException as exc:
            if exc.status != 404:
                raise
            co.patch_namespaced_custom_object_status(
                group, version, namespace, plural, name, {"status": {"message": f"no Node {node_name}"}}
            )
            continue
        pid = node.spec.provider_id
        if not pid:
            pid = PROVIDER_PREFIX + node_name
            core.patch_node(node_name, {"spec": {"providerID": pid}}, _request_timeout=10)
            done.append(f"Node {node_name}: providerID {pid}")
        co.patch_namespaced_custom_object(
            group, version, namespace, plural, name, {"spec": {"providerID": pid}}
        )
        co.patch_namespaced_custom_object_status(
            group, version, namespace, plural, name,
            {"status": {"initialization": {"provisioned": True}, "message": ""}},
        )  # fmt: skip
        done.append(f"LabMachine {name}: provisioned, providerID {pid}")
    for (group, version, plural, kind), field in (
        (LAB_CP, "controlPlaneInitialized"),
        (LAB_CLUSTER, "provisioned"),
    ):
        items = co.list_namespaced_custom_object(group, version, namespace, plural, _request_timeout=10)[
            "items"
        ]
        for obj in items:
            if ((obj.get("status") or {}).get("initialization") or {}).get(field):
                continue
            co.patch_namespaced_custom_object_status(
                group, version, namespace, plural, obj["metadata"]["name"],
                {"status": {"initialization": {field: True}}},
            )  # fmt: skip
            done.append(f"{kind} {obj['metadata']['name']}: {field}")
    return done


def main(argv: list[str] | None = None) -> int:
    """``python -m noderemedy_lab.capi --kubeconfig K --namespace N``: the stand-in providers'
    controller, a pass every 0.5 s until SIGTERM (one line per change on stdout)."""
    from kubernetes import config as kconfig

    parser = argparse.ArgumentParser(prog="noderemedy_lab.capi", description=main.__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args(argv)
    api = kconfig.new_client_from_config(args.kubeconfig)
    while True:
        try:
            for line in reconcile_once(api, args.namespace):
                print(line, flush=True)
        except Exception as exc:  # noqa: BLE001 - a controller retries; say what failed
            print(f"error: {exc}", flush=True)
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CLUSTER", "NAMESPACE", "CapiCluster", "crd_documents", "reconcile_once", "webhook_documents"]
