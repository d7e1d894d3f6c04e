# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes modules' shared ``main()`` shell: the ``AnsibleModule`` with the ``kube_auth``
options and the missing-library check, and the diff-mode result.

Shape: kubernetes.core ``module_utils/k8s/core.py`` (``AnsibleK8SModule``: one place adds the
auth options and checks for the kubernetes library) and community.crypto ``module_utils/argspec.py``
(``ArgumentSpec.create_ansible_module``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.noderemedy.core.plugins.module_utils._kube import (
    HAS_KUBERNETES,
    KUBE_AUTH_ARGSPEC,
    KUBERNETES_IMPORT_ERROR,
)


def kube_module(module_spec: Mapping[str, dict[str, Any]], **constraints: Any) -> AnsibleModule:
    """The ``AnsibleModule`` of a module that talks to the Kubernetes API, with check mode supported.

    Args:
        module_spec: the module's own options; the ``kube_auth`` options
            (``_kube.KUBE_AUTH_ARGSPEC``) are added.
        constraints: ``mutually_exclusive``, ``required_if``... as ``AnsibleModule`` takes them.

    Fails the module with ``missing_required_lib("kubernetes")`` (and the import traceback) when
    the kubernetes library is missing.
    """
    module = AnsibleModule(
        argument_spec={**module_spec, **KUBE_AUTH_ARGSPEC}, supports_check_mode=True, **constraints
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)
    return module


def exit_with_diff(module: AnsibleModule, result: dict[str, Any]) -> None:
    """Exit with ``result``, whose ``diff`` key (``{"before": ..., "after": ...}``, always computed)
    is returned only in diff mode."""
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)
