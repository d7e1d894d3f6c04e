# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the SNMP connection options, 1:1 with
``plugins/module_utils/_snmp.py`` ``SNMP_ARG_SPEC`` (fence-agents ``fencing_snmp`` names)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  ipaddr:
    description:
      - Address of the SNMP agent (the PDU or switch).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - UDP port of the SNMP agent (fence-agents C(--ipport)).
    type: int
    default: 161
  snmp_version:
    description:
      - SNMP version. fence_apc_snmp and fence_eaton_snmp default to V(1), fence_ifmib to V(2c).
    type: str
    choices: [ '1', '2c', '3' ]
    default: 2c
  community:
    description:
      - Community for SNMP v1/v2c; it needs write access. Never logged or returned.
      - A wrong community is indistinguishable from a device that does not answer (agents drop
        such requests); the error says so.
      - Can also be set with the E(NODEREMEDY_SNMP_COMMUNITY) environment variable.
    type: str
  username:
    description:
      - SNMPv3 user name (fence-agents C(--username)).
      - Can also be set with the E(NODEREMEDY_SNMP_USERNAME) environment variable.
    type: str
    aliases: [ login ]
  password:
    description:
      - SNMPv3 authentication passphrase, 8 characters or more (fence-agents C(--password)).
      - Can also be set with the E(NODEREMEDY_SNMP_PASSWORD) environment variable.
    type: str
    aliases: [ passwd ]
  snmp_sec_level:
    description:
      - SNMPv3 security level. Default from the keys given - V(authPriv) with O(snmp_priv_passwd),
        V(authNoPriv) with O(password) only, else V(noAuthNoPriv).
    type: str
    choices: [ noAuthNoPriv, authNoPriv, authPriv ]
  snmp_auth_prot:
    description:
      - SNMPv3 authentication protocol.
    type: str
    choices: [ MD5, SHA, SHA224, SHA256, SHA384, SHA512 ]
    default: SHA
  snmp_priv_prot:
    description:
      - SNMPv3 privacy protocol.
    type: str
    choices: [ DES, AES, AES192, AES256 ]
    default: AES
  snmp_priv_passwd:
    description:
      - SNMPv3 privacy passphrase, 8 characters or more.
      - Can also be set with the E(NODEREMEDY_SNMP_PRIV_PASSWD) environment variable.
    type: str
  snmp_timeout:
    description:
      - Seconds to wait for each SNMP answer.
    type: float
    default: 1
  snmp_retries:
    description:
      - Retransmissions of an unanswered SNMP request.
    type: int
    default: 1
requirements:
  - pysnmp >= 7.1
"""
