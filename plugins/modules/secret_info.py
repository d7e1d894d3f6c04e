#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: secret_info
short_description: Read the decoded data of one Kubernetes Secret (for fencing credentials)
version_added: 0.1.0
description:
  - Reads one Secret and returns its C(data) base64-decoded (and its C(stringData)-free keys), so a
    playbook can pass a fencing device's credentials to C(noderemedy.core.ipmi_power),
    C(noderemedy.core.pdu_outlet) or C(noderemedy.core.fc_port) without the credentials ever being
    an extra variable.
  - "B(Always use it with) C(no_log: true) on the task, and pass the values on with C(no_log: true)
    (the result holds the secret values; the module cannot hide them from the task's own result)."
  - With O(keys), the listed keys must exist (a clear error names the Secret and the missing key);
    only they are returned.
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - noderemedy.core.kube
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Read only.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  name:
    description:
      - The Secret's name.
    type: str
    required: true
  namespace:
    description:
      - The Secret's namespace.
    type: str
    required: true
  keys:
    description:
      - Keys that must be present; only these are returned. All keys when omitted.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Read the BMC credentials of lab-node-0
  noderemedy.core.secret_info:
    name: lab-node-0-bmc
    namespace: noderemedy
    keys: [username, password]
  register: bmc_secret
  no_log: true

- name: Power off through the BMC
  noderemedy.core.ipmi_power:
    ipaddr: 10.0.0.10
    username: "{{ bmc_secret.data.username }}"
    password: "{{ bmc_secret.data.password }}"
    state: "off"
  no_log: true
"""

RETURN = r"""
data:
  description: The Secret's keys and their decoded (UTF-8) values. Secret values - keep the task no_log.
  returned: success
  type: dict
keys:
  description: The names of the returned keys (not secret).
  returned: success
  type: list
  elements: str
reason:
  description: On failure, the classified Kubernetes error (not_found, forbidden, invalid, ...).
  returned: failure
  type: str
"""

import traceback  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError, get_api_client  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._kube_module import kube_module  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._secret import read_secret  # noqa: E402


def main():
    module = kube_module(
        dict(
            name=dict(type="str", required=True),
            namespace=dict(type="str", required=True),
            keys=dict(type="list", elements="str", no_log=False),
        )
    )
    p = module.params
    try:
        data = read_secret(get_api_client(p), p["name"], p["namespace"], p["keys"])
    except KubeError as exc:
        module.fail_json(msg=exc.message, reason=exc.reason, exception=traceback.format_exc())
    module.exit_json(changed=False, data=data, keys=sorted(data))


if __name__ == "__main__":
    main()
