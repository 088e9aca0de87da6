"""Signed status webhooks out (issue 12, item 5), following the Standard Webhooks spec.

Each status change of a message becomes one *status event* whose id
(:func:`status_event_id`) is the same across retries and subscriptions, so a receiver
dedups on it (``webhook-id``). Each (subscription, event) becomes one *delivery message*
(:func:`delivery_message`) on channel ``webhook``, which rides the outbox, queues,
claim, retries and dead-lettering of every other message.

Signing follows https://www.standardwebhooks.com (:func:`sign`). While a rotated secret
is still valid every valid secret signs, so a receiver that knows either verifies. Pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from tepat.domain.errors import DomainError
from tepat.domain.models import Message, message_id_for
from tepat.domain.retry import RetryPolicy

#: The channel of delivery messages, and the user id they carry: not a valid user id
#: (``check_identifier`` refuses ``~``), so a user's message list never shows them and no
#: plan run or re-plan ever touches them.
WEBHOOK_CHANNEL = "webhook"
WEBHOOK_USER = "~webhook"

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the spec asks for 24 to 64
# How long a rotated-out secret keeps signing beside the new one.
ROTATION_OVERLAP = timedelta(hours=24)
MAX_URL_LENGTH = 2048
MAX_SECRETS = 8  # rotations within one overlap window pile up; beyond this, refuse

#: Status -> event type: ``missed`` arrives as ``message.skipped`` with ``status:
#: "missed"``; ``read`` comes from the inbox; ``pending``, ``sending`` and ``cancelled``
#: are internal and never sent.
STATUS_EVENT_TYPES: Mapping[str, str] = {
    "sent": "message.sent",
    "delivered": "message.delivered",
    "failed": "message.failed",
    "skipped": "message.skipped",
    "missed": "message.skipped",
    "read": "message.read",
}
EVENT_TYPES: tuple[str, ...] = tuple(dict.fromkeys(STATUS_EVENT_TYPES.values()))

#: A receiver down for an hour loses nothing: backoff from 5 s up to an hour, given up
#: after 3 days (as the spec's example schedule); age is the limit, not attempts.
WEBHOOK_RETRY = RetryPolicy(
    base_seconds=5.0, cap_seconds=3600.0, max_attempts=1000, max_age=timedelta(days=3)
)


@dataclass(frozen=True, slots=True)
class WebhookSecret:
    """One signing secret, ``whsec_<base64>``; ``expires_at`` set once rotated out."""

    secret: str
    created_at: datetime
    expires_at: datetime | None = None

    def valid_at(self, now: datetime) -> bool:
        return self.expires_at is None or now < self.expires_at


@dataclass(frozen=True, slots=True)
class WebhookSubscription:
    id: str
    url: str
    event_types: tuple[str, ...]
    secrets: tuple[WebhookSecret, ...]
    created_at: datetime
    updated_at: datetime
    # Empty: every category.
    categories: tuple[str, ...] = ()
    description: str = ""
    enabled: bool = True
    # Why it stopped (``gone``: the receiver answered 410).
    disabled_reason: str | None = None
    # Compare-and-set token of every update (a rotation, a disable).
    version: int = 1

    def wants(self, event_type: str, category: str) -> bool:
        if not self.enabled or event_type not in self.event_types:
            return False
        return not self.categories or category in self.categories

    def signing_secrets(self, now: datetime) -> list[str]:
        """The secrets that sign at ``now``: the current one and any still in overlap."""
        return [s.secret for s in self.secrets if s.valid_at(now)]


@dataclass(frozen=True, slots=True)
class StatusChangeEntry:
    """One status change waiting to become webhooks (the store's journal), written in
    the same write as the change. ``channel`` is None where the journal does not know it;
    ``key`` is the store's handle to drop it."""

    key: str
    message_id: str
    status: str
    user_id: str
    category: str
    at: datetime
    reason: str | None = None
    channel: str | None = None


def new_secret(random_bytes: bytes) -> str:
    """``whsec_`` + base64 of the caller's random bytes (``secrets.token_bytes``)."""
    if not 24 <= len(random_bytes) <= 64:
        raise ValueError("a signing secret is 24 to 64 random bytes")
    return SECRET_PREFIX + base64.b64encode(random_bytes).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key: the bytes the base64 after ``whsec_`` encodes."""
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not a whsec_ secret") from None


def sign(secret: str, msg_id: str, timestamp: int, body: str | bytes) -> str:
    """One signature, ``v1,<base64 HMAC-SHA256 of "{msg_id}.{timestamp}.{body}">``."""
    payload = body.encode() if isinstance(body, str) else body
    content = f"{msg_id}.{timestamp}.".encode() + payload
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def webhook_headers(
    secrets: Sequence[str], msg_id: str, timestamp: int, body: str
) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        # One signature per secret, space separated.
        "webhook-signature": " ".join(sign(s, msg_id, timestamp, body) for s in secrets),
        "content-type": "application/json",
    }


def rotate(sub: WebhookSubscription, secret: str, now: datetime) -> WebhookSubscription:
    """A new current secret; the ones signing until now keep signing for
    :data:`ROTATION_OVERLAP` (or less, if they were already due to stop), expired ones
    are dropped."""
    ends = now + ROTATION_OVERLAP
    kept = [
        replace(s, expires_at=ends if s.expires_at is None else min(s.expires_at, ends))
        for s in sub.secrets
        if s.valid_at(now)
    ]
    if len(kept) + 1 > MAX_SECRETS:
        raise DomainError(
            "secret", f"at most {MAX_SECRETS} secrets sign at once; wait for one to expire"
        )
    return replace(
        sub,
        secrets=(*kept, WebhookSecret(secret, created_at=now)),
        updated_at=now,
        version=sub.version + 1,
    )


def _loopback(host: str) -> bool:
    name = host.lower()
    if name in ("localhost", "localhost.localdomain") or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(value: str, allow_http: bool = False) -> str:
    """An absolute ``https`` URL; ``http`` only to a loopback host or when allowed
    (``TEPAT_WEBHOOK_ALLOW_HTTP``, for a private network)."""
    url = value.strip()
    if not url or len(url) > MAX_URL_LENGTH:
        raise DomainError("url", f"must be 1 to {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        _ = parts.port  # raises on a bad port
    except ValueError:
        raise DomainError("url", "not a valid URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise DomainError("url", "must be an absolute https:// URL")
    if parts.username is not None or parts.password is not None:
        raise DomainError("url", "must not carry credentials (verify the signature instead)")
    if parts.fragment:
        raise DomainError("url", "must not have a fragment")
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        raise DomainError("url", "must not contain spaces or control characters")
    if parts.scheme == "http" and not (allow_http or _loopback(host)):
        raise DomainError(
            "url",
            "must be https:// (http:// only to a loopback host, or with TEPAT_WEBHOOK_ALLOW_HTTP)",
        )
    return url


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_SETTING = "TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS"
# Names that only mean something inside a network (cloud metadata, mDNS, this host).
_INTERNAL_SUFFIXES = (".localhost", ".internal", ".local", ".localdomain", ".home.arpa")
# NAT64 (RFC 6052): an IPv6 address carrying an IPv4 one in its last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    """The private hosts webhooks may reach anyway (``TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS``):
    host names, and addresses or networks (CIDR)."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    def allows_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def allows_address(self, host: str, address: IPAddress) -> bool:
        return self.allows_host(host) or any(address in net for net in self.networks)


def parse_target_policy(value: str | None) -> TargetPolicy:
    """``"hooks.lan, 10.1.2.0/24, 127.0.0.1"`` -> a TargetPolicy; ValueError naming a bad
    entry."""
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for raw in (value or "").split(","):
        item = raw.strip().lower().rstrip(".")
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        if "/" in item or not all(_HOST_LABEL.match(label) for label in item.split(".")):
            raise ValueError(f"{raw.strip()!r} is neither a host name nor an address or CIDR")
        hosts.add(item)
    return TargetPolicy(frozenset(hosts), tuple(networks))


_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)\Z")


def address_refusal(address: IPAddress) -> str | None:
    """Why a webhook must not go to ``address`` (loopback, private, ...), None when it
    is a public unicast address. An IPv4-mapped or NAT64 IPv6 address is judged by the
    IPv4 address it carries."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in _NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    for why, hit in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("unspecified", address.is_unspecified),
        ("private", address.is_private),
        ("reserved", address.is_reserved or not address.is_global),
    ):
        if hit:
            return why
    return None


def check_target_host(host: str, policy: TargetPolicy) -> None:
    """Refuse a host name that can only be internal (``localhost``,
    ``metadata.google.internal``, ``*.local``) unless allow-listed; addresses are checked
    once resolved (:func:`check_target_address`)."""
    name = host.lower().rstrip(".")
    if policy.allows_host(name):
        return
    if name == "localhost" or name.endswith(_INTERNAL_SUFFIXES):
        raise DomainError(
            "url", f"{host} is an internal host name: refused (allow it with {ALLOW_SETTING})"
        )


def check_target_address(host: str, address: IPAddress, policy: TargetPolicy) -> None:
    why = address_refusal(address)
    if why is not None and not policy.allows_address(host, address):
        verb = "is" if host == str(address) else "resolves to"
        raise DomainError(
            "url",
            f"{host} {verb} a {why} address ({address}): refused (allow it with {ALLOW_SETTING})",
        )


def check_target_ip_literal(host: str, policy: TargetPolicy) -> None:
    """A URL whose host is an address literal: checked without any lookup."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return
    check_target_address(host, address, policy)


def check_event_types(values: Iterable[str]) -> tuple[str, ...]:
    chosen = list(dict.fromkeys(values))
    if not chosen:
        raise DomainError("event_types", f"name at least one of {', '.join(EVENT_TYPES)}")
    if unknown := [v for v in chosen if v not in EVENT_TYPES]:
        raise DomainError(
            "event_types", f"unknown event type {unknown[0]!r}; one of {', '.join(EVENT_TYPES)}"
        )
    return tuple(t for t in EVENT_TYPES if t in chosen)


def check_categories(values: Iterable[str], known: Iterable[str]) -> tuple[str, ...]:
    names = set(known)
    chosen = tuple(dict.fromkeys(values))
    if unknown := [v for v in chosen if v not in names]:
        raise DomainError("categories", f"unknown category {unknown[0]!r}")
    return chosen


def status_event_id(message_id: str, status: str) -> str:
    """The event's stable id (``webhook-id``): one per (message, status), since a status
    is reached at most once (forward-only). No ``.`` in it, as the spec asks."""
    return "msg_" + hashlib.blake2b(f"{message_id}|{status}".encode(), digest_size=16).hexdigest()


def business_event_id(dedup_key: str) -> str | None:
    """The business event a message came from (its keys are ``e|event|user|channel``;
    ``|`` never appears in an id)."""
    if not dedup_key.startswith("e|"):
        return None
    parts = dedup_key.split("|")
    return parts[1] if len(parts) >= 4 else None


def status_payload(entry: StatusChangeEntry, channel: str, event_id: str | None) -> dict[str, Any]:
    """The body: ``type``, ``timestamp`` (when the status changed) and ``data``."""
    data: dict[str, Any] = {
        "message_id": entry.message_id,
        "user_id": entry.user_id,
        "category": entry.category,
        "channel": channel,
        "status": entry.status,
        "reason": entry.reason,
    }
    if event_id is not None:
        data["event_id"] = event_id
    at = entry.at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"type": STATUS_EVENT_TYPES[entry.status], "timestamp": at, "data": data}


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a delivery message carries in ``content``."""

    subscription_id: str
    event_id: str
    event_type: str
    body: str

    def content(self) -> dict[str, Any]:
        values = (self.subscription_id, self.event_id, self.event_type, self.body)
        return dict(zip(_DELIVERY_KEYS, values, strict=True))

    @staticmethod
    def from_content(content: Mapping[str, Any]) -> Delivery | None:
        try:
            return Delivery(*(str(content[key]) for key in _DELIVERY_KEYS))
        except KeyError:
            return None


# The keys of a delivery message's ``content``, in the order of :class:`Delivery`'s fields.
_DELIVERY_KEYS = ("subscription_id", "event_id", "type", "body")


def delivery_message(
    subscription_id: str, entry: StatusChangeEntry, payload: Mapping[str, Any], now: datetime
) -> Message:
    """The message that delivers one event to one subscription. Its dedup, live and slot
    keys are (subscription, event), and its id their hash: turning one journal entry
    into deliveries twice (a crash before the entry was dropped) inserts nothing new."""
    event_id = status_event_id(entry.message_id, entry.status)
    event_type = STATUS_EVENT_TYPES[entry.status]
    key = f"w|{subscription_id}|{event_id}"
    # Compact JSON, fixed when the delivery is created: every attempt sends (and signs)
    # the same bytes.
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return Message(
        id=message_id_for(key),
        user_id=WEBHOOK_USER,
        category=entry.category,
        label=WEBHOOK_CHANNEL,
        title=event_type,
        body="",
        scheduled_at=now,
        timezone="UTC",
        dedup_key=key,
        live_key=key,
        slot_key=key,
        nominal_at=now,
        due_at=now,
        channel=WEBHOOK_CHANNEL,
        content=Delivery(subscription_id, event_id, event_type, body).content(),
    )
