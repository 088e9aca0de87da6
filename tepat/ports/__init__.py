"""The three ports: Store, Broker, PushProvider. Adapters live in ``tepat.adapters``."""
