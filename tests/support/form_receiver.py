"""A tiny HTTP server that records the form posts it gets (a provider's callbacks), in a thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tepat.sandbox.runner import running_app


@dataclass(frozen=True, slots=True)
class Post:
    url: str  # as the receiver saw it: what a signature covers
    headers: dict[str, str]
    params: list[tuple[str, str]]

    def param(self, name: str) -> str | None:
        return next((v for k, v in self.params if k == name), None)


@dataclass(slots=True)
class FormReceiver:
    posts: list[Post] = field(default_factory=list)
    status: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)
    base_url: str = ""

    def received(self) -> list[Post]:
        with self.lock:
            return list(self.posts)

    def app(self) -> Starlette:
        async def record(request: Request) -> Response:
            form = parse_qsl((await request.body()).decode(), keep_blank_values=True)
            post = Post(str(request.url), {k.lower(): v for k, v in request.headers.items()}, form)
            with self.lock:
                self.posts.append(post)
            return Response(status_code=self.status)

        return Starlette(routes=[Route("/{path:path}", record, methods=["POST"])])


@contextmanager
def running_receiver(host: str = "127.0.0.1") -> Iterator[FormReceiver]:
    receiver = FormReceiver()
    with running_app(receiver.app(), "form-receiver", host) as url:
        receiver.base_url = url
        yield receiver
