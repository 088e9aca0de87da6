"""Twilio's request signature (``X-Twilio-Signature``), as Twilio documents it.

twilio.com/docs/usage/webhooks/webhooks-security: take the full URL Twilio requested
(scheme, host, port if any, path and query string), append each POST parameter's name
and value, parameters sorted by name, with no separators; HMAC-SHA1 that string keyed by
the account's auth token; base64. A name given several values contributes each of
them, in sorted order (as Twilio's own helper libraries do).

The sandbox signs its status callbacks with :func:`twilio_signature`; the API's
provider routes check callbacks with :func:`valid_twilio_signature`, which also accepts
the URL with the scheme's default port added or removed, because a proxy in between
may have changed how the port is written (the same allowance Twilio's libraries make).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

Params = Mapping[str, str] | Iterable[tuple[str, str]]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _pairs(params: Params) -> list[tuple[str, str]]:
    items = params.items() if isinstance(params, Mapping) else params
    return sorted(set(items))


def signing_string(url: str, params: Params) -> str:
    return url + "".join(name + value for name, value in _pairs(params))


def twilio_signature(auth_token: str, url: str, params: Params) -> str:
    digest = hmac.new(
        auth_token.encode(), signing_string(url, params).encode(), hashlib.sha1
    ).digest()
    return base64.b64encode(digest).decode("ascii")


def _url_variants(url: str) -> list[str]:
    """``url`` as given, without its port when it is the scheme's default, and with it."""
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme)
    variants = [url]
    if default is None or parts.hostname is None:
        return variants
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    userinfo = parts.netloc.rpartition("@")[0]
    prefix = f"{userinfo}@" if userinfo else ""
    if parts.port is None:
        netloc = f"{prefix}{host}:{default}"
    elif parts.port == default:
        netloc = f"{prefix}{host}"
    else:
        return variants
    variants.append(urlunsplit(parts._replace(netloc=netloc)))
    return variants


def valid_twilio_signature(
    auth_token: str, url: str, params: Params, signature: str | None
) -> bool:
    """Whether ``signature`` is Twilio's for this URL and these parameters (constant time)."""
    if not signature:
        return False
    pairs = _pairs(params)
    expected = signature.encode()
    return any(
        hmac.compare_digest(twilio_signature(auth_token, candidate, pairs).encode(), expected)
        for candidate in _url_variants(url)
    )
