"""Where a channel message goes: each user's contact point, checked against suppressions.

Called by the one send path for contact channels (``tepat/services/sending/channel_sender.py``) at
send time, for a whole batch at once: one read of the contacts, one of the
suppressions, whatever the number of users. Resolving at send time (not when the
message is planned) means an address changed or suppressed since is honoured.
"""

from __future__ import annotations

from collections.abc import Sequence

from tepat.domain.models import SkipReason
from tepat.ports.repositories.contacts import ContactRepository

#: What a user resolves to when there is nothing to send to (``Message.status_reason``
#: of the skipped message): a :class:`SkipReason`, never a plain string like an address.
SKIP_REASONS: frozenset[str] = frozenset({SkipReason.NO_CONTACT, SkipReason.SUPPRESSED})


async def resolve_targets(
    store: ContactRepository,
    channel: str,
    user_ids: Sequence[str],
    *,
    require_verified: bool = False,
) -> dict[str, str]:
    """For each user (every one of ``user_ids`` is a key): the address to send to on
    ``channel``, or a skip reason: ``"no_contact"`` (none set, or not verified when
    ``require_verified``, i.e. ``TEPAT_REQUIRE_VERIFIED_CONTACTS``) or ``"suppressed"``
    (the address is suppressed on that channel)."""
    contacts = await store.contacts_for_users(user_ids, channel)
    usable = {uid: c.address for uid, c in contacts.items() if c.verified or not require_verified}
    suppressed = (
        await store.suppressions_for(channel, sorted(set(usable.values()))) if usable else {}
    )
    targets: dict[str, str] = dict.fromkeys(user_ids, SkipReason.NO_CONTACT)
    targets.update(
        (uid, SkipReason.SUPPRESSED if a in suppressed else a) for uid, a in usable.items()
    )
    return targets
