"""``/v1/webhooks``: status webhook subscriptions (admin API key only).

Creating one returns its signing secret, once; a rotation returns the new one, once, and
the previous secret keeps signing beside it for 24 hours. See tepat/domain/webhooks.py for
the rules and README "Status webhooks" for the receiver's side.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Self

from fastapi import Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RT, admin_router
from api.pagination import Page
from api.problems import problem_responses
from api.schemas import Paged, Request, Text, View, read_fields
from tepat.domain.webhooks import EVENT_TYPES, MAX_URL_LENGTH, WebhookSubscription
from tepat.services.webhooks import WebhookService
from tepat.wiring import target_check, webhook_repository

router = admin_router("webhooks", tag="webhooks")

SubscriptionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The subscription's id",
        examples=["wh_5f0c1e2d3a4b5c6d7e8f9a0b"],
    ),
]


class WebhookIn(Request):
    url: Text = Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description="Where to POST: https:// (http:// only to a loopback host, or with "
        "TEPAT_WEBHOOK_ALLOW_HTTP). A host that is or resolves to a loopback, private, "
        "link-local or internal address is refused unless TEPAT_WEBHOOK_ALLOW_PRIVATE_HOSTS "
        "names it",
        examples=["https://example.com/tepat/webhooks"],
    )
    event_types: list[str] = Field(
        min_length=1,
        max_length=len(EVENT_TYPES),
        description=f"Any of {', '.join(EVENT_TYPES)}",
        examples=[["message.delivered", "message.failed"]],
    )
    categories: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Only messages of these categories; empty: every category",
        examples=[["meal"]],
    )
    description: Text = Field(default="", max_length=200)


class SecretInfo(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # read from the domain's secrets

    created_at: datetime
    expires_at: datetime | None = Field(
        description="Set once rotated out: it signs beside the new one until then"
    )


class WebhookOut(View):
    id: str
    url: str
    event_types: list[str]
    categories: list[str]
    description: str
    enabled: bool
    disabled_reason: str | None = Field(
        description="Why it stopped: gone (the receiver answered 410 Gone)"
    )
    created_at: datetime
    updated_at: datetime
    secrets: list[SecretInfo] = Field(description="The signing secrets (never their values)")

    @classmethod
    def of(cls, sub: WebhookSubscription) -> Self:
        # The newest secret is the current one; only WebhookWithSecret shows it.
        return cls(**read_fields(cls, sub, secret=sub.secrets[-1].secret))


class WebhookWithSecret(WebhookOut):
    secret: str = Field(
        description="The signing secret (whsec_...): shown this once, keep it",
        examples=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    )


class WebhookList(Paged):
    items: list[WebhookOut]


def _service(rt: RT) -> WebhookService:
    return WebhookService(
        webhook_repository(rt.settings, rt.store),
        rt.clock,
        rt.categories.names,
        allow_http=rt.settings.webhook_allow_http,
        check_target=target_check(rt.settings),
    )


Webhooks = Annotated[WebhookService, Depends(_service)]


@router.post(
    "",
    status_code=201,
    summary="Subscribe a URL to message status events",
)
async def create_webhook(
    body: WebhookIn, service: Webhooks, response: Response
) -> WebhookWithSecret:
    """The answer carries the signing secret, this once. Deliveries start with the next
    status change."""
    sub = await service.create(body.url, body.event_types, body.categories, body.description)
    response.headers["Location"] = f"/v1/webhooks/{sub.id}"
    return WebhookWithSecret.of(sub)


@router.get("", summary="Every webhook subscription")
async def list_webhooks(service: Webhooks, page: Page) -> WebhookList:
    """Oldest first."""
    found, next_cursor = page.cut(await service.list_all(), key=_list_key)
    return WebhookList(items=[WebhookOut.of(s) for s in found], next_cursor=next_cursor)


def _list_key(s: WebhookSubscription) -> str:
    # UTC ISO instants to the microsecond compare as text in time order.
    return f"{s.created_at.astimezone(UTC).isoformat(timespec='microseconds')}\n{s.id}"


@router.get(
    "/{subscription_id}", responses=problem_responses(404), summary="One webhook subscription"
)
async def get_webhook(subscription_id: SubscriptionId, service: Webhooks) -> WebhookOut:
    return WebhookOut.of(await service.get(subscription_id))


@router.delete(
    "/{subscription_id}",
    status_code=204,
    response_class=Response,
    responses=problem_responses(404),
    summary="Unsubscribe: nothing more is sent to it, pending deliveries included",
)
async def delete_webhook(subscription_id: SubscriptionId, service: Webhooks) -> None:
    await service.delete(subscription_id)


@router.post(
    "/{subscription_id}/rotate-secret",
    responses=problem_responses(404),
    summary="A new signing secret; the previous one keeps signing for 24 hours",
)
async def rotate_webhook_secret(
    subscription_id: SubscriptionId, service: Webhooks
) -> WebhookWithSecret:
    """Every delivery carries one signature per valid secret, so a receiver that still
    knows only the previous secret keeps verifying until it switches (within 24 hours)."""
    return WebhookWithSecret.of(await service.rotate_secret(subscription_id))


@router.post(
    "/{subscription_id}/enable",
    responses=problem_responses(404),
    summary="Send to it again after a 410 Gone disabled it",
)
async def enable_webhook(subscription_id: SubscriptionId, service: Webhooks) -> WebhookOut:
    return WebhookOut.of(await service.enable(subscription_id))
