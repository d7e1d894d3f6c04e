# Copyright: noderemedy developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the node a Kubernetes node module acts on, 1:1 with
``plugins/module_utils/_kube.py`` ``NODE_ARGSPEC``."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  name:
    description:
      - Name of the node.
    type: str
    required: true
    aliases: [ node ]
"""
