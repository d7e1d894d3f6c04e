#!/usr/bin/python
# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_version_info
short_description: Read the StorageVersion objects (KEP-2339) - encoding and decodable versions per resource and apiserver
version_added: 0.1.0
description:
  - Lists the cluster-scoped C(internal.apiserver.k8s.io/v1alpha1) C(StorageVersion) objects and returns, per
    resource, the encoding version(s) the cluster stores (C(commonEncodingVersion), or each apiserver's
    C(encodingVersion)) and, per apiserver identity, what it can decode and serve.
  - The API is served only when the apiservers run with the C(StorageVersionAPI) and C(APIServerIdentity)
    feature gates and C(--runtime-config=internal.apiserver.k8s.io/v1alpha1=true). When it is not served
    the module does not fail; it returns RV(available=false) and the reason.
  - On an HA control plane it also reads the apiserver identity Leases in C(kube-system) (label
    C(apiserver.kubernetes.io/identity)); it needs C(list) on C(leases.coordination.k8s.io) there. An
    apiserver's entries whose identity Lease is gone or expired are stale - named in RV(stale_apiservers)
    and left out of RV(resources), RV(apiservers) and RV(encodings).
  - Source - KEP-2339 "StorageVersion API for HA API servers", KEP-1965 "kube-apiserver identity".
author:
  - noderemedy developers (@noderemedy)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - noderemedy.core.kube
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  apiserver_id:
    description: Return only this apiserver identity in RV(apiservers).
    type: str
  resources:
    description: Restrict the result to these StorageVersion names (C(<group>.<resource>), e.g. C(apps.deployments)).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: What does each apiserver encode and decode?
  noderemedy.core.storage_version_info:
    kubeconfig: /etc/kubernetes/admin.conf
  register: sv

- name: Fail if the deployments are not stored as apps/v1
  ansible.builtin.assert:
    that: sv.resources['apps.deployments'].encodingVersions == ['apps/v1']
"""

RETURN = r"""
available:
  description: Whether the StorageVersion API is served and answered.
  returned: always
  type: bool
message:
  description: Why the API is unavailable, or a summary.
  returned: always
  type: str
resources:
  description: Per StorageVersion name - C(group), C(resource), C(commonEncodingVersion), C(encodingVersions),
    C(allEncodingVersionsEqual) and C(servers) (per apiServerID - C(encodingVersion), C(decodableVersions),
    C(servedVersions)).
  returned: always
  type: dict
  sample: {"apps.deployments": {"commonEncodingVersion": "apps/v1", "encodingVersions": ["apps/v1"]}}
apiservers:
  description: Per apiServerID, per resource - C(encodingVersion), C(decodableVersions), C(servedVersions).
  returned: always
  type: dict
encodings:
  description: Per resource, the encoding versions the cluster stores now (live apiservers only).
  returned: always
  type: dict
identities:
  description: The apiserver identity Leases by ID (the Lease name, the C(apiServerID) of StorageVersions) -
    C(component), C(hostname) (its C(kubernetes.io/hostname) label), C(holderIdentity), C(renewTime),
    C(leaseDurationSeconds), C(expired).
  returned: always
  type: dict
  sample: {"apiserver-4dfxx2c5vh3uxgvvrxnuhn3ztu": {"component": "kube-apiserver", "hostname": "cp-1", "expired": false}}
stale_apiservers:
  description: Per stale apiServerID - C(reason) (C(NoIdentityLease) or C(IdentityLeaseExpired)) and the
    C(resources) it still has entries in.
  returned: always
  type: dict
this_apiserver_id:
  description: The ID of the kube-apiserver on this host (the live identity Lease labelled with this host's
    name), null when there is none.
  returned: always
  type: str
"""

import traceback  # noqa: E402

from ansible_collections.noderemedy.core.plugins.module_utils._kube import (  # noqa: E402
    KUBE_AUTH_ARGSPEC,
    KubeError,
    get_api_client,
)
from ansible_collections.noderemedy.core.plugins.module_utils._kube_module import kube_module  # noqa: E402
from ansible_collections.noderemedy.core.plugins.module_utils._storage_version import (  # noqa: E402
    StorageVersionError,
    info,
)


def argument_spec() -> dict:
    """The module's argspec: its own options plus the kube auth group (as ``kube_module`` adds it)."""
    return {
        "apiserver_id": {"type": "str"},
        "resources": {"type": "list", "elements": "str"},
        **KUBE_AUTH_ARGSPEC,
    }


def main() -> None:
    module = kube_module(argument_spec())
    try:
        result = info(
            lambda: get_api_client(module.params), module.params["apiserver_id"], module.params["resources"]
        )
    except (StorageVersionError, KubeError) as exc:
        module.fail_json(
            msg=str(exc),
            exception=traceback.format_exc(),
            reason=getattr(exc, "reason", ""),
            field=getattr(exc, "field", ""),
        )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
