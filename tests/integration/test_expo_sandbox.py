"""The Expo sandbox, over real HTTP, behaves like Expo's push API (docs.expo.dev, GUIDE §6)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tepat.clock import FakeClock
from tepat.sandbox.expo import ExpoSandbox, access_token_label
from tepat.sandbox.expo_wire import TokenScript
from tepat.sandbox.faults import AfterAccept
from tepat.sandbox.server import RunningSandbox, running_sandbox
from tests.support import expo_fixtures

SEND = "/--/api/v2/push/send"
RECEIPTS = "/--/api/v2/push/getReceipts"


def tok(i: int | str, spelling: str = "ExponentPushToken") -> str:
    return f"{spelling}[tok-{i}]"


# the sandbox over HTTP, its receipts due when the test moves the clock
clock, sandbox, server = expo_fixtures.clock, expo_fixtures.sandbox, expo_fixtures.server


@pytest.fixture
def http(server: RunningSandbox) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        yield client


def send(http: httpx.Client, body: Any, **headers: str) -> httpx.Response:
    return http.post(SEND, json=body, headers=headers)


def receipts(http: httpx.Client, ids: list[str]) -> dict[str, Any]:
    response = http.post(RECEIPTS, json={"ids": ids})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


# ---- shapes ----


def test_single_message_gets_a_single_ticket_object(http: httpx.Client) -> None:
    response = send(http, {"to": tok(1), "title": "hi", "body": "there"})
    assert response.status_code == 200
    ticket = response.json()["data"]
    assert ticket["status"] == "ok" and isinstance(ticket["id"], str)


def test_array_and_list_to_give_one_ticket_per_recipient_in_order(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    body = [
        {"to": tok(1), "body": "a"},
        {"to": [tok(2), "not-a-token", tok(3, "ExpoPushToken")], "body": "b"},
        {"to": tok(4, "ExpoPushToken"), "body": "c"},
    ]
    response = send(http, body)
    assert response.status_code == 200
    tickets = response.json()["data"]
    assert [t["status"] for t in tickets] == ["ok", "ok", "error", "ok", "ok"]
    assert [r["to"] for r in sandbox.received()] == [
        tok(1),
        tok(2),
        "not-a-token",
        tok(3, "ExpoPushToken"),
        tok(4, "ExpoPushToken"),
    ]
    ids = [t.get("id") for t in tickets]
    assert [r["ticket_id"] for r in sandbox.received()] == ids
    assert len({i for i in ids if i}) == 4  # distinct ids; the error ticket has none


def test_a_single_message_with_a_list_to_gets_an_array(http: httpx.Client) -> None:
    tickets = send(http, {"to": [tok(1), tok(2)], "body": "x"}).json()["data"]
    assert isinstance(tickets, list) and len(tickets) == 2


def test_a_malformed_token_gets_expos_device_not_registered_ticket(http: httpx.Client) -> None:
    ticket = send(http, [{"to": "abc", "body": "x"}]).json()["data"][0]
    assert ticket == {
        "status": "error",
        "message": '"abc" is not a registered push notification recipient',
        "details": {"error": "DeviceNotRegistered", "expoPushToken": "abc"},
    }


# ---- limits ----


def test_more_than_100_notifications_is_a_whole_request_error(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    ok = send(http, [{"to": [tok(i) for i in range(100)], "body": "x"}])
    assert ok.status_code == 200 and len(ok.json()["data"]) == 100
    sandbox.clear_received()
    # 101 counted across messages and list recipients, as Expo counts them.
    too_many = send(http, [{"to": [tok(i) for i in range(100)]}, {"to": tok(100)}])
    assert too_many.status_code == 400
    (error,) = too_many.json()["errors"]
    assert error["code"] == "PUSH_TOO_MANY_NOTIFICATIONS"
    assert "data" not in too_many.json()
    assert sandbox.received() == []


def test_an_oversize_payload_gets_message_too_big_and_the_rest_still_go(http: httpx.Client) -> None:
    big = {"to": tok(1), "body": "x", "data": {"blob": "y" * 4100}}
    tickets = send(http, [big, {"to": tok(2), "body": "small"}]).json()["data"]
    assert tickets[0]["status"] == "error"
    assert tickets[0]["details"]["error"] == "MessageTooBig"
    assert tickets[1]["status"] == "ok"


def test_the_payload_limit_is_4096_bytes_without_to(http: httpx.Client) -> None:
    def message(blob_len: int) -> dict[str, Any]:
        return {"to": tok(1), "data": {"b": "y" * blob_len}}

    overhead = len(json.dumps({"data": {"b": ""}}, separators=(",", ":")))
    at_limit = send(http, [message(4096 - overhead)]).json()["data"][0]
    over = send(http, [message(4097 - overhead)]).json()["data"][0]
    assert at_limit["status"] == "ok"
    assert over["details"]["error"] == "MessageTooBig"


@pytest.mark.parametrize(
    "body",
    [b"not json", b'[{"title": "no to"}]', b"[42]", b'{"to": []}'],
    ids=["not-json", "missing-to", "not-an-object", "empty-to"],
)
def test_malformed_requests_are_400_validation_errors(http: httpx.Client, body: bytes) -> None:
    response = http.post(SEND, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["code"] == "VALIDATION_ERROR"


# ---- gzip ----


def test_gzip_request_bodies_are_accepted_and_counted(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    body = json.dumps([{"to": tok(i), "body": "hello " * 20} for i in range(30)]).encode()
    response = http.post(
        SEND,
        content=gzip.compress(body),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 200
    assert len(response.json()["data"]) == 30
    assert sandbox.stats()["gzip_requests"] == 1
    assert {r["content_encoding"] for r in sandbox.received()} == {"gzip"}
    # Expo compresses large answers for clients that accept gzip; so does the sandbox.
    assert response.headers.get("content-encoding") == "gzip"


def test_a_corrupt_gzip_body_is_a_400(http: httpx.Client) -> None:
    response = http.post(
        SEND,
        content=b"\x1f\x8b garbage",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 400


# ---- receipts ----


def test_receipts_appear_after_the_delay_on_the_clock_and_expire(
    http: httpx.Client, clock: FakeClock
) -> None:
    ids = [t["id"] for t in send(http, [{"to": tok(1)}, {"to": tok(2)}]).json()["data"]]
    assert receipts(http, ids) == {}  # not ready: absent, not an error
    clock.advance(899)
    assert receipts(http, ids) == {}
    clock.advance(1)
    assert receipts(http, [*ids, "unknown-id"]) == {
        ids[0]: {"status": "ok"},
        ids[1]: {"status": "ok"},
    }
    clock.advance(86_400)
    assert receipts(http, ids) == {}  # Expo keeps receipts about a day


def test_more_than_1000_receipt_ids_is_a_whole_request_error(http: httpx.Client) -> None:
    assert http.post(RECEIPTS, json={"ids": [f"id-{i}" for i in range(1000)]}).status_code == 200
    response = http.post(RECEIPTS, json={"ids": [f"id-{i}" for i in range(1001)]})
    assert response.status_code == 400
    assert response.json()["errors"][0]["code"] == "PUSH_TOO_MANY_RECEIPTS"


def test_receipt_request_must_carry_ids(http: httpx.Client) -> None:
    response = http.post(RECEIPTS, json={"tickets": []})
    assert response.status_code == 400
    assert response.json()["errors"][0]["code"] == "VALIDATION_ERROR"


# ---- authentication ----


def test_bearer_token_is_required_when_configured(clock: FakeClock) -> None:
    with (
        running_sandbox(ExpoSandbox(clock=clock, access_token="s3cret")) as server,
        httpx.Client(base_url=server.base_url) as http,
    ):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            for path, body in ((SEND, {"to": tok(1)}), (RECEIPTS, {"ids": []})):
                response = http.post(path, json=body, headers=headers)
                assert response.status_code == 401
                assert response.json()["errors"][0]["code"] == "UNAUTHORIZED"
        ok = http.post(SEND, json={"to": tok(1)}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert server.sandbox.stats()["unauthorized"] == 6
        assert len(server.sandbox.received()) == 1


# ---- scripted outcomes ----


def test_scripted_ticket_and_receipt_errors_from_the_constructor(clock: FakeClock) -> None:
    sandbox = ExpoSandbox(
        clock=clock,
        scripts={
            tok("dead"): TokenScript(ticket_error="DeviceNotRegistered"),
            tok("gone"): TokenScript(receipt_error="DeviceNotRegistered"),
        },
    )
    with running_sandbox(sandbox) as server, httpx.Client(base_url=server.base_url) as http:
        tickets = send(http, [{"to": tok("dead")}, {"to": tok("gone")}, {"to": tok(1)}]).json()
        dead, gone, fine = tickets["data"]
        assert dead["details"]["error"] == "DeviceNotRegistered" and "id" not in dead
        assert gone["status"] == "ok" and fine["status"] == "ok"
        got = receipts(http, [gone["id"], fine["id"]])
        assert got[fine["id"]] == {"status": "ok"}
        assert got[gone["id"]]["status"] == "error"
        assert got[gone["id"]]["details"]["error"] == "DeviceNotRegistered"


@pytest.mark.parametrize(
    "code", ["MessageRateExceeded", "MessageTooBig", "InvalidCredentials", "MismatchSenderId"]
)
def test_scripted_ticket_errors_over_http(http: httpx.Client, code: str) -> None:
    control = http.post("/_sandbox/script", json={"tokens": {tok("x"): {"ticket_error": code}}})
    assert control.status_code == 200
    assert control.json()["tokens"][tok("x")]["ticket_error"] == code
    ticket, other = send(http, [{"to": tok("x")}, {"to": tok("y")}]).json()["data"]
    assert ticket["status"] == "error" and ticket["details"]["error"] == code
    assert other["status"] == "ok"
    # null removes the script
    http.post("/_sandbox/script", json={"tokens": {tok("x"): None}})
    assert send(http, [{"to": tok("x")}]).json()["data"][0]["status"] == "ok"


def test_unknown_scripted_error_code_is_refused(http: httpx.Client, sandbox: ExpoSandbox) -> None:
    response = http.post("/_sandbox/script", json={"tokens": {tok(1): {"ticket_error": "Oops"}}})
    assert response.status_code == 400
    with pytest.raises(ValueError):
        sandbox.script_token(tok(1), receipt_error="Oops")


def test_next_requests_fail_with_429_then_500_then_recover(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    control = http.post("/_sandbox/script", json={"next_429": 2, "next_500": 1, "retry_after": 7})
    assert control.status_code == 200
    answers = [send(http, {"to": tok(1)}) for _ in range(4)]
    assert [a.status_code for a in answers] == [429, 429, 500, 200]
    assert answers[0].json()["errors"][0]["code"] == "TOO_MANY_REQUESTS"
    assert answers[0].headers["retry-after"] == "7"
    stats = sandbox.stats()
    assert (stats["too_many_requests"], stats["server_errors"], stats["requests"]) == (2, 1, 4)
    assert len(sandbox.received()) == 1  # failed requests deliver nothing


def test_scripted_failures_also_hit_receipt_requests(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_next(1, status=503, retry_after=None)
    response = http.post(RECEIPTS, json={"ids": []})
    assert response.status_code == 503 and "retry-after" not in response.headers
    assert http.post(RECEIPTS, json={"ids": []}).status_code == 200


# ---- answers lost after accepting ----


def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Wait for a condition set by the server thread; False if it never holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_after_accept_error_receives_and_tickets_then_answers_5xx(
    http: httpx.Client, sandbox: ExpoSandbox, clock: FakeClock
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.ERROR, status=502)
    lost = send(http, [{"to": tok(1)}, {"to": tok(2)}])
    assert lost.status_code == 502
    assert lost.json()["errors"][0]["code"] == "INTERNAL_SERVER_ERROR"
    received = sandbox.received()
    assert [(r["to"], r["status"]) for r in received] == [(tok(1), "ok"), (tok(2), "ok")]
    clock.advance(900)
    # The tickets are real: their receipts come, as they would from Expo.
    assert set(receipts(http, [r["ticket_id"] for r in received])) == {
        r["ticket_id"] for r in received
    }
    assert send(http, {"to": tok(3)}).status_code == 200  # only the next request was hit
    assert sandbox.stats()["answers_lost"] == 1
    # The copies whose answer was lost say so (a chaos tally tells them apart).
    assert [r.get("answer_lost") for r in sandbox.received()] == ["error", "error", None]


def test_after_accept_drop_receives_then_closes_the_connection_mid_response(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_after_accept(1, "drop")
    with pytest.raises(httpx.RemoteProtocolError):
        send(http, {"to": tok(1)})
    assert [r["to"] for r in sandbox.received()] == [tok(1)]
    assert send(http, {"to": tok(2)}).status_code == 200
    assert [r.get("answer_lost") for r in sandbox.received()] == ["drop", None]


def test_after_accept_stall_receives_then_holds_the_answer_until_the_client_hangs_up(
    server: RunningSandbox, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.STALL)
    with (
        httpx.Client(base_url=server.base_url, timeout=0.3) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        send(impatient, {"to": tok(1)})
    assert [r["to"] for r in sandbox.received()] == [tok(1)]
    assert until(lambda: sandbox.stalled() == 0)  # the hang-up ends the stall


def test_a_stalled_answer_is_released_late_with_its_tickets(
    server: RunningSandbox, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.STALL)
    with (
        httpx.Client(base_url=server.base_url, timeout=10) as patient,
        ThreadPoolExecutor(1) as pool,
    ):
        answer = pool.submit(send, patient, {"to": tok(1)})
        assert until(lambda: sandbox.stalled() == 1)
        assert not answer.done()
        sandbox.release_stalled()
        response = answer.result(timeout=10)
    assert response.status_code == 200
    assert response.json()["data"]["id"] == sandbox.received()[0]["ticket_id"]


def test_after_accept_faults_leave_receipt_requests_alone(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    sandbox.fail_after_accept(1, AfterAccept.ERROR)
    assert http.post(RECEIPTS, json={"ids": []}).status_code == 200
    assert send(http, {"to": tok(1)}).status_code == 500


def test_after_accept_over_http_and_bad_values_refused(
    http: httpx.Client, sandbox: ExpoSandbox
) -> None:
    control = http.post(
        "/_sandbox/script", json={"after_accept": {"count": 2, "fault": "error", "status": 503}}
    )
    assert control.status_code == 200
    assert control.json()["after_accept"] == [{"fault": "error", "remaining": 2, "status": 503}]
    assert [send(http, {"to": tok(i)}).status_code for i in range(3)] == [503, 503, 200]
    assert len(sandbox.received()) == 3
    for bad in ({"fault": "explode"}, {"fault": "error", "status": 429}, "stall"):
        refused = http.post("/_sandbox/script", json={"after_accept": bad})
        assert refused.status_code == 400, bad
    assert http.get("/_sandbox/script").json()["after_accept"] == []
    sandbox.fail_after_accept(1)
    assert http.post("/_sandbox/script", json={"clear": True}).json()["after_accept"] == []


# ---- rate limit ----


def test_rate_limit_answers_429_beyond_it_until_the_clock_moves(clock: FakeClock) -> None:
    sandbox = ExpoSandbox(clock=clock, rate_limit=100)
    with running_sandbox(sandbox) as server, httpx.Client(base_url=server.base_url) as http:
        assert send(http, [{"to": [tok(i) for i in range(60)]}]).status_code == 200
        assert send(http, [{"to": [tok(i) for i in range(40)]}]).status_code == 200
        refused = send(http, [{"to": tok(1)}])
        assert refused.status_code == 429
        assert refused.json()["errors"][0]["code"] == "TOO_MANY_REQUESTS"
        assert refused.headers["retry-after"] == "1"
        clock.advance(0.5)
        assert send(http, [{"to": [tok(i) for i in range(50)]}]).status_code == 200
        assert send(http, [{"to": tok(1)}]).status_code == 429
        assert sandbox.stats()["too_many_requests"] == 2
        assert sandbox.stats()["notifications"] == 150


def test_a_per_token_limit_refuses_one_project_over_it_and_not_another(
    clock: FakeClock,
) -> None:
    """As Expo limits each project: A's flood gets 429s, B's requests still go."""
    sandbox = ExpoSandbox(clock=clock, token_rate_limit=100)
    a, b = {"Authorization": "Bearer token-a"}, {"Authorization": "Bearer token-b"}
    with running_sandbox(sandbox) as server, httpx.Client(base_url=server.base_url) as http:
        assert send(http, [{"to": [tok(i) for i in range(100)]}], **a).status_code == 200
        refused = send(http, [{"to": tok(1)}], **a)
        assert refused.status_code == 429
        assert refused.json()["errors"][0]["code"] == "TOO_MANY_REQUESTS"
        assert refused.headers["retry-after"] == "1"
        assert send(http, [{"to": [tok(i) for i in range(100)]}], **b).status_code == 200
        clock.advance(0.5)
        assert send(http, [{"to": [tok(i) for i in range(50)]}], **a).status_code == 200
        assert send(http, [{"to": tok(1)}], **a).status_code == 429
        counts = sandbox.describe()["too_many_requests_by_token"]
        assert counts == {access_token_label("Bearer token-a"): 2}
        assert sandbox.stats()["too_many_requests"] == 2
        sandbox.reset()
        assert sandbox.describe()["too_many_requests_by_token"] == {}
        assert send(http, [{"to": [tok(i) for i in range(100)]}], **a).status_code == 200


# ---- inspection ----


def test_received_lists_what_was_sent_and_can_be_reset(
    http: httpx.Client, sandbox: ExpoSandbox, clock: FakeClock
) -> None:
    message = {
        "to": tok(1),
        "title": "Take your pill",
        "body": "8 pm",
        "data": {"message_id": "m1"},
        "channelId": "reminders",
        "categoryId": "pill",
        "ttl": 60,
        "priority": "high",
    }
    ticket = send(http, message).json()["data"]
    (entry,) = http.get("/_sandbox/received").json()["received"]
    assert entry["to"] == tok(1)
    assert (entry["title"], entry["body"], entry["data"]) == (
        "Take your pill",
        "8 pm",
        {"message_id": "m1"},
    )
    assert (entry["channel_id"], entry["category_id"]) == ("reminders", "pill")
    assert entry["ticket_id"] == ticket["id"] and entry["status"] == "ok"
    assert entry["received_at"] == clock.now().isoformat()
    assert entry["content_encoding"] is None

    assert http.delete("/_sandbox/received").status_code == 204
    assert http.get("/_sandbox/received").json()["received"] == []
    stats = http.get("/_sandbox/stats").json()
    assert stats["notifications"] == 1 and stats["send_requests"] == 1

    assert http.post("/_sandbox/reset").status_code == 204
    assert http.get("/_sandbox/stats").json()["notifications"] == 0
    assert receipts(http, [ticket["id"]]) == {}  # tickets are forgotten too
