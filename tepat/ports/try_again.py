"""The one "try again" answer of every provider port (push, e-mail, SMS, webhooks): a
temporary failure means the same whichever provider gave it, and one recorder reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tepat.domain.retry import ProviderTerms


@dataclass(frozen=True, slots=True)
class TryAgain:
    """The request failed in a way worth retrying (429, 5xx, SMTP 4xx, network).

    ``maybe_sent`` says whether the provider may have acted on the request anyway:

    * ``False``, *not sent*: the request never reached the provider whole, or the provider
      refused it without acting (429, 408, 503): sending again duplicates nothing.
    * ``True``, *maybe sent*: the whole request went out and the answer was lost (a read
      timeout, an unreadable 200, an undocumented 5xx): sending again may deliver a
      second copy, as the category's ``maybe_sent`` policy decides.

    ``server_error`` marks a 5xx the provider documents as retryable: retried whatever the
    category's policy (the common, transient case); the rare one where the provider had
    acted is a possible duplicate, counted in ``tepat_maybe_sent_total{action="retried_5xx"}``.
    """

    reason: str
    retry_after: float | None = None
    maybe_sent: bool = False
    # The provider's rate limit refused it (429): the sender should slow down.
    throttled: bool = False
    # A 5xx its provider documents as retryable: retried, counted as a possible duplicate.
    server_error: bool = False
    # The provider was never called (its circuit breaker is open): the attempt the claim
    # counted is given back, so an outage spends the message's age limit, not its attempts.
    not_tried: bool = False
    # The provider's own terms for retrying it (FCM's), which the channel's policy is held to.
    terms: ProviderTerms | None = None
