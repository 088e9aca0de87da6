"""Webhook signing secrets encrypted at rest, the one rule for every store.

With ``TEPAT_SECRETS_KEY`` (a Fernet key: AES-128-CBC with HMAC-SHA256) a secret is
written as ``enc:v1:<Fernet token>``; without it, as it is (the security page says so).
Reading decrypts what carries the marker and passes plain values through, so secrets
written before the key was set keep signing; rotating a subscription's secret rewrites
all of them encrypted. The secrets must be readable (they sign every delivery), so they
are encrypted, not hashed.

:class:`SealedWebhooks` applies the rule around any :class:`WebhookRepository`; the
wiring hands it to the webhook service and the webhook channel, so neither store
adapter knows about it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from cryptography.fernet import Fernet, InvalidToken

from tepat.domain.webhooks import StatusChangeEntry, WebhookSubscription
from tepat.ports.repositories.webhooks import WebhookRepository

MARKER = "enc:v1:"


class SecretKeyError(RuntimeError):
    """A stored secret cannot be read with the configured key (or without one)."""


def check_key(key: str) -> None:
    """Raise ValueError unless ``key`` is a Fernet key (32 url-safe base64 bytes)."""
    try:
        Fernet(key.encode())
    except ValueError:
        raise ValueError(
            "not a Fernet key: 32 url-safe base64-encoded bytes (make one with"
            ' python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key()'
            '.decode())")'
        ) from None


class SecretBox:
    """Encrypts (with a key) and decrypts secrets; plain through without a key."""

    def __init__(self, key: str | None, what: str = "a webhook secret") -> None:
        """``what``: the secret's name in a :class:`SecretKeyError`'s message."""
        self._fernet = Fernet(key.encode()) if key else None
        self._what = what

    def seal(self, secret: str) -> str:
        if self._fernet is None or secret.startswith(MARKER):
            return secret
        return MARKER + self._fernet.encrypt(secret.encode()).decode()

    def open(self, stored: str) -> str:
        if not stored.startswith(MARKER):
            return stored
        if self._fernet is None:
            raise SecretKeyError(
                f"{self._what} is stored encrypted but TEPAT_SECRETS_KEY is not set"
            )
        try:
            return self._fernet.decrypt(stored.removeprefix(MARKER).encode()).decode()
        except InvalidToken:
            raise SecretKeyError(
                f"{self._what} does not decrypt with TEPAT_SECRETS_KEY (was the key changed?)"
            ) from None

    def seal_all(self, sub: WebhookSubscription) -> WebhookSubscription:
        return _with_secrets(sub, self.seal)

    def open_all(self, sub: WebhookSubscription) -> WebhookSubscription:
        return _with_secrets(sub, self.open)


def _with_secrets(sub: WebhookSubscription, change: Callable[[str], str]) -> WebhookSubscription:
    secrets = tuple(dataclasses.replace(s, secret=change(s.secret)) for s in sub.secrets)
    return dataclasses.replace(sub, secrets=secrets)


class SealedWebhooks:
    """A :class:`WebhookRepository` whose stored secrets are sealed by ``box``."""

    def __init__(self, inner: WebhookRepository, box: SecretBox) -> None:
        self._inner = inner
        self._box = box

    async def create_webhook_subscription(self, sub: WebhookSubscription) -> bool:
        return await self._inner.create_webhook_subscription(self._box.seal_all(sub))

    async def get_webhook_subscription(self, subscription_id: str) -> WebhookSubscription | None:
        sub = await self._inner.get_webhook_subscription(subscription_id)
        return None if sub is None else self._box.open_all(sub)

    async def list_webhook_subscriptions(self) -> list[WebhookSubscription]:
        return [self._box.open_all(s) for s in await self._inner.list_webhook_subscriptions()]

    async def update_webhook_subscription(
        self, sub: WebhookSubscription, expect_version: int
    ) -> bool:
        return await self._inner.update_webhook_subscription(
            self._box.seal_all(sub), expect_version
        )

    async def delete_webhook_subscription(self, subscription_id: str) -> bool:
        return await self._inner.delete_webhook_subscription(subscription_id)

    async def webhook_journal(self, limit: int) -> list[StatusChangeEntry]:
        return await self._inner.webhook_journal(limit)

    async def drop_webhook_journal(self, entries: Sequence[StatusChangeEntry]) -> int:
        return await self._inner.drop_webhook_journal(entries)
