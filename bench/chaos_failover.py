"""``bench chaos --fault provider_down``: the primary push provider down during a drain,
with failover configured (docs/guides/operations.md, "Failover").

Nine devices in ten carry an FCM fallback token (the FCM sandbox, in a process of its
own); the tenth has none. As the messages fall due, the Expo sandbox first loses the
answers of two requests after accepting them (ambiguous answers: failed over, a possible
duplicate, where the category retries; closed ``outcome_unknown`` where it closes),
then answers every request 503 for 60 s (quick: 8 s). Expected: nothing lost, the
fallback devices' notifications through FCM within seconds, the others waiting and then
going through Expo, and a second copy only of a message whose first answer was
ambiguous.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.activemq import ActiveMQ
from bench.chaos_rig import Timing, rig, wait_for
from bench.report import Result, log
from bench.sandbox import running_sandbox

WITHOUT_FALLBACK = 10  # every tenth device has no fallback token
LOST = 2  # requests whose answer is lost: the first two messages (safety, then meal)


def fcm_token(i: int) -> str | None:
    # The last of each ten: the first messages (whose answers are lost) have one.
    return None if i % WITHOUT_FALLBACK == WITHOUT_FALLBACK - 1 else f"fcm-bench-{i:07d}"


def as_expo_copies(received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The FCM sandbox's log in the shape of the Expo sandbox's, as the tally reads it
    (FCM answers at send time: every entry it logged, it accepted)."""
    return [
        {
            "status": "ok",
            "data": e["message"].get("data") or {},
            "received_at": e["at"],
            "ticket_id": e["name"],
            "via": "fcm",
        }
        for e in received
    ]


def run_provider_down(
    workdir: Path,
    broker: ActiveMQ | None,
    prefix: str,
    messages: int,
    down_s: float,
    store: str,
) -> Result:
    from bench.chaos import result_of  # imported here: bench.chaos dispatches to this module

    timing = Timing(lease_s=30.0, grace_s=10.0)
    with (
        rig(workdir, broker, prefix, messages, timing, store, fcm_token) as r,
        running_sandbox(workdir, None, "fcm") as fcm,
    ):
        env = {"TEPAT_FCM_URL": fcm.url, "TEPAT_FCM_CREDENTIALS_FILE": str(workdir / "fcm.json")}
        r.start_scheduler()
        for _ in range(1 if r.embedded else 2):
            r.start_consumer(env)
        ids = r.insert(messages, lead_s=2.0, span_s=down_s + 5.0)
        first_due = r.due[ids[0]].scheduled_at
        time.sleep(max(0.0, (first_due - datetime.now(UTC)).total_seconds()))
        r.sandbox.script({"after_accept": {"count": LOST, "fault": "stall"}})
        wait_for("ambiguous answers", lambda: r.sandbox.stats()["answers_lost"] >= LOST, 30)
        down_at = datetime.now(UTC)
        r.sandbox.script({"fail_next": {"count": 10**6, "status": 503}, "retry_after": 1})
        log(f"provider_down: Expo answers 503 for {down_s:.0f}s")
        time.sleep(down_s)
        r.sandbox.script({"clear": True})
        log("provider_down: Expo is back")
        waited = r.wait_terminal(timing.lease_s + 120 + messages / 50)
        via_fcm = as_expo_copies(fcm.received())
        expo = [e for e in r.sandbox.received() if e.get("status") == "ok"]
        received = expo + via_fcm
        firsts = [datetime.fromisoformat(e["received_at"]) for e in via_fcm]
        figures = {
            "via_fcm": len(via_fcm),
            "via_expo": len(expo),
            "first_failover_after_s": (
                round((min(firsts) - down_at).total_seconds(), 2) if firsts else None
            ),
            "wait_s": round(waited, 1),
        }
        params = {"down_s": down_s, "without_fallback": f"1 in {WITHOUT_FALLBACK}"}
        notes = [
            "window_dup here: a message whose first answer was ambiguous (Expo accepted it, "
            "the answer was lost), failed over (safety: maybe_sent retry) or retried",
        ]
        return result_of("provider_down", r, ids, params, figures, notes, received=received)
