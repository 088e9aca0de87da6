"""Benchmarks for Tepat: planning, dispatch, rate limits, lateness and bursts (issue 6).

Run ``python -m bench SCENARIO [--backend embedded|activemq] [--quick] [--json]``;
``bench/README.md`` documents the scenarios and the figures each reports.
Everything runs end to end against real processes: the SQLite store on disk,
the broker (embedded or ActiveMQ), ``tepat`` consumer processes and the Expo
sandbox over HTTP in its own process.
"""
