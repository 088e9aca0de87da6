"""Errors as RFC 9457 ``application/problem+json``, naming the offending field(s).

Every error the API returns goes through :func:`problem_response`, including
framework validation errors and anything unexpected: a client never sees an
HTML page or a traceback.
"""

from __future__ import annotations

import http
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from tepat.domain.errors import DomainError
from tepat.domain.templates import TemplateError
from tepat.services.accounts import FieldConflict, IdempotencyConflict, NotFound
from tepat.services.webhooks import SubscriptionNotFound

log = structlog.get_logger("tepat.api")

PROBLEM_JSON = "application/problem+json"
# Where a framework error's location starts; the field name follows it.
_LOC_SOURCES = frozenset({"body", "query", "path", "header", "cookie"})


class FieldError(BaseModel):
    field: str = Field(description="Dotted name of the offending field", examples=["timezone"])
    message: str = Field(examples=["unknown IANA time zone 'Mars/Base'"])


class Problem(BaseModel):
    """An RFC 9457 problem document (extension members allowed)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(default="about:blank", description="Problem type URI")
    title: str = Field(description="Short summary of the problem type", examples=["Not Found"])
    status: int = Field(description="HTTP status code", examples=[404])
    detail: str | None = Field(default=None, description="What went wrong, for a human")
    errors: list[FieldError] = Field(
        default_factory=list, description="The offending fields, for input errors"
    )


def problem_response(
    status: int,
    detail: str | None = None,
    *,
    errors: Iterable[FieldError] = (),
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    body = Problem(
        title=_phrase(status),
        status=status,
        detail=detail,
        errors=list(errors),
        **dict(extra or {}),
    )
    return JSONResponse(
        body.model_dump(mode="json"),
        status_code=status,
        headers=dict(headers or {}),
        media_type=PROBLEM_JSON,
    )


def field_problem(status: int, field: str, message: str, **more: Any) -> JSONResponse:
    """A problem naming one offending field (``detail`` ``"<field>: <message>"``);
    ``more``: :func:`problem_response`'s ``headers`` and ``extra``."""
    errors = [FieldError(field=field, message=message)]
    return problem_response(status, f"{field}: {message}", errors=errors, **more)


class ProblemError(Exception):
    """A refusal raised anywhere in a request; the app-wide handler answers its
    :meth:`response` (a problem naming ``field``, when given, its detail
    ``"<field>: <detail>"`` unless ``field_in_detail`` is false)."""

    def __init__(
        self,
        status: int,
        detail: str,
        field: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        field_in_detail: bool = True,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.headers = dict(headers or {})
        self.field_in_detail = field_in_detail

    def response(self) -> JSONResponse:
        if self.field is not None and self.field_in_detail:
            return field_problem(self.status, self.field, self.detail, headers=self.headers)
        errors = [] if self.field is None else [FieldError(field=self.field, message=self.detail)]
        return problem_response(self.status, self.detail, headers=self.headers, errors=errors)


async def _on_problem_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return exc.response()


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def field_name(loc: Sequence[int | str]) -> str:
    """``("body", "quiet_hours", "start")`` -> ``"quiet_hours.start"``."""
    parts = list(loc)
    if parts and parts[0] in _LOC_SOURCES:
        parts = parts[1:]
    return ".".join(str(p) for p in parts) or "body"


def error_message(err: Mapping[str, Any]) -> str:
    # pydantic prefixes messages raised by validators with "Value error, ".
    return str(err.get("msg", "invalid value")).removeprefix("Value error, ")


def summary(errors: Sequence[FieldError]) -> str:
    """The detail of an input error: its first field and message, and how many more."""
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first.field}: {first.message}{more}"


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names only the first matching route's methods; a resource
        # (say PUT and GET /v1/users/{id}) spans several routes.
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return problem_response(exc.status_code, str(exc.detail), headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route | APIRoute) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return sorted(methods)


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        FieldError(field="body", message="request body is not valid JSON")
        if err.get("type") == "json_invalid"
        else FieldError(field=field_name(err.get("loc", ())), message=error_message(err))
        for err in exc.errors()
    ] or [FieldError(field="body", message="invalid request")]
    return problem_response(422, summary(errors), errors=errors)


# The services' errors a request may meet, and the status each answers.
_STATUS_OF: dict[type[Exception], int] = {
    DomainError: 422,
    FieldConflict: 409,
    IdempotencyConflict: 409,
    NotFound: 404,
    SubscriptionNotFound: 404,
}


async def _on_service_error(request: Request, exc: Exception) -> JSONResponse:
    status = next(s for error, s in _STATUS_OF.items() if isinstance(exc, error))
    if isinstance(exc, TemplateError):  # plus why: compile_error, too_large, render_error…
        extra = {"reason": exc.reason.value}
        if exc.variable is not None:
            extra["variable"] = exc.variable
        return field_problem(status, exc.field, exc.message, extra=extra)
    if isinstance(exc, DomainError | FieldConflict):
        return field_problem(status, exc.field, exc.message)
    if isinstance(exc, SubscriptionNotFound):
        return problem_response(status, f"webhook subscription {exc.args[0]!r} not found")
    return problem_response(status, str(exc))


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", path=request.url.path, method=request.method)
    return problem_response(500, "internal error; the server log has the details")


# How long a client is asked to wait when the store cannot answer: about one of the
# store's own server-selection waits (tepat/adapters/mongo/client.py).
STORE_RETRY_AFTER_SECONDS = 5


async def _on_store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    # Expected during an outage, once per request: one line, no traceback.
    log.warning(
        "store unavailable",
        path=request.url.path,
        method=request.method,
        error=type(exc).__name__,
    )
    return problem_response(
        503,
        "the store cannot answer now; try again later",
        headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
    )


def install_problem_handlers(
    app: FastAPI, store_unavailable: tuple[type[Exception], ...] = ()
) -> None:
    """``store_unavailable``: the store's errors that mean "try again later" (503)."""
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(ProblemError, _on_problem_error)
    for known in _STATUS_OF:
        app.add_exception_handler(known, _on_service_error)
    for error in store_unavailable:
        app.add_exception_handler(error, _on_store_unavailable)
    app.add_exception_handler(Exception, _on_unexpected)


_DESCRIPTIONS = {
    400: "Malformed request body (not UTF-8 JSON)",
    401: "No or invalid credentials",
    403: "These credentials may not reach this resource",
    404: "No such user or resource",
    409: "Idempotency key reused with a different request, or a state that refuses it"
    " (a quota reached, a push token held by another user); `errors` names the field",
    413: "Request body too large",
    422: "Invalid input; `errors` names each offending field",
    503: "Not ready",
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for a route's own error statuses; those every route
    of its shape may answer, :func:`document_problems` adds."""
    return {
        s: {"model": Problem, "description": _DESCRIPTIONS.get(s, _phrase(s))} for s in statuses
    }


_TOO_MANY_FAILURES = {
    "description": "Too many wrong API keys from this address (`Retry-After` says how long)",
    "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
}


def document_problems(doc: dict[str, Any], api_prefix: str, unchecked_prefix: str) -> None:
    """Adds to OpenAPI ``doc`` the errors an operation under ``api_prefix`` (but not
    ``unchecked_prefix``, which takes no credentials) may answer by its shape: the
    credentials check (401, 403, and 429 for an address that sent too many wrong keys),
    a body (400, 413, 422), parameters (422); and types every error response
    ``application/problem+json``."""
    for path, operations in doc.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if path.startswith(api_prefix) and not path.startswith(unchecked_prefix):
                statuses = {401, 403}
                if "requestBody" in operation:
                    statuses |= {400, 413, 422}
                if operation.get("parameters"):
                    statuses.add(422)
                problem = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
                for status in statuses:  # 422 in place of FastAPI's own
                    responses[str(status)] = {
                        "description": _DESCRIPTIONS[status],
                        "content": problem,
                    }
                responses["429"] = {**_TOO_MANY_FAILURES, "content": problem}
            for status, response in responses.items():
                content = response.get("content", {})
                if status[:1] in "45" and "application/json" in content:
                    content[PROBLEM_JSON] = content.pop("application/json")
    # FastAPI's own 422 body, which no operation answers now.
    for unused in ("HTTPValidationError", "ValidationError"):
        doc.get("components", {}).get("schemas", {}).pop(unused, None)
