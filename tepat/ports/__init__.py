"""The ports: the repositories of the store, Broker, Channel, PushProvider."""
