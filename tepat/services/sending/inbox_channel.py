"""The in-app inbox as a Channel (tepat/ports/channel.py): a message is ``delivered`` once
its item is stored in the user's inbox, which wakes the user's open streams.

The item is keyed on (user, message id) (``InboxService.deliver`` is idempotent), so a
re-drive after a crash stores nothing twice: the message id is the idempotency key.
"""

from __future__ import annotations

from collections.abc import Sequence

from tepat.domain.errors import DomainError
from tepat.ports.channel import ChannelOutcome, Delivered, Outgoing, Refused, Withheld
from tepat.services.accounts import NotFound
from tepat.services.inbox import InboxService


class InboxChannel:
    name = "inbox"
    max_batch = 100

    def __init__(self, inbox: InboxService) -> None:
        self._inbox = inbox

    async def send(self, items: Sequence[Outgoing]) -> list[ChannelOutcome | Withheld]:
        return [await self._one(item) for item in items]

    async def _one(self, item: Outgoing) -> ChannelOutcome | Withheld:
        if not item.still_sendable():  # the items before it took their time
            return Withheld()
        m = item.message
        content = m.content
        try:
            await self._inbox.deliver(
                item.target,
                m.id,
                category=m.category,
                title=m.title,
                body=m.body,
                event_type=content.get("event_type"),
                html=content.get("html"),
                link=content.get("link"),
                data=m.data,
            )
        except NotFound:
            return Refused("user_deleted")
        except DomainError as e:  # a rendered link the inbox refuses
            return Refused(f"render_error: {e}")
        return Delivered()

    async def close(self) -> None:
        return None
