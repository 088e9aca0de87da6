"""Open endpoints: liveness, readiness and Prometheus metrics (no credentials)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import structlog
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from api.deps import RT
from api.problems import problem_response, problem_responses
from api.schemas import Health, Ready
from tepat import metrics
from tepat.domain.zones import TZDATA_RELEASE

log = structlog.get_logger("tepat.api")
router = APIRouter(tags=["health"])

PING_TIMEOUT_SECONDS = 3.0


@router.get("/healthz", summary="The process is up")
async def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Ready,
    responses=problem_responses(503),
    summary="The store and the broker are reachable",
)
async def readyz(rt: RT) -> Ready | JSONResponse:
    checks = {
        "store": await _check("store", rt.store.ping()),
        "broker": await _check("broker", rt.broker.ping()),
    }
    if all(v == "ok" for v in checks.values()):
        return Ready(tzdata=TZDATA_RELEASE)
    failing = ", ".join(f"{k}: {v}" for k, v in checks.items() if v != "ok")
    return problem_response(
        503, f"not ready ({failing})", extra={"checks": checks, "tzdata": TZDATA_RELEASE}
    )


async def _check(name: str, ping: Awaitable[None]) -> str:
    """ "ok", or what kind of failure (details go to the log, not to this open endpoint)."""
    try:
        await asyncio.wait_for(ping, PING_TIMEOUT_SECONDS)
    except TimeoutError:
        log.warning("readiness check timed out", component=name)
        return "timeout"
    except Exception as e:
        log.warning("readiness check failed", component=name, error=str(e))
        return f"unavailable ({type(e).__name__})"
    return "ok"


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}},
    summary="Prometheus metrics",
)
async def prometheus() -> Response:
    """What this process recorded, and the store/broker gauges as last refreshed in
    the background (in `serve`; see tepat/metrics.py): a scrape does no I/O."""
    return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
