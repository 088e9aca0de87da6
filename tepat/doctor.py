"""``tepat doctor``: is this deployment able to send? One verdict per check, each with a fix.

Checks run in order (:func:`diagnose`) and each one reports as soon as it is done; a
check that cannot run because an earlier one failed is reported as skipped. None sends
anything: the broker's scheduler is probed on a queue of its own (``tepat.doctor.<random>``,
never a category queue, so no consumer takes it), and each provider's credentials by a
request that changes nothing, where the provider has one. The provider checks also run
per app (issue 23): each enabled app of the registry with its Settings, its lines named
``app <id>: <check>`` (:func:`check_apps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from functools import partial
from pathlib import Path

from tepat.adapters.secret_box import SecretKeyError
from tepat.adapters.stomp.url import redact
from tepat.clock import Clock, SystemClock
from tepat.config import ConfigError, Settings
from tepat.domain.apps import DEFAULT_APP
from tepat.domain.errors import DomainError
from tepat.domain.zones import TZDATA_RELEASE
from tepat.ports.broker import Broker, Delivery
from tepat.ports.push import Receipts, Rejected
from tepat.ports.store import Store
from tepat.ports.try_again import TryAgain
from tepat.services.planning.creator import TZDATA_META_KEY, TZDATA_PROGRESS_KEY

EXPO_HOST = "https://exp.host"
FCM_HOST = "https://fcm.googleapis.com"
# Apple's production and development environments: both real.
APNS_HOSTS = ("https://api.push.apple.com", "https://api.sandbox.push.apple.com")
TWILIO_API = "https://api.twilio.com"
#: The scheduler takes an id that no ticket ever had; Expo answers it with no receipt.
PROBE_TICKET_ID = "00000000-0000-4000-8000-000000000000"


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str = ""

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL

    def line(self) -> str:
        text = f"{self.status.value:<4}  {self.name:<10} {self.detail}"
        return f"{text}; fix: {self.hint}" if self.hint else text


# How the scheduler check probes: the delay asked for and what counts as "about" it.
PROBE_DELAY = 1.0
PROBE_EARLIEST = 0.8  # ActiveMQ fires at 500 ms granularity, never before the delay
PROBE_LATEST = 5.0  # the first job after a broker start takes ~2.3 s for a 2 s delay
PROBE_GIVE_UP = 10.0


async def diagnose(load: Callable[[], Settings], wait: float = 10.0) -> AsyncIterator[Check]:
    """Every check, in order, as each finishes."""
    from tepat.runtime import make_broker, make_store

    clock = SystemClock()
    try:
        settings = load()
    except ConfigError as e:
        yield Check("config", Status.FAIL, str(e), "set the variable it names (see README)")
        for name in ("store", "broker", "scheduler", "expo", "tzdata"):
            yield Check(name, Status.SKIP, "needs a valid configuration")
        return
    yield config_check(settings)

    async with AsyncExitStack() as stack:
        candidate = make_store(settings, clock)
        check, opened = await _store_check(settings, candidate, wait)
        store = candidate if opened else None
        if opened:
            stack.push_async_callback(_quietly, candidate.close)
        yield check

        broker = make_broker(settings, clock)
        stack.push_async_callback(_quietly, broker.close)
        check = await _broker_check(settings, broker, wait)
        yield check
        if check.failed:
            yield Check("scheduler", Status.SKIP, "needs the broker")
        else:
            yield await scheduler_check(broker)

        apps, refused = await registered_apps(settings, store)
        for check in refused:
            yield check
        async for check in check_apps([(DEFAULT_APP, settings), *apps], wait):
            yield check

        yield await tzdata_check(store, clock.now(), wait)


async def registered_apps(
    settings: Settings, store: Store | None
) -> tuple[list[tuple[str, Settings]], list[Check]]:
    """The enabled apps of the registry in the default app's store, each with its Settings
    as a process would open it; and a failed check for each app whose settings are refused
    (a process logs it 'app not opened' and serves the others), or for the registry if it
    cannot be read. None without the store (its check failed)."""
    from tepat.tenancy import app_settings
    from tepat.wiring import app_repository

    if store is None:
        return [], []
    try:
        listed = await app_repository(settings, store).list_apps()
    except SecretKeyError as e:
        hint = "set TEPAT_SECRETS_KEY to the key the apps' settings were sealed with"
        return [], [Check("apps", Status.FAIL, f"registry unreadable: {e}", hint)]
    apps: list[tuple[str, Settings]] = []
    refused: list[Check] = []
    for app in listed:
        if app.disabled:
            continue
        try:
            apps.append((app.app_id, app_settings(settings, app)))
        except DomainError as e:
            hint = f"PATCH /v1/admin/apps/{app.app_id} with settings that hold, or disable it"
            refused.append(Check(f"app {app.app_id}: config", Status.FAIL, str(e), hint))
    return apps, refused


async def provider_checks(settings: Settings, clock: Clock, wait: float) -> AsyncIterator[Check]:
    """The provider accounts of ``settings``, in order: Expo, then each configured one."""
    from tepat.runtime import make_push_provider

    push = make_push_provider(settings, clock)
    try:
        yield await expo_check(settings, push.receipts([PROBE_TICKET_ID]), wait)
    finally:
        await _quietly(push.close)
    fcm = await fcm_check(settings, clock, wait)
    for check in (fcm, apns_check(settings, clock), webpush_check(settings, clock)):
        if check is not None:
            yield check
    for secondary in (False, True):  # failover's second account and relay too
        if (twilio := await twilio_check(settings, wait, secondary)) is not None:
            yield twilio
        if (smtp := await smtp_check(settings, wait, secondary)) is not None:
            yield smtp


async def check_apps(apps: Sequence[tuple[str, Settings]], wait: float) -> AsyncIterator[Check]:
    """Each app's provider accounts (issue 23), app by app, as each check finishes: the
    ``(app id, that app's Settings)`` given. The default app's lines read as they always
    have; another app's are named ``app <id>: <check>``, so each verdict says whose
    account it judged."""
    for app_id, settings in apps:
        async for check in provider_checks(settings, SystemClock(), wait):
            yield (
                check
                if app_id == DEFAULT_APP
                else replace(check, name=f"app {app_id}: {check.name}")
            )


def config_check(settings: Settings) -> Check:
    notes = [
        f"store {redact(settings.database_url)}",
        f"broker {redact(settings.broker_url)}",
        f"Expo {settings.expo_url}" + (" with access token" if settings.expo_access_token else ""),
    ]
    if settings.jwt_secret is None:
        notes.append("TEPAT_JWT_SECRET unset (end-user tokens refused)")
    return Check("config", Status.OK, "; ".join(notes))


async def _store_check(settings: Settings, store: Store, wait: float) -> tuple[Check, bool]:
    url = redact(settings.database_url)
    if settings.database_url.startswith("sqlite:///"):
        early = _sqlite_file_check(url, Path(settings.database_url.removeprefix("sqlite:///")))
        if early is not None:
            return early, False
    fail = partial(Check, "store", Status.FAIL)
    opened = False
    try:
        await asyncio.wait_for(store.open(), wait)
        opened = True
        await asyncio.wait_for(store.ping(), wait)
    except Exception as e:
        if opened:
            return fail(
                f"{url} opened but does not answer: {_why(e)}",
                "check the database server's health and disk",
            ), True
        return fail(
            f"cannot open {url}: {_why(e)}",
            "start the database or correct TEPAT_DATABASE_URL (host, port, credentials, path)",
        ), False
    return Check("store", Status.OK, f"{url} answers"), True


def _sqlite_file_check(url: str, path: Path) -> Check | None:
    """A verdict without opening, when there is no file (opening would create one)."""
    fail = partial(Check, "store", Status.FAIL)
    if not path.parent.is_dir():
        return fail(
            f"{url}: directory {path.parent} does not exist",
            "create it, or point TEPAT_DATABASE_URL at a writable path",
        )
    # The directory takes SQLite's journal and the generated admin key; the file, writes.
    why = _cannot_write(path.parent, path)
    if why is not None:
        return fail(
            f"{url}: {why}",
            "give the service's user write access to that directory and file, or point"
            " TEPAT_DATABASE_URL at a writable path",
        )
    if not path.exists():
        return Check("store", Status.OK, f"{url}: not created yet (the first start creates it)")
    return None


def _cannot_write(directory: Path, file: Path) -> str | None:
    """Why SQLite could not write there (None: it can), found by trying: permission bits
    say nothing for root, or on a read-only mount."""
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".tepat-doctor-"):
            pass
    except OSError as e:
        return f"directory {directory} is not writable ({e.strerror or e})"
    if file.exists():
        try:
            with file.open("ab"):  # appends nothing: the content is untouched
                pass
        except OSError as e:
            return f"file {file} is not writable ({e.strerror or e})"
    return None


async def _broker_check(settings: Settings, broker: Broker, wait: float) -> Check:
    url = redact(settings.broker_url)
    try:
        await asyncio.wait_for(broker.connect(), wait)
        await asyncio.wait_for(broker.ping(), wait)
    except Exception as e:
        return Check(
            "broker",
            Status.FAIL,
            f"cannot reach {url}: {_why(e)}",
            "start the broker (scripts/activemq.sh start BASE, or `docker compose up activemq`)"
            " or correct host, port, user and password in TEPAT_BROKER_URL",
        )
    if settings.broker_url == "embedded://":
        return Check("broker", Status.OK, f"{url}: in-process (only `tepat serve` can use it)")
    return Check("broker", Status.OK, f"{url} answers")


async def scheduler_check(broker: Broker) -> Check:
    """Publish one probe with ``PROBE_DELAY`` on a private queue and time its arrival."""
    queue = f"tepat.doctor.{uuid.uuid4().hex[:12]}"
    body = f"tepat doctor probe {uuid.uuid4().hex}".encode()
    fail = partial(Check, "scheduler", Status.FAIL)
    try:
        async with broker.consume([queue], prefetch=1) as deliveries:
            started = time.monotonic()
            # The adapter fires messages its lead early (TEPAT_BROKER_LEAD_SECONDS) for
            # consumers to hold until their instant; the probe asks for its delay net.
            lead = float(getattr(broker, "lead_seconds", 0.0))
            await broker.publish(queue, body, delay_seconds=PROBE_DELAY + lead)
            elapsed = await asyncio.wait_for(
                _arrival(broker, deliveries, body, started), PROBE_GIVE_UP
            )
    except TimeoutError:
        return fail(
            f"a probe published with a {PROBE_DELAY:g} s delay on {queue} did not arrive"
            f" within {PROBE_GIVE_UP:g} s",
            "look at the broker's log: the scheduler store (KahaDB) may be full or broken",
        )
    except Exception as e:
        return fail(f"probe on {queue} failed: {_why(e)}", "check the broker")
    said = f"a probe with a {PROBE_DELAY:g} s delay arrived after {elapsed:.2f} s"
    if elapsed < PROBE_EARLIEST:
        return fail(
            f"{said}: delays are ignored",
            'enable the scheduler: schedulerSupport="true" on <broker> in activemq.xml'
            " (deploy/activemq/conf/activemq.xml), then restart the broker",
        )
    if elapsed > PROBE_LATEST:
        return Check(
            "scheduler",
            Status.WARN,
            f"{said}: the broker's scheduler is slow",
            "look at the broker's load and its scheduler store",
        )
    return Check("scheduler", Status.OK, said)


async def _arrival(
    broker: Broker, deliveries: AsyncIterator[Delivery], body: bytes, started: float
) -> float:
    async for delivery in deliveries:
        await broker.ack(delivery)
        if delivery.body == body:
            return time.monotonic() - started
    raise RuntimeError("the probe's subscription ended")


async def expo_check(settings: Settings, dry_request: Awaitable[object], wait: float) -> Check:
    """``dry_request``: a receipts call for an id that does not exist."""
    where = settings.expo_url.rstrip("/")
    token = settings.expo_access_token is not None
    fail = partial(Check, "expo", Status.FAIL)
    try:
        result = await asyncio.wait_for(dry_request, wait)
    except Exception as e:
        result = e
    if isinstance(result, Rejected):
        return fail(
            f"{where} refused the request: {result.reason}",
            "set TEPAT_EXPO_ACCESS_TOKEN to a valid token (expo.dev: account settings,"
            " access tokens); it is required once push security is enabled for the project",
        )
    if not isinstance(result, Receipts):
        return fail(
            f"cannot reach {where}: {getattr(result, 'reason', None) or _why(result)}",
            "correct TEPAT_EXPO_URL, or let this host reach it (firewall, proxy)",
        )
    detail = f"{where} answers" + (" and accepts the access token" if token else "")
    if not token and where == EXPO_HOST:
        detail += "; no access token (fine unless push security is enabled)"
    also = " and TEPAT_EXPO_ACCESS_TOKEN"
    return _ok_unless_sandbox("expo", detail, "Expo", where, [EXPO_HOST], "TEPAT_EXPO_URL", also)


async def fcm_check(settings: Settings, clock: Clock, wait: float) -> Check | None:
    """FCM's service account: an access token fetched from its token endpoint (sends
    nothing); None (no line) when FCM is not configured."""
    from tepat.adapters.fcm_auth import FcmAuth, read_service_account

    path = settings.fcm_credentials_file
    if path is None:
        return None
    fail = partial(Check, "fcm", Status.FAIL)
    try:
        credentials = read_service_account(path)
    except ValueError as e:
        return fail(str(e), _FCM_KEY_HINT)
    account = f"service account {credentials.service_account_email}"
    auth = FcmAuth(credentials, clock)
    try:
        token = await asyncio.wait_for(auth.token(), wait)
    except Exception as e:
        token = TryAgain(_why(e))
    finally:
        auth.close()
    if isinstance(token, Rejected):
        return fail(f"{account}: {token.reason}", _FCM_KEY_HINT)
    if isinstance(token, TryAgain):
        return fail(
            f"cannot fetch an access token for the {account}: {token.reason}",
            "let this host reach the key file's token_uri (firewall, proxy)",
        )
    detail = f"{account} got an access token for project {settings.fcm_project_id}"
    return _ok_unless_sandbox("fcm", detail, "FCM", settings.fcm_url, [FCM_HOST], "TEPAT_FCM_URL")


_FCM_KEY_HINT = (
    "set TEPAT_FCM_CREDENTIALS_FILE to a current key of the project's service account"
    " (Firebase console: project settings, service accounts, generate new private key)"
)


def apns_check(settings: Settings, clock: Clock) -> Check | None:
    """The APNs auth key: it parses and signs a provider token. Nothing goes to Apple: APNs
    has no request that checks a token without sending a notification. None (no line)
    when APNs is not configured."""
    from tepat.adapters.apns_auth import ProviderToken, read_signing_key

    path, key_id, team_id = settings.apns_key_file, settings.apns_key_id, settings.apns_team_id
    if not (path and key_id and team_id):
        return None
    try:
        ProviderToken(read_signing_key(path), key_id=key_id, team_id=team_id, clock=clock)
    except ValueError as e:
        return Check(
            "apns",
            Status.FAIL,
            str(e),
            "set TEPAT_APNS_KEY_FILE to the .p8 auth key (Apple developer account: keys)",
        )
    detail = (
        f"key {key_id} of team {team_id} signs a provider token; APNs cannot check it"
        " without sending a notification: a wrong key id or team shows at the first send"
        " (403 InvalidProviderToken)"
    )
    url = settings.apns_url
    return _ok_unless_sandbox("apns", detail, "APNs", url, APNS_HOSTS, "TEPAT_APNS_URL")


def webpush_check(settings: Settings, clock: Clock) -> Check | None:
    """The VAPID key: it parses and signs, and the line names its public key, which the
    app's browsers must subscribe with. Nothing is sent: a push service checks the key
    only on a send. None (no line) when Web Push is not configured."""
    from tepat.adapters.apns_auth import read_signing_key
    from tepat.adapters.webpush_push import Vapid

    path, subject = settings.webpush_vapid_private_key_file, settings.webpush_vapid_subject
    if not (path and subject):
        return None
    try:
        vapid = Vapid(read_signing_key(path), subject, clock)
        vapid.header("https://push.example")
    except ValueError as e:
        return Check(
            "webpush",
            Status.FAIL,
            str(e),
            "set TEPAT_WEBPUSH_VAPID_PRIVATE_KEY_FILE to the VAPID key (P-256, PEM)",
        )
    detail = (
        f"the VAPID key signs for {subject}; browsers must subscribe with its public key"
        f" (applicationServerKey) {vapid.public_key}"
    )
    return Check("webpush", Status.OK, detail)


async def twilio_check(settings: Settings, wait: float, secondary: bool = False) -> Check | None:
    """The Twilio credentials, with a fetch of the account (sends nothing); None (no
    line) when Twilio is not configured. ``secondary``: the failover account's."""
    from tepat.wiring import build_sms_channel

    channel = build_sms_channel(settings, SystemClock(), secondary)
    if channel is None:
        return None
    name = "twilio_secondary" if secondary else "twilio"
    var = f"TEPAT_{name.upper()}_"
    where = (settings.twilio_secondary_url if secondary else None) or settings.twilio_url
    fail = partial(Check, name, Status.FAIL)
    try:
        response = await asyncio.wait_for(channel.check_account(), wait)
    except Exception as e:
        return fail(
            f"cannot reach {where}: {_why(e)}",
            f"correct {var}URL, or let this host reach it (firewall, proxy)",
        )
    finally:
        await _quietly(channel.close)
    if response.status_code in (401, 403):
        return fail(
            f"{where} refused the account SID and auth token (HTTP {response.status_code})",
            f"set {var}ACCOUNT_SID and {var}AUTH_TOKEN from the Twilio"
            " console (Account info); the token is the account's current primary one",
        )
    if response.status_code != 200:
        return fail(
            f"{where} answered HTTP {response.status_code} for the account",
            f"check {var}URL (the API's base URL, https://api.twilio.com)",
        )
    detail = f"{where} accepts the account SID and auth token"
    if settings.public_url is None:
        return Check(
            name,
            Status.WARN,
            f"{detail}; TEPAT_PUBLIC_URL is unset: no status callbacks, SMS stay sent",
            "set TEPAT_PUBLIC_URL to the https URL Twilio reaches this API at",
        )
    return _ok_unless_sandbox(name, detail, "Twilio", where, [TWILIO_API], f"{var}URL")


def _ok_unless_sandbox(
    name: str, detail: str, provider: str, url: str, real: Sequence[str], var: str, also: str = ""
) -> Check:
    """OK (credentials that passed), or a warning when ``url`` is none of the
    ``provider``'s ``real`` ones (a sandbox?), since nothing real is sent then."""
    if url.rstrip("/") in real:
        return Check(name, Status.OK, detail)
    return Check(
        name,
        Status.WARN,
        f"{detail}; not {provider} itself (a sandbox?): nothing real is sent",
        f"to send for real set {var}={real[0]}{also}",
    )


async def smtp_check(settings: Settings, wait: float, secondary: bool = False) -> Check | None:
    """The SMTP relay: connect, TLS and login as a send would, then NOOP and QUIT
    (sends nothing); None (no line) when e-mail is not configured. ``secondary``: the
    failover relay, whose host, port and login are ``TEPAT_SMTP_SECONDARY_URL``'s."""
    import ssl

    import aiosmtplib

    from tepat.adapters.smtp_email import SmtpEmailChannel
    from tepat.wiring import smtp_config

    config = smtp_config(settings, secondary)
    if config is None:
        return None
    where = f"{config.host}:{config.resolved_port} ({config.tls})"
    name = "smtp_secondary" if secondary else "smtp"
    fail = partial(Check, name, Status.FAIL)
    if secondary:  # the second relay's host, port and login are all in its URL
        host = at = "TEPAT_SMTP_SECONDARY_URL"
        login_vars = f"{host}'s user and password"
    else:
        host, at = "TEPAT_SMTP_HOST", "TEPAT_SMTP_HOST and TEPAT_SMTP_PORT"
        login_vars = "TEPAT_SMTP_USERNAME and TEPAT_SMTP_PASSWORD"
    channel = SmtpEmailChannel(config, SystemClock())
    try:
        greeting = await asyncio.wait_for(channel.probe(), wait)
    except aiosmtplib.SMTPAuthenticationError as e:
        return fail(
            f"{where} refused the login ({e.code} {e.message.splitlines()[0]})",
            f"set {login_vars} to the relay's credentials",
        )
    except (ssl.SSLCertVerificationError, aiosmtplib.SMTPException) as e:
        # The client raises the certificate error itself, or wraps it in its own.
        cert = e if isinstance(e, ssl.SSLCertVerificationError) else e.__cause__
        if isinstance(cert, ssl.SSLCertVerificationError):
            return fail(
                f"{where}: the relay's certificate does not verify ({cert.verify_message})",
                f"set TEPAT_SMTP_CA_FILE to the CA that signed it, or correct {host}"
                " to the name in the certificate",
            )
        return fail(
            f"{where}: {_why(e)}",
            f"check {at} and TEPAT_SMTP_TLS (starttls on 587,"
            " implicit on 465) against the relay's documentation",
        )
    except Exception as e:
        return fail(
            f"cannot reach {where}: {_why(e)}",
            f"correct {at}, or let this host reach the relay",
        )
    finally:
        await _quietly(channel.close)
    login = " and accepts the login" if config.username else ""
    return Check(name, Status.OK, f"{where} answers ({greeting[:60]}){login}; nothing sent")


async def tzdata_check(store: Store | None, now: datetime, wait: float) -> Check:
    release = TZDATA_RELEASE
    ok, warn = partial(Check, "tzdata", Status.OK), partial(Check, "tzdata", Status.WARN)
    year = int(release[:4]) if release[:4].isdigit() else None
    if year is not None and year < now.year - 1:
        return warn(
            f"tzdata {release} is from {year}: zones change several times a year",
            "upgrade the tzdata package (pip install -U tzdata) and restart the scheduler",
        )
    if store is None:
        return ok(f"tzdata {release} (store not open: not compared)")
    try:
        planned = await asyncio.wait_for(store.get_meta(TZDATA_META_KEY), wait)
        progress = await asyncio.wait_for(store.get_meta(f"{TZDATA_PROGRESS_KEY}:{release}"), wait)
    except Exception as e:
        return warn(f"tzdata {release}; store meta unreadable: {_why(e)}")
    if planned is None:
        return ok(f"tzdata {release} (the scheduler records it on its first run)")
    if planned != release:
        doing = f", re-planning (users done up to {progress!r})" if progress else ""
        return warn(
            f"tzdata {release} here, messages planned with {planned}{doing}",
            "run `tepat scheduler` (or `serve`) with this release: it re-plans every user once;"
            " if this host is the older one, upgrade its tzdata package",
        )
    return ok(f"tzdata {release}, the release messages were planned with")


def _why(e: object) -> str:
    if isinstance(e, TimeoutError):
        return "timed out"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


async def _quietly(close: Callable[[], Awaitable[None]]) -> None:
    # Closing after a failed check must not hide the verdicts.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(close(), 5)
