"""JSON log lines carry the custom resource and the node on every line."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from noderemedy_runner.logs import bind, scope, set_node, setup


@pytest.fixture
def stream():
    buf = io.StringIO()
    setup("debug", buf)
    yield buf
    setup("warning", io.StringIO())


def lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_resource_and_node_on_every_line(stream: io.StringIO) -> None:
    log = logging.getLogger("t")
    bind(log, resource="NodeFence/lab-node-1", node="lab-node-1").info(
        "created %s", "x", extra={"late_s": 0.1}
    )
    log.warning("plain")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        bind(log, node="n2").exception("failed")
    a, b, c = lines(stream)
    assert (a["resource"], a["node"], a["msg"], a["late_s"], a["level"]) == (
        "NodeFence/lab-node-1",
        "lab-node-1",
        "created x",
        0.1,
        "info",
    )
    assert (b["resource"], b["node"]) == (None, None)
    assert c["node"] == "n2" and "RuntimeError: boom" in c["exc"]
    assert a["time"].endswith("Z") and a["logger"] == "t"


def test_unknown_level() -> None:
    with pytest.raises(ValueError, match="--log-level 'loud'"):
        setup("loud")


def test_scope_stamps_lines_of_code_that_does_not_know_the_resource(stream: io.StringIO) -> None:
    log = logging.getLogger("noderemedy_runner.executor")
    seen_in_thread: list[dict] = []
    with scope(resource="NodeFence/nf-1"):
        log.info("before the node is known")
        set_node("lab-node-1")
        log.info("run started")
        bind(log, resource="Node/lab-node-2", node="lab-node-2").info("bound wins")
        t = threading.Thread(target=lambda: log.info("other thread"))
        t.start()
        t.join()
        with scope(resource="Metal3Remediation/ns/m"):
            log.info("nested")
        log.info("restored")
    log.info("outside")
    seen_in_thread = [ln for ln in lines(stream) if ln["msg"] == "other thread"]
    got = {ln["msg"]: (ln["resource"], ln["node"]) for ln in lines(stream)}
    assert got == {
        "before the node is known": ("NodeFence/nf-1", None),
        "run started": ("NodeFence/nf-1", "lab-node-1"),
        "bound wins": ("Node/lab-node-2", "lab-node-2"),
        "other thread": (None, None),  # a context is per thread
        "nested": ("Metal3Remediation/ns/m", None),
        "restored": ("NodeFence/nf-1", "lab-node-1"),
        "outside": (None, None),
    }
    assert len(seen_in_thread) == 1
