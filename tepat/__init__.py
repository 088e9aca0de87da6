"""Tepat: every user's notifications at the right local moment, once, never to a dead device."""

__version__ = "0.1.0"
