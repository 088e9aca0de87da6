"""The ``TEPAT_*`` configuration the bench gives every child process."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from tepat.domain.categories import DEFAULT_CATEGORIES, Categories, CategoryPolicy


def run_prefix() -> str:
    """Queue names of one run (``bench.<id>.<category>``): runs sharing a broker stay apart."""
    return f"bench.{uuid.uuid4().hex[:10]}."


@dataclass(frozen=True)
class Config:
    db_path: Path
    broker_url: str  # embedded:// or stomp://...
    queue_prefix: str
    expo_url: str = "https://invalid.example"
    # The client's own limit. With the sandbox unlimited, lift it: the dispatch
    # figure is then the consumer's capacity, not Expo's quota.
    expo_rate_limit: float | None = None
    # another store than the SQLite file at db_path (chaos --store mongo)
    database_url: str | None = None
    # the settings of another push provider than Expo (bench/push_kinds.py)
    provider_env: tuple[tuple[str, str], ...] = ()

    def categories_json(self) -> str:
        return json.dumps(
            {
                c.name: {
                    "quiet_hours": c.quiet_hours.value,
                    "missed_window_minutes": c.missed_window.total_seconds() / 60,
                    "queue": f"{self.queue_prefix}{c.name}",
                    "priority": c.priority,
                }
                for c in DEFAULT_CATEGORIES
            }
        )

    def categories(self) -> Categories:
        return Categories(
            CategoryPolicy(
                c.name,
                quiet_hours=c.quiet_hours,
                missed_window=c.missed_window,
                queue=f"{self.queue_prefix}{c.name}",
                priority=c.priority,
                # as the processes read TEPAT_CATEGORIES: the built-in policy (safety retries)
                maybe_sent=c.maybe_sent,
            )
            for c in DEFAULT_CATEGORIES
        )

    def env(self) -> dict[str, str]:
        env = {
            "TEPAT_DATABASE_URL": self.database_url or f"sqlite:///{self.db_path}",
            "TEPAT_BROKER_URL": self.broker_url,
            "TEPAT_EXPO_URL": self.expo_url,
            "TEPAT_CATEGORIES": self.categories_json(),
            "TEPAT_LOG_JSON": "true",
            # receipts are not part of these scenarios: keep the poller out of the way
            "TEPAT_RECEIPT_DELAY_SECONDS": "86400",
            # several processes on one host: no fixed metrics port for them to fight over
            "TEPAT_METRICS_PORT": "0",
        }
        if self.expo_rate_limit is not None:
            env["TEPAT_EXPO_RATE_LIMIT"] = str(self.expo_rate_limit)
        env.update(self.provider_env)
        return env
