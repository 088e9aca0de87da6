"""The Store on MongoDB (PyMongo's async API): the production store."""

from tepat.adapters.mongo.store import MongoStore

__all__ = ["MongoStore"]
