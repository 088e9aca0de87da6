"""How an SMTP relay's replies become typed outcomes (:mod:`tepat.ports.channel`).

A transaction is ``MAIL FROM``, ``RCPT TO``, ``DATA`` (then the content and its final
reply). Which reply refused the message, and whether the relay could have taken it:

========================================== ======================== ==========================
what happened                              outcome                  why
========================================== ======================== ==========================
250 after the content                      Accepted(Message-ID)     the relay has it: ``sent``
4xx to any command (421, 450, 451, 452)    TryAgain, maybe_sent no  refused for now; retried
                                                                    with backoff
5xx to RCPT or after the content           Refused("smtp_<code>")   permanent; ``suppress``
                                                                    below
5xx to MAIL FROM                           Refused("smtp_<code>_    our sender is refused, not
                                           sender"), no suppress    the recipient
connect, TLS, EHLO or AUTH failure         TryAgain, maybe_sent no  nothing went out; a
                                                                    misconfigured relay is
                                                                    retried, not failed
connection lost or timeout before DATA     TryAgain, maybe_sent no  no content went out
connection lost or timeout during DATA     TryAgain, maybe_sent yes the content may have been
                                                                    taken before the reply
                                                                    was lost
========================================== ======================== ==========================

``suppress="hard_bounce"`` (the address is dead: later sends skip it ``suppressed``) on a
5xx to ``RCPT`` or to the content when the enhanced status code (RFC 3463) says the
mailbox is bad: ``5.1.x`` (bad address, no such user) or ``5.2.1`` (mailbox disabled).
Without an enhanced code, 550, 551 and 553 count as mailbox errors. An enhanced code of
another class (``550 5.7.1`` spam or policy block, ``552 5.2.2`` mailbox full) fails the
message without suppressing the address: the mailbox exists.

``throttled`` is set on a 4xx whose enhanced code is ``4.7.x`` or whose text says the
relay is rate limiting ("too many", "rate", "throttl"), so the sender can slow down.
"""

from __future__ import annotations

import re
from typing import Literal

from tepat.ports.channel import ChannelOutcome, Refused
from tepat.ports.try_again import TryAgain

Stage = Literal["mail", "rcpt", "data"]

HARD_BOUNCE = "hard_bounce"
_ENHANCED = re.compile(r"^\s*([245])\.(\d{1,3})\.(\d{1,3})\b")
_THROTTLE_TEXT = re.compile(r"too many|rate|throttl", re.IGNORECASE)
_MAILBOX_CODES = frozenset({550, 551, 553})


def enhanced_status(text: str) -> tuple[int, int, int] | None:
    """The RFC 3463 code a reply's text starts with (``5.1.1 <x>: no such user``)."""
    m = _ENHANCED.match(text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def outcome_for_reply(code: int, text: str, stage: Stage) -> ChannelOutcome:
    """A refusal (any reply other than the one that lets the transaction go on)."""
    enhanced = enhanced_status(text)
    if 400 <= code < 500:
        throttled = (enhanced is not None and enhanced[:2] == (4, 7)) or bool(
            _THROTTLE_TEXT.search(text)
        )
        return TryAgain(reason=f"smtp_{code}", throttled=throttled)
    if 500 <= code < 600:
        if stage == "mail":
            return Refused(reason=f"smtp_{code}_sender")
        return Refused(
            reason=f"smtp_{code}", suppress=HARD_BOUNCE if _dead_mailbox(code, enhanced) else None
        )
    # Not a reply SMTP defines for a refusal (1xx, 3xx where 2xx was due, garbage): the
    # relay is confused; another attempt on a fresh connection is the safe answer.
    return TryAgain(reason=f"smtp_{code}")


def _dead_mailbox(code: int, enhanced: tuple[int, int, int] | None) -> bool:
    if enhanced is None:
        return code in _MAILBOX_CODES
    return enhanced[1] == 1 or enhanced[1:] == (2, 1)
