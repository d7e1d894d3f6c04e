"""Shared by the fence configuration parser's tests (test_fencecfg*.py): the seed's bare-metal
example for node worker-1 (its ConfigMap and its two templates)."""

from __future__ import annotations

NODE = "worker-1"
CM = "fence-config-worker-1"


def seed_config() -> dict[str, str]:
    """The seed's bare-metal example, for node worker-1."""
    return {
        "config.properties": (
            f"node_name={NODE}\nisolation=fc-off\npower_management=eaton-off eaton-on\nrecovery=fc-on\n"
        ),
        "fence-method-fc-on": "template=fence-method-template-fc-switch\nplug=2\naction=on",
        "fence-method-fc-off": "template=fence-method-template-fc-switch\nplug=2\naction=off",
        "fence-method-eaton-on": "template=fence-method-template-eaton-pdu\nplug=1\naction=on",
        "fence-method-eaton-off": "template=fence-method-template-eaton-pdu\nplug=1\naction=off",
    }


def seed_templates() -> dict[str, dict[str, str]]:
    return {
        "fence-method-template-fc-switch": {
            "template.properties": "type=fc\naddress=127.0.0.1:16011\nsecret=fc-switch-credentials\n"
        },
        "fence-method-template-eaton-pdu": {
            "template.properties": "# the rack PDU\ntype=pdu\nmodel=eaton\naddress=snmp://127.0.0.1:16013\nsecret=eaton-pdu\n"
        },
    }
