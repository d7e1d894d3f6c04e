# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""SNMP transport for the PDU and FC-switch drivers: pysnmp 7 asyncio high-level API, run
synchronously on a private event loop, with one ``SnmpEngine`` per credential set reused for the
whole run (and across runs in one process, see ``_EnginePool``).

Options and their meaning are fence-agents' (``lib/fencing_snmp.py``): ``snmp_version`` 1, 2c
or 3; ``community`` for v1/v2c; for v3 ``username``, ``password`` (authentication passphrase),
``snmp_sec_level`` (noAuthNoPriv, authNoPriv, authPriv), ``snmp_auth_prot``, ``snmp_priv_prot``
and ``snmp_priv_passwd``.

Errors are classified into the fencing family (:mod:`._fence`):

* no answer before ``snmp_timeout`` x (1 + ``snmp_retries``) -> :class:`UnreachableError`
  (a v1/v2c agent silently drops a wrong community, RFC 3584 section 4.1);
* unknown v3 user, wrong digest, decryption error (RFC 3414 usmStats reports) -> :class:`AuthError`;
* noAccess, notWritable, authorizationError, readOnly (RFC 3416 error-status) -> :class:`PrivilegeError`;
* wrongValue, badValue, wrongType, inconsistentValue, genErr... -> :class:`RejectedError`;
* noSuchName (v1) / noSuchObject / noSuchInstance (v2c/v3) -> :class:`NotFoundError`.
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import threading
from collections import OrderedDict
from typing import Any

from ansible.module_utils.basic import env_fallback

from ansible_collections.noderemedy.core.plugins.module_utils import _fence

with _fence.Library("pysnmp") as PYSNMP_LIBRARY:
    from pysnmp.hlapi.v3arch import asyncio as hlapi
    from pysnmp.proto import rfc1902, rfc1905

#: SNMP connection options; documented 1:1 by ``doc_fragments/fence.py`` ``SNMP``. Names are fence-agents'.
SNMP_ARG_SPEC: dict[str, dict[str, Any]] = {
    **_fence.login_arg_spec(161, ["NODEREMEDY_SNMP_USERNAME"], ["NODEREMEDY_SNMP_PASSWORD"]),
    "snmp_version": {"type": "str", "default": "2c", "choices": ["1", "2c", "3"]},
    "community": {"type": "str", "no_log": True, "fallback": (env_fallback, ["NODEREMEDY_SNMP_COMMUNITY"])},
    "snmp_sec_level": {"type": "str", "choices": ["noAuthNoPriv", "authNoPriv", "authPriv"]},
    "snmp_auth_prot": {
        "type": "str",
        "default": "SHA",
        "choices": ["MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512"],
    },
    "snmp_priv_prot": {"type": "str", "default": "AES", "choices": ["DES", "AES", "AES192", "AES256"]},
    "snmp_priv_passwd": {
        "type": "str",
        "no_log": True,
        "fallback": (env_fallback, ["NODEREMEDY_SNMP_PRIV_PASSWD"]),
    },
    "snmp_timeout": {"type": "float", "default": 1.0},
    "snmp_retries": {"type": "int", "default": 1},
}

#: Secret key -> option, for the SNMP fencing modules' ``credentials_secret`` (SNMP v1/v2c:
#: community; v3: user, authentication and privacy keys).
SNMP_SECRET_KEYS = {
    "community": "community",
    "username": "username",
    "password": "password",
    "priv_password": "snmp_priv_passwd",
}

_AUTH_PROTOCOLS = {
    "MD5": "USM_AUTH_HMAC96_MD5",
    "SHA": "USM_AUTH_HMAC96_SHA",
    "SHA224": "USM_AUTH_HMAC128_SHA224",
    "SHA256": "USM_AUTH_HMAC192_SHA256",
    "SHA384": "USM_AUTH_HMAC256_SHA384",
    "SHA512": "USM_AUTH_HMAC384_SHA512",
}
_PRIV_PROTOCOLS = {
    "DES": "USM_PRIV_CBC56_DES",
    "AES": "USM_PRIV_CFB128_AES",
    "AES192": "USM_PRIV_CFB192_AES",
    "AES256": "USM_PRIV_CFB256_AES",
}

#: RFC 3416 error-status names -> error class.
_STATUS_PRIVILEGE = {"noAccess", "notWritable", "authorizationError", "readOnly", "noCreation"}
_STATUS_NOT_FOUND = {"noSuchName"}

#: pysnmp error indications (``pysnmp.proto.errind``) that mean refused credentials.
_AUTH_INDICATIONS = (
    "unknownusername",
    "unknownusmuser",
    "wrongdigest",
    "wrongsnmppdudigest",
    "decryptionerror",
    "unsupportedseclevel",
    "unsupportedsecuritylevel",
    "unsupportedsnmpsecuritylevel",
    "authenticationfailure",
)


def normalize_oid(oid: str) -> str:
    """``.1.3.6.1`` / ``1.3.6.1`` -> ``1.3.6.1``; FenceConfigError for anything but dotted digits."""
    text = str(oid).strip().lstrip(".")
    parts = text.split(".")
    if not text or not all(p.isdigit() for p in parts):
        raise _fence.FenceConfigError(f"OID {oid!r} is not a dotted numeric OID")
    return text


def _value(val: Any) -> int | str:
    """pysnmp value -> int (INTEGER, Gauge...) or str (OctetString, OID without leading dot)."""
    if isinstance(val, rfc1902.ObjectIdentifier):
        return str(val)
    if isinstance(val, rfc1902.OctetString):
        return val.asOctets().decode("utf-8", "replace")
    try:
        return int(val)
    except (TypeError, ValueError):
        return val.prettyPrint()


class _EnginePool:
    """Process-wide ``SnmpEngine`` objects, one per credential set, on one private event loop.

    pysnmp 7 compiles its MIB modules from source for every new ``SnmpEngine`` (about 0.1 s, more
    on a loaded machine: ``pysnmp/smi/builder.py`` ``read`` never finds a usable ``.pyc``), which
    would dominate every fence. A run (one module execution) therefore uses one engine, and a
    long-lived process (the watcher, the benchmark) reuses it across runs. Engines are keyed by a
    digest of the credentials so a changed key or community never reuses stale USM/community
    state. Calls are serialised by a lock (the loop is not thread-safe); at most ``size`` engines
    are kept; everything is closed at interpreter exit.
    """

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.lock = threading.RLock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.engines: OrderedDict[str, Any] = OrderedDict()

    def run(self, coro: Any) -> Any:
        with self.lock:
            if self.loop is None or self.loop.is_closed():
                self.loop = asyncio.new_event_loop()
            return self.loop.run_until_complete(coro)

    def engine(self, key: str) -> Any:
        """The engine for credential digest ``key`` (created on first use; call inside :meth:`run`)."""
        if key in self.engines:
            self.engines.move_to_end(key)
            return self.engines[key]
        engine = hlapi.SnmpEngine()
        self.engines[key] = engine
        while len(self.engines) > self.size:
            old = self.engines.popitem(last=False)[1]
            self._close_engine(old)
        return engine

    @staticmethod
    def _close_engine(engine: Any) -> None:
        try:
            engine.close_dispatcher()
        except Exception:
            pass

    def close_all(self) -> None:
        """Close every engine and the loop (cancelling pysnmp's timer tasks); never raises."""
        with self.lock:
            for engine in self.engines.values():
                self._close_engine(engine)
            self.engines.clear()
            loop, self.loop = self.loop, None
            if loop is None or loop.is_closed():
                return
            try:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()
            except Exception:
                pass


_POOL = _EnginePool()
atexit.register(_POOL.close_all)


#: Rows a GETBULK request of :meth:`SnmpClient.walk` asks for (``max-repetitions``): 25 rows of
#: ifDescr or ifName fit in one UDP datagram of the common 1,472-byte maximum.
BULK_REPETITIONS = 25


class SnmpClient:
    """One SNMP peer; synchronous ``get``/``set``/``walk`` on a pooled engine (:class:`_EnginePool`).

    Args:
        ipaddr / ipport: agent address and UDP port.
        snmp_version: ``1``, ``2c`` or ``3``.
        community: v1/v2c community (secret; never logged or put in messages).
        username / password: v3 user and authentication passphrase (>= 8 characters, RFC 3414).
        snmp_sec_level: v3 ``noAuthNoPriv`` / ``authNoPriv`` / ``authPriv``; default from the
            keys given (priv key -> authPriv, auth key -> authNoPriv).
        snmp_auth_prot / snmp_priv_prot: v3 protocols (``SHA``, ``AES``...).
        snmp_priv_passwd: v3 privacy passphrase.
        snmp_timeout: seconds per request attempt; snmp_retries: retransmissions.
    Raises:
        FenceConfigError: a missing or inconsistent option, naming it.
    """

    def __init__(
        self,
        ipaddr: str,
        ipport: int = 161,
        snmp_version: str = "2c",
        community: str | None = None,
        username: str | None = None,
        password: str | None = None,
        snmp_sec_level: str | None = None,
        snmp_auth_prot: str = "SHA",
        snmp_priv_prot: str = "AES",
        snmp_priv_passwd: str | None = None,
        snmp_timeout: float = 1.0,
        snmp_retries: int = 1,
    ) -> None:
        if not PYSNMP_LIBRARY.present:
            raise _fence.FenceConfigError("pysnmp: the Python library pysnmp (>= 7) is required")
        _fence.check_address(ipaddr, ipport, "the device", "UDP port")
        if snmp_timeout is None or snmp_timeout <= 0:
            raise _fence.FenceConfigError(f"snmp_timeout: must be > 0 seconds, got {snmp_timeout!r}")
        if snmp_retries is None or snmp_retries < 0:
            raise _fence.FenceConfigError(f"snmp_retries: must be >= 0, got {snmp_retries!r}")
        self.target = f"{ipaddr}:{ipport}"
        self.ipaddr = ipaddr
        self.ipport = int(ipport)
        self.timeout = float(snmp_timeout)
        self.retries = int(snmp_retries)
        self.version = str(snmp_version)
        if self.version in ("1", "2c"):
            if not community:
                raise _fence.FenceConfigError(f"community: required for snmp_version {self.version}")
            self._auth = hlapi.CommunityData(community, mpModel=0 if self.version == "1" else 1)
        elif self.version == "3":
            self._auth = self._usm(
                username, password, snmp_sec_level, snmp_auth_prot, snmp_priv_prot, snmp_priv_passwd
            )
        else:
            raise _fence.FenceConfigError(f"snmp_version: {snmp_version!r} is not one of 1, 2c, 3")
        # engines are shared per credential set; the key is a digest, never the secrets themselves
        self._key = hashlib.sha256(
            repr(
                (
                    self.version,
                    community,
                    username,
                    password,
                    snmp_sec_level,
                    snmp_auth_prot,
                    snmp_priv_prot,
                    snmp_priv_passwd,
                )
            ).encode()
        ).hexdigest()
        self._engine: Any = None
        self._transport: Any = None

    @staticmethod
    def _usm(
        username: str | None,
        password: str | None,
        level: str | None,
        auth_prot: str,
        priv_prot: str,
        priv_passwd: str | None,
    ) -> Any:
        if not username:
            raise _fence.FenceConfigError("username: required for snmp_version 3")
        if level is None:
            level = "authPriv" if priv_passwd else ("authNoPriv" if password else "noAuthNoPriv")
        if level not in ("noAuthNoPriv", "authNoPriv", "authPriv"):
            raise _fence.FenceConfigError(
                f"snmp_sec_level: {level!r} is not noAuthNoPriv, authNoPriv or authPriv"
            )
        if level == "noAuthNoPriv":
            return hlapi.UsmUserData(username)
        if not password or len(password) < 8:
            raise _fence.FenceConfigError(
                f"password: snmp_sec_level {level} needs an authentication passphrase of 8+ characters"
            )
        if auth_prot not in _AUTH_PROTOCOLS:
            raise _fence.FenceConfigError(
                f"snmp_auth_prot: {auth_prot!r} is not one of {', '.join(_AUTH_PROTOCOLS)}"
            )
        auth = getattr(hlapi, _AUTH_PROTOCOLS[auth_prot])
        if level == "authNoPriv":
            return hlapi.UsmUserData(username, authKey=password, authProtocol=auth)
        if not priv_passwd or len(priv_passwd) < 8:
            raise _fence.FenceConfigError(
                "snmp_priv_passwd: snmp_sec_level authPriv needs a privacy passphrase of 8+ characters"
            )
        if priv_prot not in _PRIV_PROTOCOLS:
            raise _fence.FenceConfigError(
                f"snmp_priv_prot: {priv_prot!r} is not one of {', '.join(_PRIV_PROTOCOLS)}"
            )
        return hlapi.UsmUserData(
            username,
            authKey=password,
            privKey=priv_passwd,
            authProtocol=auth,
            privProtocol=getattr(hlapi, _PRIV_PROTOCOLS[priv_prot]),
        )

    # -- lifecycle -------------------------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        return _POOL.run(coro)

    async def _ensure(self) -> None:
        if self._engine is None:
            self._engine = _POOL.engine(self._key)
        if self._transport is None:
            try:
                self._transport = await hlapi.UdpTransportTarget.create(
                    (self.ipaddr, self.ipport), timeout=self.timeout, retries=self.retries
                )
            except Exception as exc:  # name resolution / socket errors
                raise _fence.UnreachableError(f"cannot reach the SNMP agent: {exc}", self.target) from None

    def close(self) -> None:
        """Release this client (the engine stays in the process-wide pool); never raises."""
        self._engine = None
        self._transport = None

    def __enter__(self) -> SnmpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- classification --------------------------------------------------------------------
    def _check(self, what: str, ind: Any, status: Any, index: Any, var_binds: Any) -> None:
        if ind:
            name = type(ind).__name__.lower()
            text = str(ind)
            if "timedout" in name or "timeout" in text.lower():
                hint = (
                    "a wrong community, which agents ignore"
                    if self.version in ("1", "2c")
                    else "a wrong v3 privacy key, which agents drop"
                )
                raise _fence.UnreachableError(
                    f"{what}: no SNMP answer within {self.timeout:g}s x {1 + self.retries} "
                    f"(agent down, wrong address or port, or {hint})",
                    self.target,
                )
            if any(k in name or k in text.lower().replace(" ", "") for k in _AUTH_INDICATIONS):
                raise _fence.AuthError(f"{what}: SNMPv3 authentication refused ({text})", self.target)
            raise _fence.UnreachableError(f"{what}: SNMP error: {text}", self.target)
        if status and int(status):
            name = status.prettyPrint()
            if name in _STATUS_PRIVILEGE:
                raise _fence.PrivilegeError(
                    f"{what}: agent answered {name} (read-only community or user without write access)",
                    self.target,
                )
            if name in _STATUS_NOT_FOUND:
                raise _fence.NotFoundError(f"{what}: no such object on the agent ({name})", self.target)
            raise _fence.RejectedError(f"{what}: agent rejected the request ({name})", self.target)
        for vb in var_binds:
            val = vb[1]
            if isinstance(val, (rfc1905.NoSuchObject, rfc1905.NoSuchInstance, rfc1905.EndOfMibView)):
                raise _fence.NotFoundError(
                    f"{what}: no such object on the agent ({val.prettyPrint()})", self.target
                )

    # -- operations ------------------------------------------------------------------------
    def get(self, *oids: str) -> list[int | str]:
        """GET one or more OIDs in one PDU; values as int / str in the order asked.

        Raises: UnreachableError, AuthError, NotFoundError, RejectedError (see module docstring).
        """
        norm = [normalize_oid(o) for o in oids]
        objects = [hlapi.ObjectType(hlapi.ObjectIdentity(o)) for o in norm]
        var_binds = self._command(hlapi.get_cmd, f"GET {', '.join(norm)}", objects)
        return [_value(vb[1]) for vb in var_binds]

    def set(self, oid: str, value: int) -> None:
        """SET one INTEGER (Integer32). Raises as :meth:`get`, plus PrivilegeError for read-only access."""
        norm = normalize_oid(oid)
        objects = [hlapi.ObjectType(hlapi.ObjectIdentity(norm), rfc1902.Integer32(int(value)))]
        self._command(hlapi.set_cmd, f"SET {norm}={value}", objects)

    def _command(self, command: Any, what: str, objects: list[Any]) -> Any:
        """Send one PDU with ``command`` (pysnmp ``get_cmd`` / ``set_cmd``) for ``objects``
        (``ObjectType``) and return its var-binds; errors are classified by :meth:`_check`, naming
        ``what``."""

        async def go() -> Any:
            await self._ensure()
            return await command(
                self._engine, self._auth, self._transport, hlapi.ContextData(), *objects, lookupMib=False
            )

        ind, status, index, var_binds = self._run(go())
        self._check(what, ind, status, index, var_binds)
        return var_binds

    def walk(self, oid: str, max_rows: int = 10000) -> list[tuple[str, int | str]]:
        """Walk the subtree under ``oid``: [(oid without leading dot, value), ...], in OID order.

        v2c and v3 walk with GETBULK (RFC 3416 section 4.2.3), :data:`BULK_REPETITIONS` rows a
        request, where GETNEXT costs a request a row: a 1,000-port switch's ifDescr is 40
        requests instead of 1,000. v1 has no GETBULK and walks with GETNEXT."""
        norm = normalize_oid(oid)
        prefix = norm + "."

        def command() -> Any:
            start = hlapi.ObjectType(hlapi.ObjectIdentity(norm))
            options = {"lexicographicMode": False, "lookupMib": False, "maxRows": max_rows}
            if self.version == "1":
                return hlapi.walk_cmd(
                    self._engine, self._auth, self._transport, hlapi.ContextData(), start, **options
                )
            return hlapi.bulk_walk_cmd(
                self._engine, self._auth, self._transport, hlapi.ContextData(), 0, BULK_REPETITIONS, start,
                **options,
            )  # fmt: skip

        async def go() -> list[tuple[str, int | str]]:
            await self._ensure()
            rows: list[tuple[str, int | str]] = []
            async for ind, status, index, var_binds in command():
                if status and status.prettyPrint() in _STATUS_NOT_FOUND:
                    break  # v1 end of MIB
                self._check(f"WALK {norm}", ind, status, index, var_binds)
                for vb in var_binds:
                    name = str(vb[0])
                    if not name.startswith(prefix):
                        return rows
                    rows.append((name, _value(vb[1])))
            return rows

        try:
            return self._run(go())
        except _fence.NotFoundError:
            return []

    def sys_object_id(self) -> str:
        """SNMPv2-MIB sysObjectID.0 (1.3.6.1.2.1.1.2.0), without a leading dot."""
        return str(self.get("1.3.6.1.2.1.1.2.0")[0]).lstrip(".")


def client_from_params(params: dict[str, Any]) -> SnmpClient:
    """Build a :class:`SnmpClient` from module params (the keys of :data:`SNMP_ARG_SPEC`)."""
    return SnmpClient(**{k: params.get(k) for k in SNMP_ARG_SPEC if k in params})


__all__ = [
    "SNMP_ARG_SPEC",
    "SnmpClient",
    "client_from_params",
    "normalize_oid",
]
