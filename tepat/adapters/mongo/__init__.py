"""The MongoDB store (PyMongo async API).

:mod:`.base` (the handles every part shares), :mod:`.indexes` (where every uniqueness
guarantee lives, and the migration of older documents), :mod:`.codecs` (documents <->
models), one module per aggregate, and :mod:`.store` composing :class:`MongoStore`.
"""

from tepat.adapters.mongo.base import database_name
from tepat.adapters.mongo.store import MongoStore

__all__ = ["MongoStore", "database_name"]
