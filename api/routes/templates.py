"""``/v1/templates``: versioned message templates (admin API key only).

Each PUT adds a version (never edits one); an identical PUT is an idempotent retry.
See tepat/domain/templates.py for the rules and limits, README "Templates" for use.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import Path, Query, Response

from api.deps import Templates, admin_router, answer_created
from api.pagination import Page
from api.problems import problem_responses
from api.schemas import (
    TemplateIn,
    TemplateList,
    TemplateOut,
    TemplatePreviewIn,
    TemplatePreviewOut,
)
from tepat.domain.routing import check_event_type_name
from tepat.domain.templates import Template
from tepat.services.templates import TemplateService

router = admin_router("templates", tag="templates")

# Checked by the domain (which names the field and says what is wrong); only bounded here.
TypePath = Annotated[
    str, Path(min_length=1, max_length=128, description="Event type", examples=["order.paid"])
]
ChannelPath = Annotated[
    str,
    Path(min_length=1, max_length=16, description="push, inbox, email or sms", examples=["push"]),
]
LocalePath = Annotated[
    str, Path(min_length=1, max_length=35, description="Locale tag", examples=["pt-BR"])
]


def _out(service: TemplateService, t: Template) -> TemplateOut:
    return TemplateOut(
        id=t.id,
        type=t.key.event_type,
        channel=t.key.channel.value,
        locale=t.key.locale,
        version=t.version,
        created_at=t.created_at,
        parts=dict(t.parts),
        variables=list(service.variables(t)),
    )


@router.put(
    "/{event_type}/{channel}/{locale}",
    status_code=201,
    responses={
        200: {"model": TemplateOut, "description": "Identical to the latest version: nothing new"}
    },
    summary="Save a new version of a template",
)
async def put_template(
    event_type: TypePath,
    channel: ChannelPath,
    locale: LocalePath,
    body: TemplateIn,
    service: Templates,
    response: Response,
) -> TemplateOut:
    """201 with the new version; 200 with the latest when it already has these sources
    (a retried PUT creates nothing). A source that does not compile, or is too large, is
    a 422 naming the part."""
    key = service.key(event_type, channel, locale)
    template, created = await service.put(key, body.parts())
    answer_created(response, created)
    response.headers["Location"] = (
        f"/v1/templates/{quote(key.event_type)}/{key.channel.value}/{key.locale}"
        f"?version={template.version}"
    )
    return _out(service, template)


@router.get(
    "/{event_type}/{channel}/{locale}",
    responses=problem_responses(404),
    summary="A template's latest version, or a given one",
)
async def get_template(
    event_type: TypePath,
    channel: ChannelPath,
    locale: LocalePath,
    service: Templates,
    version: Annotated[int | None, Query(ge=1, le=2**62, description="This version")] = None,
) -> TemplateOut:
    """Exactly this locale (no fallback: see the preview for what a user would get)."""
    key = service.key(event_type, channel, locale)
    return _out(service, await service.get(key, version))


@router.get("", summary="The latest version of every template")
async def list_templates(
    service: Templates,
    page: Page,
    type: Annotated[str | None, Query(max_length=128, description="Only this event type")] = None,
) -> TemplateList:
    """By event type, channel and locale."""
    if type is not None:
        check_event_type_name(type, "type")
    found, next_cursor = page.cut(await service.list(type), key=_list_key)
    return TemplateList(templates=[_out(service, t) for t in found], next_cursor=next_cursor)


def _list_key(t: Template) -> str:
    # "\n" sorts before every character a name may hold: the order of the tuple.
    return "\n".join((t.key.event_type, t.key.channel.value, t.key.locale))


@router.post(
    "/preview",
    responses=problem_responses(404),
    summary="Render a stored or inline template with sample data",
)
async def preview(body: TemplatePreviewIn, service: Templates) -> TemplatePreviewOut:
    """A stored template is looked up as for a user of `locale` (`pt-BR` → `pt` → the
    default locale) unless `version` names one; `locale` in the answer is the one used.
    A variable missing from `data` is a 422 naming it (`data.<name>`)."""
    if body.template is not None:
        result = await service.preview_inline(
            body.type, body.channel, body.locale, body.template.parts(), body.data
        )
    else:
        result = await service.preview_stored(
            body.type, body.channel, body.locale, body.data, body.version
        )
    stored = result.template
    return TemplatePreviewOut(
        type=body.type,
        channel=body.channel,
        locale_requested=body.locale,
        locale=result.locale,
        template_id=stored.id if stored else None,
        version=stored.version if stored else None,
        rendered=result.rendered.as_dict(),
        variables=list(result.variables),
    )
