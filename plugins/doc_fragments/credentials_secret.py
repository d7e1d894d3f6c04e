# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the fencing modules' ``credentials_secret`` option, 1:1 with
``plugins/module_utils/_secret.py`` ``CREDENTIALS_SECRET_ARGSPEC``."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  credentials_secret:
    description:
      - Read the device credentials from this Kubernetes Secret instead of task options. The module
        reads the Secret itself, so the values never appear in a task result, an extra variable or
        a log; every value read is masked in what the module returns.
      - Secret keys - IPMI, Redfish and vSphere C(username), C(password); AWS C(access_key), C(secret_key); SNMP v1/v2c C(community); SNMPv3 C(username),
        C(password) (authentication key) and C(priv_password) (privacy key). A key missing from the
        Secret is skipped; an option given to the task wins over the Secret.
      - Kubernetes access - O(credentials_secret.kubeconfig) and O(credentials_secret.context), else
        the E(K8S_AUTH_*) environment variables of the kube_auth options of
        M(noderemedy.core.secret_info), else the in-cluster service account or the default kubeconfig.
    type: dict
    suboptions:
      name:
        description: The Secret's name.
        type: str
        required: true
      namespace:
        description: The Secret's namespace.
        type: str
        required: true
      kubeconfig:
        description: Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
        type: raw
      context:
        description: The kubeconfig context to use.
        type: str
requirements:
  - kubernetes >= 37 (only with O(credentials_secret))
"""
