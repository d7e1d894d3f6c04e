"""Whatever the remedy Configuration loader accepts renders Jobs the API server accepts.

A hypothesis sweep of Configurations whose ``remedyConfigs`` pod templates mix what the design
writes (the ``env`` Secret-key and ``configmaps`` shorthand), full EnvVar maps, labels, Secret
names, and values Kubernetes refuses (upper-case names, names over 63 characters, bad keys,
untrimmed images...). Each one is loaded as ``--check-config`` loads it: refused, the error names
the ``remedyConfigs`` field; accepted, every pod remedy's Job
(:func:`noderemedy_runner.job_manifests.remedy_job_manifest`, as the runner renders it) is sent to the lab's
API server with server-side dry run (``dryRun=All``: validated and admitted, never stored), and
none may be refused. The design's own example Configuration (verbatim) is sent the same way.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from noderemedy_runner.config.remedy import ConfigError, ConfigurationSet, parse_configurations
from noderemedy_runner.job_manifests import remedy_job_manifest
from noderemedy_runner.machines.remedies import remedy_job_name

pytestmark = [pytest.mark.lab, pytest.mark.kube]

DESIGN_EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "unit"
    / "runner"
    / "data"
    / "design-examples"
    / "remedy-configuration.yaml"
)
#: The runner pod a Job takes its node selector and tolerations from when the template has none.
RUNNER_POD = {
    "spec": {
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [
            {"key": "node.kubernetes.io/out-of-service", "operator": "Exists", "effect": "NoExecute"}
        ],
    }
}


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` seven times in eight, else ``invalid``: what a user may write."""
    return st.sampled_from([True] * 7 + [False]).flatmap(lambda ok: valid if ok else invalid)


label = st.from_regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
names = mostly(label, st.sampled_from(["Repair", "a_b", "-x", "r" * 64]))
images = mostly(
    st.sampled_from(
        ["IMAGE:VERSION", "busybox", "registry.example.com/team/tool:1.2", "busybox@sha256:" + "a" * 64]
    ),
    st.sampled_from([" busybox", ""]),
)
printable = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=24)
secret_keys = mostly(
    st.one_of(st.from_regex(r"[a-zA-Z][-._a-zA-Z0-9]{0,30}", fullmatch=True), st.just("secret-key")),
    st.sampled_from(["bad key", "1st", "a=b"]),
)
env_maps = st.fixed_dictionaries(
    {
        "name": mostly(st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True), st.just("a=b")),
        "value": printable,
    }
)
configmap_names = mostly(
    st.one_of(
        st.from_regex(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?(\.[a-z0-9]{1,10})?", fullmatch=True),
        st.just("fence-method-config"),
    ),
    st.sampled_from(["Bad_Name", "c" * 260]),
)
label_keys = mostly(
    st.from_regex(
        r"([a-z]{1,10}\.[a-z]{2,5}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,30}[A-Za-z0-9])?", fullmatch=True
    ),
    st.sampled_from(["-bad", "a/b/c", "x" * 64]),
)
label_values = mostly(
    st.from_regex(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,30}[A-Za-z0-9])?)?", fullmatch=True),
    st.sampled_from(["has space", "v" * 64]),
)


@st.composite
def containers(draw: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": draw(names), "image": draw(images)}
    if draw(st.booleans()):
        c["command"] = draw(st.lists(printable, max_size=3))
    if draw(st.booleans()):
        c["args"] = draw(st.lists(printable, max_size=3))
    if draw(st.booleans()):
        c["env"] = draw(st.lists(st.one_of(secret_keys, env_maps), max_size=4))
    if draw(st.booleans()):
        c["configmaps"] = draw(st.lists(configmap_names, max_size=3))
    return c


@st.composite
def remedy_configs(draw: Any) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {"containers": draw(st.lists(containers(), min_size=1, max_size=2)), "restartPolicy": "Never"}
    }
    if draw(st.booleans()):
        template["metadata"] = {"labels": draw(st.dictionaries(label_keys, label_values, max_size=3))}
    if draw(st.booleans()):
        template["spec"]["terminationGracePeriodSeconds"] = 1
    entry: dict[str, Any] = {"name": draw(names), "podTemplate": template}
    if draw(st.booleans()):
        entry["secretName"] = draw(mostly(configmap_names, st.just("Creds")))
    return entry


@st.composite
def configurations(draw: Any) -> dict[str, Any]:
    entries = draw(st.lists(remedy_configs(), min_size=1, max_size=3))
    return {
        "apiVersion": "node-remedy/v1alpha",
        "kind": "Configuration",
        "metadata": {"name": "sweep"},
        "thresholdConfigs": [
            {
                "nodeConditionType": "Ready",
                "nodeConditionStatus": False,
                "nodeConditionPeriod": "5s",
                "remedy1": [{"name": e["name"]} for e in entries if isinstance(e["name"], str)],
            }
        ],
        "remedyConfigs": entries,
    }


def send_every_job(batch: client.BatchV1Api, namespace: str, cfgs: ConfigurationSet, node: str) -> int:
    """Render every pod remedy's Job for ``node`` and create it with ``dryRun=All``; the number
    sent. AssertionError with the API server's answer when one is refused."""
    sent = 0
    for cfg in cfgs.configurations:
        for th in cfg.thresholds:
            for r in th.chain():
                if not r.pod:
                    continue
                body = remedy_job_manifest(
                    name=remedy_job_name(node, r.name),
                    namespace=namespace,
                    node=node,
                    remedy=r.name,
                    template=r.template(),
                    pod=RUNNER_POD,
                    deadline=r.period or 300.0,
                    owner={
                        "apiVersion": "remediation.noderemedy.io/v1alpha1",
                        "kind": "NodeFence",
                        "metadata": {"name": node, "uid": str(uuid.uuid4())},
                    },
                )
                try:
                    batch.create_namespaced_job(namespace, body, dry_run="All")
                except ApiException as exc:
                    raise AssertionError(
                        f"remedy {r.name}: its Job was refused ({exc.status}): {exc.body}\n{json.dumps(body, indent=1)}"
                    ) from exc
                sent += 1
    return sent


@pytest.fixture
def job_namespace(api: client.ApiClient) -> Any:
    core = client.CoreV1Api(api)
    name = f"nr-dry-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_the_design_example_renders_jobs_the_api_server_accepts(
    api: client.ApiClient, job_namespace: str
) -> None:
    cfgs = parse_configurations(DESIGN_EXAMPLE.read_text(), DESIGN_EXAMPLE.name)
    sent = send_every_job(client.BatchV1Api(api), job_namespace, cfgs, "worker-1")
    assert sent == 2  # repair and terminate


@pytest.mark.timeout(900)
def test_every_configuration_the_loader_accepts_renders_jobs_the_api_server_accepts(
    api: client.ApiClient, job_namespace: str
) -> None:
    batch = client.BatchV1Api(api)
    seen: Counter[str] = Counter()

    @settings(
        max_examples=400,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(doc=configurations(), node=st.from_regex(r"[a-z]([-a-z0-9]{0,40}[a-z0-9])?", fullmatch=True))
    def check(doc: dict[str, Any], node: str) -> None:
        text = yaml.safe_dump(doc)
        try:
            cfgs = parse_configurations(text, "sweep.yaml")
        except ConfigError as exc:
            assert "remedyConfigs" in str(exc) or "thresholdConfigs" in str(exc), exc
            seen["refused"] += 1
            return
        seen["accepted"] += 1
        seen["jobs"] += send_every_job(batch, job_namespace, cfgs, node)

    check()
    print(
        f"FIGURE remedy Job dry-run sweep: {seen['accepted'] + seen['refused']} Configurations, "
        f"{seen['refused']} refused at load naming the field, {seen['accepted']} accepted, "
        f"{seen['jobs']} Jobs sent with dryRun=All, 0 refused by the API server"
    )
    assert seen["jobs"] > 0 and seen["refused"] > 0, seen  # both sides of the property were exercised
