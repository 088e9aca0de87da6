"""The push provider a delivery run sends through (``--provider expo|fcm|apns``): the
``TEPAT_*`` settings that point the consumers at its sandbox (bench/sandbox.py), and its
log of arrivals in the one shape the tallies read (Expo's: ``status``, ``to``, ``data``,
``received_at``).

FCM and APNs have no project ceiling of Expo's kind (600/s): their sandboxes run
unlimited unless a rate is asked for, and the client's own FCM rate is lifted with
Expo's (``UNLIMITED_CLIENT`` in bench/scenarios.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROVIDERS = ("expo", "fcm", "apns")
# what `tepat sandbox apns` signs and expects (tepat/sandbox/apns.py's defaults)
APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC = "SANDBOXKEY", "TEAM123456", "dev.tepat.app"
# the credentials the sandbox writes into the run's directory (bench/sandbox.py) and the
# consumers read
FCM_ACCOUNT, APNS_KEY = "fcm.json", "apns.p8"


def consumer_env(kind: str, url: str, workdir: Path, client_rate: float | None) -> dict[str, str]:
    """The settings that make ``kind``'s provider send to the sandbox at ``url`` (Expo's
    own are in bench/config.py)."""
    if kind == "fcm":
        account = str(workdir / FCM_ACCOUNT)
        env = {"TEPAT_FCM_URL": url, "TEPAT_FCM_CREDENTIALS_FILE": account}
        if client_rate is not None:
            env["TEPAT_FCM_RATE_LIMIT"] = str(client_rate)
        return env
    if kind == "apns":
        return {
            "TEPAT_APNS_URL": url,
            "TEPAT_APNS_KEY_FILE": str(workdir / APNS_KEY),
            "TEPAT_APNS_KEY_ID": APNS_KEY_ID,
            "TEPAT_APNS_TEAM_ID": APNS_TEAM_ID,
            "TEPAT_APNS_TOPIC": APNS_TOPIC,
        }
    return {}


def as_expo_entry(kind: str, entry: dict[str, Any]) -> dict[str, Any]:
    """One accepted notification of ``kind``'s sandbox log as the Expo sandbox logs it
    (FCM and APNs log only what they accepted: ``status`` is ``ok``)."""
    if kind == "fcm":
        message = entry["message"]
        token, data = message["token"], message.get("data") or {}
    elif kind == "apns":
        token, data = entry["token"], entry["payload"]
    else:
        return entry
    out = {"status": "ok", "to": token, "data": data, "received_at": entry["at"]}
    if "answer_lost" in entry:
        out["answer_lost"] = entry["answer_lost"]
    return out


def send_requests(kind: str, stats: dict[str, int]) -> int:
    """Send requests the sandbox answered: FCM and APNs take one notification a request."""
    if kind == "fcm":
        return stats.get("messages", 0)
    if kind == "apns":
        return stats.get("notifications", 0)
    return stats.get("send_requests", 0)
