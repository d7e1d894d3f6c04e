# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the IPMI connection options, 1:1 with
``plugins/module_utils/_ipmi.py`` ``IPMI_ARG_SPEC`` (fence_ipmilan names)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  ipaddr:
    description:
      - Address of the BMC (fence_ipmilan C(--ip)).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - UDP port of the BMC's RMCP+ service.
    type: int
    default: 623
  username:
    description:
      - BMC user name (fence_ipmilan C(--username)).
      - Can also be set with the E(NODEREMEDY_IPMI_USERNAME) or E(IPMI_USERNAME) environment variable,
        or read from O(credentials_secret) (key C(username)). Required one way or another.
    type: str
    aliases: [ login ]
  password:
    description:
      - BMC password (fence_ipmilan C(--password)). Never logged or returned. An empty password is
        refused (the session would be unauthenticated).
      - Can also be set with the E(NODEREMEDY_IPMI_PASSWORD) or E(IPMI_PASSWORD) environment variable,
        or read from O(credentials_secret) (key C(password)). Required one way or another.
    type: str
    aliases: [ passwd ]
  cipher:
    description:
      - RMCP+ (IPMI 2.0 lanplus) cipher suite, as C(fence_ipmilan --cipher) / C(ipmitool -C).
      - V(3) is RAKP-HMAC-SHA1 / HMAC-SHA1-96 / AES-CBC-128; V(17) is RAKP-HMAC-SHA256 /
        HMAC-SHA256-128 / AES-CBC-128. Suite V(0) (no authentication; BMCs accept any password)
        is refused; other suites are not supported by pyghmi.
      - The session fails when the BMC negotiates anything else, or offers only IPMI 1.5.
    type: int
    default: 3
  privlvl:
    description:
      - Privilege level requested for the session (fence_ipmilan C(--privlvl)). Power control
        needs V(operator) or V(administrator); a V(user) session is refused with a privilege error.
    type: str
    default: administrator
    choices: [ callback, user, operator, administrator ]
requirements:
  - pyghmi >= 1.6.19
"""
