"""APNs token-based authentication: one ES256 JWT (Apple's "provider token") from a .p8 key.

Apple takes a provider token for up to an hour and refuses one renewed more often than
every 20 minutes (``TooManyProviderTokenUpdates``), so every stream shares one token,
signed again once it is :data:`RENEW_AFTER` old, or once when APNs calls it expired or
invalid (:meth:`ProviderToken.renew`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from tepat.clock import Clock

RENEW_AFTER = timedelta(minutes=40)


def read_signing_key(path: str | Path) -> ec.EllipticCurvePrivateKey:
    """The P-256 private key of a PEM file (an APNs ``.p8``, a VAPID key); ValueError
    saying why it is not one."""
    try:
        key = load_pem_private_key(Path(path).read_bytes(), password=None)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path} is not an unencrypted PEM private key: {e}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError(f"{path} is not a P-256 (ES256) key")
    return key


class ProviderToken:
    """The provider token every request of one APNs client sends (``authorization: bearer``)."""

    def __init__(
        self, key: ec.EllipticCurvePrivateKey, *, key_id: str, team_id: str, clock: Clock
    ) -> None:
        self._key = key
        self._key_id = key_id
        self._team_id = team_id
        self._clock = clock
        self._token, self._signed_at = self._sign()

    def _sign(self) -> tuple[str, datetime]:
        now = self._clock.now()
        claims = {"iss": self._team_id, "iat": int(now.timestamp())}
        return jwt.encode(claims, self._key, algorithm="ES256", headers={"kid": self._key_id}), now

    def current(self) -> str:
        if self._clock.now() - self._signed_at >= RENEW_AFTER:
            self._token, self._signed_at = self._sign()
        return self._token

    def renew(self, stale: str) -> str:
        """A new token in place of ``stale``, which APNs refused; when another stream
        renewed it already, that one, so that a burst of refusals signs once."""
        if stale == self._token:
            self._token, self._signed_at = self._sign()
        return self._token
