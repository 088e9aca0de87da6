"""``python -m bench SCENARIO [--backend embedded|activemq] [--quick] [--json]``.

Scenarios: plan, dispatch, ratelimited, lateness, burst, register, or all; api (per-item
writes, bench/api_writes.py; not part of all); apps (two apps, one flooding, in one
deployment, bench/apps.py; not part of all); and chaos (faults:
``--fault KIND``, repeatable; every kind by default). ``python -m bench email|sms`` runs the
channel-burst benchmark (bench/channel_burst.py, its own options); ``python -m bench capacity``
the capacity model over dispatch's figures (bench/capacity.py). Exit status: 0 when every
correctness check held (speed goals are reported, never fatal), 1 when one failed,
2 when the harness itself broke.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import (
    api_writes,
    apps,
    burst,
    capacity,
    channel_burst,
    chaos,
    import_plan,
    plan,
    ratelimited,
    register,
    scenarios,
    slow_clients,
)
from bench.activemq import ActiveMQ, activemq
from bench.chaos_store import STORES
from bench.config import run_prefix
from bench.push_kinds import PROVIDERS
from bench.report import Result, emit, log

SCENARIOS = ("plan", "dispatch", "ratelimited", "lateness", "burst", "register")


@dataclass(frozen=True)
class Sizes:
    users: int
    dispatch: int
    ratelimited: int
    lateness_seconds: int
    lateness_rates: tuple[float, ...]
    burst: int
    dispatch_consumers: tuple[int, ...]


FULL = Sizes(
    100_000, 50_000, 12_000, 60, scenarios.LATENESS_RATES, 20_000, scenarios.DISPATCH_CONSUMERS
)
QUICK = Sizes(2_000, 2_000, 600, 8, (50.0,), 1_000, (1, 2))


def consumer_counts(text: str) -> tuple[int, ...]:
    """``1,2,3`` -> (1, 2, 3); 1 must be among them (the others are scaled against it)."""
    try:
        counts = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not counts or counts[0] != 1:
        raise argparse.ArgumentTypeError("the counts must include 1, and none below it")
    return counts


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", choices=(*SCENARIOS, "all", "api", "apps", "chaos", "import"))
    p.add_argument("--backend", choices=("embedded", "activemq"), default="embedded")
    p.add_argument("--quick", action="store_true", help="small sizes: each scenario in seconds")
    p.add_argument("--json", action="store_true", help="one JSON object per scenario, last lines")
    p.add_argument(
        "--stomp-url", help="an ActiveMQ to use (default: $TEPAT_TEST_STOMP_URL, else start one)"
    )
    p.add_argument(
        "--users",
        type=int,
        help="plan, import: users (default 100,000; quick 2,000, import 1,000); api: per case",
    )
    p.add_argument(
        "--scale", action="store_true", help="plan: 10k, 100k and 1M users (quick: 1k, 2k)"
    )
    p.add_argument(
        "--clients",
        type=int,
        help=f"register, import, api: concurrent HTTP clients (default {register.CLIENTS}, "
        f"{register.CLIENTS}, {api_writes.CLIENTS})",
    )
    p.add_argument(
        "--mongo-url",
        default=os.environ.get("TEPAT_TEST_MONGO_URL"),
        help="api on activemq, import --store mongo: the MongoDB(-wire) server for the store"
        " (default $TEPAT_TEST_MONGO_URL; api without one: a SQLite file); the run uses a"
        " database of its own there and drops it",
    )
    p.add_argument("--pid-file", type=Path, help="api: write the API process's pid here")
    p.add_argument(
        "--workers",
        type=int,
        help="plan: tepat plan --workers N (default 1); "
        "register: tepat api --workers N (default 2 on ActiveMQ; embedded: always 1)",
    )
    p.add_argument("--messages", type=int, help="dispatch/ratelimited/burst: messages")
    p.add_argument(
        "--consumers",
        type=consumer_counts,
        help="dispatch: consumer process counts, one run each (default 1,2,3; quick 1,2; "
        "embedded: 1 only)",
    )
    p.add_argument(
        "--rate",
        type=float,
        action="append",
        help="lateness: messages due per second (repeatable; default 100, 300, 600, 1200)",
    )
    p.add_argument(
        "--provider-limit",
        type=float,
        default=ratelimited.DEFAULT_PROVIDER_LIMIT,
        help="ratelimited: notifications/s the sandbox accepts (Tepat stays at 600)",
    )
    p.add_argument(
        "--seconds",
        type=int,
        help="lateness: seconds of due messages per rate (60); apps: seconds of app a's "
        f"flood ({apps.FLOOD_SECONDS}; quick {apps.QUICK_FLOOD_SECONDS})",
    )
    p.add_argument(
        "--provider",
        choices=PROVIDERS,
        default="expo",
        help="dispatch/lateness: the devices' kind, sent through that provider's sandbox",
    )
    p.add_argument(
        "--fault",
        action="append",
        choices=(*chaos.FAULTS, "provider_storms"),
        help="chaos: one fault kind (repeatable; default: every kind)",
    )
    p.add_argument(
        "--store",
        choices=STORES,
        default="sqlite",
        help="chaos: the store under test (mongo: a wire server of the run's own, "
        "scripts/mongo-wire.sh, installed); import: mongo is a database of its own on "
        "$TEPAT_TEST_MONGO_URL",
    )
    p.add_argument(
        "--reminders",
        type=int,
        default=import_plan.REMINDERS,
        help="import: daily reminders per user (at most 3)",
    )
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, db)")
    return p.parse_args(argv)


@contextmanager
def broker_for(args: argparse.Namespace, workdir: Path) -> Iterator[ActiveMQ | None]:
    if args.backend == "embedded":
        yield None
        return
    # chaos restarts the broker: always one of its own, never a shared one
    own = args.scenario == "chaos"
    if own and (args.stomp_url or os.environ.get("TEPAT_TEST_STOMP_URL")):
        log("chaos: starting an ActiveMQ of its own (it restarts it); the given URL is not used")
    with activemq(args.stomp_url, workdir, own=own) as broker:
        yield broker


@dataclass
class Context:
    args: argparse.Namespace
    sizes: Sizes
    broker: ActiveMQ | None
    prefix: str

    @property
    def url(self) -> str:
        return self.broker.url if self.broker else "embedded://"


def run_one(name: str, ctx: Context, where: Path) -> Result:
    args, sizes, backend = ctx.args, ctx.sizes, ctx.args.backend
    if name == "plan":
        workers = getattr(args, "workers", None) or 1
        if args.scale:
            scale = plan.QUICK_SCALE_USERS if args.quick else plan.SCALE_USERS
            return plan.run_plan_scale(
                where, backend, ctx.broker, ctx.prefix + "plan.", scale, workers
            )
        users = args.users or sizes.users
        return plan.run_plan(where, backend, ctx.broker, ctx.prefix + "plan.", users, workers)
    if name == "dispatch":
        m = args.messages or sizes.dispatch
        counts = args.consumers or sizes.dispatch_consumers
        return scenarios.run_dispatch(where, backend, ctx.url, ctx.prefix, m, counts, args.provider)
    if name == "ratelimited":
        m = args.messages or sizes.ratelimited
        return ratelimited.run_ratelimited(
            where, backend, ctx.url, ctx.prefix, m, args.provider_limit
        )
    if name == "apps":
        quick = apps.QUICK_FLOOD_SECONDS if args.quick else apps.FLOOD_SECONDS
        return apps.run_apps(where, backend, ctx.url, ctx.prefix, args.seconds or quick)
    if name == "burst":
        m = args.messages or sizes.burst
        return burst.run_burst(where, backend, ctx.url, ctx.prefix, m)
    if name == "import":
        if args.store == "mongo" and not args.mongo_url:
            raise SystemExit("bench import --store mongo: give --mongo-url or TEPAT_TEST_MONGO_URL")
        users = args.users or (import_plan.QUICK_USERS if args.quick else import_plan.FULL_USERS)
        return import_plan.run_import(
            where,
            args.mongo_url if args.store == "mongo" else None,
            ctx.prefix,
            users,
            args.clients or register.CLIENTS,
            args.reminders,
        )
    if name == "register":
        users = args.users or (register.QUICK_USERS if args.quick else register.FULL_USERS)
        workers = args.workers or (1 if backend == "embedded" else 2)
        clients = args.clients or register.CLIENTS
        return register.run_register(where, backend, ctx.url, ctx.prefix, users, clients, workers)
    if name == "api":
        users = args.users or (api_writes.QUICK_USERS if args.quick else api_writes.FULL_USERS)
        return api_writes.run_api(
            where,
            backend,
            ctx.url,
            users,
            clients=args.clients or api_writes.CLIENTS,
            mongo_url=args.mongo_url,
            pid_file=args.pid_file,
        )
    rates = tuple(args.rate) if args.rate else sizes.lateness_rates
    seconds = args.seconds or sizes.lateness_seconds
    return scenarios.run_lateness(
        where, backend, ctx.url, ctx.prefix, rates, seconds, args.provider
    )


def chaos_faults(args: argparse.Namespace) -> list[str]:
    """The fault kinds asked for, or every kind the store has; one the store cannot
    have (store_restart on SQLite, store_outage on MongoDB) is refused."""
    fits = [f for f in chaos.FAULTS if chaos.STORE_OF.get(f, args.store) == args.store]
    out: list[str] = []
    for f in args.fault or fits:
        for kind in chaos.STORMS if f == "provider_storms" else (f,):
            if kind not in fits:
                raise SystemExit(f"bench chaos: {kind} needs --store {chaos.STORE_OF[kind]}")
            if kind not in out:
                out.append(kind)
    return [f for f in chaos.FAULTS if f in out]


def run_chaos(args: argparse.Namespace, workdir: Path) -> int:
    faults = chaos_faults(args)  # before a broker starts: a refusal costs nothing
    results: list[Result] = []

    def emit_one(result: Result) -> None:
        results.append(result)
        emit(result, args.json)

    with broker_for(args, workdir) as broker:
        sizes = chaos.QUICK if args.quick else chaos.FULL
        chaos.run_chaos(workdir, broker, run_prefix(), sizes, faults, emit_one, args.store)
    if not args.json:
        print(f"chaos on {args.backend}, {args.store}{' (quick)' if args.quick else ''}:")
        print(chaos.summary(results), flush=True)
    return 0 if all(r.ok for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in channel_burst.CHANNELS:
        # One process of its own, with its own options (bench/channel_burst.py).
        return channel_burst.main(argv)
    if argv[:1] == ["slowclients"]:
        return slow_clients.main(argv[1:])  # its own options too (bench/slow_clients.py)
    if argv[:1] == ["capacity"]:
        return capacity.main(argv[1:])  # a model over dispatch's figures, no processes
    args = parse(argv)
    if args.scenario == "chaos":
        return _in_workdir("tepat-chaos-", args.keep, lambda workdir: _chaos_in(args, workdir))
    return _in_workdir("tepat-bench-", args.keep, lambda workdir: _scenarios_in(args, workdir))


def _in_workdir(prefix: str, keep: bool, run: Callable[[Path], int]) -> int:
    """``run`` in a fresh working directory, kept when asked or when the run failed."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    log(f"working directory {workdir}")
    status = 0
    try:
        status = run(workdir)
    finally:
        if keep or status:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return status


def _scenarios_in(args: argparse.Namespace, workdir: Path) -> int:
    wanted = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    status = 0
    with broker_for(args, workdir) as broker:
        ctx = Context(args, QUICK if args.quick else FULL, broker, run_prefix())
        for name in wanted:
            where = workdir / name
            where.mkdir()
            try:
                result = run_one(name, ctx, where)
            except Exception:
                traceback.print_exc()
                log(f"{name}: the harness failed (see above)")
                status = 2
                continue
            emit(result, args.json)
            if not result.ok:
                status = max(status, 1)
    return status


def _chaos_in(args: argparse.Namespace, workdir: Path) -> int:
    try:
        return run_chaos(args, workdir)
    except Exception:
        traceback.print_exc()
        log("chaos: the harness failed (see above)")
        return 2


if __name__ == "__main__":
    sys.exit(main())
