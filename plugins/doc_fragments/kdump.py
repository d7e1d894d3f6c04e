# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the kdump listener options, 1:1 with
``plugins/module_utils/_kdump.py`` ``KDUMP_ARG_SPEC`` (fence_kdump names)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  nodename:
    description:
      - Host names or addresses of the node (fence_kdump C(--nodename)). Only messages sent from
        one of their addresses count; every other datagram is ignored.
    type: list
    elements: str
    required: true
  ipport:
    description:
      - UDP port to listen on (fence_kdump C(--ipport)); the node's C(fence_kdump_send -p) must match.
    type: int
    default: 7410
  family:
    description:
      - IP family (fence_kdump C(--family)). V(auto) follows the node's addresses.
    type: str
    default: auto
    choices: [ auto, ipv4, ipv6 ]
  listen_address:
    description:
      - Address to bind. Default every address of the family.
    type: str
  timeout:
    description:
      - Seconds to wait for the node's message (fence_kdump C(--timeout)). Waiting in vain is not a
        failure - RV(fence.verified) is false and the next fence method (power) runs.
    type: float
    default: 60
"""
