"""``/v1/admin``: operator endpoints (admin API key only)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import Path, Query

from api.deps import RT, admin_router
from api.problems import problem_responses
from api.schemas import (
    BrokerDeadLetterOut,
    DeadLetters,
    FailedMessageOut,
    PlanIn,
    PlanOut,
    QueueList,
    QueueOut,
    ReplayOut,
)
from tepat.domain.errors import DomainError
from tepat.services.accounts import NotFound

router = admin_router("admin", tag="admin")
DeadLetterId = Annotated[str, Path(min_length=1, max_length=256)]

MAX_PLAN_WINDOW = timedelta(days=31)
# Planning reads each user's local dates a day either side of the window, in zones up to
# about 16 h from UTC (historical local mean times): two days from the ends of the
# calendar keep every such date representable.
PLANNABLE_FROM = datetime(1, 1, 3, tzinfo=UTC)
PLANNABLE_UNTIL = datetime(9999, 12, 29, tzinfo=UTC)


@router.post(
    "/plan",
    summary="Plan reminders due in [start, end)",
)
async def plan(body: PlanIn, rt: RT) -> PlanOut:
    """The same work as `tepat plan`: idempotent, so planning a window twice creates nothing."""
    for field, instant in (("start", body.start), ("end", body.end)):
        if not PLANNABLE_FROM <= instant <= PLANNABLE_UNTIL:
            raise DomainError(
                field,
                f"out of range: plan windows lie between {PLANNABLE_FROM.date().isoformat()}"
                f" and {PLANNABLE_UNTIL.date().isoformat()} (UTC)",
            )
    if body.end <= body.start:
        raise DomainError("end", "must be after start")
    if body.end - body.start > MAX_PLAN_WINDOW:
        raise DomainError("end", f"the window may span at most {MAX_PLAN_WINDOW.days} days")
    result = await rt.creator.plan_window(body.start, body.end)
    return PlanOut(created=result.created, existing=result.existing)


@router.get("/queues", summary="Broker queue depths")
async def queues(rt: RT) -> QueueList:
    stats = await rt.broker.stats(rt.queues)
    return QueueList(queues=[QueueOut.of(s) for s in stats])


@router.get(
    "/dead-letters",
    summary="Failed messages and broker dead letters",
)
async def dead_letters(
    rt: RT,
    limit: Annotated[
        int, Query(ge=1, le=500, description="At most this many failed messages")
    ] = 100,
) -> DeadLetters:
    failed = await rt.store.dead_letters(limit)
    broker = await rt.broker.dead_letters(rt.queues)
    return DeadLetters(
        messages=[FailedMessageOut.of(m) for m in failed],
        broker=[BrokerDeadLetterOut.of(d) for d in broker],
    )


@router.post(
    "/dead-letters/{dead_letter_id}/replay",
    responses=problem_responses(404),
    summary="Put a broker dead letter back on its queue, due now",
)
async def replay(dead_letter_id: DeadLetterId, rt: RT) -> ReplayOut:
    """Safe to replay: consumers claim each message atomically, so nothing is sent twice."""
    # Only a letter of this app's queues: on a broker apps share, an id is not a key.
    own = {d.id for d in await rt.broker.dead_letters(rt.queues)}
    if dead_letter_id not in own or not await rt.broker.replay_dead_letter(dead_letter_id):
        raise NotFound("dead letter", dead_letter_id)
    return ReplayOut(id=dead_letter_id, replayed=True)
