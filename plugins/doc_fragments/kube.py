# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the Kubernetes modules' options, each attribute 1:1 with its argspec in
``plugins/module_utils/_kube.py``:

* ``DOCUMENTATION`` (``noderemedy.core.kube``): the authentication options, ``KUBE_AUTH_ARGSPEC``;
* ``NODE`` (``noderemedy.core.kube.node``): the node a node module acts on, ``NODE_ARGSPEC``.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
      - When no option of this group is given, the in-cluster service account is used if the module
        runs in a pod, else the default kubeconfig (C($KUBECONFIG) or C(~/.kube/config)).
      - Can also be set with the E(K8S_AUTH_KUBECONFIG) environment variable.
    type: raw
  context:
    description:
      - The kubeconfig context to use.
      - Can also be set with the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
  host:
    description:
      - URL of the API server, for example V(https://127.0.0.1:6443). Overrides the kubeconfig's server.
      - Can also be set with the E(K8S_AUTH_HOST) environment variable.
    type: str
  api_key:
    description:
      - Bearer token for the API server.
      - Can also be set with the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's TLS certificate. Unset keeps the kubeconfig's setting.
      - Can also be set with the E(K8S_AUTH_VERIFY_SSL) environment variable.
    type: bool
    aliases: [ verify_ssl ]
  ca_cert:
    description:
      - Path to a CA certificate file used to verify the API server.
      - Can also be set with the E(K8S_AUTH_SSL_CA_CERT) environment variable.
    type: path
    aliases: [ ssl_ca_cert ]
  client_cert:
    description:
      - Path to a client certificate file for TLS client authentication.
      - Can also be set with the E(K8S_AUTH_CERT_FILE) environment variable.
    type: path
    aliases: [ cert_file ]
  client_key:
    description:
      - Path to the key of O(client_cert).
      - Can also be set with the E(K8S_AUTH_KEY_FILE) environment variable.
    type: path
    aliases: [ key_file ]
requirements:
  - python >= 3.11
  - kubernetes >= 37
"""

    NODE = r"""
options:
  name:
    description:
      - Name of the node.
    type: str
    required: true
    aliases: [ node ]
"""
