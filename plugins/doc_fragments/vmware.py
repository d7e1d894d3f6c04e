# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the vSphere connection options, 1:1 with
``plugins/module_utils/_vmware.py`` ``VMWARE_ARG_SPEC`` (fence_vmware_soap names)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  ipaddr:
    description:
      - Address or host name of vCenter or the ESXi host (fence_vmware_soap C(--ip)).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - HTTPS port of the vSphere API.
    type: int
    default: 443
  username:
    description:
      - vSphere user name (fence_vmware_soap C(--username)).
      - Can also be set with E(NODEREMEDY_VMWARE_USERNAME) or E(VMWARE_USER), or read from
        O(credentials_secret) (key C(username)). Required one way or another.
    type: str
    aliases: [ login ]
  password:
    description:
      - vSphere password (fence_vmware_soap C(--password)). Never logged or returned.
      - Can also be set with E(NODEREMEDY_VMWARE_PASSWORD) or E(VMWARE_PASSWORD), or read from
        O(credentials_secret) (key C(password)). Required one way or another.
    type: str
    aliases: [ passwd ]
  ssl_insecure:
    description:
      - Do not verify the server's TLS certificate (fence-agents C(--ssl-insecure)). Prefer O(ca_path).
    type: bool
    default: false
  ca_path:
    description:
      - CA file, or directory of CA certificates, that signed the server's certificate. Without it
        the system's trusted CAs are used.
    type: path
  plug:
    description:
      - The VM's name, BIOS UUID or instance UUID (fence_vmware_soap C(--plug)). Several VMs with
        that name are an error; give the UUID then.
    type: str
    required: true
    aliases: [ vm ]
requirements:
  - pyvmomi >= 8
"""
