"""A real SMTP server for tests: ``aiosmtpd`` on a free local port, recording what it
receives, and answering per recipient with a refusal when told to.

    server = SmtpServer()                      # plain SMTP
    server = SmtpServer(tls="starttls", cert=self_signed(), auth=("u", "p"))
    with server:
        server.replies["dead@example.com"] = "550 5.1.1 <dead@example.com>: no such user"
        ...                                    # send to 127.0.0.1:server.port
        server.received[0].mail                # email.message.EmailMessage

It runs in aiosmtpd's own thread and event loop (``Controller``), so a client in the
test's loop talks to it over a real socket.
"""

from __future__ import annotations

import email
import email.policy
import socket
import ssl
import threading
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Literal

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.support.selfsigned import SelfSigned


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes

    @property
    def mail(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass
class Recorder:
    """The aiosmtpd handler. ``replies`` (address -> reply line) answers RCPT for that
    address; ``data_replies`` answers the end of DATA for a recipient;
    ``drop_data_for``: close the connection instead of answering DATA."""

    received: list[Received] = field(default_factory=list)
    replies: dict[str, str] = field(default_factory=dict)
    data_replies: dict[str, str] = field(default_factory=dict)
    drop_data_for: set[str] = field(default_factory=set)
    connections: int = 0
    rcpt_attempts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        # A second EHLO on one connection comes after STARTTLS: count the first only.
        if not getattr(session, "tepat_counted", False):
            session.tepat_counted = True
            with self.lock:
                self.connections += 1
        session.host_name = hostname
        return responses

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        with self.lock:
            self.rcpt_attempts[address] = self.rcpt_attempts.get(address, 0) + 1
            reply = self.replies.get(address)
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        rcpts = list(envelope.rcpt_tos)
        for rcpt in rcpts:
            if rcpt in self.drop_data_for:
                # The content arrived; the reply never will (a relay that crashed after
                # taking it): the client cannot know whether it was taken.
                with self.lock:
                    self.received.append(Received(envelope.mail_from, rcpts, envelope.content))
                server.transport.close()
                return "250 never seen"
            if rcpt in self.data_replies:
                return self.data_replies[rcpt]
        with self.lock:
            self.received.append(Received(envelope.mail_from, rcpts, envelope.content))
        return "250 2.0.0 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class SmtpServer:
    def __init__(
        self,
        tls: Literal["none", "starttls", "implicit"] = "none",
        cert: SelfSigned | None = None,
        cert_dir: Path | None = None,
        auth: tuple[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.handler = Recorder()
        self.port = port or free_port()
        self.tls = tls
        self.auth = auth
        self.logins: list[str] = []
        self._context: ssl.SSLContext | None = None
        if tls != "none":
            assert cert is not None and cert_dir is not None, "TLS needs a certificate"
            cert_file, key_file = cert.write(cert_dir, f"smtp-{self.port}")
            self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._context.load_cert_chain(cert_file, key_file)
        self._controller: Controller | None = None

    @property
    def received(self) -> list[Received]:
        return self.handler.received

    @property
    def replies(self) -> dict[str, str]:
        return self.handler.replies

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if self.auth is None or not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        ok = (auth_data.login.decode(), auth_data.password.decode()) == self.auth
        if ok:
            self.logins.append(auth_data.login.decode())
        return AuthResult(success=ok, handled=False)

    def start(self) -> SmtpServer:
        kwargs: dict[str, Any] = {}
        if self.tls == "starttls":
            kwargs.update(tls_context=self._context, require_starttls=True)
        elif self.tls == "implicit":
            kwargs.update(ssl_context=self._context)
        if self.auth is not None:
            kwargs.update(
                authenticator=self._authenticate,
                auth_required=True,
                # aiosmtpd does not count implicit TLS as TLS here (it hides AUTH until a
                # STARTTLS that never comes); the connection is encrypted all the same.
                auth_require_tls=self.tls == "starttls",
            )
        self._controller = Controller(
            self.handler, hostname="127.0.0.1", port=self.port, ready_timeout=10, **kwargs
        )
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> SmtpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
