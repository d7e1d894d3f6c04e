"""Where the runs' playbooks are: a checkout's ``playbooks/`` or the installed ``noderemedy.core``.

Both the watcher (:mod:`noderemedy_runner.loops.watcher`, the in-process executor's playbook
directory) and the remediation pod's ``--job-run`` side (:mod:`noderemedy_runner.jobs`) find the
playbooks the same way, so the rule lives here, beside the executor it feeds.
"""

from __future__ import annotations

import os
from pathlib import Path

from noderemedy_runner.executor import link_collection

#: The checkout this package runs from, when it is one (the collection root: playbooks/, roles/).
CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


def installed_collection_root() -> Path | None:
    """The installed ``noderemedy.core`` (as in the remediation pod image): the first
    ``ansible_collections/noderemedy/core`` with a ``playbooks`` directory on
    ``ANSIBLE_COLLECTIONS_PATH`` (colon-separated) or, without it, ansible-core's default
    collections paths (``~/.ansible/collections``, ``/usr/share/ansible/collections``); else None."""
    env = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
    paths = env.split(os.pathsep) if env else ["~/.ansible/collections", "/usr/share/ansible/collections"]
    for base in paths:
        root = Path(base).expanduser() / "ansible_collections" / "noderemedy" / "core"
        if (root / "playbooks").is_dir():
            return root
    return None


def default_collection_root() -> Path | None:
    """The checkout to use as ``noderemedy.core`` when running from a source tree, else None
    (the collection is installed, as in the pod image)."""
    root = CHECKOUT_ROOT
    return root if (root / "galaxy.yml").is_file() and (root / "playbooks").is_dir() else None


def playbook_root(playbook_dir: Path | None, data_dir: Path) -> tuple[Path, Path | None]:
    """Where the runs' playbooks are, and the ``ANSIBLE_COLLECTIONS_PATH`` that makes
    ``noderemedy.core`` importable: ``playbook_dir`` if given, else a checkout's ``playbooks/``
    (linked as a collection under ``data_dir/collections``), else the installed collection's
    (the pod image; collections path None: ansible's default). Raises ValueError when there is
    neither."""
    root = default_collection_root()
    collections = link_collection(data_dir / "collections", root) if root is not None else None
    if playbook_dir is not None:
        return playbook_dir, collections
    playbooks = root or installed_collection_root()
    if playbooks is None:
        raise ValueError(
            "playbook_dir is required when running neither from a checkout nor with "
            "noderemedy.core installed in a collections path"
        )
    return playbooks / "playbooks", collections
