"""Adapters: the concrete Store, Broker and PushProvider implementations behind the ports."""
