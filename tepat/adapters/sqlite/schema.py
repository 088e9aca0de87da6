"""Opening the database file: pragmas (WAL, busy timeout, cache) and the numbered migrations."""

from __future__ import annotations

import sqlite3
import time as _time
from pathlib import Path

Conn = sqlite3.Connection

BUSY_TIMEOUT_S = 30.0
CACHE_KIB = 64 * 1024

_CLEAR_MARK = (
    "UPDATE users SET plan_stamp = plan_stamp + 1, plan_from = NULL, plan_next_at = NULL, "
    "plan_fp = NULL WHERE user_id = {user}"
)

# Status webhooks (migration 11): which message statuses reach the journal, and when.
_WEBHOOK_ANY = "EXISTS (SELECT 1 FROM webhook_subscriptions WHERE enabled = 1)"
_WEBHOOK_JOURNALED = (
    "NEW.status IN ('sent', 'delivered', 'failed', 'skipped', 'missed') "
    f"AND NEW.user_id != '~webhook' AND {_WEBHOOK_ANY}"
)
# The same test as migration 19 writes it: one comparison per status. SQLite codes an IN
# list of more than two constants as a temporary b-tree, built once per statement but
# once per row inside a trigger: a claim built one for every message it took, a fifth
# of its cost (and so did the sent after it), though neither journals anything.
_WEBHOOK_JOURNALED_EACH = (
    "(NEW.status = 'sent' OR NEW.status = 'delivered' OR NEW.status = 'failed' "
    "OR NEW.status = 'skipped' OR NEW.status = 'missed') "
    f"AND NEW.user_id != '~webhook' AND {_WEBHOOK_ANY}"
)
_WEBHOOK_JOURNAL_MESSAGE = (
    "INSERT INTO webhook_journal (message_id, status, reason, user_id, category, channel, at) "
    "VALUES (NEW.id, NEW.status, NEW.status_reason, NEW.user_id, NEW.category, NULL, "
    "NEW.updated_at);"
)

# Numbered migrations, applied in order, each exactly once, recorded in
# ``schema_migrations``. Never edit a released one: append a new number.
# A message counted under its (new) status, category and channel.
_COUNT_NEW = (
    "INSERT INTO message_counts VALUES (new.status, new.category, new.channel, 1) "
    "ON CONFLICT DO UPDATE SET n = n + 1"
)

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            """CREATE TABLE meta (
                key TEXT PRIMARY KEY,
                value TEXT NOT NULL
            )""",
            """CREATE TABLE users (
                user_id TEXT PRIMARY KEY,
                timezone TEXT NOT NULL,
                locale TEXT NOT NULL,
                quiet_start TEXT,
                quiet_end TEXT,
                enabled INTEGER NOT NULL,
                plan_version INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE devices (
                user_id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                push_token TEXT NOT NULL,
                platform TEXT,
                active INTEGER NOT NULL,
                consecutive_failures INTEGER NOT NULL DEFAULT 0,
                deactivated_reason TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, device_id)
            )""",
            "CREATE UNIQUE INDEX ux_devices_active_device ON devices(device_id) WHERE active = 1",
            "CREATE UNIQUE INDEX ux_devices_active_token ON devices(push_token) WHERE active = 1",
            """CREATE TABLE reminders (
                user_id TEXT NOT NULL,
                reminder_id TEXT NOT NULL,
                category TEXT NOT NULL,
                local_time TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                label TEXT NOT NULL,
                days TEXT NOT NULL,
                data TEXT NOT NULL,
                enabled INTEGER NOT NULL,
                version INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, reminder_id)
            )""",
            """CREATE TABLE preferences (
                user_id TEXT NOT NULL,
                category TEXT NOT NULL,
                enabled INTEGER NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, category)
            )""",
            """CREATE TABLE messages (
                id TEXT PRIMARY KEY,
                user_id TEXT NOT NULL,
                category TEXT NOT NULL,
                label TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                scheduled_at TEXT NOT NULL,
                timezone TEXT NOT NULL,
                dedup_key TEXT NOT NULL,
                live_key TEXT,
                device_id TEXT,
                reminder_id TEXT,
                idempotency_key TEXT,
                request_hash TEXT,
                local_date TEXT,
                local_time TEXT,
                data TEXT NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('pending', 'sending', 'sent',
                    'delivered', 'failed', 'skipped', 'missed', 'cancelled')),
                status_reason TEXT,
                attempts INTEGER NOT NULL,
                ticket_id TEXT,
                last_error TEXT,
                plan_version INTEGER NOT NULL,
                claimed_at TEXT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE UNIQUE INDEX ux_messages_dedup ON messages(dedup_key)",
            """CREATE UNIQUE INDEX ux_messages_live ON messages(live_key)
                WHERE live_key IS NOT NULL""",
            # '*' stands for "all the user's devices" (device_id NULL), which a
            # plain unique index would treat as distinct from every other NULL.
            """CREATE UNIQUE INDEX ux_messages_pending_slot ON messages(
                user_id, coalesce(device_id, '*'), category, label, scheduled_at
            ) WHERE status = 'pending'""",
            "CREATE INDEX ix_messages_user_time ON messages(user_id, scheduled_at, id)",
            """CREATE INDEX ix_messages_pending_due ON messages(scheduled_at, id)
                WHERE status = 'pending'""",
            """CREATE INDEX ix_messages_sending_claimed ON messages(claimed_at, id)
                WHERE status = 'sending'""",
            """CREATE INDEX ix_messages_failed_updated ON messages(updated_at, id)
                WHERE status = 'failed'""",
            # Category first: led by status, the planner would prefer it over the
            # partial indexes above for "status = 'pending'" and sort in memory.
            "CREATE INDEX ix_messages_category_status ON messages(category, status)",
            """CREATE TABLE tickets (
                ticket_id TEXT PRIMARY KEY,
                message_id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                push_token TEXT NOT NULL,
                sent_at TEXT NOT NULL,
                receipt_status TEXT,
                receipt_error TEXT,
                checked_at TEXT
            )""",
            "CREATE INDEX ix_tickets_message ON tickets(message_id)",
            """CREATE INDEX ix_tickets_awaiting ON tickets(sent_at, ticket_id)
                WHERE receipt_status IS NULL""",
        ),
    ),
    (
        2,
        (
            # The nominal instant (never moves), the dispatch instant (retries and
            # re-drives move it) and the outbox mark: see ports/store.py.
            "ALTER TABLE messages ADD COLUMN nominal_at TEXT",
            "ALTER TABLE messages ADD COLUMN due_at TEXT",
            "ALTER TABLE messages ADD COLUMN slot_key TEXT",
            "ALTER TABLE messages ADD COLUMN publish_pending INTEGER NOT NULL DEFAULT 0",
            "UPDATE messages SET nominal_at = scheduled_at, due_at = scheduled_at",
            # Rows of the old (user, device, category, label, instant) slot, spelled
            # as a slot key; the old index kept them unique, so the new one holds.
            """UPDATE messages SET slot_key = CASE
                WHEN reminder_id IS NULL AND live_key IS NOT NULL THEN live_key
                ELSE 's|' || user_id || '|' || coalesce(device_id, '') || '|' || category
                    || '|' || label || '|'
                    -- slot_key_for's spelling of the instant: UTC, milliseconds
                    || substr(scheduled_at, 1, 23) || '+00:00' END""",
            "DROP INDEX ux_messages_pending_slot",
            """CREATE UNIQUE INDEX ux_messages_pending_slot_key ON messages(slot_key)
                WHERE status = 'pending'""",
            """CREATE INDEX ix_messages_outbox ON messages(due_at, id)
                WHERE publish_pending = 1""",
            """CREATE INDEX ix_messages_pending_due_at ON messages(due_at, id)
                WHERE status = 'pending'""",
            "CREATE INDEX ix_messages_user_pending ON messages(user_id) WHERE status = 'pending'",
            # A device id is scoped to its user (the primary key already says one
            # row per (user, device id)); only a push token stays globally unique.
            "DROP INDEX ux_devices_active_device",
        ),
    ),
    (
        3,
        (
            # The operator dashboard's recent figures (adapters/sqlite/ops_views.py).
            "CREATE INDEX ix_tickets_sent ON tickets(sent_at)",
            "CREATE INDEX ix_devices_deactivated ON devices(updated_at) WHERE active = 0",
        ),
    ),
    (
        4,
        (
            # Live consumer processes, so they share the provider's rate ceiling
            # (adapters/sqlite/presence.py, consumers/rate_share.py).
            """CREATE TABLE presence (
                grp TEXT NOT NULL,
                member TEXT NOT NULL,
                beat_at TEXT NOT NULL,
                PRIMARY KEY (grp, member)
            )""",
        ),
    ),
    (
        5,
        (
            # Planning marks (ports/store.py, UserRepository): a change stamp per user and
            # what the last plan run covered. The triggers bump the stamp and clear
            # the mark on every write that can change what planning makes of a user,
            # whoever writes, so a standing mark is never stale.
            "ALTER TABLE users ADD COLUMN plan_stamp INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE users ADD COLUMN plan_from TEXT",
            "ALTER TABLE users ADD COLUMN plan_next_at TEXT",
            "ALTER TABLE users ADD COLUMN plan_fp TEXT",
            f"""CREATE TRIGGER tr_users_plan_inputs
                AFTER UPDATE OF timezone, quiet_start, quiet_end, enabled, plan_version ON users
                WHEN OLD.timezone IS NOT NEW.timezone OR OLD.quiet_start IS NOT NEW.quiet_start
                    OR OLD.quiet_end IS NOT NEW.quiet_end OR OLD.enabled IS NOT NEW.enabled
                    OR OLD.plan_version IS NOT NEW.plan_version
                BEGIN {_CLEAR_MARK.format(user="NEW.user_id")}; END""",
            f"""CREATE TRIGGER tr_reminders_insert_plan AFTER INSERT ON reminders
                BEGIN {_CLEAR_MARK.format(user="NEW.user_id")}; END""",
            f"""CREATE TRIGGER tr_reminders_update_plan AFTER UPDATE ON reminders
                BEGIN {_CLEAR_MARK.format(user="OLD.user_id")};
                    {_CLEAR_MARK.format(user="NEW.user_id")}; END""",
            f"""CREATE TRIGGER tr_reminders_delete_plan AFTER DELETE ON reminders
                BEGIN {_CLEAR_MARK.format(user="OLD.user_id")}; END""",
        ),
    ),
    (
        6,
        (
            # Message templates (adapters/sqlite/templates.py): every version kept,
            # never updated; the key and version are the primary key.
            """CREATE TABLE templates (
                event_type TEXT NOT NULL,
                channel TEXT NOT NULL,
                locale TEXT NOT NULL,
                version INTEGER NOT NULL,
                parts TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (event_type, channel, locale, version)
            )""",
        ),
    ),
    (
        7,
        (
            # Business events and their fan-out (adapters/sqlite/events.py): one row per
            # event_id, its cursor (the last recipient done) and counts; the listed
            # recipients beside it, paged by user id. The event's push messages are
            # found by their keys (a range of ux_messages_dedup), so messages need no
            # new column.
            """CREATE TABLE events (
                event_id TEXT PRIMARY KEY,
                type TEXT NOT NULL,
                category TEXT NOT NULL,
                priority TEXT NOT NULL,
                request_hash TEXT NOT NULL,
                all_users INTEGER NOT NULL,
                data TEXT NOT NULL,
                occurred_at TEXT NOT NULL,
                send_at TEXT,
                local_time TEXT,
                listed INTEGER NOT NULL,
                state TEXT NOT NULL,
                cursor TEXT NOT NULL,
                recipients INTEGER NOT NULL,
                counts TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "CREATE INDEX ix_events_open ON events(created_at) WHERE state != 'done'",
            """CREATE TABLE event_recipients (
                event_id TEXT NOT NULL,
                user_id TEXT NOT NULL,
                PRIMARY KEY (event_id, user_id)
            ) WITHOUT ROWID""",
        ),
    ),
    (
        8,
        (
            # The in-app inbox (adapters/sqlite/inbox.py). AUTOINCREMENT: a seq is never
            # reused, even after the newest row is deleted, and since SQLite has one
            # writer at a time a higher seq is always committed after a lower one, so a
            # stream that has seen seq n has seen every item below it.
            """CREATE TABLE inbox (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                item_id TEXT NOT NULL UNIQUE,
                user_id TEXT NOT NULL,
                message_id TEXT NOT NULL,
                event_type TEXT,
                category TEXT NOT NULL,
                title TEXT NOT NULL,
                body TEXT NOT NULL,
                html TEXT,
                link TEXT,
                data TEXT NOT NULL,
                created_at TEXT NOT NULL,
                read_at TEXT,
                UNIQUE (user_id, message_id)
            )""",
            "CREATE INDEX ix_inbox_user_seq ON inbox(user_id, seq)",
            "CREATE INDEX ix_inbox_unread ON inbox(user_id, seq) WHERE read_at IS NULL",
        ),
    ),
    (
        9,
        (
            # Channels (issue 12): where a message goes, its channel's extra rendered
            # parts (JSON), and an event's priority (which queue: critical, normal, bulk).
            "ALTER TABLE messages ADD COLUMN channel TEXT NOT NULL DEFAULT 'push'",
            "ALTER TABLE messages ADD COLUMN content TEXT NOT NULL DEFAULT '{}'",
            "ALTER TABLE messages ADD COLUMN priority TEXT",
        ),
    ),
    (
        10,
        (
            # Read by nothing since the outbox (pending messages are found by due_at):
            # it only cost an index update on every insert and every claim.
            "DROP INDEX IF EXISTS ix_messages_pending_due",
        ),
    ),
    (
        11,
        (
            # Status webhooks (adapters/sqlite/webhooks.py, tepat/domain/webhooks.py):
            # the subscriptions, and the journal of status changes waiting to become
            # webhook deliveries. The triggers write the journal in the same statement
            # as the change, so no change is lost between its write and its webhook; they
            # write nothing while no subscription is enabled (one probe of a tiny table),
            # nor for the webhook deliveries themselves (user '~webhook': keyed on the
            # user id, not the channel column, so this migration needs no other).
            """CREATE TABLE webhook_subscriptions (
                id TEXT PRIMARY KEY,
                url TEXT NOT NULL,
                event_types TEXT NOT NULL,
                categories TEXT NOT NULL,
                secrets TEXT NOT NULL,
                description TEXT NOT NULL,
                enabled INTEGER NOT NULL,
                disabled_reason TEXT,
                version INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE webhook_journal (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                message_id TEXT NOT NULL,
                status TEXT NOT NULL,
                reason TEXT,
                user_id TEXT NOT NULL,
                category TEXT NOT NULL,
                channel TEXT,
                at TEXT NOT NULL
            )""",
            f"""CREATE TRIGGER tr_webhook_status AFTER UPDATE OF status ON messages
                WHEN NEW.status IS NOT OLD.status AND {_WEBHOOK_JOURNALED}
                BEGIN {_WEBHOOK_JOURNAL_MESSAGE} END""",
            # Messages written already final (a render error fails at creation).
            f"""CREATE TRIGGER tr_webhook_status_insert AFTER INSERT ON messages
                WHEN {_WEBHOOK_JOURNALED}
                BEGIN {_WEBHOOK_JOURNAL_MESSAGE} END""",
            # An inbox item's first read (forward-only: read_at is set once).
            f"""CREATE TRIGGER tr_webhook_inbox_read AFTER UPDATE OF read_at ON inbox
                WHEN OLD.read_at IS NULL AND NEW.read_at IS NOT NULL AND {_WEBHOOK_ANY}
                BEGIN
                    INSERT INTO webhook_journal
                        (message_id, status, reason, user_id, category, channel, at)
                    VALUES (NEW.message_id, 'read', NULL, NEW.user_id, NEW.category, 'inbox',
                        NEW.read_at);
                END""",
        ),
    ),
    (
        12,
        (
            # Contact points, suppressions and provider-event dedup
            # (adapters/sqlite/contacts.py): each primary key is the port's unique key.
            """CREATE TABLE contacts (
                user_id TEXT NOT NULL,
                channel TEXT NOT NULL,
                address TEXT NOT NULL,
                verified INTEGER NOT NULL,
                updated_at TEXT NOT NULL,
                PRIMARY KEY (user_id, channel)
            ) WITHOUT ROWID""",
            """CREATE TABLE suppressions (
                channel TEXT NOT NULL,
                address TEXT NOT NULL,
                reason TEXT NOT NULL,
                added_at TEXT NOT NULL,
                source TEXT,
                PRIMARY KEY (channel, address)
            ) WITHOUT ROWID""",
            """CREATE TABLE provider_events (
                provider TEXT NOT NULL,
                event_id TEXT NOT NULL,
                recorded_at TEXT NOT NULL,
                PRIMARY KEY (provider, event_id)
            ) WITHOUT ROWID""",
        ),
    ),
    (
        13,
        # The W3C traceparent of the request or plan run that made the message
        # (tepat/tracing.py): its send and receipt continue that trace.
        ("ALTER TABLE messages ADD COLUMN trace_parent TEXT",),
    ),
    (
        14,
        # The push service a device's token is for (Device.kind); every device
        # registered before is an Expo one. The token stays unique across kinds.
        ("ALTER TABLE devices ADD COLUMN kind TEXT NOT NULL DEFAULT 'expo'",),
    ),
    (
        15,
        # A device's fallback token for another push kind (Device.fallback_kind),
        # used only while its primary provider is down (tepat/domain/failover.py).
        (
            "ALTER TABLE devices ADD COLUMN fallback_kind TEXT",
            "ALTER TABLE devices ADD COLUMN fallback_token TEXT",
        ),
    ),
    (
        16,
        (
            # Fewer indexes for every message insert to update: the counts by status,
            # category and channel (count_messages: metrics, dashboard) come from a
            # counter table the triggers keep in the same statement as the change, so
            # they stay exact under concurrent writers and crashes; a user's pending
            # messages (pending_for_user) come from ix_messages_user_time.
            "DROP INDEX IF EXISTS ix_messages_category_status",
            "DROP INDEX IF EXISTS ix_messages_user_pending",
            """CREATE TABLE message_counts (
                status TEXT NOT NULL,
                category TEXT NOT NULL,
                channel TEXT NOT NULL,
                n INTEGER NOT NULL,
                PRIMARY KEY (status, category, channel)
            ) WITHOUT ROWID""",
            """INSERT INTO message_counts
                SELECT status, category, channel, count(*) FROM messages GROUP BY 1, 2, 3""",
            f"""CREATE TRIGGER tr_message_counts_insert AFTER INSERT ON messages BEGIN
                {_COUNT_NEW};
            END""",
            f"""CREATE TRIGGER tr_message_counts_update
                AFTER UPDATE OF status, category, channel ON messages
                WHEN old.status IS NOT new.status OR old.category IS NOT new.category
                    OR old.channel IS NOT new.channel
            BEGIN
                UPDATE message_counts SET n = n - 1 WHERE status = old.status
                    AND category = old.category AND channel = old.channel;
                {_COUNT_NEW};
            END""",
            """CREATE TRIGGER tr_message_counts_delete AFTER DELETE ON messages BEGIN
                UPDATE message_counts SET n = n - 1 WHERE status = old.status
                    AND category = old.category AND channel = old.channel;
            END""",
        ),
    ),
    (
        17,
        # A dead token is dropped as any device's fallback (deactivate_token).
        (
            """CREATE INDEX ix_devices_fallback_token ON devices(fallback_token)
                WHERE fallback_token IS NOT NULL""",
        ),
    ),
    (
        18,
        # The registry of apps and their keys (issue 23, adapters/sqlite/apps.py): used in
        # the default app's file only, created in every file so each opens the same way.
        # A key is stored as its hash; its id (not secret) names it in listings.
        (
            """CREATE TABLE apps (
                app_id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                settings TEXT NOT NULL,
                version INTEGER NOT NULL,
                created_at TEXT NOT NULL,
                disabled INTEGER NOT NULL
            ) WITHOUT ROWID""",
            """CREATE TABLE app_keys (
                key_hash TEXT PRIMARY KEY,
                key_id TEXT NOT NULL UNIQUE,
                app_id TEXT NOT NULL,
                role TEXT NOT NULL,
                poster TEXT,
                event_types TEXT,
                created_at TEXT NOT NULL,
                revoked_at TEXT
            )""",
            "CREATE INDEX ix_app_keys_app ON app_keys(app_id, created_at, key_id)",
        ),
    ),
    (
        19,
        # The status webhooks' triggers of migration 11, journaling the same statuses
        # without an IN list (see _WEBHOOK_JOURNALED_EACH).
        (
            "DROP TRIGGER tr_webhook_status",
            f"""CREATE TRIGGER tr_webhook_status AFTER UPDATE OF status ON messages
                WHEN NEW.status IS NOT OLD.status AND {_WEBHOOK_JOURNALED_EACH}
                BEGIN {_WEBHOOK_JOURNAL_MESSAGE} END""",
            "DROP TRIGGER tr_webhook_status_insert",
            f"""CREATE TRIGGER tr_webhook_status_insert AFTER INSERT ON messages
                WHEN {_WEBHOOK_JOURNALED_EACH}
                BEGIN {_WEBHOOK_JOURNAL_MESSAGE} END""",
        ),
    ),
)


def _migrate(conn: Conn, now: str) -> None:
    """Apply the missing migrations; a second process opening at once waits, then finds none."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            applied_at TEXT NOT NULL
        )"""
    )
    # Every missing number, not only those above the highest applied: migrations
    # written side by side may land out of order (6 before 5), and a file that got
    # the later one first must still get the earlier. Such migrations must not
    # depend on each other.
    applied = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    for version, statements in MIGRATIONS:
        if version in applied:
            continue
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now))


def _enable_wal(conn: Conn) -> None:
    """Switch to WAL (persistent in the file); retried because the switch needs a
    brief exclusive lock that a concurrent opener may hold, and it does not
    always go through the busy handler."""
    deadline = _time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or _time.monotonic() > deadline:
                raise
            _time.sleep(0.05)  # worker thread, not the event loop


def on_disk(path: str) -> bool:
    return path != ":memory:" and not path.startswith("file:")


def _connect(path: str, cache_kib: int = CACHE_KIB) -> Conn:
    if on_disk(path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: we issue BEGIN IMMEDIATE / COMMIT ourselves.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    _enable_wal(conn)
    # NORMAL in WAL mode: a power cut may lose the last commits, never corrupt.
    conn.execute("PRAGMA synchronous=NORMAL")
    # Bulk plans insert into seven message indexes in hash order; the default
    # 2 MB page cache makes that disk-bound long before 300k rows.
    conn.execute(f"PRAGMA cache_size=-{cache_kib}")
    return conn
