"""``/v1/admin/apps``: the apps of this deployment and their keys (the operator key only).

An app is served by every process within ``TEPAT_APPS_REFRESH_SECONDS`` of a change (at
once by the process that made it): created, its settings changed (its runtime reopens
with them), disabled, a key made or revoked. A key is shown once, when it is made; the
store keeps its SHA-256. See docs/guides/apps.md.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Depends, Path, Request, Response
from pydantic import BaseModel, Field

from api.deps import admin_router, app_state
from api.problems import ProblemError, problem_responses
from api.schemas import Request as RequestBody
from api.schemas import Text, read_fields
from tepat.config import Settings
from tepat.domain.apps import APP_ID_PATTERN, APP_SETTINGS, MAX_KEYS_PER_APP, App, AppKey
from tepat.services.apps import AppService
from tepat.tenancy import Apps, settings_check

router = admin_router("admin/apps", "apps", responses=problem_responses(404))

AppId = Annotated[
    str,
    Path(pattern=APP_ID_PATTERN, max_length=31, description="The app's id", examples=["shop"]),
]
KeyId = Annotated[str, Path(pattern=r"^[0-9a-f]{1,32}$", description="The key's id")]
# A setting's value: what its TEPAT_ variable would hold, as JSON.
SettingValue = str | int | float | bool | None | dict[str, Any] | list[Any]
_SECRET_SETTINGS = frozenset(
    name
    for name in APP_SETTINGS
    if "SecretStr" in str(Settings.model_fields[name].annotation)
    or name == "smtp_secondary_url"  # may hold the relay's password
)


class AppIn(RequestBody):
    app_id: str = Field(pattern=APP_ID_PATTERN, max_length=31, examples=["shop"])
    name: Text = Field(min_length=1, max_length=200)
    settings: dict[str, SettingValue] = Field(
        default_factory=dict,
        max_length=len(APP_SETTINGS),
        description="The app's own settings, by name (`expo_access_token`, `jwt_secret`,"
        " `categories`, …: docs/guides/apps.md lists them)",
    )


class AppPatch(RequestBody):
    name: Text | None = Field(default=None, min_length=1, max_length=200)
    settings: dict[str, SettingValue] | None = Field(
        default=None, max_length=len(APP_SETTINGS), description="Replaces the settings whole"
    )
    disabled: bool | None = None


class AppOut(BaseModel):
    app_id: str
    name: str
    created_at: datetime
    version: int
    disabled: bool
    settings: dict[str, Any] = Field(description="Secrets shown as `********`")
    served: bool = Field(description="Whether this process serves the app now")

    @classmethod
    def of(cls, app: App, apps: Apps) -> AppOut:
        settings = {
            name: "********" if name in _SECRET_SETTINGS and value else value
            for name, value in app.settings.items()
        }
        served = apps.runtime(app.app_id) is not None
        return cls(**read_fields(cls, app, settings=settings, served=served))


class KeyIn(RequestBody):
    role: Literal["admin", "events"]
    poster: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_-]{0,63}$",
        description="An events key's name (its events' ids are `<poster>:<id>`); the app's"
        " id when unset",
    )
    event_types: list[Annotated[str, Field(max_length=100)]] | None = Field(
        default=None, max_length=100, description="An events key's event types (unset: all)"
    )


class KeyOut(BaseModel):
    key_id: str
    app_id: str
    role: str
    poster: str | None
    event_types: list[str] | None
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, key: AppKey) -> KeyOut:
        types = sorted(key.event_types) if key.event_types is not None else None
        return cls(**read_fields(cls, key, event_types=types))


class NewKeyOut(KeyOut):
    key: str = Field(description="The key itself: shown this once")


class NewAppOut(BaseModel):
    app: AppOut
    admin_key: NewKeyOut


def _service(request: Request) -> AppService:
    apps: Apps = request.app.state.apps
    if apps.registry is None:  # an API built over one runtime (create_app without apps)
        raise ProblemError(404, "this API serves the default app alone: no apps to manage")
    return AppService(apps.registry, apps.default.clock, settings_check(apps.base))


Service = Annotated[AppService, Depends(_service)]
Served = Annotated[Apps, app_state("apps")]


def _new_key(key: AppKey, plain: str) -> NewKeyOut:
    return NewKeyOut(**KeyOut.of(key).model_dump(), key=plain)


@router.post("", status_code=201, summary="Create an app and its first admin key")
async def create_app(body: AppIn, service: Service, apps: Served) -> NewAppOut:
    app, key, plain = await service.create(body.app_id, body.name, body.settings)
    await apps.refresh()
    return NewAppOut(app=AppOut.of(app, apps), admin_key=_new_key(key, plain))


@router.get("", summary="Every app")
async def list_apps(service: Service, apps: Served) -> list[AppOut]:
    return [AppOut.of(a, apps) for a in await service.list_apps()]


@router.get("/{app_id}", summary="One app")
async def get_app(app_id: AppId, service: Service, apps: Served) -> AppOut:
    return AppOut.of(await service.get(app_id), apps)


@router.patch("/{app_id}", summary="Change an app's name or settings, or disable it")
async def update_app(app_id: AppId, body: AppPatch, service: Service, apps: Served) -> AppOut:
    app = await service.update(
        app_id, name=body.name, settings=body.settings, disabled=body.disabled
    )
    await apps.refresh()
    return AppOut.of(app, apps)


@router.get("/{app_id}/keys", summary="The app's keys (never the keys themselves)")
async def list_keys(app_id: AppId, service: Service) -> list[KeyOut]:
    return [KeyOut.of(k) for k in await service.keys(app_id)]


@router.post(
    "/{app_id}/keys",
    status_code=201,
    summary=f"Make a key (at most {MAX_KEYS_PER_APP} active per app); shown once",
)
async def add_key(app_id: AppId, body: KeyIn, service: Service, apps: Served) -> NewKeyOut:
    types = frozenset(body.event_types) if body.event_types is not None else None
    key, plain = await service.add_key(app_id, body.role, body.poster, types)
    await apps.refresh()
    return _new_key(key, plain)


@router.delete(
    "/{app_id}/keys/{key_id}", status_code=204, summary="Revoke a key (at once in this process)"
)
async def revoke_key(app_id: AppId, key_id: KeyId, service: Service, apps: Served) -> Response:
    await service.revoke_key(app_id, key_id)
    await apps.refresh()
    return Response(status_code=204)
