"""Decoding a Secret's data for noderemedy.core.secret_info: pure logic, no network."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.noderemedy.core.plugins.module_utils._kube import KubeError
from ansible_collections.noderemedy.core.plugins.module_utils._secret import decode_secret_data


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


DATA = {"username": b64("admin"), "password": b64("s3cr3t-ü"), "community": b64("")}


def test_every_key_or_the_listed_ones():
    assert decode_secret_data(DATA, None, "ns/bmc") == {
        "username": "admin",
        "password": "s3cr3t-ü",
        "community": "",
    }
    assert decode_secret_data(DATA, ["password"], "ns/bmc") == {"password": "s3cr3t-ü"}
    assert decode_secret_data({}, None, "ns/empty") == {}


def test_missing_key_names_the_secret_and_the_keys_it_has():
    with pytest.raises(KubeError) as err:
        decode_secret_data(DATA, ["username", "priv_password"], "ns/bmc")
    assert err.value.reason == "invalid"
    assert (
        err.value.message
        == "Secret ns/bmc: key 'priv_password' missing; keys are ['community', 'password', 'username']"
    )


@pytest.mark.parametrize("value", ["%%%not-base64", base64.b64encode(b"\xff\xfe\xfd").decode()])
def test_undecodable_value_names_the_key_never_the_value(value):
    with pytest.raises(KubeError) as err:
        decode_secret_data({"password": value}, None, "ns/bmc")
    assert err.value.reason == "invalid"
    assert err.value.message == "Secret ns/bmc: key 'password' is not UTF-8 text"
    assert value not in str(err.value)


@settings(deadline=None)
@given(
    st.dictionaries(st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True), st.text(max_size=40), max_size=5)
)
def test_round_trip(values):
    assert decode_secret_data({k: b64(v) for k, v in values.items()}, None, "ns/s") == values
