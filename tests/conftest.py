"""Plugins for the whole suite.

Plugins: pytester (for the tests of the suite's own plugins), the one that fails a skip
for want of a service under the test command (tests/support/require_services.py), and
the order and groups in which xdist workers take the tests (tests/support/xdist_groups.py),
and one TLS context per process for the HTTP clients of the tests' runtimes
(tests/support/shared_ssl_context.py).
"""

from __future__ import annotations

pytest_plugins = [
    "pytester",
    "tests.support.require_services",
    "tests.support.xdist_groups",
    "tests.support.shared_ssl_context",
]
