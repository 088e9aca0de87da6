"""What every part of the MongoDB store shares: the client and database handles."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, TypeVar
from urllib.parse import urlsplit

from pymongo import ASCENDING, DESCENDING
from pymongo.errors import BulkWriteError, DuplicateKeyError

from tepat.clock import Clock, SystemClock
from tepat.domain.models import MessageStatus

T = TypeVar("T")

DEFAULT_DATABASE = "tepat"
DUPLICATE_KEY = 11000
# The server's own limit on a query that scans (a page, a count): under the client's
# socket timeout (tepat.adapters.mongo.client), so an overloaded server stops the work
# and answers ExecutionTimeout (a 503 or a handed-back batch) rather than going on with
# a query whose client has already given up, which only deepens the overload.
QUERY_MAX_TIME_MS = 20_000
ID_ONLY = {"_id": True}  # a projection: the ids alone
doc_id = itemgetter("_id")


def database_name(url: str) -> str:
    """The database named by the URL path (``mongodb://host/tepat``), else ``tepat``.

    Parsed by hand rather than with the driver's URI parser so it also works for
    an injected client and never resolves ``mongodb+srv`` records.
    """
    path = urlsplit(url).path.lstrip("/")
    return path or DEFAULT_DATABASE


def only_duplicates(exc: BulkWriteError) -> set[int]:
    """Input indexes rejected by a unique index; re-raises on any other failure."""
    details = exc.details
    errors = details.get("writeErrors", [])
    if details.get("writeConcernErrors") or any(e.get("code") != DUPLICATE_KEY for e in errors):
        raise exc
    return {int(e["index"]) for e in errors}


def sort_spec(fields: Sequence[str]) -> list[tuple[str, int]]:
    """MongoDB's sort for field names in order, a leading "-" for a descending one."""
    return [(f[1:], DESCENDING) if f.startswith("-") else (f, ASCENDING) for f in fields]


def keyset_after(order: Sequence[str], key: Sequence[Any]) -> dict[str, Any]:
    """The filter for the documents after ``key`` in ``order`` (two fields, one direction),
    so a keyset page starts where the last one ended and never hides the ones behind."""
    (first, direction), (second, _) = sort_spec(order)
    op = "$gt" if direction == ASCENDING else "$lt"
    return {"$or": [{first: {op: key[0]}}, {first: key[0], second: {op: key[1]}}]}


class MongoBase:
    """The handles the aggregate mixins work on; :class:`MongoStore` composes them."""

    def __init__(self, url: str, *, client: Any | None = None, clock: Clock | None = None) -> None:
        self._url = url
        self._db_name = database_name(url)
        self._owns_client = client is None
        # The client and its collections are duck-typed (``Any``) on purpose: the
        # real AsyncMongoClient and the test facade share an API, not a class.
        self._client: Any = client
        self._clock: Clock = clock or SystemClock()
        # Whether a webhook subscription is enabled, and until when (monotonic) this process
        # trusts that answer (tepat.adapters.mongo.webhooks.webhooks_active).
        self._webhooks_active: tuple[bool, float] | None = None

    @property
    def _db(self) -> Any:
        if self._client is None:
            raise RuntimeError("MongoStore.open() has not been called")
        return self._client[self._db_name]

    async def _fetch(
        self,
        decode: Callable[[dict[str, Any]], T],
        collection: str,
        query: Mapping[str, Any],
        *,
        sort: Sequence[str] = (),
        limit: int | None = None,
        projection: Mapping[str, Any] | None = None,
    ) -> list[T]:
        """The documents matching ``query``, decoded, in ``sort`` order (see
        :func:`sort_spec`), at most ``limit`` (none when ``limit`` <= 0: ``limit(0)`` would
        mean *no* limit)."""
        if limit is not None and limit <= 0:
            return []
        cursor = self._db[collection].find(
            query, projection=projection, max_time_ms=QUERY_MAX_TIME_MS
        )
        if sort:
            cursor = cursor.sort(sort_spec(sort))
        if limit is not None:
            cursor = cursor.limit(limit)
        return [decode(doc) for doc in await cursor.to_list(None)]

    async def _fetch_in(
        self,
        decode: Callable[[dict[str, Any]], T],
        collection: str,
        field: str,
        values: Sequence[Any],
        query: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> list[T]:
        """:meth:`_fetch` of the documents whose ``field`` is one of ``values`` (and that
        match ``query``); none asked, none read."""
        if not values:
            return []
        query = {field: {"$in": list(set(values))}, **(query or {})}
        return await self._fetch(decode, collection, query, **options)

    async def _fetch_one(
        self, decode: Callable[[dict[str, Any]], T], collection: str, query: Mapping[str, Any]
    ) -> T | None:
        doc = await self._db[collection].find_one(query)
        return None if doc is None else decode(doc)

    async def _insert_if_new(self, collection: str, doc: dict[str, Any]) -> bool:
        """Insert ``doc`` unless a unique index already holds it; whether it did."""
        try:
            await self._db[collection].insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    async def _insert_new(self, collection: str, docs: Sequence[dict[str, Any]]) -> set[int]:
        """Insert ``docs``; the indexes (in ``docs``) of those a unique index refused.
        Unordered: one duplicate does not stop the rest, and the server names each."""
        if not docs:
            return set()
        try:
            await self._db[collection].insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            return only_duplicates(exc)
        return set()

    async def _update(
        self, collection: str, query: Mapping[str, Any], update: Any, *, many: bool = False
    ) -> int:
        """How many documents ``update`` changed: the first that matches ``query``, or every
        one with ``many``."""
        documents = self._db[collection]
        result = await (documents.update_many if many else documents.update_one)(query, update)
        return int(result.modified_count)

    async def _set_where_status(
        self, message_ids: Sequence[str], status: MessageStatus, fields: dict[str, Any]
    ) -> int:
        """``$set`` ``fields`` on those of ``message_ids`` in ``status``; how many changed."""
        if not message_ids:
            return 0
        query = {"_id": {"$in": list(set(message_ids))}, "status": status.value}
        return await self._update("messages", query, {"$set": fields}, many=True)

    async def _count(
        self, collection: str, match: dict[str, Any], **by: Any
    ) -> list[tuple[dict[str, Any], int]]:
        """How many documents matching ``match`` share each value of ``by`` (a name for
        each expression, e.g. ``status="$status"``): (the values by name, how many)."""
        pipeline = [{"$match": match}, {"$group": {"_id": by, "n": {"$sum": 1}}}]
        cursor = await self._db[collection].aggregate(pipeline, maxTimeMS=QUERY_MAX_TIME_MS)
        return [(doc["_id"], int(doc["n"])) for doc in await cursor.to_list(None)]

    async def _upsert(
        self, collection: str, key: str, update: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Apply ``update`` (a ``$set`` of every field but ``created_at``, which its
        ``$setOnInsert`` gives) to document ``key``, inserting it if absent; returns the
        stored document and whether this write inserted it. The write's upsert result
        decides: a findAndModify pre-image is null for a losing upsert the server retried
        as an update (seen on MongoDB 8.2), so it cannot tell."""
        documents = self._db[collection]
        result = await documents.update_one({"_id": key}, update, upsert=True)
        created = update["$setOnInsert"]["created_at"]
        if result.upserted_id is None:
            # created_at never changes once inserted, so reading it afterwards is exact.
            doc = await documents.find_one({"_id": key}, projection={"created_at": True})
            created = doc["created_at"] if doc else created
        return {"_id": key, **update["$set"], "created_at": created}, result.upserted_id is not None
