"""Slow and idle clients against a real ``tepat serve`` (issue 19 #5).

300 connections that send a request line and headers a byte at a time (slowloris) must
leave the API answering ``/healthz`` (within a second on a quiet machine; here within
``ANSWER_WITHIN``), and the log must grow by a few lines a second at most: the server
closes them when the header timeout passes, and says so in one line now and then
instead of one (or a traceback) per connection. The measurement is the benchmark's
(``python -m bench slowclients``, bench/slow_clients.py).
"""

from __future__ import annotations

from pathlib import Path

from bench.slow_clients import CLIENTS, run

HEADER_TIMEOUT = 2.0  # seconds; the default is 10, short here so the test sees them closed
# Before the fix the API was unreachable for over 45 s. How fast it answers under this
# load is the benchmark's figure (goal 1 s), not a wall-clock assertion that a busy test
# machine (several workers, a broker, a database server) can break: here each request
# must be answered, well within a few seconds, until the server closed every slow client.
ANSWER_WITHIN = 5.0


def test_300_slow_clients_leave_healthz_answering_and_the_log_quiet(tmp_path: Path) -> None:
    result = run(CLIENTS, HEADER_TIMEOUT, tmp_path)
    figures = result.figures
    assert result.checks == {"every_slow_client_closed": True, "every_healthz_answered": True}
    assert figures["probes"] > 0
    assert figures["healthz_max_ms"] < ANSWER_WITHIN * 1000, figures
    # at most 3 lines a second (here: one summary line, give or take)
    assert result.goals["log_few_lines_per_s"], figures
