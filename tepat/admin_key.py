"""The admin API key: configured, or generated once and kept beside the SQLite data.

``TEPAT_ADMIN_API_KEY`` wins when set. On the embedded defaults (SQLite) with
no key configured, the first start generates one into ``<db dir>/.tepat-admin-key``
(mode 0600) and later starts read it back, so the key the CLI printed once
keeps working. MongoDB installs are shared and must configure a key.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tepat.config import ConfigError, Settings

KEY_FILE_NAME = ".tepat-admin-key"


def resolve_admin_key(settings: Settings) -> tuple[str, bool]:
    """``(key, generated)``; print the key once when ``generated`` is True.

    Raises :class:`ConfigError` when no key can be had (MongoDB without one).
    """
    if settings.admin_api_key is not None and settings.admin_api_key.get_secret_value():
        return settings.admin_api_key.get_secret_value(), False
    url = settings.database_url
    if not url.startswith("sqlite:///"):
        raise ConfigError("tepat: bad configuration: TEPAT_ADMIN_API_KEY: required with MongoDB")
    path = Path(url.removeprefix("sqlite:///")).parent / KEY_FILE_NAME
    if path.exists():
        return _read_key(path), False
    key = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write a private temp file, then link it into place: the key file appears
    # complete or not at all, and if two processes start at once one key wins.
    tmp = path.with_name(f"{KEY_FILE_NAME}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        os.link(tmp, path)
    except FileExistsError:
        return _read_key(path), False
    finally:
        tmp.unlink(missing_ok=True)
    return key, True


def _read_key(path: Path) -> str:
    key = path.read_text().strip()
    if not key:
        raise ConfigError(
            f"tepat: bad configuration: TEPAT_ADMIN_API_KEY: {path} is empty "
            "(delete it to generate a new key, or set the variable)"
        )
    return key
