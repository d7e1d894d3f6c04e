# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the fence timing options, 1:1 with
``plugins/module_utils/_fence.py`` ``FENCE_ARG_SPEC`` (fence-agents names and meanings)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  power_timeout:
    description:
      - Seconds to wait, after the switch command, for the device to read back the wanted state
        (fence-agents C(--power-timeout)). Not reaching it is a failure, never a success.
      - For an IPMI BMC that does not answer at all, the login also gives up after this many seconds.
    type: float
    default: 20
  power_wait:
    description:
      - Seconds to sleep after the switch command before the first read-back (fence-agents
        C(--power-wait)). C(fence_ipmilan) defaults to 2; the read-back is polled here, so 0 is safe
        for devices that report their state truthfully.
    type: float
    default: 0
  retry_on:
    description:
      - Extra attempts of switching on (fence-agents C(--retry-on)). O(state=on) is tried
        1 + O(retry_on) times, the power-on half of a reboot O(retry_on) times (at least once).
    type: int
    default: 1
  poll_interval:
    description:
      - Seconds between read-backs while verifying (fence-agents polls once a second). At most 1.
    type: float
    default: 0.1
"""
