"""The e-mail a message becomes: MIME parts, headers, one-click unsubscribe (RFC 8058).

Pure: no I/O, so the whole shape of what goes over SMTP is tested without a server.

- ``multipart/alternative`` with a ``text/plain`` part (``message.body``) and a
  ``text/html`` part (``message.content["html"]``) when the template rendered one;
  text alone otherwise.
- ``Message-ID: <{message.id}@{the sender's domain}>``: the same on every attempt, so a
  retry after a lost reply is recognisable as the same mail by the relay, the recipient's
  provider and our own bounce handling (``X-Tepat-Message-Id`` carries the bare id too,
  for relays that rewrite ``Message-ID``, as SES does).
- ``List-Unsubscribe: <https URL>, <mailto:...>`` and
  ``List-Unsubscribe-Post: List-Unsubscribe=One-Click`` when the sender gave an
  unsubscribe URL (bulk categories): what Gmail and Yahoo require of bulk senders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, parseaddr
from urllib.parse import quote

from tepat.domain.email_events import HEADER_MESSAGE_ID
from tepat.domain.models import Message

# What a header may not carry: a rendered title with a line break would otherwise start a
# header of its own (header injection), and email refuses it anyway.
_LINE_BREAKS = re.compile(r"[\r\n\x00]+")
# A domain of the sender's address: letters, digits, hyphens, dots.
_DOMAIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
# Headers set with set_raw go out as given (folded by us); all others as policy.SMTP folds them.
_POLICY = policy.SMTP.clone(refold_source="none")
_FOLD_AT = 78  # RFC 5322's recommended line length
_LOCAL = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Sender:
    """``TEPAT_SMTP_FROM`` parsed: what goes in ``From`` and the envelope's ``MAIL FROM``."""

    display_name: str
    address: str

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2]

    def header(self) -> str:
        return str(Address(display_name=self.display_name, addr_spec=self.address))


def parse_from(value: str) -> Sender:
    """``no-reply@example.com`` or ``Example <no-reply@example.com>``; ValueError otherwise."""
    if "," in value or _LINE_BREAKS.search(value):
        raise ValueError("expected one address such as 'Example <no-reply@example.com>'")
    name, address = parseaddr(value)
    if not address:
        raise ValueError("expected an address such as 'Example <no-reply@example.com>'")
    check_address(address)
    return Sender(display_name=name, address=address)


def check_address(address: str) -> str:
    local, at, domain = address.rpartition("@")
    if not at or not _LOCAL.fullmatch(local) or not _DOMAIN.fullmatch(domain) or "." not in domain:
        raise ValueError(
            f"expected an e-mail address such as no-reply@example.com, got {address!r}"
        )
    return address


def check_mailto(value: str) -> str:
    """``TEPAT_UNSUBSCRIBE_MAILTO``: an address, with or without ``mailto:``."""
    check_address(value.removeprefix("mailto:"))
    return value


def message_id_header(message_id: str, sender: Sender) -> str:
    return f"<{message_id}@{sender.domain}>"


def list_unsubscribe(url: str, mailto: str | None) -> str:
    """The ``List-Unsubscribe`` value: the one-click URL first (RFC 8058 requires an https
    URI in it), then a mailto whose subject carries the same token, so a request by mail
    names the same (user, category, channel) for whoever reads that mailbox.

    Folded by hand, at the space after a comma only: RFC 2369 readers look for ``<URI>``
    and would find nothing in the RFC 2047 encoded-words that the email package makes of
    any unstructured value longer than a line."""
    uris = [f"<{url}>"]
    if mailto:
        token = url.rstrip("/").rpartition("/")[2]
        address = mailto.removeprefix("mailto:")
        uris.append(f"<mailto:{address}?subject={quote('unsubscribe ' + token)}>")
    one_line = ", ".join(uris)
    if len("List-Unsubscribe: ") + len(one_line) <= _FOLD_AT:
        return one_line
    return ",\n ".join(uris)  # the generator writes the policy's CRLF


def build_email(
    message: Message,
    to: str,
    sender: Sender,
    now: datetime,
    unsubscribe_url: str | None = None,
    unsubscribe_mailto: str | None = None,
) -> EmailMessage:
    """The MIME message for one attempt; the same bytes apart from ``Date`` on a retry."""
    mail = EmailMessage(policy=_POLICY)
    mail["From"] = sender.header()
    mail["To"] = to
    mail["Subject"] = _LINE_BREAKS.sub(" ", message.title).strip()
    mail["Date"] = format_datetime(now)
    mail["Message-ID"] = message_id_header(message.id, sender)
    mail[HEADER_MESSAGE_ID] = message.id
    if unsubscribe_url:
        # set_raw and refold_source="none": the generator writes this value as given
        mail.set_raw("List-Unsubscribe", list_unsubscribe(unsubscribe_url, unsubscribe_mailto))
        mail["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    # Quoted-printable: 7-bit on the wire whatever the text, so a relay without 8BITMIME
    # (MAIL FROM is sent without BODY=8BITMIME) takes it unchanged.
    mail.set_content(message.body, cte="quoted-printable")
    html = message.content.get("html")
    if isinstance(html, str) and html:
        mail.add_alternative(html, subtype="html", cte="quoted-printable")
    return mail
