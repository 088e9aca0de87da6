"""Stand-ins for the outside services Tepat talks to, for tests and demos (see ``expo``)."""

from tepat.sandbox.expo import AfterAccept, ExpoSandbox, TokenScript
from tepat.sandbox.server import RunningSandbox, running_sandbox

__all__ = [
    "AfterAccept",
    "ExpoSandbox",
    "RunningSandbox",
    "TokenScript",
    "running_sandbox",
]
