#!/usr/bin/env bash
# Command 2 of the README: install what the tests need (ActiveMQ from Debian's
# packages included), start a broker and a MongoDB-wire server, and run lint, type
# checks, the whole test suite and a quick run of every benchmark scenario. Stops
# both on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

# Each phase's heading also says how long the one before took, and the end the total:
# where a slow CI run spent its time, without rerunning it.
PHASE_NAME= PHASE_START=$SECONDS RUN_START=$SECONDS
phase() {
  [[ -z $PHASE_NAME ]] || echo "   (${PHASE_NAME%% (*}: $((SECONDS - PHASE_START)) s)"
  PHASE_NAME=$1 PHASE_START=$SECONDS
  [[ $1 == end ]] || echo "== $1"
}

# Steps that run beside the others (the installs wait on apt, pip and a JVM; mypy takes a
# core of its own): each writes to its own log, shown when the step is awaited, and a
# step that failed fails the run there, as it would have in line.
JOB_LOGS=$(mktemp -d)
declare -A JOB_PID
in_background() {
  local name=$1
  shift
  "$@" >"$JOB_LOGS/$name" 2>&1 &
  JOB_PID[$name]=$!
}
await() {
  local name=$1 status=0
  wait "${JOB_PID[$name]}" || status=$?
  unset "JOB_PID[$name]"
  sed "s/^/  [$name] /" "$JOB_LOGS/$name"
  if ((status != 0)); then
    echo "== $name failed (exit status $status)" >&2
    exit "$status"
  fi
}

BROKER_BASE="$ROOT/.broker-test"
MONGO_WIRE_DIR="$ROOT/.mongo-wire-test"
stop_all() {
  local pid
  for pid in "${JOB_PID[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/mongo-wire.sh stop "$MONGO_WIRE_DIR" >/dev/null 2>&1 || true
  scripts/activemq.sh stop "$BROKER_BASE" >/dev/null 2>&1 || true
  rm -rf "$JOB_LOGS"
}
trap stop_all EXIT

# apt one package at a time (two apt-get at once fail on dpkg's lock): chromium for
# tests/browser (the dashboard in a real browser), then ActiveMQ, started on a fresh base.
apt_installs_and_broker() {
  scripts/chromium.sh
  scripts/activemq.sh install
  scripts/activemq.sh stop "$BROKER_BASE" >/dev/null 2>&1 || true
  rm -rf "$BROKER_BASE"
  scripts/activemq.sh start "$BROKER_BASE"
}
# SecantusDB in its own virtualenv, patched at install (scripts/mongo-wire/README.md): the
# Mongo suites' mongo-server variant, beside mongomock. It writes its URL to DIR/url.
mongo_wire() {
  scripts/mongo-wire.sh install
  scripts/mongo-wire.sh stop "$MONGO_WIRE_DIR" >/dev/null 2>&1 || true
  scripts/mongo-wire.sh start "$MONGO_WIRE_DIR" >/dev/null
}

phase "python environment (chromium, activemq and the mongo wire server beside it)"
in_background chromium+activemq apt_installs_and_broker
in_background mongo-wire mongo_wire
# .venv with the test dependencies at the versions pinned in constraints.txt
bash scripts/venv.sh test

phase "promtool (tests/ops_cli: the Prometheus alert rules), once apt is free"
await chromium+activemq
# TEPAT_AMQ_STOMP_PORT / TEPAT_AMQ_OPENWIRE_PORT (scripts/activemq.sh) move the test
# broker off 61613 / 61616, beside a broker already running there.
export TEPAT_TEST_STOMP_URL="stomp://127.0.0.1:${TEPAT_AMQ_STOMP_PORT:-61613}"
export TEPAT_TEST_ACTIVEMQ_BASE="$BROKER_BASE"
scripts/promtool.sh

phase "mongo wire server"
await mongo-wire
TEPAT_TEST_MONGO_URL=$(cat "$MONGO_WIRE_DIR/url")
export TEPAT_TEST_MONGO_URL

phase "ruff (mypy beside it and the next steps)"
in_background mypy .venv/bin/mypy
.venv/bin/ruff check .
.venv/bin/ruff format --check .

phase "mkdocs"
# The documentation site, strictly: a broken link or anchor, or a setting without a
# description, fails. Built into a temporary directory, never into the tree.
DOCS_SITE=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$DOCS_SITE"
rm -rf "$DOCS_SITE"

phase "import-linter"
# the layers of pyproject.toml [tool.importlinter], no ignored imports
.venv/bin/lint-imports

phase "vulture"
# dead code: settings in pyproject.toml [tool.vulture], exceptions in scripts/vulture_whitelist.py
.venv/bin/vulture

phase "mypy"
await mypy

phase "pytest"
# Everything above is installed and running: a test skipped for want of it fails
# (tests/support/require_services.py lists the skips that stay skips).
export TEPAT_TEST_REQUIRE_SERVICES=1
# Exit status 5 means nothing was collected: when arguments name only tests of one part.
pytest_part() { .venv/bin/pytest -q -p no:cacheprovider "$@" || [[ $? == 5 ]]; }
# On several processes (4 on CI's 2 cores: the two workers with a backend's quick benches
# mostly wait, so two more keep both cores busy: 498 s against 586 s with 3);
# tests sharing something heavy (the benches, a broker of their own) run on one of them
# (tests/support/xdist_groups.py). PYTEST_WORKERS=0 runs everything in one process.
# --durations: the slowest tests in the log, for whoever makes the suite faster next.
pytest_part -n "${PYTEST_WORKERS:-4}" --dist loadgroup -m "not serial" --durations=25 "$@"
phase "pytest, serial"
# Then, alone, the tests marked serial (they restart the broker the others use).
pytest_part -m serial "$@"
phase end
echo "== total: $((SECONDS - RUN_START)) s"
