"""A remedy's pod template: the design's own Configuration (verbatim: a byte-for-byte copy of the
design documents' example in ``data/design-examples/``) loads, its ``env``/``configmaps`` shorthand becomes ``secretKeyRef``
entries and mounted ConfigMap volumes, and the remedy's Job renders; what cannot be used is refused
at load time naming the field. That every rendered Job is one the API server accepts is shown
against the lab's API server (tests/integration/test_remedy_job_dry_run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noderemedy_runner.config.podtemplate import (
    CONFIGMAP_MOUNT_ROOT,
    PodTemplateError,
    default_secret_name,
    env_name,
    pod_template,
    volume_name,
)
from noderemedy_runner.config.remedy import ConfigError, parse_configurations
from noderemedy_runner.job_manifests import remedy_job_manifest

#: The design documents' example, copied verbatim.
DESIGN_EXAMPLE = Path(__file__).resolve().parent / "data" / "design-examples" / "remedy-configuration.yaml"
WHERE = "c.yaml: Configuration x: remedyConfigs[0].podTemplate"


def render(template: dict[str, Any], remedy: str = "repair") -> dict[str, Any]:
    return remedy_job_manifest(
        name=f"worker-1-remedy-{remedy}",
        namespace="noderemedy",
        node="worker-1",
        remedy=remedy,
        template=template,
        pod=None,
        deadline=180.0,
        owner=None,
    )


def test_the_design_example_verbatim_loads_and_renders() -> None:
    assert DESIGN_EXAMPLE.is_file(), f"{DESIGN_EXAMPLE}: the design's example is missing"
    configs = parse_configurations(DESIGN_EXAMPLE.read_text(), str(DESIGN_EXAMPLE))
    (cfg,) = configs.configurations
    repair = cfg.remedy_config("repair")
    assert repair is not None and repair.pod_template is not None
    job = render(json.loads(repair.pod_template))
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "configmaps" not in container
    assert container["env"][0] == {
        "name": "SECRET_KEY",
        "valueFrom": {"secretKeyRef": {"name": "remedy-repair", "key": "secret-key"}},
    }
    assert {"name": "NODEREMEDY_NODE", "value": "worker-1"} in container["env"]
    assert container["volumeMounts"] == [
        {
            "name": "cm-fence-method-config",
            "mountPath": f"{CONFIGMAP_MOUNT_ROOT}/fence-method-config",
            "readOnly": True,
        }
    ]
    assert pod["volumes"] == [
        {"name": "cm-fence-method-config", "configMap": {"name": "fence-method-config"}}
    ]
    # the DiskPressure threshold keeps its storage-fence remedy: the fence flow
    disk = cfg.thresholds[1]
    assert (disk.condition_type, disk.statuses, disk.period) == ("DiskPressure", frozenset({"True"}), 600.0)
    assert [(r.name, r.pod, r.clean_resources) for r in disk.chain()] == [("storage-fence", False, True)]


def test_secret_name_and_env_maps() -> None:
    text = json.loads(
        pod_template(
            {
                "spec": {
                    "containers": [{"name": "r", "image": "b", "env": ["a.b", {"name": "X", "value": "1"}]}]
                }
            },
            WHERE,
            "repair",
            "repair-credentials",
        )
    )
    env = text["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "A_B", "valueFrom": {"secretKeyRef": {"name": "repair-credentials", "key": "a.b"}}},
        {"name": "X", "value": "1"},
    ]
    assert default_secret_name("repair") == "remedy-repair"
    assert env_name("secret-key") == "SECRET_KEY"
    long = "c" * 200
    assert len(volume_name(long)) == 63 and volume_name(long) != volume_name(long + "d")


@pytest.mark.parametrize(
    ("container", "field"),
    [
        ({"name": "Repair", "image": "b"}, "containers[0].name"),
        ({"name": "r", "image": " b"}, "containers[0].image"),
        ({"name": "r", "image": "b", "command": "binary clean"}, "containers[0].command"),
        ({"name": "r", "image": "b", "env": "secret-key"}, "containers[0].env"),
        ({"name": "r", "image": "b", "env": ["bad key"]}, "containers[0].env[0]"),
        ({"name": "r", "image": "b", "env": ["1st"]}, "containers[0].env[0]"),
        ({"name": "r", "image": "b", "env": ["a-b", "a_b"]}, "containers[0].env[1]"),
        ({"name": "r", "image": "b", "env": [{"name": "X", "value": 1}]}, "containers[0].env[0].value"),
        ({"name": "r", "image": "b", "env": [{"name": "a=b"}]}, "containers[0].env[0].name"),
        ({"name": "r", "image": "b", "env": [3]}, "containers[0].env[0]"),
        ({"name": "r", "image": "b", "configmaps": "cm"}, "containers[0].configmaps"),
        ({"name": "r", "image": "b", "configmaps": ["Bad_Name"]}, "containers[0].configmaps[0]"),
        ({"name": "r", "image": "b", "configmaps": ["cm", "cm"]}, "containers[0].configmaps[1]"),
    ],
)
def test_containers_refused_naming_the_field(container: dict[str, Any], field: str) -> None:
    with pytest.raises(
        PodTemplateError, match=r"podTemplate\.spec\." + field.replace("[", r"\[").replace("]", r"\]")
    ):
        pod_template({"spec": {"containers": [container]}}, WHERE, "repair")


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "r", "image": "b"}]}}, "metadata"),
        (
            {"metadata": {"labels": {"a": "b c"}}, "spec": {"containers": [{"name": "r", "image": "b"}]}},
            "metadata.labels",
        ),
        (
            {"metadata": {"labels": {"-a": "b"}}, "spec": {"containers": [{"name": "r", "image": "b"}]}},
            "metadata.labels",
        ),
        (
            {"metadata": {"annotations": {"a": 1}}, "spec": {"containers": [{"name": "r", "image": "b"}]}},
            "metadata.annotations",
        ),
        (
            {"spec": {"containers": [{"name": "r", "image": "b"}, {"name": "r", "image": "b"}]}},
            "spec.containers[1].name",
        ),
        (
            {
                "spec": {
                    "volumes": [{"name": "cm-x", "emptyDir": {}}],
                    "containers": [{"name": "r", "image": "b", "configmaps": ["x"]}],
                }
            },
            "spec.volumes",
        ),
    ],
)
def test_templates_refused_naming_the_field(template: dict[str, Any], field: str) -> None:
    with pytest.raises(
        PodTemplateError,
        match=r"podTemplate\." + field.replace(".", r"\.").replace("[", r"\[").replace("]", r"\]"),
    ):
        pod_template(template, WHERE, "repair")


def doc(entry: str) -> str:
    return f"""\
apiVersion: node-remedy/v1alpha
kind: Configuration
metadata: {{name: x}}
thresholdConfigs:
- {{nodeConditionType: Ready, nodeConditionStatus: false, nodeConditionPeriod: 5s, remedy1: [{{name: repair}}]}}
remedyConfigs:
{entry}
"""


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        (
            "- {name: repair, secretName: Bad_Name, podTemplate: {spec: {containers: [{name: r, image: b}]}}}",
            "remedyConfigs[0].secretName",
        ),
        ("- {name: repair, secretName: creds}", "remedyConfigs[0].secretName"),
        (
            f"- {{name: {'r' * 64}, podTemplate: {{spec: {{containers: [{{name: r, image: b}}]}}}}}}",
            "remedyConfigs[0].name",
        ),
        (
            "- {name: repair, podTemplate: {spec: {containers: [{name: r, image: b, env: [secret key]}]}}}",
            "remedyConfigs[0].podTemplate.spec.containers[0].env[0]",
        ),
    ],
)
def test_load_refuses_naming_the_field(entry: str, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.").replace("[", r"\[").replace("]", r"\]")):
        parse_configurations(doc(entry), "c.yaml")


def test_secret_name_is_used_by_the_env_shorthand() -> None:
    cfgs = parse_configurations(
        doc(
            "- {name: repair, secretName: creds, podTemplate: {spec: {containers: [{name: r, image: b, env: [k]}]}}}"
        ),
        "c.yaml",
    )
    rc = cfgs.configurations[0].remedy_config("repair")
    assert rc is not None and rc.pod_template is not None
    env = json.loads(rc.pod_template)["spec"]["containers"][0]["env"]
    assert env == [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]


def test_check_config_accepts_the_design_example(capsys: pytest.CaptureFixture[str]) -> None:
    from noderemedy_runner.cli import main

    assert main(["--config", str(DESIGN_EXAMPLE), "--check-config", "--metrics-addr", "0"]) == 0
    out = capsys.readouterr().out
    assert "repair" in out and "storage-fence" in out


class _Jobs:
    """Stands in for :class:`~noderemedy_runner.jobs.JobRuns`: a render failure never reaches it."""

    namespace = "noderemedy"

    def start(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a Job that cannot be rendered is never created")


def test_a_template_that_cannot_be_rendered_fails_its_remedy_not_the_loop() -> None:
    """A pod template the loader never produced (written into a Configuration by other means) that
    remedy_job_manifest cannot render: that remedy fails with a message naming it (the machine
    records RemedyFailed and escalates); no exception reaches the reconcile loop."""
    import threading

    from noderemedy_runner.config.remedy import ConfigurationSet, RemedyConfig, RemedyConfiguration
    from noderemedy_runner.executor import Executor
    from noderemedy_runner.loops.remedies import CONFIGURATION_ANNOTATION, PodRemedies
    from noderemedy_runner.machines.actions import Action

    raw = RemedyConfig("repair", json.dumps({"spec": {"containers": ["repair"]}}))
    configs = ConfigurationSet((RemedyConfiguration("c", remedy_configs=(raw,)),))
    remedies = PodRemedies(_Jobs(), configs)  # type: ignore[arg-type]
    obj = {
        "kind": "NodeFence",
        "metadata": {"name": "worker-1", "uid": "u", "annotations": {CONFIGURATION_ANNOTATION: "c"}},
    }
    action = Action(
        kind="run_remedy", ident="worker-1-remedy-repair", extravars={"node": "worker-1", "remedy": "repair"}
    )
    result = remedies.run(obj, action, Executor.__new__(Executor), threading.Event())
    assert result is not None and not result.ok
    assert "remedy repair: its Job cannot be rendered" in result.message
