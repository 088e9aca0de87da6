"""The adapter's exceptions (both are ``ConnectionError``, so callers can treat them alike)."""

from __future__ import annotations


class BrokerUnavailable(ConnectionError):
    """ActiveMQ could not be reached, or the connection broke mid-request."""


class BrokerClosed(ConnectionError):
    """The adapter was closed; call ``connect()`` again to use it."""
