"""The Store on SQLite: the embedded default for a laptop or a small install.

Where things are: ``schema`` (DDL, migrations, pragmas/WAL), ``codecs`` (rows <->
models, the text forms of instants and times), ``connection`` (the worker thread,
transactions and the query helpers), one module per aggregate (``users`` with
devices, ``reminders`` with preferences, ``messages_write``, ``messages_read``,
``tickets``), and ``store`` composing :class:`SqliteStore` from them.
"""

from tepat.adapters.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
