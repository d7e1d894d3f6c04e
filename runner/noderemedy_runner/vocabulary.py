"""Plain vocabulary shared by the configuration formats and the state machines.

The fence ConfigMap (:mod:`noderemedy_runner.config.fence`) names the methods of each NodeFence
step, and the machines (:mod:`noderemedy_runner.machines`) run those steps: both speak of the same
steps, so the words live here, below both, and the configuration imports no decision code.
"""

from __future__ import annotations

from typing import Literal

#: NodeFence steps (node remedy seed: "isolation", "power-management", "recovery").
Step = Literal["Isolation", "PowerManagement", "Recovery"]
STEPS: tuple[Step, ...] = ("Isolation", "PowerManagement", "Recovery")
