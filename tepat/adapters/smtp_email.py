"""The e-mail channel: messages over SMTP to a relay (``aiosmtplib``), typed outcomes.

Configured by ``TEPAT_SMTP_*`` (tepat/config.py, read by :mod:`tepat.wiring`, which builds
none when ``TEPAT_SMTP_HOST`` is unset). What the e-mail looks like: :mod:`smtp_message`; how
replies become outcomes: :mod:`smtp_outcomes`.

Connections: a small pool (``TEPAT_SMTP_CONNECTIONS``, 4) of connections kept open
between messages, one transaction at a time on each. A transaction costs three round
trips (MAIL, RCPT, DATA and the content), so one connection alone, 20 ms from its relay,
would carry some 15 messages/s, short of the default 50/s. A connection the relay closed
while idle is noticed at the next ``MAIL FROM`` (nothing has gone out yet) and opened
again once; any other failure closes it, and the next message opens a fresh one.

Rate: a token bucket per channel (``TEPAT_SMTP_RATE``, 50/s, on the injectable clock)
paces every ``MAIL FROM``: relays and providers (SES: 14/s in a new account) refuse
what comes faster, and a refusal costs a retry.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiosmtplib
import structlog

from tepat.adapters.rate_limit import TokenBucket
from tepat.adapters.smtp_message import (
    Sender,
    build_email,
    message_id_header,
)
from tepat.adapters.smtp_outcomes import Stage, outcome_for_reply
from tepat.clock import Clock
from tepat.domain.queues import may_use_critical_reserve
from tepat.ports.channel import Accepted, ChannelOutcome, Outgoing, Refused, Withheld
from tepat.ports.try_again import TryAgain

log = structlog.get_logger("tepat.email")

_DEFAULT_PORTS = {"none": 25, "starttls": 587, "implicit": 465}
# A transport-level failure: the connection, TLS, or a reply that never came.
_TRANSPORT_ERRORS = (aiosmtplib.SMTPException, OSError, asyncio.TimeoutError, ssl.SSLError)


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    host: str
    sender: Sender
    port: int | None = None
    tls: str = "starttls"  # none | starttls | implicit
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    rate: float = 50.0
    critical_reserve: float = 0.0
    timeout: float = 30.0
    connections: int = 4
    unsubscribe_mailto: str | None = None
    # EHLO name; None: aiosmtplib's default (this host's FQDN)
    local_hostname: str | None = None
    # A login over tls="none" sends the password in clear: only when asked for.
    allow_plaintext_auth: bool = False

    def __post_init__(self) -> None:
        if self.username and self.tls == "none" and not self.allow_plaintext_auth:
            raise ValueError("SMTP login without TLS refused: the password would go in clear")

    @property
    def resolved_port(self) -> int:
        return self.port or _DEFAULT_PORTS[self.tls]


class _Stale(Exception):
    """A pooled connection the relay closed while it was idle."""


class SmtpEmailChannel:
    name = "email"
    max_batch = 50

    def __init__(self, config: SmtpConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.bucket = TokenBucket(
            config.rate, clock, critical_reserve=config.critical_reserve, provider="smtp"
        )
        self._idle: list[aiosmtplib.SMTP] = []
        self._slots = asyncio.Semaphore(config.connections)
        self._tls_context: ssl.SSLContext | None = None
        self._closed = False

    def set_rate_share(self, share: float) -> None:
        self.bucket.set_share(share)

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome | Withheld]:
        return list(await asyncio.gather(*(self._send_one(item) for item in items)))

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for smtp in idle:
            await _quit(smtp, min(self.config.timeout, 5.0))

    async def probe(self) -> str:
        """Connect, upgrade to TLS and log in as a send would, then NOOP and QUIT:
        nothing is sent (``tepat doctor``). Returns what the relay greeted with; raises
        aiosmtplib's and the socket's errors as they come."""
        smtp = await self._connect()
        try:
            await smtp.noop()
            greeting = smtp.last_ehlo_response.message if smtp.last_ehlo_response else ""
            return greeting.splitlines()[0] if greeting else ""
        finally:
            await _quit(smtp, self.config.timeout)

    async def _send_one(self, item: Outgoing) -> ChannelOutcome | Withheld:
        if not item.target.isascii():
            # A non-ASCII local part needs SMTPUTF8, which this adapter does not speak
            # (domains arrive as xn--, normalised by tepat/domain/contacts.py).
            return Refused(reason="smtp_address_not_ascii")
        try:
            mail = build_email(
                item.message,
                item.target,
                self.config.sender,
                self.clock.now(),
                item.unsubscribe_url,
                self.config.unsubscribe_mailto,
            )
            content = mail.as_bytes()
        except (ValueError, TypeError, UnicodeError) as e:
            # The same rendered parts fail the same way on every attempt.
            log.warning("email_unbuildable", message_id=item.message.id, error=str(e))
            return Refused(reason="smtp_bad_message")
        # Other traffic waits for its share before a connection (TokenBucket.pass_share).
        await self.bucket.pass_share(1, may_use_critical_reserve(item.message))
        async with self._slots:
            # Paced at the connection, not before waiting for one: a token taken while
            # waiting for a free connection would let the waiters go in a clump.
            await self.bucket.acquire_ceiling(1)
            if not item.still_sendable():
                return Withheld()
            smtp = self._idle.pop() if self._idle else None
            outcome, smtp = await self._transaction(smtp, item, content)
            if smtp is not None and smtp.is_connected and not self._closed:
                self._idle.append(smtp)
            elif smtp is not None:
                smtp.close()
        return outcome

    async def _transaction(
        self, smtp: aiosmtplib.SMTP | None, item: Outgoing, content: bytes
    ) -> tuple[ChannelOutcome, aiosmtplib.SMTP | None]:
        """One MAIL/RCPT/DATA on a pooled connection (opened if needed); the outcome and
        the connection if it may be used again."""
        for fresh in (False, True):
            if smtp is None or not smtp.is_connected or fresh:
                if smtp is not None:
                    smtp.close()
                try:
                    smtp = await self._connect()
                except aiosmtplib.SMTPResponseException as e:
                    log.warning("smtp_connect_refused", code=e.code, reply=e.message)
                    return TryAgain(reason=f"smtp_connect_{e.code}"), None
                except _TRANSPORT_ERRORS as e:
                    log.warning("smtp_connect_failed", error=str(e) or type(e).__name__)
                    return TryAgain(reason="smtp_connect"), None
                reused = False
            else:
                reused = True
            try:
                return await self._envelope(smtp, item, content, reused), smtp
            except _Stale:
                continue  # the relay had closed the idle connection: once more, fresh
            except BaseException:
                smtp.close()  # cancelled mid-transaction: never back into the pool
                raise
        return TryAgain(reason="smtp_connection_lost"), None  # pragma: no cover

    async def _envelope(
        self, smtp: aiosmtplib.SMTP, item: Outgoing, content: bytes, reused: bool
    ) -> ChannelOutcome:
        message_id = item.message.id
        commands: list[tuple[Stage, Callable[[], Awaitable[object]]]] = [
            ("mail", lambda: smtp.mail(self.config.sender.address)),
            ("rcpt", lambda: smtp.rcpt(item.target)),
            ("data", lambda: smtp.data(content)),
        ]
        for stage, command in commands:
            try:
                await command()
            except aiosmtplib.SMTPResponseException as e:
                return await self._refused(smtp, e, stage, message_id)
            except _TRANSPORT_ERRORS as e:
                if stage == "mail" and reused:
                    raise _Stale from e
                if stage != "data":
                    return TryAgain(reason="smtp_connection_lost")
                # The content may have reached the relay and only its reply was lost (or
                # the DATA command itself went unanswered: aiosmtplib does not say which).
                smtp.close()
                log.warning("smtp_no_reply_to_data", message_id=message_id)
                return TryAgain(reason="smtp_no_reply", maybe_sent=True)
        return Accepted(provider_id=message_id_header(message_id, self.config.sender))

    async def _refused(
        self,
        smtp: aiosmtplib.SMTP,
        e: aiosmtplib.SMTPResponseException,
        stage: Stage,
        message_id: str,
    ) -> ChannelOutcome:
        outcome = outcome_for_reply(e.code, e.message, stage)
        log.info("smtp_refused", message_id=message_id, stage=stage, code=e.code, reply=e.message)
        if smtp.is_connected:
            # End the half-made transaction so the connection can carry the next one.
            try:
                await smtp.rset()
            except _TRANSPORT_ERRORS:
                smtp.close()
        return outcome

    async def _connect(self) -> aiosmtplib.SMTP:
        c = self.config
        tls = self._context() if c.tls != "none" else None
        smtp = aiosmtplib.SMTP(
            hostname=c.host,
            port=c.resolved_port,
            username=c.username,
            password=c.password,
            timeout=c.timeout,
            use_tls=c.tls == "implicit",
            start_tls=c.tls == "starttls",
            tls_context=tls,
            local_hostname=c.local_hostname,
        )
        await smtp.connect()
        return smtp

    def _context(self) -> ssl.SSLContext:
        if self._tls_context is None:
            # The system's CAs, or only those of TEPAT_SMTP_CA_FILE (a relay's own CA).
            self._tls_context = ssl.create_default_context(cafile=self.config.ca_file)
        return self._tls_context


async def _quit(smtp: aiosmtplib.SMTP, seconds: float) -> None:
    try:
        await smtp.quit(timeout=seconds)
    except _TRANSPORT_ERRORS:
        smtp.close()
