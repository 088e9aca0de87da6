"""Where the admin API key comes from."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from tepat.admin_key import KEY_FILE_NAME, resolve_admin_key
from tepat.config import ConfigError, Settings

KEY = "configured-admin-key-0123456789"


def sqlite_settings(tmp_path: Path, key: str | None = None) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path}/data/t.db",
        admin_api_key=SecretStr(key) if key else None,
    )


def test_configured_key_wins(tmp_path: Path) -> None:
    assert resolve_admin_key(sqlite_settings(tmp_path, KEY)) == (KEY, False)
    assert not (tmp_path / "data" / KEY_FILE_NAME).exists()


def test_sqlite_generates_once_then_reads_back(tmp_path: Path) -> None:
    key, generated = resolve_admin_key(sqlite_settings(tmp_path))
    assert generated and len(key) >= 40
    path = tmp_path / "data" / KEY_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert resolve_admin_key(sqlite_settings(tmp_path)) == (key, False)
    assert [p.name for p in path.parent.iterdir()] == [KEY_FILE_NAME]  # no temp files left


def test_empty_key_file_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / KEY_FILE_NAME).write_text("\n")
    with pytest.raises(ConfigError, match="TEPAT_ADMIN_API_KEY"):
        resolve_admin_key(sqlite_settings(tmp_path))


def test_mongodb_requires_a_key() -> None:
    settings = Settings(database_url="mongodb://localhost/tepat", admin_api_key=None)
    with pytest.raises(ConfigError) as e:
        resolve_admin_key(settings)
    assert str(e.value) == ("tepat: bad configuration: TEPAT_ADMIN_API_KEY: required with MongoDB")
    assert (
        resolve_admin_key(settings.model_copy(update={"admin_api_key": SecretStr("k")}))[0] == "k"
    )
