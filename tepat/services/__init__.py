"""Use cases shared by the entrypoints (api/, scheduler/, consumers/), written against the ports."""
