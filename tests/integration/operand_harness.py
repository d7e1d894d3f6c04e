"""A small stand-in for the kubelet, for one static pod, so the fallback can be tested against a real operand.

The lab has no kubelet. :class:`StaticPodKubelet` does the part of a kubelet's static-pod handling
that the fallback depends on, and nothing more:

* it polls the live manifest (``<manifests_dir>/<operand>-pod.yaml``, every ``poll`` seconds) and,
  when its content changes, stops the running process and starts the new one;
* it runs the first container's ``command`` + ``args`` directly on the host (``Popen``, own process
  group, output to ``<logdir>/<operand>-<n>.log``), restarting it ``restart_delay`` seconds after
  it exits (restartPolicy Always, fixed delay);
* it appends a start record (and an exit record) to the termination log in the format
  ``_static_pod/__init__.py`` documents: ``{"event": "start", "time", "revision", "pid"}``.

What it does not do: images, containers, namespaces, volumes, env, resource limits, probes,
CrashLoopBackOff's exponential delay, mirror pods in the API, pod status, init containers, more
than one container, files other than the live manifest, dot-file semantics beyond "only this file
is read". Processes are stopped through their own Popen handle (SIGTERM to the group, SIGKILL after
10 s) and always reaped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import yaml


class StaticPodKubelet:
    """Runs the static pod of ``manifest`` like a kubelet would (see the module docstring).

    Args:
        manifest: the live manifest path.
        termination_log: where start/exit records are appended.
        logdir: directory for the operand's output logs.
        restart_delay: seconds between an exit and the next start.
        poll: seconds between manifest / process checks.
    """

    def __init__(
        self,
        manifest: Path,
        termination_log: Path,
        logdir: Path,
        restart_delay: float = 1.0,
        poll: float = 0.1,
    ) -> None:
        self.manifest = Path(manifest)
        self.termination_log = Path(termination_log)
        self.logdir = Path(logdir)
        self.restart_delay = restart_delay
        self.poll = poll
        self.proc: subprocess.Popen | None = None
        self.revision: int | None = None
        self.starts: list[dict] = []
        self._content: bytes | None = None
        self._next_start = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-{self.manifest.name}", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> StaticPodKubelet:
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.termination_log.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the loop and the running process (reaped)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        self._kill()

    def _record(self, rec: dict) -> None:
        with open(self.termination_log, "a") as fh:
            fh.write(json.dumps(rec) + "\n")

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._record(
            {"event": "exit", "time": time.time(), "revision": self.revision, "exitCode": proc.returncode}
        )

    def _start(self) -> None:
        try:
            pod = yaml.safe_load(self._content or b"")
            container = pod["spec"]["containers"][0]
            argv = list(container.get("command") or []) + list(container.get("args") or [])
            self.revision = int(pod["metadata"]["labels"]["revision"])
        except (yaml.YAMLError, TypeError, KeyError, IndexError, ValueError):
            self._next_start = float("inf")  # like the kubelet: an invalid manifest is never started
            return
        n = len(self.starts)
        out = open(self.logdir / f"{self.manifest.stem}-{n}-rev{self.revision}.log", "wb")
        with out:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        rec = {"event": "start", "time": time.time(), "revision": self.revision, "pid": self.proc.pid}
        self.starts.append(rec)
        self._record(rec)

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    content = self.manifest.read_bytes()
                except FileNotFoundError:
                    content = None
                if content != self._content:
                    self._kill()
                    self._content = content
                    self._next_start = 0.0
                if self._content is not None:
                    if self.proc is not None and self.proc.poll() is not None:
                        rc = self.proc.returncode
                        self.proc = None
                        self._record(
                            {"event": "exit", "time": time.time(), "revision": self.revision, "exitCode": rc}
                        )
                        self._next_start = time.monotonic() + self.restart_delay
                    if self.proc is None and time.monotonic() >= self._next_start:
                        self._start()
                self._stop.wait(self.poll)
        except BaseException as exc:  # surfaced by the tests through .error
            self.error = exc
