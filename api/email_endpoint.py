"""What ``/v1/providers/email/events`` needs of an app: its e-mail events service, the SNS
topics it accepts and its relay's secret (api/routes/providers_email.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tepat.adapters.sns_verify import SnsVerifier
from tepat.config import Settings
from tepat.services.email_events import EmailEvents


@dataclass
class EmailEventsEndpoint:
    """What the route needs; the app builds one (tests swap the certificate fetcher)."""

    events: EmailEvents
    topics: frozenset[str] = frozenset()
    secret: bytes | None = None
    verifier: SnsVerifier = field(default_factory=SnsVerifier)


def build_endpoint(settings: Settings, events: EmailEvents) -> EmailEventsEndpoint:
    secret = settings.email_events_secret
    topics = (settings.email_events_topic_arns or "").split(",")
    return EmailEventsEndpoint(
        events=events,
        topics=frozenset(t for t in topics if t),
        secret=secret.get_secret_value().encode() if secret else None,
    )
