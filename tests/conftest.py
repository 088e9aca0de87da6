"""Plugins for the whole suite: pytester (for the tests of the suite's own plugins), and
the one that fails a skip for want of a service under the test command."""

pytest_plugins = ["pytester", "tests.support.require_services"]
