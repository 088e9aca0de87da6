"""X-Twilio-Signature (tepat/adapters/twilio_signature.py) against Twilio's published
vectors and an HMAC-SHA1 written here from the documented algorithm."""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given
from hypothesis import strategies as st

from tepat.adapters.twilio_signature import twilio_signature, valid_twilio_signature

# The example of Twilio's security documentation and helper libraries' tests.
URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+14158675309",
    "Digits": "1234",
    "From": "+14158675309",
    "To": "+18005551212",
}
SIGNATURE = "RSOYDt4T1cUTdK1PDd93/VVr8B8="


def documented(token: str, url: str, params: dict[str, str]) -> str:
    data = url + "".join(k + params[k] for k in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def test_twilio_published_vectors() -> None:
    assert twilio_signature("12345", URL, PARAMS) == SIGNATURE
    assert valid_twilio_signature("12345", URL, PARAMS, SIGNATURE)
    # A name with several values: each value, sorted (twilio-python's test vector).
    repeated = [
        ("Sid", "CA123"),
        ("SidAccount", "AC123"),
        ("Digits", "5678"),
        ("Digits", "1234"),
        ("Digits", "1234"),
    ]
    assert twilio_signature("12345", URL, repeated) == "IK+Dwps556ElfBT0I3Rgjkr1wJU="


def test_anything_changed_fails() -> None:
    assert not valid_twilio_signature("12346", URL, PARAMS, SIGNATURE)
    assert not valid_twilio_signature("12345", URL + "&x=1", PARAMS, SIGNATURE)
    assert not valid_twilio_signature("12345", URL, {**PARAMS, "Digits": "9999"}, SIGNATURE)
    assert not valid_twilio_signature("12345", URL, {**PARAMS, "Extra": ""}, SIGNATURE)
    assert not valid_twilio_signature("12345", URL, PARAMS, None)
    assert not valid_twilio_signature("12345", URL, PARAMS, "")
    assert not valid_twilio_signature("12345", URL, PARAMS, "invalid 王")
    assert not valid_twilio_signature("12345", URL.replace("https", "http"), PARAMS, SIGNATURE)


def test_the_default_port_written_or_not() -> None:
    with_port = "https://mycompany.com:443/myapp.php?foo=1&bar=2"
    assert valid_twilio_signature("12345", with_port, PARAMS, SIGNATURE)
    signed_with_port = twilio_signature("12345", with_port, PARAMS)
    assert valid_twilio_signature("12345", URL, PARAMS, signed_with_port)
    other_port = "https://mycompany.com:8443/myapp.php?foo=1&bar=2"
    assert not valid_twilio_signature("12345", other_port, PARAMS, SIGNATURE)


@given(
    token=st.text(min_size=1, max_size=40),
    path=st.text(alphabet="abcxyz/?=&%", max_size=30),
    params=st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=40), max_size=8),
)
def test_agrees_with_the_documented_algorithm(
    token: str, path: str, params: dict[str, str]
) -> None:
    url = f"https://tepat.example/{path}"
    expected = documented(token, url, params)
    assert twilio_signature(token, url, params) == expected
    assert valid_twilio_signature(token, url, params, expected)
