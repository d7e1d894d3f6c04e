# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fencing modules' shared ``main()`` shell: argument spec, missing library, credentials
Secret, driver run and the power result, so that each module keeps only its own options, its docs
and what is its own (building its driver, extra result keys).

Shape: community.crypto ``module_utils/argspec.py`` (``ArgumentSpec.create_ansible_module``: the
shared code makes the ``AnsibleModule``) and its module backends (the module supplies a backend,
the shared code owns check mode, diff and the result). Errors become ``fail_json`` in one place,
:func:`~ansible_collections.noderemedy.core.plugins.module_utils._fence.run_driver`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.noderemedy.core.plugins.module_utils._fence import (
    FENCE_ARG_SPEC,
    FenceDriver,
    FenceResult,
    Library,
    power_result,
    run_driver,
    unverified,
)
from ansible_collections.noderemedy.core.plugins.module_utils._secret import (
    CREDENTIALS_SECRET_ARGSPEC,
    apply_credentials_secret,
)

#: Secret key -> option, for ``credentials_secret`` of the modules that log in with a user name
#: and a password (IPMI, Redfish, vSphere).
LOGIN_SECRET_KEYS: Mapping[str, str] = MappingProxyType({"username": "username", "password": "password"})


def fencing_module(
    connection_spec: Mapping[str, dict[str, Any]],
    module_spec: Mapping[str, dict[str, Any]],
    library: Library,
    **constraints: Any,
) -> AnsibleModule:
    """The ``AnsibleModule`` of a fencing module, with check mode supported.

    Args:
        connection_spec: the device's connection options (``IPMI_ARG_SPEC``, ``SNMP_ARG_SPEC``...).
        module_spec: the module's own options (``state``, ``plug``...); they come last, after
            the shared timing (``FENCE_ARG_SPEC``) and ``credentials_secret`` options.
        library: the Python library the driver needs (``_fence.Library``).
        constraints: ``mutually_exclusive``, ``required_if``, ``required_one_of``... as
            ``AnsibleModule`` takes them.

    Fails the module with ``missing_required_lib(name)`` (and the import traceback) when the
    library is missing.
    """
    module = AnsibleModule(
        argument_spec={**connection_spec, **FENCE_ARG_SPEC, **CREDENTIALS_SECRET_ARGSPEC, **module_spec},
        supports_check_mode=True,
        **constraints,
    )
    if not library.present:
        module.fail_json(msg=missing_required_lib(library.name), exception=library.import_error)
    return module


def fence(
    module: AnsibleModule,
    method: str,
    target: str,
    plugs: list[str],
    build: Callable[[], FenceDriver],
    secret_keys: Mapping[str, str] | None = LOGIN_SECRET_KEYS,
    run: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any]:
    """Fill the credentials from ``credentials_secret``, build the driver and run the action.

    Args:
        module: the module from :func:`fencing_module`.
        method / target / plugs: the never-verified ``fence`` evidence (``_fence.unverified``)
            returned when the Secret cannot be read or the driver cannot be built.
        build: makes the driver from ``module.params`` (see ``_fence.run_driver``).
        secret_keys: Secret key -> option (default :data:`LOGIN_SECRET_KEYS`, ``_snmp.SNMP_SECRET_KEYS``);
            None when ``build`` reads the Secret itself (the AWS module resolves the instance
            first).
        run: the action on the built driver; default ``driver.run(state, check_mode)``.

    Returns ``(driver, result)`` as ``_fence.run_driver``; on any failure the module fails and
    this never returns.
    """
    fallback = unverified(method, target, plugs)
    if secret_keys is not None:
        apply_credentials_secret(module, secret_keys, fallback)
    return run_driver(module, build, fallback, run)


def exit_power(
    module: AnsibleModule,
    driver: FenceDriver,
    result: FenceResult,
    diff: tuple[dict[str, Any], dict[str, Any]] | None = None,
    **extra: Any,
) -> None:
    """Exit with the power result of ``result`` (``_fence.power_result``: ``changed``, the power
    states before and after, ``extra``, ``verify_seconds``, ``attempts`` and the driver's ``fence``
    evidence); never returns.

    In diff mode the result has a ``diff``: ``{"before": {"power": <state>}, "after": {"power":
    <state>}}``, or ``{"before": diff[0], "after": diff[1]}`` when the module gives ``diff``
    (``pdu_outlet``: each outlet's state).
    """
    out = power_result(result, driver.evidence(result), module._diff and diff is None, **extra)
    if module._diff and diff is not None:
        out["diff"] = {"before": diff[0], "after": diff[1]}
    module.exit_json(**out)
