"""Request and response bodies of the contacts and suppressions API (snake_case JSON)."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, Field

from api.schemas import Paged, Request, View, read_fields
from tepat.domain.contacts import Suppression, SuppressionReason

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

    @classmethod
    def of(cls, s: Suppression) -> Self:
        return cls(**read_fields(cls, s, reason=s.reason.value))


class SuppressionAdded(SuppressionOut):
    created: bool = Field(description="False when the address was already suppressed")

    @classmethod
    def added(cls, s: Suppression, created: bool) -> SuppressionAdded:
        return cls(**SuppressionOut.of(s).model_dump(), created=created)


class SuppressionPageOut(BaseModel):
    items: list[SuppressionOut]
    next_cursor: str | None
