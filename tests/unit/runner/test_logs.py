"""JSON log lines carry the custom resource and the node on every line."""

from __future__ import annotations

import io
import json
import logging

import pytest

from noderemedy_runner.logs import bind, setup


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
