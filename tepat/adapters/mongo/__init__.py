"""The MongoDB store (PyMongo async API), one module per purpose.

- :mod:`.base`: the client/database handles every part shares, ``database_name``;
- :mod:`.indexes`: collections and their indexes (where every uniqueness guarantee lives),
  and the migration of documents and indexes written by earlier versions;
- :mod:`.codecs`: documents <-> domain models, BSON instants;
- :mod:`.users` (users, devices), :mod:`.reminders` (reminders, preferences),
  :mod:`.messages`, :mod:`.tickets`: one module per aggregate; :mod:`.outbox`: the
  messages' outbox mark;
- :mod:`.store`: :class:`MongoStore`, composed of the above.
"""

from tepat.adapters.mongo.base import database_name
from tepat.adapters.mongo.store import MongoStore

__all__ = ["MongoStore", "database_name"]
