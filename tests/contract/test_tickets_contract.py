"""The contract of tickets (``tepat/ports/repositories/tickets.py``).

Every adapter runs this file through the ``store`` fixture (``tests/contract/conftest.py``).
"""

from __future__ import annotations

from datetime import datetime

from tepat.ports.store import Store
from tests.contract.records import at, ticket


async def test_tickets_round_trip_per_message(store: Store) -> None:
    ts = [ticket("t1", "m1", at(0)), ticket("t2", "m1", at(1)), ticket("t3", "m2", at(0))]
    await store.add_tickets(ts)
    found = await store.tickets_for_message("m1")
    assert sorted(found, key=lambda t: t.ticket_id) == ts[:2]
    assert await store.tickets_for_message("none") == []


async def test_tickets_awaiting_receipt_oldest_first_then_recorded_once(store: Store) -> None:
    ts = [ticket(f"t{n}", "m1", at(n)) for n in (2, 0, 1, 9)]
    await store.add_tickets(ts)
    awaiting = await store.tickets_awaiting_receipt(sent_before=at(5), limit=10)
    assert [t.ticket_id for t in awaiting] == ["t0", "t1", "t2"]
    assert len(await store.tickets_awaiting_receipt(sent_before=at(5), limit=2)) == 2

    assert await store.record_receipt("t0", "error", "DeviceNotRegistered", at(20))
    assert not await store.record_receipt("t0", "ok", None, at(21))
    [t0] = [t for t in await store.tickets_for_message("m1") if t.ticket_id == "t0"]
    assert t0 == ticket(
        "t0",
        "m1",
        at(0),
        receipt_status="error",
        receipt_error="DeviceNotRegistered",
        checked_at=at(20),
    )
    awaiting = await store.tickets_awaiting_receipt(sent_before=at(5), limit=10)
    assert [t.ticket_id for t in awaiting] == ["t1", "t2"]


async def test_receipt_paging_reaches_tickets_behind_a_full_page(store: Store) -> None:
    # Five tickets share one instant and none has a receipt yet: a page of two
    # must not stop the poller from reaching the ones behind them.
    ts = [ticket(f"t0{c}", "m1", at(0)) for c in "edcba"]
    ts += [ticket(f"t1{c}", "m2", at(1)) for c in "ab"]
    ts += [ticket("t2", "m3", at(2)), ticket("late", "m4", at(9))]
    await store.add_tickets(ts)
    await store.record_receipt("t1a", "ok", None, at(3))
    seen: list[str] = []
    after: tuple[datetime, str] | None = None
    while True:
        page = await store.tickets_awaiting_receipt(sent_before=at(5), limit=2, after=after)
        seen += [t.ticket_id for t in page]
        if len(page) < 2:
            break
        after = (page[-1].sent_at, page[-1].ticket_id)
    assert seen == ["t0a", "t0b", "t0c", "t0d", "t0e", "t1b", "t2"]
    # Starting after a key inside an instant resumes within that instant.
    mid = await store.tickets_awaiting_receipt(at(5), limit=10, after=(at(0), "t0c"))
    assert [t.ticket_id for t in mid] == ["t0d", "t0e", "t1b", "t2"]
    assert await store.tickets_awaiting_receipt(at(5), limit=10, after=(at(2), "t2")) == []
