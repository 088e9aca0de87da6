"""The push provider a delivery run sends through (``--provider expo|fcm|apns``): its
sandbox process (``tepat sandbox KIND``), the ``TEPAT_*`` settings that
point the consumers at it, and its log of arrivals in the one shape the tallies read
(Expo's: ``status``, ``to``, ``data``, ``received_at``).

FCM and APNs have no project ceiling of Expo's kind (600/s): their sandboxes run
unlimited unless a rate is asked for, and the client's own FCM rate is lifted with
Expo's (``UNLIMITED_CLIENT`` in bench/scenarios.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.procs import tepat_argv

PROVIDERS = ("expo", "fcm", "apns")
# what `tepat sandbox apns` signs and expects (tepat/sandbox/apns.py's defaults)
APNS_KEY_ID, APNS_TEAM_ID, APNS_TOPIC = "SANDBOXKEY", "TEAM123456", "dev.tepat.app"
# the credentials the sandbox writes into the run's directory and the consumers read
FCM_ACCOUNT, APNS_KEY = "fcm-account.json", "apns.p8"


def sandbox_argv(kind: str, port: int, workdir: Path, rate_limit: float | None) -> list[str]:
    """``tepat sandbox KIND`` on ``port``; its credentials (FCM's service account, APNs's
    .p8 key) are written into ``workdir``, where :func:`consumer_env` points."""
    if kind == "fcm":
        argv = tepat_argv("sandbox", "fcm", "--credentials", str(workdir / FCM_ACCOUNT))
    elif kind == "apns":
        argv = tepat_argv("sandbox", "apns", "--key-file", str(workdir / APNS_KEY))
    else:
        argv = tepat_argv("sandbox", "expo", "--receipt-delay", "3600")
    argv += ["--port", str(port)]
    return argv + (["--rate-limit", str(rate_limit)] if rate_limit else [])


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
