"""``noderemedy.core.static_pod_fallback`` through the real ``ansible-playbook`` (no network): the check/apply
quartet, errors naming the field, the lock, the role and the playbook, all under a temporary root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FQCN = "noderemedy.core.static_pod_fallback"


def pod(rev: int, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system", "labels": {"revision": str(rev)}},
        "spec": {"containers": [{"name": name, "image": "k8s", "command": [name, f"--rev={rev}"]}]},
    }


def make_root(
    tmp: Path, operand: str = "kube-apiserver", revisions=(1, 2, 3), live: int = 3, lkg: int | None = 2
):
    manifests, resources, lock = tmp / "manifests", tmp / "resources", tmp / "lock"
    for d in (manifests, resources, lock):
        d.mkdir(exist_ok=True)
    for r in revisions:
        (resources / f"{operand}-pod-{r}").mkdir()
        (resources / f"{operand}-pod-{r}" / f"{operand}-pod.yaml").write_text(yaml.safe_dump(pod(r, operand)))
    (manifests / f"{operand}-pod.yaml").write_text(yaml.safe_dump(pod(live, operand)))
    if lkg is not None:
        (resources / f"{operand}-last-known-good").symlink_to(
            resources / f"{operand}-pod-{lkg}" / f"{operand}-pod.yaml"
        )
    return {
        "manifests_dir": str(manifests),
        "resources_dir": str(resources),
        "lock_file": str(lock / f"{operand}-installer.lock"),
        "termination_log": str(tmp / f"{operand}-termination.log"),
    }


def test_fallback_check_apply_quartet(run_playbook, tmp_path):
    paths = make_root(tmp_path)
    args = {
        "operand": "kube-apiserver",
        "state": "fallback",
        "reason": "CrashLooping",
        "fallback_message": "m",
        **paths,
    }
    args["storage_version_check"] = "never"
    tasks = [{"name": "fallback", FQCN: args}]
    live = Path(paths["manifests_dir"]) / "kube-apiserver-pod.yaml"
    before = live.read_bytes()

    check = run_playbook(tasks, check=True).task("fallback")
    assert check["changed"] is True and check["fallback_revision"] == 2
    assert live.read_bytes() == before

    apply = run_playbook(tasks).task("fallback")
    assert (apply["changed"], apply["action"], apply["reason"]) == (True, "fallback", "CrashLooping")
    assert apply["files_written"] == [str(live)]
    assert apply["retry"]["retryable"] is False
    written = yaml.safe_load(live.read_text())
    assert written["metadata"]["labels"]["revision"] == "2"
    assert (
        written["metadata"]["annotations"]["startup-monitor.static-pods.openshift.io/fallback-for-revision"]
        == "3"
    )

    args["revision"] = 3
    assert run_playbook(tasks, check=True).task("fallback")["changed"] is False
    again = run_playbook(tasks).task("fallback")
    assert (again["changed"], again["action"]) == (False, "none")
    assert sorted(p.name for p in Path(paths["manifests_dir"]).iterdir()) == ["kube-apiserver-pod.yaml"]


def test_mark_good_status_and_prune(run_playbook, tmp_path):
    paths = make_root(tmp_path, revisions=range(1, 8), live=6, lkg=2)
    base = {"operand": "kube-apiserver", "storage_version_check": "never", **paths}
    res = run_playbook(
        [
            {"name": "good", FQCN: {**base, "state": "mark_good"}},
            {"name": "status", FQCN: {**base, "state": "status"}},
            {"name": "prune", FQCN: {**base, "state": "prune", "revision_limit": 2}},
        ]
    )
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task("good")["last_known_good_revision"] == 6 and res.task("good")["changed"] is True
    status = res.task("status")
    assert (status["revision"], status["last_known_good_revision"], status["revisions"]) == (
        6,
        6,
        list(range(1, 8)),
    )
    assert res.task("prune")["pruned_revisions"] == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in Path(paths["resources_dir"]).iterdir()) == [
        "kube-apiserver-last-known-good",
        "kube-apiserver-pod-6",
        "kube-apiserver-pod-7",
    ]


@pytest.mark.parametrize(
    ("extra", "field", "text"),
    [
        ({"operand": "Kube_API"}, "operand", "operand: must be a DNS label"),
        ({"state": "monitor", "timeout": 0}, "timeout", "timeout: must be > 0"),
        ({"state": "mark_good", "revision": 9}, "revision", "revision 9 has no manifest"),
    ],
)
def test_bad_input_fails_naming_the_field(run_playbook, tmp_path, extra, field, text):
    paths = make_root(tmp_path)
    live = Path(paths["manifests_dir"]) / "kube-apiserver-pod.yaml"
    before = live.read_bytes()
    args = {
        "operand": "kube-apiserver",
        "state": "fallback",
        "storage_version_check": "never",
        **paths,
        **extra,
    }
    res = run_playbook([{"name": "bad", FQCN: args}]).task("bad")
    assert res["failed"] is True
    assert text in res["msg"] and res["field"] == field
    assert "exception" in res  # the traceback itself is shown only with ANSIBLE_DISPLAY_TRACEBACK
    assert live.read_bytes() == before


def test_the_monitor_refuses_when_it_cannot_see_a_start_attempt(run_playbook, tmp_path):
    """No pod logs directory, no client configuration, no termination log: the module fails with
    NoStartAttemptSource naming the options, before judging; the live revision stays."""
    paths = make_root(tmp_path)
    del paths["termination_log"]
    live = Path(paths["manifests_dir"]) / "kube-apiserver-pod.yaml"
    before = live.read_bytes()
    args = {
        "operand": "kube-apiserver",
        "state": "monitor",
        "timeout": 1,
        "storage_version_check": "never",
        "pod_logs_dir": str(tmp_path / "no-pod-logs"),
        **paths,
    }
    res = run_playbook([{"name": "blind", FQCN: args}]).task("blind")
    assert res["failed"] is True and res["reason"] == "NoStartAttemptSource", res
    assert res["field"] == "pod_logs_dir"
    for option in ("pod_logs_dir", "node_name", "kubeconfig", "mirror_pod", "termination_log"):
        assert option in res["msg"], res["msg"]
    assert live.read_bytes() == before
    assert not list(Path(paths["manifests_dir"]).glob(".*"))


HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_module_fails_with_lock_busy_and_writes_nothing(run_playbook, tmp_path):
    paths = make_root(tmp_path)
    live = Path(paths["manifests_dir"]) / "kube-apiserver-pod.yaml"
    before = live.read_bytes()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, paths["lock_file"]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        args = {"operand": "kube-apiserver", "state": "fallback", "lock_timeout": 0.5, **paths}
        args["storage_version_check"] = "never"
        res = run_playbook([{"name": "locked", FQCN: args}]).task("locked")
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert res["failed"] is True and res["reason"] == "LockBusy"
    assert live.read_bytes() == before


def test_playbook_runs_the_role_for_etcd_and_kube_apiserver(run_playbook, tmp_path):
    """The shipped playbook: etcd falls back (no start attempt within the timeout), kube-apiserver too."""
    etcd_root, kas_root = tmp_path / "etcd", tmp_path / "kas"
    etcd_root.mkdir()
    kas_root.mkdir()
    etcd = make_root(etcd_root, operand="etcd", revisions=(4, 5), live=5, lkg=4)
    kas = make_root(kas_root, revisions=(1, 2), live=2, lkg=None)
    settings = {"etcd": etcd, "kube-apiserver": {**kas, "storage_version_check": "never"}}
    plays = yaml.safe_load((ROOT / "playbooks" / "static_pod_fallback.yml").read_text())
    res = run_playbook(
        plays=plays,
        extravars={
            "static_pod_fallback_settings": settings,
            "static_pod_fallback_timeout": 1,
            "static_pod_fallback_interval": 0.5,
            "ansible_connection": "local",
        },
    )
    assert res.rc == 0, res.stdout[-3000:] + res.stderr[-2000:]
    results = res.task("Report")["static_pod_fallback_results"]
    assert results["etcd"]["action"] == "fallback" and results["etcd"]["reason"] == "NeverStartedUp"
    assert (results["etcd"]["fallback_revision"], results["etcd"]["fallback_source"]) == (
        4,
        "last-known-good",
    )
    assert results["kube-apiserver"]["fallback_revision"] == 1
    assert results["kube-apiserver"]["fallback_source"] == "previous-revision"
    etcd_live = yaml.safe_load((Path(etcd["manifests_dir"]) / "etcd-pod.yaml").read_text())
    assert etcd_live["metadata"]["annotations"][
        "startup-monitor.static-pods.openshift.io/fallback-reason"
    ] == ("NeverStartedUp")


def _collection_modules():
    """The doc fragment and ``_static_pod``, imported from this checkout as ``noderemedy.core``."""
    from ansible_collections.noderemedy.core.plugins.doc_fragments import static_pod as fragment
    from ansible_collections.noderemedy.core.plugins.module_utils import _static_pod as sp

    return fragment.ModuleDocFragment, sp


def test_doc_fragments_match_the_argspec_constants_one_to_one():
    fragment, sp = _collection_modules()
    for doc, spec in (
        (fragment.DOCUMENTATION, sp.LAYOUT_ARGSPEC),
        (fragment.PROBE, sp.PROBE_ARGSPEC),
        (fragment.STORAGE_VERSION, sp.STORAGE_VERSION_ARGSPEC),
    ):
        options = yaml.safe_load(doc)["options"]
        assert set(options) == set(spec)
        for name, opt in options.items():
            assert opt["type"] == spec[name]["type"], name
            assert opt.get("default") == spec[name].get("default"), name
            assert opt.get("choices") == spec[name].get("choices"), name
            assert bool(opt.get("required")) == bool(spec[name].get("required")), name


@pytest.fixture(scope="module")
def ansible_doc(collections_path) -> dict[str, dict]:
    """What ``ansible-doc --json`` shows for each of the two modules (run once for the module's
    tests): module name -> its ``doc``."""
    bindir = Path(sys.executable).parent
    env = {"ANSIBLE_COLLECTIONS_PATH": str(collections_path), "PATH": str(bindir), "HOME": str(Path.home())}
    docs = {}
    for name in ("static_pod_fallback", "storage_version_info"):
        out = subprocess.run(
            [str(bindir / "ansible-doc"), "--json", f"noderemedy.core.{name}"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        docs[name] = json.loads(out.stdout)[f"noderemedy.core.{name}"]["doc"]
    return docs


def test_ansible_doc_matches_each_modules_argspec(ansible_doc):
    """What ansible-doc shows (fragments merged) is exactly what each module accepts."""
    import importlib

    _collection_modules()
    for name in ("static_pod_fallback", "storage_version_info"):
        documented = ansible_doc[name]["options"]
        spec = importlib.import_module(
            f"ansible_collections.noderemedy.core.plugins.modules.{name}"
        ).argument_spec()
        assert set(documented) == set(spec), name
        for opt, doc in documented.items():
            want = spec[opt]
            assert doc.get("type", "str") == want.get("type", "str"), (name, opt)
            assert doc.get("default") == want.get("default"), (name, opt)
            assert sorted(doc.get("choices") or []) == sorted(want.get("choices") or []), (name, opt)
            assert doc.get("elements") == want.get("elements"), (name, opt)
            assert sorted(doc.get("aliases") or []) == sorted(want.get("aliases") or []), (name, opt)


def test_ansible_doc_renders_both_modules(ansible_doc):
    for name in ("static_pod_fallback", "storage_version_info"):
        doc = ansible_doc[name]
        assert {"check_mode", "diff_mode", "platform"} <= set(doc["attributes"])
        assert {"kubeconfig", "host", "api_key"} <= set(doc["options"])


def test_role_prunes_after_mark_good_and_can_fail_on_a_fallback(run_playbook, tmp_path):
    paths = make_root(tmp_path, revisions=range(1, 6), live=5, lkg=1)
    role = "noderemedy.core.static_pod_fallback"
    settings = {"kube-apiserver": {**paths, "storage_version_check": "never"}}
    common = {"static_pod_fallback_settings": settings, "static_pod_fallback_revision_limit": 2}
    play = {"hosts": "localhost", "gather_facts": False, "connection": "local"}
    good = run_playbook(
        plays=[{**play, "roles": [{"role": role, "static_pod_fallback_state": "mark_good", **common}]}],
    )
    assert good.rc == 0, good.stdout[-3000:]
    outcome = good.task("noderemedy.core.static_pod_fallback : Record the outcome of kube-apiserver")
    result = outcome["ansible_facts"]["static_pod_fallback_results"]["kube-apiserver"]
    assert (result["action"], result["last_known_good_revision"]) == ("mark_good", 5)
    assert result["pruned_revisions"] == [1, 2, 3]
    assert sorted(p.name for p in Path(paths["resources_dir"]).iterdir()) == [
        "kube-apiserver-last-known-good",
        "kube-apiserver-pod-4",
        "kube-apiserver-pod-5",
    ]
    failing = run_playbook(
        plays=[
            {
                **play,
                "roles": [
                    {
                        "role": role,
                        "static_pod_fallback_state": "fallback",
                        "static_pod_fallback_fail_on_fallback": True,
                        "static_pod_fallback_revision_limit": 2,
                        "static_pod_fallback_settings": {
                            "kube-apiserver": {**settings["kube-apiserver"], "revision_limit": 2}
                        },
                    }
                ],
            }
        ],
    )
    assert failing.rc != 0
    failed = failing.task("noderemedy.core.static_pod_fallback : Fail on a fallback of kube-apiserver")
    assert failed["failed"] is True and "fell back to revision 4" in failed["msg"]
