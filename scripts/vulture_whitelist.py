"""Names vulture (pyproject.toml [tool.vulture]) reports as unused though something uses them.

Each line says who. Scanned as one more source file: naming a name here marks it used.
"""
# ruff: noqa: B018

from vulture.whitelist_utils import Whitelist

_ = Whitelist()

# Called or read by a library, never by our code
_.model_config  # pydantic reads a model's settings from it
_.intercepted_binops  # Jinja's sandbox routes these operators through call_binop
_.code_generator_class, _.visit_Concat  # Jinja compiles with this class; ~ is its Concat
_.concat, _.checked_parts  # named in the Python code Jinja generates (environment.concat)
_.on_message, _.on_heartbeat_timeout  # stomp.py's listener callbacks
_.capture_signals, _.should_exit  # uvicorn.Server: overridden hook, the flag its loop polls
_.header_table_size  # hpack.Encoder: a test's client shrinks its table through it
_.local_settings  # h2.H2Connection: a test's server sends its first SETTINGS from it
_.handle_EHLO, _.handle_RCPT, _.handle_DATA, _.host_name  # aiosmtpd's handler protocol
_.mechanism  # aiosmtpd passes it to an authenticator by this name
_.do_GET, _.do_POST, _.log_message  # http.server.BaseHTTPRequestHandler
_.get_database  # pymongo's client API, mirrored by the async mongomock wrapper
_.succeeded  # pymongo.monitoring.CommandListener's callbacks (a test's listener)
_.maxTimeMS  # pymongo's aggregate option, mirrored (and ignored) by the mongomock wrapper
_.pytestmark  # pytest marks every test of the module with it
_.strategy  # hypothesis's data.draw(strategy), mirrored by the replay stub
_.__class__  # set_ssl swaps stomp.py's transport class in place
_.levelname  # logging's formatters read the record's level name
_.eof_received  # asyncio.Protocol: the loop calls it when the peer closes

# Set on app.state, read by name through api/deps.py:app_state
_.dashboard_sessions

# Fields only serialized (JSON answers of the API, the dashboard, the sandboxes' stats)
_.checked_at  # Ticket's: the stores' table-driven codecs write and read it by field name
_.status_url, _.failed_reasons, _.unknown_users, _.messages_created, _.locale_requested
_.generated_at, _.tzdata_release, _.failures_window_seconds, _.failures_by_code
_.deactivated_since, _.messages_by_status, _.answers_by_outcome, _.live_consumers
_.oldest_due_unsent_seconds, _.added_at, _.sends_by_outcome
_.send_requests, _.receipt_requests, _.notifications, _.tickets_ok, _.tickets_error
_.gzip_requests, _.too_many_requests, _.server_errors, _.unauthorized, _.bad_requests
_.answers_lost, _.callbacks_posted, _.callbacks_failed, _.inbound_posted, _.token_requests
_.late_by_seconds  # matched by position: case Missed(late)

# Re-exported for pytest to collect as fixtures (tests/support/broker_factories.py)
_.activemq_factory, _.embedded_broker_factory, _.namespaced_broker_factory

# httpcore's network backend interface, called by its connection pool; httpx's pool slot
_.connect_unix_socket, _._pool  # tepat/adapters/webhook_target.py

_._split_scope  # xdist's LoadScopeScheduling calls it (tests/support/xdist_groups.py)

_.api_worker_app  # named by an import string: uvicorn.run("tepat.processes:api_worker_app")
_.guarded_http_from_settings  # named by an import string: tepat.http_server.WORKERS_HTTP_PROTOCOL
