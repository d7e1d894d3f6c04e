# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""VMware vSphere VM power fencing with pyvmomi (the vSphere Web Services API, SOAP).

Behaviour follows fence-agents ``fence_vmware_soap``: log in to vCenter or ESXi, find the VM by
name or UUID (``--plug``), *off* is ``PowerOffVM_Task`` (a hard power-off, not a guest shutdown),
*on* is ``PowerOnVM_Task``, a reboot is off (verified) then on, and the power is read back from
``runtime.powerState`` (vSphere API ``VirtualMachinePowerState``: ``poweredOn``, ``poweredOff``,
``suspended``).

Differences from ``fence_vmware_soap`` (on purpose): a ``suspended`` VM is not off (its memory,
and so its workloads' state, is kept and resumes with it; ``fence_vmware_soap`` reports
everything but ``poweredOn`` as off); a task that fails (no permission) is reported as such at
once instead of waiting out the power timeout; two VMs with the plug's name are an error, not a
guess. Every session is logged out.

Errors are classified once, here: InvalidLogin -> ``auth``; NoPermission -> ``privilege``; no
connection / TLS failure -> ``unreachable``; no such VM -> ``not_found``; other task faults ->
``rejected``.
"""

from __future__ import annotations

import ssl
import time
from typing import Any

from ansible_collections.noderemedy.core.plugins.module_utils import _fence

with _fence.Library("pyvmomi") as PYVMOMI_LIBRARY:
    from pyVim.connect import Disconnect, SmartConnect
    from pyVmomi import vim, vmodl

#: vSphere connection options; documented 1:1 by ``doc_fragments/fence.py`` ``VMWARE`` (fence_vmware_soap names).
VMWARE_ARG_SPEC: dict[str, dict[str, Any]] = {
    **_fence.login_arg_spec(
        443, ["NODEREMEDY_VMWARE_USERNAME", "VMWARE_USER"], ["NODEREMEDY_VMWARE_PASSWORD", "VMWARE_PASSWORD"]
    ),
    "ssl_insecure": {"type": "bool", "default": False},
    "ca_path": {"type": "path"},
    "plug": {"type": "str", "required": True, "aliases": ["vm"]},
}

#: ``runtime.powerState`` -> the driver's state (``suspended`` is never off).
POWER_STATES = {"poweredOn": _fence.ON, "poweredOff": _fence.OFF, "suspended": "suspended"}


class VmwareVmDriver(_fence.FenceDriver):
    """Power of one vSphere VM (the single plug: its name, BIOS UUID or instance UUID).

    Args:
        ipaddr / ipport: vCenter or ESXi host and HTTPS port.
        username / password: the vSphere login (both required).
        plug: the VM's name or UUID.
        ssl_insecure: do not verify the certificate (fence-agents ``--ssl-insecure``); ca_path:
            CA file or directory to verify it with (else the system's).
        Timing options: see :class:`~._fence.FenceDriver`.
    Raises:
        FenceConfigError: missing credentials or plug, bad port or timing values.
    """

    method = "vmware"

    def __init__(
        self,
        ipaddr: str,
        username: str | None,
        password: str | None,
        plug: str,
        ipport: int = 443,
        ssl_insecure: bool = False,
        ca_path: str | None = None,
        **timing: Any,
    ) -> None:
        _fence.check_address(ipaddr, ipport, "the vCenter or ESXi", "TCP port (1-65535)")
        if not plug:
            raise _fence.FenceConfigError("plug: the VM's name or UUID is required")
        super().__init__(f"{ipaddr}:{ipport}", [plug], **timing)
        _fence.require_login(username, password)
        self.ipaddr, self.ipport = ipaddr, ipport
        self.ssl_insecure, self.ca_path = ssl_insecure, ca_path
        self._username, self._password = username, password
        self._si: Any = None
        self._vm: Any = None

    def _context(self) -> ssl.SSLContext:
        if self.ssl_insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        if self.ca_path:
            import os  # noqa: PLC0415

            if os.path.isdir(self.ca_path):
                return ssl.create_default_context(capath=self.ca_path)
            return ssl.create_default_context(cafile=self.ca_path)
        return ssl.create_default_context()

    def _classify(self, exc: BaseException, doing: str) -> _fence.FenceError:
        if isinstance(exc, vim.fault.InvalidLogin):
            return _fence.AuthError(f"{doing}: login refused (wrong user name or password)", self.target)
        if isinstance(exc, vim.fault.NoPermission):
            return _fence.PrivilegeError(
                f"{doing}: no permission ({getattr(exc, 'privilegeId', '')})", self.target
            )
        if isinstance(exc, ssl.SSLError):
            return _fence.UnreachableError(
                f"{doing}: TLS failed ({exc.reason}); give ca_path, or ssl_insecure=true", self.target
            )
        if isinstance(exc, OSError):
            return _fence.UnreachableError(
                f"{doing}: cannot reach {self.target} ({exc.strerror or exc})", self.target
            )
        if isinstance(exc, vmodl.MethodFault):
            return _fence.RejectedError(
                f"{doing}: {type(exc).__name__}: {getattr(exc, 'msg', '')}", self.target
            )
        return _fence.RejectedError(f"{doing}: {exc}", self.target)

    def open(self) -> None:
        """Log in (``SessionManager.Login``)."""
        PYVMOMI_LIBRARY.require()
        try:
            self._si = SmartConnect(
                host=self.ipaddr,
                port=self.ipport,
                user=self._username,
                pwd=self._password,
                sslContext=self._context(),
                connectionPoolTimeout=int(max(1, self.power_timeout)),
            )
        except Exception as exc:  # noqa: BLE001 - classified
            raise self._classify(exc, "login") from None

    def close(self) -> None:
        """Log out; never raises."""
        si, self._si, self._vm = self._si, None, None
        _fence.close_quietly(si, Disconnect)

    def resolve(self) -> None:
        """Find the one VM whose name, BIOS UUID or instance UUID is the plug.

        Raises NotFoundError (none) or FenceConfigError naming ``plug`` (several).
        """
        plug = self.plugs[0]
        try:
            content = self._si.RetrieveContent()
            view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
            try:
                found = [
                    vm
                    for vm in view.view
                    if plug
                    in (vm.name, getattr(vm.config, "uuid", None), getattr(vm.config, "instanceUuid", None))
                ]
            finally:
                view.Destroy()
        except vmodl.MethodFault as exc:
            raise self._classify(exc, "find the VM") from None
        if not found:
            raise _fence.NotFoundError(f"plug: no VM named or with UUID {plug!r}", self.target)
        if len(found) > 1:
            raise _fence.FenceConfigError(f"plug: {len(found)} VMs are named {plug!r}; give the VM's UUID")
        self._vm = found[0]

    def get_state(self, plug: str) -> str:
        """``runtime.powerState``: ``on``, ``off`` or ``suspended``."""
        try:
            value = str(self._vm.runtime.powerState)
        except Exception as exc:  # noqa: BLE001 - classified
            raise self._classify(exc, "read runtime.powerState") from None
        return POWER_STATES.get(value, "unknown")

    def set_state(self, plug: str, state: str) -> None:
        """``PowerOffVM_Task`` (off) / ``PowerOnVM_Task`` (on); waits for the task (at most
        ``power_timeout`` seconds) so a refused task is reported as such. A task that finds the VM
        already in the wanted state (InvalidPowerState) is not an error."""
        name = "PowerOffVM_Task" if state == _fence.OFF else "PowerOnVM_Task"
        try:
            task = self._vm.PowerOffVM_Task() if state == _fence.OFF else self._vm.PowerOnVM_Task()
            deadline = time.monotonic() + self.power_timeout
            while str(task.info.state) in ("queued", "running") and time.monotonic() < deadline:
                time.sleep(self.poll_interval)
            if str(task.info.state) == "error" and not isinstance(
                task.info.error, vim.fault.InvalidPowerState
            ):
                raise task.info.error
        except Exception as exc:  # noqa: BLE001 - classified
            raise self._classify(exc, name) from None
