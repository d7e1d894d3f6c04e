"""Net-SNMP ``pass_persist`` backend of the noderemedy lab: a stateful PDU or FC switch.

Usage (in snmpd.conf, rendered by :mod:`noderemedy_lab.snmp`)::

    pass_persist <subtree> /usr/bin/python3 fence_pass.py <profile> <state.json>

Profiles:

``apc-rpdu``
    APC rack PDU (PowerNet-MIB; fence_apc_snmp's "ApcRPDU" for sysObjectID .318.1.3.4.5):
    rPDUOutletControlCommand .1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.N (write 1 on, 2 off, 3 reboot) and
    rPDUOutletStatusOutletState .1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.N (1 on, 2 off) share one state,
    as do the older sPDUOutletCtl .1.3.6.1.4.1.318.1.1.4.4.2.1.3.N (same codes).
``fcswitch``
    FC switch: IF-MIB ifTable / ifXTable (ifAdminStatus writable, ifOperStatus follows it) and
    FIBRE-CHANNEL-FE-MIB fcFxPortPhysAdminStatus / OperStatus .1.3.6.1.2.1.75.1.2.2.1.{1,2}.22.<port-1>.

The state file is JSON ``{"ports": {"1": 1, ...}, "names": {"1": "lab-node-0", ...},
"aliases": {...}, "prev": {...}, "changed": {...}, "lag": {port: seconds}, "log": [[epoch, port, value], ...], "delay": 0.0,
"hooks": {"5": [argv...]}}``. A port with a hook (the FC port of a lab real node) runs
``argv + ["up" | "down"]`` after every SET that changes its admin status (``testing`` counts as
down: no frames pass), synchronously and bounded to 10 s; that is how the port controls the node's
access to the lab's shared storage (see noderemedy_lab.realnode).
It is read on every request (so a test may edit it, under the ``<state>.lock`` flock), but parsed
again only when its bytes differ from the last ones parsed or written here, and it is rewritten
atomically (compact JSON) on every SET. ``delay`` > 0 makes the status OIDs keep showing the
previous value for that many seconds after a SET (a slow PDU or switch).

Protocol notes: net-snmp 5.9.3 ends a pass_persist SET with an extra
blank line, which must be ignored, not answered.
"""

import bisect
import fcntl
import json
import os
import subprocess
import sys
import time

PROFILE, STATE = sys.argv[1], sys.argv[2]
LOCK = STATE + ".lock"
LOG_KEEP = 1000


#: [bytes, state]: the state file's bytes last parsed or written here and the state they hold (with
#: load()'s defaults and every SET since applied), so that a request parses the file only if it
#: changed: parsing and rewriting a 1,000-port state at every varbind kept a core busy while a rack
#: of 100 was fenced. The bytes, not a stat, are compared: an edit in place within the
#: filesystem's timestamp tick, or a new file given the old inode, keeps the size and the times.
_CACHE = [None, None]


def load():
    try:
        with open(STATE, "rb") as f:
            data = f.read()
    except OSError:
        data = None
    if data is not None and data == _CACHE[0]:
        return _CACHE[1]
    try:
        st = json.loads(data) if data is not None else {}
    except ValueError:
        st, data = {}, None
    st.setdefault("ports", {str(i): 1 for i in range(1, 9)})
    st.setdefault("prev", dict(st["ports"]))
    st.setdefault("changed", {})
    st.setdefault("names", {p: (f"outlet{p}" if PROFILE == "apc-rpdu" else f"fc1/{p}") for p in st["ports"]})
    st.setdefault("aliases", {})
    st.setdefault("log", [])
    st.setdefault("delay", 0.0)
    # a file missing or not JSON is not cached: each request starts again from the defaults
    _CACHE[:] = (data, st) if data is not None else (None, None)
    return st


def save(st):
    del st["log"][:-LOG_KEEP]
    data = json.dumps(st).encode()  # no indent: json's C encoder (the indenting one is pure Python)
    tmp = STATE + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, STATE)
    _CACHE[:] = data, st


def effective(st, p):
    """The value the status OIDs show (honours the transition delay in effect when the port's last
    SET was made: a delay set later never reaches back to an earlier SET)."""
    lag = st.get("lag", {}).get(p, 0.0)
    if lag and time.time() - st["changed"].get(p, 0) < lag:
        return st["prev"].get(p, st["ports"][p])
    return st["ports"][p]


#: (port, new admin status) of the SETs of the current request, for the hooks
CHANGED = []
HOOK_TIMEOUT = 10


def commit(st, p, new, written):
    """Record a SET; a repeated SET of the same value does not restart a pending transition."""
    if (new == 1) != (st["ports"][p] == 1):
        CHANGED.append((p, new))
    if new != st["ports"][p] or written == 3:
        st["prev"][p] = 2 if written == 3 else effective(st, p)  # reboot: looks off during the delay
        st["changed"][p] = time.time()
        st.setdefault("lag", {})[p] = st["delay"]
    st["ports"][p] = new
    st["log"].append([time.time(), p, written])


def o(s):
    return tuple(int(x) for x in s.strip(".").split("."))


def table(st, only=None):
    """dict oid-tuple -> (type, value, setter-or-None); with ``only`` (a set of port keys), the rows
    of those ports alone (a GET or SET names one OID: building the rows of a 1,000-outlet PDU for
    each varbind made a rack's one SET of 100 outlets outlast snmpset's timeout)."""
    t = {}
    ports = sorted(st["ports"] if only is None else [p for p in only if p in st["ports"]], key=int)
    if PROFILE == "apc-rpdu":
        for p in ports:
            n = int(p)
            on = effective(st, p)

            def setter(v, p=p):
                if v not in (1, 2, 3, 4, 5, 6, 7):
                    return "wrong-value"
                new = {1: 1, 2: 2, 3: 1, 4: st["ports"][p], 5: 1, 6: 2, 7: 1}[v]
                commit(st, p, new, v)
                return None

            name = st["names"].get(p, f"outlet{n}")
            # rPDUOutletControlTable .318.1.1.12.3.3.1.1.{1 index, 2 name, 4 command}
            t[o(f"1.3.6.1.4.1.318.1.1.12.3.3.1.1.1.{n}")] = ("integer", n, None)
            t[o(f"1.3.6.1.4.1.318.1.1.12.3.3.1.1.2.{n}")] = ("string", name, None)
            t[o(f"1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.{n}")] = ("integer", on, setter)
            # rPDUOutletStatusTable .318.1.1.12.3.5.1.1.{1 index, 2 name, 4 state}
            t[o(f"1.3.6.1.4.1.318.1.1.12.3.5.1.1.1.{n}")] = ("integer", n, None)
            t[o(f"1.3.6.1.4.1.318.1.1.12.3.5.1.1.2.{n}")] = ("string", name, None)
            t[o(f"1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.{n}")] = ("integer", on, None)
            # legacy sPDUOutletControlTable .318.1.1.4.4.2.1.{1 index, 3 ctl, 4 name}
            t[o(f"1.3.6.1.4.1.318.1.1.4.4.2.1.1.{n}")] = ("integer", n, None)
            t[o(f"1.3.6.1.4.1.318.1.1.4.4.2.1.3.{n}")] = ("integer", on, setter)
            t[o(f"1.3.6.1.4.1.318.1.1.4.4.2.1.4.{n}")] = ("string", name, None)
    elif PROFILE == "fcswitch":
        t[o("1.3.6.1.2.1.2.1.0")] = ("integer", len(st["ports"]), None)  # ifNumber
        for p in ports:
            n = int(p)
            adm = st["ports"][p]
            eff = effective(st, p)

            def setter(v, p=p):
                if v not in (1, 2, 3):
                    return "wrong-value"
                commit(st, p, v, v)
                return None

            name = st["names"].get(p, f"fc1/{n}")
            b = "1.3.6.1.2.1.2.2.1.{}." + str(n)
            t[o(b.format(1))] = ("integer", n, None)  # ifIndex
            t[o(b.format(2))] = ("string", name, None)  # ifDescr
            t[o(b.format(3))] = ("integer", 56, None)  # ifType fibreChannel
            t[o(b.format(5))] = ("gauge", 4294967295, None)  # ifSpeed
            t[o(b.format(7))] = ("integer", adm, setter)  # ifAdminStatus up(1) down(2) testing(3)
            t[o(b.format(8))] = ("integer", 1 if eff == 1 else 2, None)  # ifOperStatus follows admin
            t[o(f"1.3.6.1.2.1.31.1.1.1.1.{n}")] = ("string", name, None)  # ifName
            t[o(f"1.3.6.1.2.1.31.1.1.1.18.{n}")] = ("string", st["aliases"].get(p, ""), None)  # ifAlias
            # FIBRE-CHANNEL-FE-MIB fcFxPortPhysAdminStatus / OperStatus .<module 22>.<port-1>
            t[o(f"1.3.6.1.2.1.75.1.2.2.1.1.22.{n - 1}")] = ("integer", adm, setter)
            t[o(f"1.3.6.1.2.1.75.1.2.2.1.2.22.{n - 1}")] = ("integer", 1 if eff == 1 else 2, None)
    return t


#: (the ports dict, its keys, the device's OIDs in order) of the last GETNEXT: the OIDs depend only
#: on which ports exist, so a walk sorts them once, not at every step. A SET changes the values of
#: the cached state's ports, never its keys: the keys are compared again only for another dict (the
#: file was parsed again), which is held here so that its id is not reused.
_ORDER = [None, None, []]


def next_oid(st, oid):
    """The first OID of the device after ``oid``, or None: a bisection in the OIDs sorted once per
    set of ports (a walk of one column of a 1,000-port switch built and scanned all its 10,000 rows at
    every step: about a minute per walk, longer than the fencing modules wait)."""
    if _ORDER[0] is not st["ports"]:
        ports = sorted(st["ports"], key=int)
        if _ORDER[1] != ports:
            _ORDER[1], _ORDER[2] = ports, sorted(table(st))
        _ORDER[0] = st["ports"]
    order = _ORDER[2]
    i = bisect.bisect_right(order, oid)
    return order[i] if i < len(order) else None


def out(*lines):
    sys.stdout.write("".join(str(x) + "\n" for x in lines))
    sys.stdout.flush()


def answer(cmd, oid, typval):
    """One request under the state lock; returns the lines to print."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        st = load()
        if cmd == "getnext":
            nxt = next_oid(st, oid)
            if nxt is None:
                return ["NONE"]
            oid = nxt
        # a row's OID names its port last: outlet N, ifIndex N, or fcFxPort N-1
        t = table(st, only={str(oid[-1]), str(oid[-1] + 1)})
        if cmd in ("get", "getnext"):
            if oid in t:
                typ, val, _ = t[oid]
                return ["." + ".".join(map(str, oid)), typ, val]
            return ["NONE"]
        # set
        if oid not in t or t[oid][2] is None:
            return ["not-writable"]
        if len(typval) != 2 or typval[0].lower() != "integer":
            return ["wrong-type"]
        try:
            value = int(typval[1])
        except ValueError:
            return ["wrong-value"]
        del CHANGED[:]
        err = t[oid][2](value)
        if err:
            return [err]
        save(st)
        run_hooks(st)
        return ["DONE"]


def run_hooks(st):
    """Run the hook of each port whose admin status a SET just changed (see module docstring)."""
    for p, new in CHANGED:
        hook = st.get("hooks", {}).get(p)
        if not hook:
            continue
        try:
            done = subprocess.run(
                hook + ["up" if new == 1 else "down"], capture_output=True, text=True, timeout=HOOK_TIMEOUT
            )
            if done.returncode != 0:
                sys.stderr.write(f"hook of port {p} failed: {done.stderr.strip()}\n")
        except (OSError, subprocess.SubprocessError) as exc:
            sys.stderr.write(f"hook of port {p} failed: {exc}\n")
    del CHANGED[:]


def main():
    while True:
        cmd = sys.stdin.readline()
        if not cmd:
            return
        cmd = cmd.strip().lower()
        if cmd == "":
            # net-snmp 5.9 ends a 'set' with an extra blank line: answering it would desynchronise
            # the pipe (snmpd would then read 'NONE' instead of 'PONG' and restart us)
            continue
        if cmd == "ping":
            out("PONG")
            continue
        if cmd not in ("get", "getnext", "set"):
            out("NONE")
            continue
        oid = o(sys.stdin.readline())
        typval = sys.stdin.readline().strip().split(None, 1) if cmd == "set" else []
        out(*answer(cmd, oid, typval))


if __name__ == "__main__":
    main()
