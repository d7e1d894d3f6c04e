"""Pure decisions: the state machines and what they decide with; no I/O, no clock (the caller passes ``now``)."""
