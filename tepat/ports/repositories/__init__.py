"""One repository Protocol per aggregate, each in its own module; ``tepat.ports.store.Store``
composes them for the adapters, and a service names only the ones it uses."""
