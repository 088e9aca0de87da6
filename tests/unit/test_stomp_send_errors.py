"""A failed STOMP write is reported once, by Tepat, not also as stomp.py's traceback."""

from __future__ import annotations

import logging
import socket

import pytest
from stomp.transport import Transport

import tepat.adapters.stomp.link  # noqa: F401  (installs the filter, as every broker import does)


def test_a_write_on_a_closed_socket_raises_without_stomp_logging_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = Transport([("localhost", 1)])
    left, right = socket.socketpair()
    right.close()
    left.close()  # the receiver thread closed it while CONNECT was being written
    transport.socket = left
    with caplog.at_level(logging.DEBUG), pytest.raises(OSError):
        transport.send(b"CONNECT\n\n\0")
    assert [r.getMessage() for r in caplog.records if r.name == "stomp.py"] == []


def test_other_stomp_records_still_pass(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        logging.getLogger("stomp.py").warning("unable to close socket because of error '%s'", "x")
    assert any(r.name == "stomp.py" for r in caplog.records)
