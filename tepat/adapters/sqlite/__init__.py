"""The Store on SQLite: the embedded default for a laptop or a small install.

``schema`` (DDL, migrations, pragmas/WAL), ``codecs`` (rows <-> models), ``connection``
(the worker threads, transactions, query helpers), one module per aggregate, and
``store`` composing :class:`SqliteStore` from them.
"""

from tepat.adapters.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
