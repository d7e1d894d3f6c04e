"""The pass_persist backend (lab/noderemedy_lab/data/fence_pass.py) parses its state file only when
the file's bytes changed: an edit made between two requests is seen by the next one, even an edit in
place that keeps the file's size and inode (and likely its mtime), and its own SETs keep the file
readable by the lab (``ports``, ``log``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from noderemedy_lab import snmp
from noderemedy_lab.bmc import data_path

STATUS = ".1.3.6.1.2.1.2.2.1.8"  # ifOperStatus
ADMIN = ".1.3.6.1.2.1.2.2.1.7"  # ifAdminStatus


@pytest.fixture
def fc(tmp_path: Path):
    state = tmp_path / "state.json"
    st = snmp.initial_state("fcswitch", [f"lab-node-{i}" for i in range(20)])
    st["log"] = [[1700000000.0 + i, "1", 1] for i in range(1000)]
    state.write_text(json.dumps(st))
    proc = subprocess.Popen(
        [sys.executable, str(data_path("fence_pass.py")), "fcswitch", str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def ask(*lines: str) -> list[str]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(line + "\n" for line in lines))
        proc.stdin.flush()
        first = proc.stdout.readline().strip()
        if first in ("NONE", "DONE") or lines[0] == "set":
            return [first]
        return [first, proc.stdout.readline().strip(), proc.stdout.readline().strip()]

    yield ask, state
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def test_an_edit_in_place_of_the_same_size_is_seen_at_once(fc) -> None:
    ask, state = fc
    assert ask("get", f"{STATUS}.7")[2] == "1"
    with open(state, "r+") as f:  # same inode, same size, within the same timestamp tick
        f.write(state.read_text().replace('"7": 1', '"7": 2', 1))
    assert ask("get", f"{STATUS}.7")[2] == "2"
    assert ask("get", f"{ADMIN}.7")[2] == "2"


def test_sets_rewrite_the_file_and_keep_the_last_1000_log_entries(fc) -> None:
    ask, state = fc
    for port in (3, 4):
        assert ask("set", f"{ADMIN}.{port}", "integer 2", "") == ["DONE"]
    st = json.loads(state.read_text())
    assert (st["ports"]["3"], st["ports"]["4"], st["ports"]["5"]) == (2, 2, 1)
    assert len(st["log"]) == 1000 and [row[1:] for row in st["log"][-2:]] == [["3", 2], ["4", 2]]
    # an edit after our own write (a new file, as the lab's helpers write it) is seen too
    st["ports"]["3"] = 1
    tmp = state.with_name("state.json.tmp")
    tmp.write_text(json.dumps(st, indent=1))
    tmp.replace(state)
    assert ask("get", f"{STATUS}.3")[2] == "1"
    assert ask("getnext", f"{STATUS}.3") == [f"{STATUS}.4", "integer", "2"]
    assert ask("set", f"{ADMIN}.5", "integer 2", "") == ["DONE"]
    st = json.loads(state.read_text())
    assert (st["ports"]["3"], st["ports"]["5"]) == (1, 2), "the edit survives the next SET"
