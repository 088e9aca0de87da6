"""How Tepat connects to MongoDB: bounded waits, and which errors mean "try again later".

PyMongo's defaults wait 30 s to find a server and forever on a socket that stopped
answering, so an outage holds every API request and consumer batch that long (a 35 s
outage ended a write with ``AutoReconnect`` after 30 s). Tepat's defaults bound each
wait; an option written in the URL wins over them, so an operator tunes them there
(``mongodb://host/tepat?serverSelectionTimeoutMS=2000&socketTimeoutMS=10000``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pymongo import AsyncMongoClient
from pymongo.errors import ConnectionFailure, ExecutionTimeout

# Finding a server and opening a connection: a healthy one answers in milliseconds.
# socketTimeoutMS bounds the wait for a reply on an open connection: generous, since a
# bulk insert of thousands of messages is one operation. Not timeoutMS (PyMongo's
# client-side operation timeout): with it set, PyMongo waits up to timeoutMS for a
# server and ignores serverSelectionTimeoutMS (measured: 30 s instead of 5 s), so an
# outage would hold each request for the whole operation budget before its 503.
DEFAULT_TIMEOUTS_MS = {
    "serverSelectionTimeoutMS": 5_000,
    "connectTimeoutMS": 5_000,
    "socketTimeoutMS": 30_000,
}

# ConnectionFailure covers AutoReconnect, NotPrimaryError, NetworkTimeout and
# ServerSelectionTimeoutError; ExecutionTimeout is the server giving up at a maxTimeMS
# (an operator's timeoutMS in the URL sets one).
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (ConnectionFailure, ExecutionTimeout)


def timeout_options(url: str) -> dict[str, Any]:
    """Tepat's default timeouts, less those the URL sets itself.

    The query string is read by hand rather than by the driver's URI parser, which
    resolves ``mongodb+srv`` records (DNS) just to read options.
    """
    given = {key.lower() for key, _ in parse_qsl(urlsplit(url).query)}
    return {k: v for k, v in DEFAULT_TIMEOUTS_MS.items() if k.lower() not in given}


def connect(url: str) -> AsyncMongoClient[Any]:
    # tz_aware: dates come back as aware UTC instead of naive values that merely
    # happen to be UTC. connect=False: the first operation connects, inside the loop.
    return AsyncMongoClient(url, tz_aware=True, connect=False, **timeout_options(url))
