"""The services a request reaches: those of its app (tepat/tenancy.py).

A route never picks an app: its dependencies (:mod:`api.deps`) read the services of the
app the request's credentials belong to, so an id of another app is simply not there
(404), whatever the route.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tepat.adapters.sns_verify import SnsVerifier
from tepat.config import Settings
from tepat.runtime import Runtime, event_service, template_service
from tepat.services.email_events import EmailEvents
from tepat.services.events import EventService
from tepat.services.inbox import InboxService
from tepat.services.templates import TemplateService
from tepat.services.unsubscribe import UnsubscribeLinks
from tepat.tenancy import Apps
from tepat.wiring import build_unsubscribe_links


@dataclass
class EmailEventsEndpoint:
    """What ``/v1/providers/email/events`` needs of an app (api/routes/providers_email.py):
    its e-mail events service, the SNS topics it accepts, its relay's secret (tests swap
    the certificate fetcher)."""

    events: EmailEvents
    topics: frozenset[str] = frozenset()
    secret: bytes | None = None
    verifier: SnsVerifier = field(default_factory=SnsVerifier)

    @classmethod
    def of(cls, settings: Settings, events: EmailEvents) -> EmailEventsEndpoint:
        secret = settings.email_events_secret
        topics = (settings.email_events_topic_arns or "").split(",")
        return cls(
            events,
            frozenset(t for t in topics if t),
            secret.get_secret_value().encode() if secret else None,
        )


@dataclass(frozen=True, slots=True)
class AppServices:
    runtime: Runtime
    templates: TemplateService
    # The runtime's: its notifier wakes this process's inbox streams for items stored by
    # the API, the inbox channel and the fan-out alike (tepat/services/inbox.py).
    inbox: InboxService
    events: EventService
    # Its public paths' (/apps/<id>/u/…, /apps/<id>/v1/providers/email/events)
    unsubscribe: UnsubscribeLinks | None
    email_events: EmailEventsEndpoint

    @classmethod
    def over(cls, rt: Runtime) -> AppServices:
        templates = template_service(rt)
        return cls(
            rt,
            templates,
            rt.inbox,
            event_service(rt, templates),
            build_unsubscribe_links(rt.settings, rt.clock),
            EmailEventsEndpoint.of(rt.settings, EmailEvents(rt.store, rt.clock)),
        )


class ServedApps:
    """Each served app's services, built once per runtime (a reopened app gets new ones)."""

    def __init__(self, apps: Apps) -> None:
        self.apps = apps
        self._services: dict[str, AppServices] = {}

    def services(self, app_id: str) -> AppServices | None:
        rt = self.apps.runtime(app_id)
        if rt is None:
            return None
        services = self._services.get(app_id)
        if services is None or services.runtime is not rt:
            services = self._services[app_id] = AppServices.over(rt)
        return services
