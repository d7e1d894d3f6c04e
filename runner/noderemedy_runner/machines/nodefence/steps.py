"""Steps, segments and fencing levels of the NodeFence flow: deterministic run idents
(:func:`run_ident`), the idempotent segments of a step (:func:`step_segments`), the level that
fenced (:func:`fenced_level`), the step and read-back actions (:func:`run_step_action`,
:func:`verify_fence_action`) and the fences a stopped flow leaves (:func:`applied_fences`)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from noderemedy_runner.config.fence import FenceConfig, FenceMethod
from noderemedy_runner.machines import actions as act
from noderemedy_runner.machines.actions import Action, Step
from noderemedy_runner.machines.fencestatus import NodeFenceStatus, RunRef

_STEP_SLUG: dict[str, str] = {
    "Isolation": "isolation",
    "PowerManagement": "power-management",
    "Recovery": "recovery",
}


def run_ident(name: str, restarts: int, step: Step, attempt: int, segment: int = 0, level: int = 1) -> str:
    """Deterministic ansible-runner ident: ``<name>-r<restarts>-<step>-a<attempt>``, with
    ``-l<level>`` appended for fencing levels after the first and ``-s<segment>`` for segments
    after the first.

    Names longer than 200 characters are shortened to 191 characters plus 8 hex digits of their
    SHA-256, so the ident fits ``status.currentRun.ident`` (at most 253 characters).
    """
    if len(name) > 200:
        name = f"{name[:191]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    tail = (f"-l{level}" if level > 1 else "") + (f"-s{segment}" if segment else "")
    return f"{name}-r{restarts}-{_STEP_SLUG[step]}-a{attempt}{tail}"


def step_segments(methods: tuple[FenceMethod, ...]) -> tuple[tuple[FenceMethod, ...], ...]:
    """Split a step's ordered methods into segments, each idempotent as a whole.

    A segment is a maximal run of consecutive methods with the same ``action`` (``off`` or
    ``on``); a ``reboot`` method is a segment of its own. Performing a segment twice has the
    effect of performing it once (an off of what is off changes nothing), while a whole step
    such as ``ipmi-off ipmi-on`` does not: replayed after its on took effect, it would cut the
    power of a node that is booting again. The machine commits to each segment in the status
    before running it. A ``reboot`` alone is not idempotent: its replay power-cycles again, which
    is why docs/fence-config.md asks for ``off`` then ``on`` methods. Returns ``()`` for no methods.
    """
    out: list[list[FenceMethod]] = []
    for m in methods:
        if out and m.action != "reboot" and out[-1][-1].action == m.action:
            out[-1].append(m)
        else:
            out.append([m])
    return tuple(tuple(seg) for seg in out)


def segment_methods(config: FenceConfig, run: RunRef) -> tuple[FenceMethod, ...]:
    """The methods of ``run``'s segment (:func:`step_segments` of its step's level); ``()`` when
    the configuration no longer has that segment."""
    segs = step_segments(config.methods(run.step, run.level))
    return segs[run.segment] if run.segment < len(segs) else ()


def _methods_extravars(methods: tuple[FenceMethod, ...]) -> list[dict[str, Any]]:
    return [m.to_extravars() for m in methods]


def run_step_action(
    name: str, run: RunRef, config: FenceConfig, namespace: str | None = None, release: bool = False
) -> Action:
    """``run_step`` for ``run``: playbook ``fence_step.yml``, extravars with the node, the fence
    ConfigMap's name and the methods of the run's segment of the step (:func:`step_segments`;
    references only: addresses, plugs, Secret names).

    ``release`` (extravar ``release_workloads``): the same run then adds the out-of-service taint
    with the evidence of the fence *it* verified -- ``noderemedy.core.node_taint`` refuses anything
    but a verified, fresh fence of a NotReady node (invariant 1) -- which saves a second
    ansible-playbook run between the fence and the release (NodeFence creation → taint in about
    3 s, docs/benchmarks.md)."""
    return Action(
        kind="run_step",
        playbook=act.PLAYBOOKS["run_step"],
        step=run.step,
        ident=run.ident,
        extravars={
            "node": config.node,
            "nodefence": name,
            "step": run.step,
            "attempt": run.attempt,
            "segment": run.segment,
            "level": run.level,
            "fence_config": config.configmap,
            "namespace": namespace,
            "methods": _methods_extravars(segment_methods(config, run)),
            "release_workloads": release,
            "fenced_storage": [dict(m) for m in config.fenced_storage],
            "fence_max_age": act.FENCE_FRESH_SECONDS,
        },
        reason=f"Run{run.step}",
    )


_FENCE_STEPS: tuple[Step, ...] = ("Isolation", "PowerManagement")


def fenced_level(status: NodeFenceStatus, step: Step) -> int:
    """The fencing level of ``step`` that last succeeded in the current pass (``restarts``) of
    the flow, per ``status.fenceLevels``; 1 when none is recorded (a step with one level)."""
    for lv in reversed(status.fence_levels):
        if lv.step == step and lv.restarts == status.restarts and lv.result == "Succeeded":
            return lv.level
    return 1


def verify_fence_action(name: str, config: FenceConfig, status: NodeFenceStatus | None = None) -> Action:
    """``verify_fence``: read back (no change) the state of every ``off`` method of Isolation and
    PowerManagement (``fence_verify.yml``) -- of the level that fenced (:func:`fenced_level`, from
    ``status``; level 1 without one); the run's own evidence task reduces the read-backs to one
    reading (``roles/fence_step/tasks/evidence.yml``)."""
    s = status or NodeFenceStatus()
    methods = tuple(
        m for step in _FENCE_STEPS for m in config.methods(step, fenced_level(s, step)) if m.action == "off"
    )
    return Action(
        kind="verify_fence",
        playbook=act.PLAYBOOKS["verify_fence"],
        extravars={
            "node": config.node,
            "nodefence": name,
            "fence_config": config.configmap,
            "methods": _methods_extravars(methods),
        },
        reason="VerifyFence",
    )


_JOB_RE = re.compile(r"-r(\d+)-(isolation|power-management)-a\d+(?:-l(\d+))?(?:-s(\d+))?$")
_SLUG_STEP: dict[str, Step] = {"isolation": "Isolation", "power-management": "PowerManagement"}


def applied_fences(status: NodeFenceStatus, config: FenceConfig) -> list[str]:
    """Every ``off`` method a run of this pass (``restarts``) of the flow ran or may have run --
    finished runs in ``jobs`` and the committed ``current_run`` -- as ``<method> (<template>[
    plug <plug>])``, in order, each once: what an admin undoes after stopping the NodeFence."""
    idents = list(status.jobs) + ([status.current_run.ident] if status.current_run else [])
    out: list[str] = []
    for ident in idents:
        m = _JOB_RE.search(ident)
        if m is None or int(m.group(1)) != status.restarts:
            continue
        step, level, segment = _SLUG_STEP[m.group(2)], int(m.group(3) or 1), int(m.group(4) or 0)
        segs = step_segments(config.methods(step, level))
        for method in segs[segment] if segment < len(segs) else ():
            if method.action != "off":
                continue
            plug = f" plug {method.plug}" if method.plug else ""
            item = f"{method.name} ({method.template.configmap}{plug})"
            if item not in out:
                out.append(item)
    return out
