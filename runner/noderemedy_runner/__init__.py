"""noderemedy-runner: the watcher that turns NodeFence and Metal3Remediation state machines into
ansible-runner playbook runs (see docs/state-machines.md and /DESIGN.md)."""

__version__ = "0.1.0"
