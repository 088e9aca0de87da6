"""A thin asyncio facade over ``mongomock`` shaped like ``pymongo.AsyncMongoClient``.

No MongoDB server can run on the development machines, so the contract suite
runs :class:`tepat.adapters.mongo.MongoStore` on ``mongomock`` (which is
synchronous). This module exposes exactly the part of the async API the adapter
uses and nothing more: awaitable collection methods, ``find()`` returning a
cursor with ``sort``/``limit`` chaining, ``async for`` and ``to_list``, and an
awaitable ``aggregate`` returning a cursor.

Where mongomock 4.3 and the server disagree, the facade takes the server's side
(checked by hand against mongomock 4.3; set ``TEPAT_TEST_MONGO_URL`` to run the
same suite on a real server):

- ``create_index`` on an index that already exists with the same spec is a
  no-op on the server. mongomock instead re-validates the existing documents
  against the unique constraint *ignoring* ``partialFilterExpression`` and raises
  ``DuplicateKeyError`` (e.g. two cancelled messages without a ``live_key``). The
  facade makes an identical re-creation a no-op, and a same-named index with a
  different spec fails with ``OperationFailure`` code 85/86 like the server.
- Building a *partial* unique index over existing documents: mongomock checks
  every document, ignoring the filter (so two sent messages without a slot
  would "collide"); the server checks only the documents the filter selects.
  The facade checks those and registers the index.
- ``drop_index`` of an index that does not exist fails with code 27
  (IndexNotFound) like the server (mongomock gives no code).
- Every awaitable yields to the event loop once before running, so concurrent
  tasks interleave at operation boundaries as they would against a server
  (each single operation stays atomic, which is what MongoDB guarantees).

Checked and found faithful, so left to mongomock: partial unique indexes are
enforced on insert, update and upsert (``$type: "string"`` and equality
filters); ``insert_many(ordered=False)`` carries on past duplicates and raises
pymongo's own ``BulkWriteError`` with ``writeErrors[].index``/``code`` 11000;
``tz_aware=True`` returns aware UTC datetimes; dates are stored at millisecond
precision.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mongomock
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure
from pymongo.results import DeleteResult, InsertManyResult, InsertOneResult, UpdateResult

Document = dict[str, Any]

_IGNORED_INDEX_INFO = {"v", "ns"}


def _index_name(keys: Any) -> str:
    if isinstance(keys, str):
        return f"{keys}_1"
    return "_".join(f"{k}_{d}" for k, d in keys)


def _key_list(keys: Any) -> list[tuple[str, Any]]:
    if isinstance(keys, str):
        return [(keys, 1)]
    return [(k, d) for k, d in keys]


class AsyncMockCursor:
    """``AsyncCursor`` subset: ``sort``, ``limit``, ``async for`` and ``to_list``."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self._iter: Iterator[Document] | None = None

    def sort(self, key_or_list: Any, direction: Any = None) -> AsyncMockCursor:
        if direction is None:
            self._cursor.sort(key_or_list)
        else:
            self._cursor.sort(key_or_list, direction)
        return self

    def limit(self, limit: int) -> AsyncMockCursor:
        self._cursor.limit(limit)
        return self

    def __aiter__(self) -> AsyncMockCursor:
        return self

    async def __anext__(self) -> Document:
        if self._iter is None:
            await asyncio.sleep(0)
            self._iter = iter(self._cursor)
        try:
            return next(self._iter)
        except StopIteration:
            raise StopAsyncIteration from None

    async def to_list(self, length: int | None = None) -> list[Document]:
        await asyncio.sleep(0)
        docs = list(self._cursor)
        return docs if length is None else docs[:length]


class AsyncMockCommandCursor:
    """``AsyncCommandCursor`` subset, as returned by ``await collection.aggregate(...)``."""

    def __init__(self, docs: list[Document]) -> None:
        self._docs = docs

    def __aiter__(self) -> AsyncIterator[Document]:
        return self._aiter()

    async def _aiter(self) -> AsyncIterator[Document]:
        for doc in self._docs:
            yield doc

    async def to_list(self, length: int | None = None) -> list[Document]:
        return list(self._docs) if length is None else self._docs[:length]


class AsyncMockCollection:
    def __init__(self, collection: Any) -> None:
        self._c = collection

    @property
    def name(self) -> str:
        return str(self._c.name)

    async def create_index(self, keys: Any, **kwargs: Any) -> str:
        await asyncio.sleep(0)
        name = kwargs.get("name") or _index_name(keys)
        existing = self._c.index_information().get(name)
        if existing is not None:
            # Server semantics: identical spec -> no-op; same name, other spec -> error.
            wanted = {"key": _key_list(keys), **{k: v for k, v in kwargs.items() if k != "name"}}
            have = {k: v for k, v in existing.items() if k not in _IGNORED_INDEX_INFO}
            if have["key"] != wanted["key"]:
                raise OperationFailure(f"index {name!r} exists with other keys", code=86)
            if have != wanted:
                raise OperationFailure(f"index {name!r} exists with other options", code=85)
            return name
        partial = kwargs.get("partialFilterExpression")
        if kwargs.get("unique") and partial is not None:
            return self._create_partial_unique(name, keys, partial)
        return str(self._c.create_index(keys, **kwargs))

    def _create_partial_unique(self, name: str, keys: Any, partial: Mapping[str, Any]) -> str:
        key_list = _key_list(keys)
        seen: set[tuple[Any, ...]] = set()
        for doc in self._c.find(dict(partial)):
            value = tuple(repr(doc.get(k)) for k, _ in key_list)
            if value in seen:
                raise DuplicateKeyError(f"E11000 duplicate key building {name!r}", 11000)
            seen.add(value)
        # mongomock's index registry (what it enforces on later writes), without
        # its filter-blind check of the existing documents.
        spec = {"key": key_list, "unique": True, "partialFilterExpression": dict(partial)}
        self._c._store.create_index(name, spec)
        return name

    async def drop_index(self, name: str) -> None:
        await asyncio.sleep(0)
        if name not in self._c.index_information():
            raise OperationFailure(f"index not found with name [{name}]", code=27)
        self._c.drop_index(name)

    async def index_information(self) -> dict[str, Any]:
        await asyncio.sleep(0)
        return dict(self._c.index_information())

    async def insert_one(self, document: Document) -> InsertOneResult:
        await asyncio.sleep(0)
        return self._c.insert_one(document)  # type: ignore[no-any-return]

    async def insert_many(
        self, documents: Sequence[Document], ordered: bool = True
    ) -> InsertManyResult:
        await asyncio.sleep(0)
        return self._c.insert_many(list(documents), ordered=ordered)  # type: ignore[no-any-return]

    async def find_one(
        self, filter: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Document | None:
        await asyncio.sleep(0)
        return self._c.find_one(filter, **kwargs)  # type: ignore[no-any-return]

    def find(self, filter: Mapping[str, Any] | None = None, **kwargs: Any) -> AsyncMockCursor:
        return AsyncMockCursor(self._c.find(filter, **kwargs))

    async def find_one_and_update(
        self, filter: Mapping[str, Any], update: Mapping[str, Any], **kwargs: Any
    ) -> Document | None:
        await asyncio.sleep(0)
        return self._c.find_one_and_update(filter, update, **kwargs)  # type: ignore[no-any-return]

    async def update_one(
        self, filter: Mapping[str, Any], update: Mapping[str, Any], upsert: bool = False
    ) -> UpdateResult:
        await asyncio.sleep(0)
        return self._c.update_one(filter, update, upsert=upsert)  # type: ignore[no-any-return]

    async def update_many(
        self, filter: Mapping[str, Any], update: Mapping[str, Any], upsert: bool = False
    ) -> UpdateResult:
        await asyncio.sleep(0)
        return self._c.update_many(filter, update, upsert=upsert)  # type: ignore[no-any-return]

    async def bulk_write(self, requests: Sequence[UpdateOne], ordered: bool = True) -> Any:
        """UpdateOne requests only, with the server's unordered semantics.

        mongomock's own bulk_write predates pymongo 4.11's UpdateOne (it passes
        ``sort``), so each update runs through update_one; like the server, an
        unordered bulk goes on past a failed write and reports it in a BulkWriteError.
        """
        await asyncio.sleep(0)
        matched = modified = 0
        errors: list[dict[str, Any]] = []
        for index, op in enumerate(requests):
            try:
                result = self._c.update_one(op._filter, op._doc, upsert=op._upsert)
            except DuplicateKeyError as e:
                errors.append({"index": index, "code": 11000, "errmsg": str(e)})
                if ordered:
                    break
                continue
            matched += result.matched_count
            modified += result.modified_count
        details = {"nMatched": matched, "nModified": modified, "writeErrors": errors}
        if errors:
            raise BulkWriteError(details)
        return _BulkResult(matched, modified)

    async def delete_one(self, filter: Mapping[str, Any]) -> DeleteResult:
        await asyncio.sleep(0)
        return self._c.delete_one(filter)  # type: ignore[no-any-return]

    async def delete_many(self, filter: Mapping[str, Any]) -> DeleteResult:
        await asyncio.sleep(0)
        return self._c.delete_many(filter)  # type: ignore[no-any-return]

    async def count_documents(self, filter: Mapping[str, Any]) -> int:
        await asyncio.sleep(0)
        return int(self._c.count_documents(filter))

    async def aggregate(
        self, pipeline: Sequence[Mapping[str, Any]], maxTimeMS: int | None = None
    ) -> AsyncMockCommandCursor:
        # maxTimeMS: mongomock has no time limit to apply, the server does.
        await asyncio.sleep(0)
        return AsyncMockCommandCursor(list(self._c.aggregate(list(pipeline))))


class AsyncMockDatabase:
    def __init__(self, database: Any) -> None:
        self._db = database

    @property
    def name(self) -> str:
        return str(self._db.name)

    def __getitem__(self, name: str) -> AsyncMockCollection:
        return AsyncMockCollection(self._db[name])

    async def command(self, command: str) -> dict[str, Any]:
        await asyncio.sleep(0)
        if command != "ping":
            raise NotImplementedError(f"the mongomock facade only answers 'ping', not {command!r}")
        return {"ok": 1.0}


class AsyncMockClient:
    """``AsyncMongoClient`` subset over one in-memory ``mongomock.MongoClient``."""

    def __init__(self) -> None:
        self._client: Any = mongomock.MongoClient(tz_aware=True)
        self.closed = False

    def __getitem__(self, name: str) -> AsyncMockDatabase:
        return AsyncMockDatabase(self._client[name])

    def get_database(self, name: str) -> AsyncMockDatabase:
        return self[name]

    async def drop_database(self, name: str) -> None:
        await asyncio.sleep(0)
        self._client.drop_database(name)

    async def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class _BulkResult:
    """The two counts of pymongo's BulkWriteResult that the adapter reads."""

    matched_count: int
    modified_count: int
