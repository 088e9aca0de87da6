"""Request and response bodies (snake_case JSON).

Request models forbid unknown fields, so a typo is a 422 naming it rather
than a silently ignored setting. The domain parsers still check every value
(time zone, "HH:MM", weekdays, push token, category): these models bound
shapes and sizes, and the patterns they publish document the same rules.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from api.problems import Problem
from tepat.domain.contacts import SuppressionReason
from tepat.domain.inbox import InboxItem
from tepat.domain.models import MessageStatus, User
from tepat.domain.validation import HHMM_PATTERN, IDENTIFIER_PATTERN, format_hhmm
from tepat.ports.broker import DeadLetter
from tepat.services.accounts import KEEP

MAX_TITLE = 200
MAX_BODY = 2000
MAX_INBOX_HTML = 4000


def read_fields(model: type[BaseModel], obj: object, **computed: Any) -> dict[str, Any]:
    """The fields of response ``model`` read by name from the domain object ``obj``, but
    for those ``computed`` here (a computed value ``model`` has no field for is left out)."""
    return {f: computed[f] if f in computed else getattr(obj, f) for f in model.model_fields}


class View(BaseModel):
    """A response made from a domain object by :func:`read_fields` (``of`` computes the
    fields that are not the object's attributes as they are)."""

    @classmethod
    def of(cls, obj: Any) -> Self:
        return cls(**read_fields(cls, obj))


class Request(BaseModel):
    # Strict: JSON types as documented (no "1" for 1, no 0 for false).
    model_config = ConfigDict(extra="forbid", strict=True)


_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _iso_string(value: object) -> object:
    # pydantic alone would also take numbers and numeric strings as Unix times.
    if not isinstance(value, str) or not _ISO_DATETIME.match(value):
        raise ValueError("expected an ISO 8601 date-time with a UTC offset")
    return value


def _instant_in_utc(value: datetime) -> datetime:
    # Every later step (comparisons, the stores, planning) works in UTC, so convert here,
    # where an instant that has no UTC form (0001-01-01T00:00+01:00 is in year 0) can
    # still be a 422 naming its field rather than an OverflowError deeper down.
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(
            "out of range: in UTC this instant falls outside the years 1 to 9999"
        ) from None


def _encodable(value: str) -> str:
    # JSON may spell a lone surrogate ("\\ud800"); such text cannot be stored or sent.
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


def _hhmm(value: object) -> object:
    return format_hhmm(value) if isinstance(value, time) else value


# Responses: a domain wall-clock time as "HH:MM".
LocalTime = Annotated[str, BeforeValidator(_hhmm)]
# Request text: any Unicode that UTF-8 can carry.
Text = Annotated[str, AfterValidator(_encodable)]
# Responses: always UTC, serialized with a "Z".
UtcDatetime = Annotated[datetime, AfterValidator(_instant_in_utc)]
# Requests: an ISO 8601 string with an offset ("2027-03-01T08:00:00+07:00" or "…Z"),
# handed on as the same instant in UTC.
OffsetDatetime = Annotated[
    AwareDatetime,
    BeforeValidator(_iso_string),
    AfterValidator(_instant_in_utc),
    # Not strict: JSON has no date-time type; the string is parsed (and must be one).
    Field(
        strict=False,
        description="ISO 8601 date-time with a UTC offset",
        examples=["2027-03-01T08:00:00+07:00"],
    ),
]
HHMM = Annotated[
    Text,
    Field(
        max_length=5,
        description='Local wall-clock time "HH:MM", 24-hour, two digits each',
        examples=["08:30"],
        json_schema_extra={"pattern": HHMM_PATTERN},
    ),
]
Identifier = Annotated[
    str, Field(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN, examples=["a1b2c3"])
]
Category = Annotated[
    Text,
    Field(
        min_length=1,
        max_length=64,
        description="A configured category (default: safety, meal, mood, hydration, sleep, "
        "activity, custom)",
        examples=["meal"],
    ),
]
Title = Annotated[Text, Field(min_length=1, max_length=MAX_TITLE, examples=["Time for lunch"])]
Body = Annotated[Text, Field(max_length=MAX_BODY, examples=["Your meal plan says: soup."])]
# A page of a long list (paged in the store): always says where the next one starts.
NextCursor = Annotated[
    str | None, Field(description="Pass as `cursor` for the next page; null at the end")
]
Data = Annotated[
    dict[str, Any],
    Field(
        description="Free JSON object delivered with the notification (payload limit applies)",
        examples=[{"screen": "meal", "meal_id": 7}],
    ),
]


# ---------------------------------------------------------------- users


class QuietHoursBody(Request):
    start: HHMM
    end: HHMM


class UserIn(Request):
    """Create or update a user. Fields left out keep their current value (defaults on create)."""

    timezone: Text = Field(
        min_length=1, max_length=64, description="IANA time zone", examples=["Asia/Jakarta"]
    )
    locale: str = Field(
        default="en",
        max_length=35,
        pattern=r"^[A-Za-z]{2,3}([_-][A-Za-z0-9]{1,8})*$",
        description="BCP 47 language tag",
        examples=["id-ID"],
    )
    quiet_hours: QuietHoursBody | None = Field(
        default=None,
        description="Local [start, end) during which messages wait (may wrap midnight); "
        "null removes quiet hours",
    )
    enabled: bool = Field(default=True, description="A disabled user is sent nothing")

    def given(self, field: str) -> Any:
        """The field's value when the request names it, else KEEP: left out, unchanged."""
        return getattr(self, field) if field in self.model_fields_set else KEEP


class UserOut(View):
    user_id: str
    timezone: str
    locale: str
    quiet_hours: QuietHoursBody | None
    enabled: bool
    plan_version: int = Field(description="Bumped whenever a change re-plans the user's messages")
    created_at: UtcDatetime | None
    updated_at: UtcDatetime | None

    @classmethod
    def of(cls, u: User) -> Self:
        qh = u.quiet_hours
        quiet = QuietHoursBody(start=format_hhmm(qh.start), end=format_hhmm(qh.end)) if qh else None
        return cls(**read_fields(cls, u, quiet_hours=quiet))


# ---------------------------------------------------------------- devices


PushKind = Literal["expo", "fcm", "apns", "webpush"]  # tepat.domain.models.PUSH_KINDS


class PushFallback(Request):
    kind: PushKind = Field(description="The push service of the fallback token")
    token: Text = Field(
        min_length=1,
        max_length=4096,
        description="The same device's token for `kind`'s push service, checked as `push_token` is",
    )


class DeviceIn(Request):
    push_token: Text = Field(
        min_length=1,
        max_length=4096,
        description="The token for `kind`'s push service: an Expo push token, an FCM "
        "registration token, an APNs device token (hex), or a Web Push subscription "
        "(`PushSubscription.toJSON()` as a JSON string). Registering it here unbinds it "
        "from any other device",
        examples=["ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]"],
    )
    platform: Literal["ios", "android", "web"] | None = None
    kind: PushKind = Field(
        default="expo",
        description="The push service the token is for; a kind this deployment has no "
        "provider for is a 422 naming `kind`",
    )
    fallback: PushFallback | None = Field(
        default=None,
        description="The same device's token for another push service (an Expo app's "
        "FCM or APNs token), sent to only while `kind`'s provider is down (failover)",
    )


class DeviceOut(View):
    device_id: str
    push_token: str
    platform: str | None
    kind: PushKind
    fallback: PushFallback | None
    active: bool
    deactivated_reason: str | None = Field(
        description="Why the device stopped receiving (e.g. DeviceNotRegistered, unregistered)"
    )
    created_at: UtcDatetime | None
    updated_at: UtcDatetime | None

    @classmethod
    def of(cls, obj: Any) -> Self:
        kind, token = obj.fallback_kind, obj.fallback_token
        fallback = None if kind is None else PushFallback(kind=kind, token=token)
        return cls(**read_fields(cls, obj, fallback=fallback))


class Paged(BaseModel):
    next_cursor: str | None = Field(
        default=None, description="Pass as `cursor` for the next page; null on the last"
    )


class DeviceList(Paged):
    devices: list[DeviceOut]


# ---------------------------------------------------------------- reminders


class ReminderIn(Request):
    category: Category
    label: Text = Field(default="", max_length=100, examples=["lunch"])
    local_time: HHMM
    days: list[str] | None = Field(
        default=None,
        max_length=7,
        description="Weekdays it fires on (mon … sun); omit for every day",
        examples=[["mon", "wed", "fri"]],
    )
    title: Title
    body: Body
    data: Data = Field(default_factory=dict)
    enabled: bool = True


class ReminderOut(View):
    reminder_id: str
    category: str
    label: str
    local_time: LocalTime = Field(examples=["08:30"])
    days: list[str]
    title: str
    body: str
    data: dict[str, Any]
    enabled: bool
    version: int
    created_at: UtcDatetime | None
    updated_at: UtcDatetime | None


class ReminderList(Paged):
    reminders: list[ReminderOut]


# ---------------------------------------------------------------- preferences


class PreferencesIn(Request):
    categories: dict[str, bool] = Field(
        max_length=64,
        description=(
            "Opt in (true) or out (false) per category on every channel ('mood'), or per"
            " category on one channel ('mood.email'; the channel key wins over the"
            " category key); keys not named stay as they are"
        ),
        examples=[{"mood": False}, {"marketing.email": False, "marketing.inbox": True}],
    )


class PreferencesOut(BaseModel):
    categories: dict[str, bool] = Field(
        description=(
            "Every configured category (true unless the user opted out), then the"
            " '<category>.<channel>' keys the user set"
        ),
        examples=[{"safety": True, "meal": True, "mood": False, "meal.email": False}],
    )


# ---------------------------------------------------------------- messages


class NotificationIn(Request):
    idempotency_key: Identifier = Field(
        description="Names this notification; a repeat with the same key returns it again"
    )
    category: Category
    title: Title
    body: Body
    data: Data = Field(default_factory=dict)
    send_at: OffsetDatetime | None = Field(
        default=None,
        description=(
            "When to send (ISO 8601 with offset; kept to the millisecond, a finer "
            "instant is rounded up); omit to send now"
        ),
    )


class MessageOut(View):
    id: str
    category: str
    reminder_id: str | None
    label: str
    local_date: date | None = Field(description="The user's local date it is meant for")
    local_time: LocalTime | None = Field(description='Local "HH:MM" it is meant for')
    timezone: str
    scheduled_at: UtcDatetime = Field(description="When it is (or was) due, UTC")
    channel: str = Field(
        default="push", description="push, inbox, email or sms (an event's message)"
    )
    status: MessageStatus
    status_reason: str | None
    last_error: str | None = Field(
        default=None,
        description="The detail behind a failure or retry (the provider's error, the"
        " template variable a render_error missed)",
    )
    attempts: int
    ticket_id: str | None = Field(
        description="The provider's id once accepted: Expo ticket, Twilio message SID,"
        " e-mail Message-ID"
    )
    created_at: UtcDatetime | None
    updated_at: UtcDatetime | None


class NotificationOut(MessageOut):
    idempotency_key: str | None
    title: str
    body: str
    data: dict[str, Any]


class MessagePage(BaseModel):
    messages: list[MessageOut] = Field(description="Newest scheduled first")
    next_cursor: NextCursor


# ---------------------------------------------------------------- admin


class PlanIn(Request):
    start: OffsetDatetime
    end: OffsetDatetime


class PlanOut(BaseModel):
    created: int = Field(description="Messages planned and enqueued by this call")
    existing: int = Field(description="Messages that were already planned")


class QueueOut(View):
    queue: str
    ready: int
    scheduled: int
    in_flight: int
    dead_letters: int


class QueueList(BaseModel):
    queues: list[QueueOut]


class FailedMessageOut(MessageOut):
    user_id: str
    title: str
    body: str
    data: dict[str, Any]


class BrokerDeadLetterOut(View):
    id: str = Field(description="Pass to POST /v1/admin/dead-letters/{id}/replay")
    queue: str
    reason: str
    attempts: int
    body: str = Field(description="The broker message (a batch of message ids), as text")

    @classmethod
    def of(cls, d: DeadLetter) -> Self:
        return cls(**read_fields(cls, d, body=d.body.decode("utf-8", errors="replace")))


class DeadLetters(BaseModel):
    messages: list[FailedMessageOut] = Field(
        description="Messages that ended failed, most recently updated first"
    )
    broker: list[BrokerDeadLetterOut] = Field(
        description="Broker messages that exhausted their redeliveries"
    )


class ReplayOut(BaseModel):
    id: str
    replayed: bool


# ---------------------------------------------------------------- health


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Ready(BaseModel):
    status: Literal["ready"] = "ready"
    store: Literal["ok"] = "ok"
    broker: Literal["ok"] = "ok"
    tzdata: str = Field(description="IANA time-zone database release in use", examples=["2026f"])


# ---------------------------------------------------------------- bulk import


class BulkDeviceIn(DeviceIn):
    device_id: Identifier = Field(description="Your id for the device (scoped to the user)")


class BulkReminderIn(ReminderIn):
    reminder_id: Identifier = Field(description="Your id for the reminder")


class BulkUserIn(UserIn):
    """One whole user, as ``PUT /v1/users/{id}`` plus its devices and reminders.

    Devices and reminders are created or replaced; ones the item does not name are
    left as they are (an import never deletes)."""

    user_id: Identifier = Field(description="Your id for the user")
    devices: list[BulkDeviceIn] = Field(default_factory=list, max_length=20)
    reminders: list[BulkReminderIn] = Field(default_factory=list, max_length=100)


class BulkItemOut(BaseModel):
    index: int = Field(description="The item's position in the request (0-based)")
    user_id: str | None
    status: Literal["created", "updated", "unchanged", "error"]
    problem: Problem | None = Field(
        default=None,
        description="What the single endpoint would have answered, each field named from the"
        " request's root (items[3].reminders[0].local_time)",
    )


class BulkImportOut(BaseModel):
    items: list[BulkItemOut] = Field(description="One result per item, in request order")
    created: int
    updated: int
    unchanged: int
    errors: int


# --- templates (issue 12): api/routes/templates.py ---------------------------------


class TemplateIn(Request):
    """A template's parts, each a Jinja2 source. Push: `title`, `body`, optional `data`
    (an object of string templates). Inbox: `title`, `body`, optional `html` (rendered
    with HTML autoescape) and `link`. A part the channel does not have is refused."""

    title: str | None = Field(default=None, examples=["Order {{ order_id }} is paid"])
    body: str | None = Field(
        default=None, examples=["Thank you, {{ name }}: {{ amount }} received."]
    )
    data: dict[str, str] | None = Field(
        default=None,
        description="push only: notification data, each value a template",
        examples=[{"url": "myapp://orders/{{ order_id }}"}],
    )
    html: str | None = Field(
        default=None, description="inbox and email: an HTML body (autoescaped)"
    )
    link: str | None = Field(default=None, description="inbox only: a URL or path to open")

    def parts(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class TemplateOut(BaseModel):
    id: str = Field(
        description="Names this version for good (what a message pins)",
        examples=["order.paid:push:en:3"],
    )
    type: str = Field(examples=["order.paid"])
    channel: str = Field(examples=["push"])
    locale: str = Field(examples=["en"])
    version: int = Field(ge=1, examples=[3])
    created_at: datetime
    parts: dict[str, Any] = Field(description="The sources, as saved")
    variables: list[str] = Field(
        description="The variables the template reads (its render data must have them"
        " unless the template tests them with `is defined` or `default`)",
        examples=[["amount", "name", "order_id"]],
    )


class TemplateList(Paged):
    templates: list[TemplateOut] = Field(
        description="The latest version of each (type, channel, locale)"
    )


class TemplatePreviewIn(Request):
    """Render a stored template (the latest for `locale`, with fallback, or exactly
    `version`) or the inline `template`, with sample `data`."""

    type: str = Field(max_length=128, examples=["order.paid"])
    channel: str = Field(max_length=16, examples=["push"])
    locale: str = Field(max_length=35, examples=["pt-BR"])
    version: int | None = Field(default=None, ge=1, description="Exactly this version at `locale`")
    template: TemplateIn | None = Field(default=None, description="Preview unsaved sources")
    data: dict[str, Any] = Field(
        default_factory=dict, examples=[{"order_id": "8841", "name": "Ana", "amount": "R$ 10"}]
    )


class TemplatePreviewOut(BaseModel):
    type: str
    channel: str
    locale_requested: str
    locale: str = Field(description="The locale actually used, after fallback")
    template_id: str | None = Field(description="The stored version rendered; null for inline")
    version: int | None
    rendered: dict[str, Any] = Field(
        description="push: title, body, data; inbox: title, body, and html and link if set"
    )
    variables: list[str]


# ---------------------------------------------------------------- in-app inbox


class InboxItemIn(Request):
    """Admin only, until ``POST /v1/events`` delivers to the inbox."""

    idempotency_key: Identifier = Field(
        description="Becomes the item's message id: a repeat returns the stored item"
    )
    category: Category
    title: Title
    body: Body
    # 4,000 characters keeps any request this model accepts under the API's 64 KiB body
    # limit even fully JSON-escaped; rendered inbox templates may hold up to 32 KiB.
    html: Annotated[Text, Field(max_length=MAX_INBOX_HTML)] | None = Field(
        default=None, description="Rich body, shown as is (trusted: the admin wrote it)"
    )
    link: Annotated[Text, Field(max_length=2048)] | None = Field(
        default=None, description="Opened on tap: a URL or a path starting with '/'"
    )
    data: Data = Field(default_factory=dict)
    event_type: Annotated[Text, Field(max_length=128)] | None = None


class InboxItemOut(View):
    id: str = Field(description="The item's id (for `…/inbox/{item_id}/read`)")
    seq: int = Field(description="Position in the inbox; the stream's event id")
    message_id: str
    event_type: str | None
    category: str
    status: Literal["delivered", "read"]
    title: str
    body: str
    html: str | None
    link: str | None
    data: dict[str, Any]
    created_at: UtcDatetime = Field(description="When it was stored (delivered)")
    read_at: UtcDatetime | None

    @classmethod
    def of(cls, i: InboxItem) -> Self:
        return cls(**read_fields(cls, i, id=i.item_id))


class InboxPageOut(BaseModel):
    items: list[InboxItemOut] = Field(description="Newest first")
    next_cursor: NextCursor
    unread_count: int


class UnreadCountOut(BaseModel):
    unread_count: int


class ReadAllIn(Request):
    up_to_seq: int | None = Field(
        default=None,
        ge=0,
        le=2**63 - 1,
        description="Only items up to this seq (the newest the app has shown); default all",
    )


class ReadAllOut(BaseModel):
    marked: int = Field(description="How many items this call marked read")
    unread_count: int


# ---------------------------------------------------------------- contacts, suppressions

MAX_ADDRESS = 320  # RFC 5321's 64 + @ + 255: longer is never an address


class ContactIn(Request):
    address: str = Field(
        min_length=1,
        max_length=MAX_ADDRESS,
        description=(
            "An e-mail address (the domain is lower-cased) or a phone number in"
            " international form (stored as E.164)"
        ),
        examples=["ana@example.com", "+62 812 3456 7890"],
    )
    verified: bool = Field(
        default=False,
        description="Whether your app verified it (a code sent and typed back)",
    )


class ContactOut(View):
    channel: str = Field(examples=["email"])
    address: str = Field(description="As stored, normalised", examples=["ana@example.com"])
    verified: bool
    updated_at: datetime


class ContactList(Paged):
    contacts: list[ContactOut]


class SuppressionIn(Request):
    channel: str = Field(max_length=16, examples=["email"])
    address: str = Field(min_length=1, max_length=MAX_ADDRESS, examples=["ana@example.com"])
    reason: str = Field(
        default=SuppressionReason.MANUAL.value,
        max_length=32,
        description=f"One of {', '.join(r.value for r in SuppressionReason)}",
    )


class SuppressionOut(View):
    channel: str
    address: str
    reason: str
    added_at: datetime
    source: str | None = Field(description="Who reported it: admin, a provider's name")


class SuppressionAdded(SuppressionOut):
    created: bool = Field(description="False when the address was already suppressed")


class SuppressionPageOut(BaseModel):
    items: list[SuppressionOut]
    next_cursor: str | None
