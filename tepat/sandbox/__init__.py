"""Stand-ins for the outside services Tepat talks to, for tests and demos (see ``expo``)."""
