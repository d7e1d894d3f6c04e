"""noderemedy lab: real peers (Kubernetes control plane, kwok nodes, OpenIPMI BMCs, SNMP PDUs and
FC switches) started on 127.0.0.1 for tests, benchmarks and the demo.

Entry points: :class:`noderemedy_lab.lab.Lab` (Python), ``noderemedy-lab`` (CLI), and the pytest
plugin :mod:`noderemedy_lab.pytest_plugin` (fixture ``lab``).
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
