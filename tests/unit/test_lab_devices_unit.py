"""Unit tests of the lab's device helpers: rendering, snmprec data, and the two scripts the peers run
(the chassis_control hook and the pass_persist backend) driven directly over their own interfaces.
No network, no peer processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from noderemedy_lab import snmp
from noderemedy_lab.bmc import (
    data_path,
    power_sets,
    render_lan_conf,
    render_power_hook,
    set_bmc_mode,
    set_ignore_power,
    validate_power_hook,
)
from noderemedy_lab.procs import ComponentError

NODES = ["lab-node-0", "lab-node-1", "lab-node-2"]


# ------------------------------------------------------------------------------------- BMC
def test_lan_conf_has_three_users_with_their_privileges_and_passwords(tmp_path: Path) -> None:
    text = render_lan_conf(
        name="bmc-x", port=24100, hook=Path("/h.sh"), node_dir=tmp_path, admin="A1", oper="O2", viewer="V3"
    )
    assert "addr 127.0.0.1 24100" in text
    assert f'chassis_control "/bin/sh /h.sh {tmp_path}"' in text
    assert 'user 2 true  "admin"  "A1"' in text and " admin " in text.splitlines()[-3]
    assert 'user 3 true  "oper"   "O2"' in text and " operator " in text.splitlines()[-2]
    assert 'user 4 true  "viewer" "V3"' in text and " user " in text.splitlines()[-1]


def test_power_hook_wrapper_passes_node_and_value_and_keeps_arguments(tmp_path: Path) -> None:
    out = tmp_path / "args"
    target = tmp_path / "target.sh"
    target.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "[$a]"; done > {out}\n')
    target.chmod(0o755)
    wrapper = tmp_path / "power_hook"
    wrapper.write_text(render_power_hook([str(target), "two words", "it's"], "lab-node-1"))
    wrapper.chmod(0o755)
    subprocess.run([str(wrapper), "0"], check=True, timeout=30)
    assert out.read_text().splitlines() == ["[two words]", "[it's]", "[lab-node-1]", "[0]"]


def _chassis(node_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/sh", str(data_path("chassis_control.sh")), str(node_dir), *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_chassis_control_records_power_and_runs_hook(tmp_path: Path) -> None:
    (tmp_path / "power").write_text("1\n")
    calls = tmp_path / "calls"
    hook = tmp_path / "power_hook"
    hook.write_text(f'#!/bin/sh\necho "$1" >> {calls}\n')
    hook.chmod(0o755)
    assert _chassis(tmp_path, "get", "power").stdout == "power:1\n"
    res = _chassis(tmp_path, "set", "power", "0")
    assert res.returncode == 0 and res.stdout == ""
    assert _chassis(tmp_path, "get", "power", "boot").stdout == "power:0\nboot:default\n"
    assert _chassis(tmp_path, "set", "shutdown", "1").returncode == 0  # soft off
    assert _chassis(tmp_path, "set", "reset", "1").returncode == 0
    assert _chassis(tmp_path, "set", "identify", "15", "0").returncode == 0
    assert [line.split()[1] for line in (tmp_path / "power.log").read_text().splitlines()] == ["0", "0"]
    assert calls.read_text().splitlines() == ["0", "0"]
    events = (tmp_path / "events.log").read_text()
    assert "reset 1" in events and "identify 15 0" in events
    assert _chassis(tmp_path, "set", "power", "7").returncode == 1
    assert _chassis(tmp_path, "check").returncode == 1


def test_chassis_control_logs_a_failing_hook_and_still_succeeds(tmp_path: Path) -> None:
    (tmp_path / "power").write_text("1\n")
    hook = tmp_path / "power_hook"
    hook.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    hook.chmod(0o755)
    res = _chassis(tmp_path, "set", "power", "0")
    assert res.returncode == 0 and res.stdout == ""
    assert (tmp_path / "power").read_text().strip() == "0"
    events = (tmp_path / "events.log").read_text()
    assert "boom" in events and "power_hook 0 failed" in events


def test_chassis_control_with_ignore_power_answers_done_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "power").write_text("1\n")
    calls = tmp_path / "calls"
    hook = tmp_path / "power_hook"
    hook.write_text(f'#!/bin/sh\necho "$1" >> {calls}\n')
    hook.chmod(0o755)
    bmc = {"power_file": str(tmp_path / "power")}
    set_ignore_power(bmc, True)
    for args in (("set", "power", "0"), ("set", "shutdown", "1")):
        res = _chassis(tmp_path, *args)
        assert res.returncode == 0 and res.stdout == "", "the BMC answers the command as done"
    assert _chassis(tmp_path, "get", "power").stdout == "power:1\n"
    assert not calls.exists()
    assert [line.split()[1:] for line in (tmp_path / "power.log").read_text().splitlines()] == [
        ["0", "ignored"],
        ["0", "ignored"],
    ], "the power log shows the attempts the BMC lied about"
    assert (tmp_path / "events.log").read_text().count("power 0 ignored") == 2
    set_ignore_power(bmc, False)
    set_ignore_power(bmc, False)  # idempotent
    assert _chassis(tmp_path, "set", "power", "0").returncode == 0
    assert _chassis(tmp_path, "get", "power").stdout == "power:0\n" and calls.read_text() == "0\n"
    # the log's reader keeps the set carried out and leaves out the two lied about, unless asked
    assert [v for _, v in power_sets(tmp_path / "power.log")] == [0]
    assert [v for _, v in power_sets(tmp_path / "power.log", with_ignored=True)] == [0, 0, 0]


def test_power_sets_refuses_a_line_of_another_form_naming_it(tmp_path: Path) -> None:
    log = tmp_path / "power.log"
    assert power_sets(log) == []
    log.write_text("1700000000.5 1\n\n1700000001.0 0 ignored\n1700000002.0 0 what\n")
    with pytest.raises(ValueError, match=r"power.log:4: .*'1700000002.0 0 what'"):
        power_sets(log)


@pytest.mark.parametrize(
    ("hook", "match"), [([], "non-empty"), ("x", "non-empty"), (["/no/such"], "executable")]
)
def test_validate_power_hook_rejects_bad_hooks(hook, match: str) -> None:
    with pytest.raises(ComponentError, match=match) as err:
        validate_power_hook(hook)
    assert err.value.component == "bmc"


# ------------------------------------------------------------------------------------- SNMP data
def test_port_names_follow_nodes_then_spares() -> None:
    names = snmp.port_names("apc-rpdu", NODES)
    assert [names[str(i)] for i in range(1, 9)] == NODES + [f"outlet{i}" for i in range(4, 9)]
    assert snmp.port_names("fcswitch", NODES)["8"] == "fc1/8"
    assert len(snmp.port_names("apc-rpdu", [f"n{i}" for i in range(12)])) == 12


@pytest.mark.parametrize("device", ["apc-ms", "eaton", "fc-sim"])
def test_snmprec_records_are_sorted_unique_and_carry_sys_object_id(device: str, tmp_path: Path) -> None:
    recs = snmp.snmprec_records(device, NODES)
    keys = [tuple(int(x) for x in oid.split(".")) for oid, _, _ in recs]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert ("1.3.6.1.2.1.1.2.0", "6", snmp.SYS_OBJECT_IDS[device].lstrip(".")) in recs
    path = snmp.write_snmprec(tmp_path, "c0ffee12", recs)
    assert path.name == "c0ffee12.snmprec"
    # a hard link: snmpsim deduplicates a symlink
    assert os.stat(tmp_path / "self.snmprec").st_ino == os.stat(path).st_ino
    assert path.read_text().splitlines()[0].count("|") == 2


def test_snmprec_rejects_unknown_device() -> None:
    with pytest.raises(ValueError, match="unknown snmpsim device"):
        snmp.snmprec_records("apc-rpdu", NODES)


def test_nobody_can_reach_checks_every_ancestor() -> None:
    top = Path(tempfile.mkdtemp(prefix="nr-unit-"))
    try:
        top.chmod(0o755)
        leaf = top / "data"
        leaf.mkdir(mode=0o755)
        leaf.chmod(0o755)
        assert snmp.nobody_can_reach(leaf)
        top.chmod(0o700)
        assert not snmp.nobody_can_reach(leaf)
    finally:
        top.chmod(0o700)
        leaf.rmdir()
        top.rmdir()


def test_set_status_delay_needs_a_state_file() -> None:
    with pytest.raises(ValueError, match="'snmpsim'"):
        snmp.set_status_delay({"kind": "snmpsim"}, 1)


def test_ensure_simvenv_is_a_no_op_when_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODEREMEDY_CACHE", str(tmp_path))
    venv = tmp_path / "simvenv"
    venv.mkdir()
    (venv / ".noderemedy-complete").write_text("\n".join(snmp.SIMVENV_REQUIREMENTS) + "\n")
    assert snmp.ensure_simvenv() == venv
    assert sorted(p.name for p in venv.iterdir()) == [".noderemedy-complete"]  # nothing was rebuilt


# ------------------------------------------------------------------------------------- pass_persist backend
class Backend:
    """fence_pass.py as snmpd runs it: a child speaking the pass_persist protocol on stdin/stdout."""

    def __init__(self, profile: str, state: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(data_path("fence_pass.py")), profile, str(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, *lines: str, answers: int = 1) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("".join(line + "\n" for line in lines))
        self.proc.stdin.flush()
        first = self.proc.stdout.readline().strip()
        if first in ("NONE", "PONG", "DONE") or answers == 1:
            return [first]
        return [first] + [self.proc.stdout.readline().strip() for _ in range(answers - 1)]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def rpdu(tmp_path: Path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps(snmp.initial_state("apc-rpdu", NODES)))
    backend = Backend("apc-rpdu", state)
    yield backend, state
    backend.close()


def test_backend_get_getnext_and_set_with_trailing_blank_line(rpdu) -> None:
    backend, state = rpdu
    assert backend.ask("PING") == ["PONG"]
    status1 = ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.1"
    assert backend.ask("get", status1, answers=3) == [status1, "integer", "1"]
    assert backend.ask("getnext", ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.2.1", answers=3) == [
        ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.2.2",
        "string",
        "lab-node-1",
    ]
    # net-snmp 5.9.3 sends a blank line after a SET: it must not be answered
    assert backend.ask("set", ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.1", "integer 2", "") == ["DONE"]
    assert backend.ask("PING") == ["PONG"]
    assert backend.ask("get", status1, answers=3)[2] == "2"
    assert json.loads(state.read_text())["ports"]["1"] == 2
    assert backend.ask("set", status1, "integer 1") == ["not-writable"]
    assert backend.ask("set", ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.1", "integer 9") == ["wrong-value"]
    assert backend.ask("set", ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.1", "string x") == ["wrong-type"]
    assert backend.ask("get", ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.99") == ["NONE"]


def test_backend_delay_holds_the_old_status(rpdu) -> None:
    backend, state = rpdu
    snmp.set_status_delay({"kind": "snmpd", "state_file": str(state)}, 600)
    assert backend.ask("set", ".1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.2", "integer 2") == ["DONE"]
    assert backend.ask("get", ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.2", answers=3)[2] == "1"
    snmp.set_status_delay({"kind": "snmpd", "state_file": str(state)}, 0)
    assert backend.ask("get", ".1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.2", answers=3)[2] == "2"


def test_backend_fc_oper_follows_admin(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(json.dumps(snmp.initial_state("fcswitch", NODES)))
    backend = Backend("fcswitch", state)
    try:
        assert backend.ask("set", ".1.3.6.1.2.1.75.1.2.2.1.1.22.2", "integer 2") == ["DONE"]
        assert backend.ask("get", ".1.3.6.1.2.1.2.2.1.8.3", answers=3)[2] == "2"  # ifOperStatus.3
        assert backend.ask("get", ".1.3.6.1.2.1.31.1.1.1.18.3", answers=3)[2] == "lab-node-2-hba0"
    finally:
        backend.close()


def test_tcp_listening_does_not_count_a_connection_to_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from noderemedy_lab import procs

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert procs.tcp_listening(server.getsockname()[1])

    def self_connected(address: tuple[str, int], timeout: float) -> socket.socket:
        # what the kernel does when it picks ``address``'s port as the source port: TCP
        # simultaneous open with itself, nothing listening
        s = socket.socket()
        s.bind(address)
        s.connect(address)
        made.append(s.getsockname() == s.getpeername())
        return s

    made: list[bool] = []
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    monkeypatch.setattr(procs.socket, "create_connection", self_connected)
    assert procs.tcp_listening(free) is False
    assert made == [True], "the probe did connect (to itself)"


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stopped(pid: int, want: bool, timeout: float = 10.0) -> bool:
    """Whether ``pid`` reaches stopped (``want``) or not stopped within ``timeout`` seconds (a
    signal is delivered asynchronously)."""
    deadline = time.monotonic() + timeout
    while (_proc_state(pid) == "T") != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_bmc_modes_lie_fall_silent_and_come_back(tmp_path: Path) -> None:
    (tmp_path / "power").write_text("1\n")
    bmc = {"power_file": str(tmp_path / "power")}
    stand_in = subprocess.Popen(["sleep", "60"])  # stands in for the BMC's ipmi_sim process
    try:
        set_bmc_mode(bmc, "lies", stand_in.pid)
        assert _chassis(tmp_path, "set", "power", "0").returncode == 0
        assert _chassis(tmp_path, "get", "power").stdout == "power:1\n"
        set_bmc_mode(bmc, "silent", stand_in.pid)
        assert _stopped(stand_in.pid, True), "a silent BMC's process is stopped"
        assert not (tmp_path / "ignore_power").exists(), "silent is not also lying"
        set_bmc_mode(bmc, "normal", stand_in.pid)
        assert _stopped(stand_in.pid, False), "answers again"
        assert _chassis(tmp_path, "set", "power", "0").returncode == 0
        assert [line.split()[1:] for line in (tmp_path / "power.log").read_text().splitlines()] == [
            ["0", "ignored"],
            ["0"],
        ]
        with pytest.raises(ValueError, match="mode: 'asleep' is not one of normal, lies, silent"):
            set_bmc_mode(bmc, "asleep", stand_in.pid)
    finally:
        stand_in.kill()
        stand_in.wait()


def test_backend_walks_a_column_in_port_order_across_a_port_added_later(tmp_path: Path) -> None:
    """GETNEXT bisects the OIDs sorted once per set of ports: port 10 sorts after port 9 (not as
    text), a column's walk ends on the next column, a port added to the state file shows in the
    next walk, and the last OID of the device answers NONE."""
    nodes = [f"lab-node-{i}" for i in range(11)]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(snmp.initial_state("fcswitch", nodes)))
    backend = Backend("fcswitch", state)
    if_name = ".1.3.6.1.2.1.31.1.1.1.1"

    def walk(column: str) -> list[str]:
        oid, seen = column, []
        while True:
            got = backend.ask("getnext", oid, answers=3)
            if got == ["NONE"] or not got[0].startswith(column + "."):
                return seen
            seen.append(got[0].rsplit(".", 1)[1])
            oid = got[0]

    try:
        assert walk(if_name) == [str(i) for i in range(1, 12)]
        st = json.loads(state.read_text())
        st["ports"]["12"] = 1
        state.write_text(json.dumps(st))
        assert walk(if_name) == [str(i) for i in range(1, 13)]
        # the FE-MIB indexes ports from 0: fcFxPortPhysOperStatus of port 12 is .22.11, the last OID
        last = ".1.3.6.1.2.1.75.1.2.2.1.2.22.11"
        assert backend.ask("getnext", ".1.3.6.1.2.1.75.1.2.2.1.2.22.10", answers=3) == [last, "integer", "1"]
        assert backend.ask("getnext", last) == ["NONE"]
    finally:
        backend.close()
