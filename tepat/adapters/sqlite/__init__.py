"""The Store on SQLite: the embedded default for a laptop or a small install."""

from tepat.adapters.sqlite.store import SqliteStore

__all__ = ["SqliteStore"]
