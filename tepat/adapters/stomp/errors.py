"""The adapter's own exceptions: ``ConnectionError`` like the port's ``BrokerClosed``, so
callers can treat them alike."""

from __future__ import annotations


class BrokerUnavailable(ConnectionError):
    """ActiveMQ could not be reached, or the connection broke mid-request."""


class BrokerRefused(BrokerUnavailable):
    """The broker answered but will not take us until a setting changes: its certificate
    fails verification, it wants a client certificate, or it refuses the credentials.

    ``setting`` names what to change: ``"url"`` (host, port, user, password),
    ``"ca_file"`` or ``"cert_file"``.
    """

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting
