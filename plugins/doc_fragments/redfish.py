# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the Redfish connection options, 1:1 with
``plugins/module_utils/_redfish.py`` ``REDFISH_ARG_SPEC`` (fence_redfish names)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  ipaddr:
    description:
      - Address or host name of the BMC (fence_redfish C(--ip)).
    type: str
    required: true
    aliases: [ ip ]
  ipport:
    description:
      - TCP port of the BMC's Redfish service. Default 443 with O(ssl=true), 80 without.
    type: int
  username:
    description:
      - BMC user name, sent with HTTP basic authentication (fence_redfish C(--username)).
      - Can also be set with the E(NODEREMEDY_REDFISH_USERNAME) or E(REDFISH_USERNAME) environment
        variable, or read from O(credentials_secret) (key C(username)). Required one way or another.
    type: str
    aliases: [ login ]
  password:
    description:
      - BMC password (fence_redfish C(--password)). Never logged or returned.
      - Can also be set with the E(NODEREMEDY_REDFISH_PASSWORD) or E(REDFISH_PASSWORD) environment
        variable, or read from O(credentials_secret) (key C(password)). Required one way or another.
    type: str
    aliases: [ passwd ]
  ssl:
    description:
      - Speak HTTPS (fence_redfish always does). V(false) for a BMC served over plain HTTP (a Metal3
        C(redfish+http://) address); credentials then cross the network in clear text.
    type: bool
    default: true
  ssl_insecure:
    description:
      - Do not verify the BMC's TLS certificate (fence-agents C(--ssl-insecure)). Prefer O(ca_path).
    type: bool
    default: false
  ca_path:
    description:
      - CA bundle file, or directory of CA certificates, that signed the BMC's certificate. Without it
        the system's trusted CAs are used.
    type: path
  redfish_uri:
    description:
      - The Redfish service root (fence_redfish C(--redfish-uri)).
    type: str
    default: /redfish/v1
  systems_uri:
    description:
      - URI of the C(ComputerSystem) to fence, for example C(/redfish/v1/Systems/System.Embedded.1)
        (fence_redfish C(--systems-uri)).
      - Without it, the member of the C(Systems) collection named by O(plug); without either, the
        collection's only member (several members are an error, never a guess).
    type: str
  plug:
    description:
      - C(Id), C(Name) or C(UUID) of the system in the C(Systems) collection (fence-agents C(--plug)),
        when O(systems_uri) is not given.
    type: str
requirements:
  - sushy >= 5
"""
