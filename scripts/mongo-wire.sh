#!/usr/bin/env bash
# The MongoDB-wire server the tests run the Mongo suites on (SecantusDB, a test tool only).
#
#   scripts/mongo-wire.sh install        its own virtualenv, the pinned version, the patch applied
#   scripts/mongo-wire.sh start   DIR    fresh storage in DIR, loopback, wait for a ping, print the URL
#   scripts/mongo-wire.sh stop    DIR    SIGTERM by DIR/server.pid, SIGKILL after 10 s
#   scripts/mongo-wire.sh restart DIR    stop, then start again on the same port KEEPING DIR/data
#   scripts/mongo-wire.sh status  DIR
#
# Environment:
#   TEPAT_MONGO_WIRE_VENV   the server's virtualenv (default .mongo-wire-venv in the checkout)
#   TEPAT_MONGO_WIRE_PORT   port to listen on (default: a free one, chosen at start)
#   TEPAT_MONGO_WIRE_SYNC   1: fsync the journal on every commit (the server's --sync-on-commit)
#   PYTHON                  interpreter the virtualenv is made with (default python3)
#
# `start` prints the URL last (mongodb://127.0.0.1:PORT) and writes it to DIR/url;
# DIR/data (the storage) is emptied on every start; DIR/server.log is the server's output.
# `restart` is a database restart, not a fresh start: the port comes from DIR/url and
# DIR/data stays, so clients reconnect to what they wrote: all of it after a clean stop;
# after a kill -9 only with TEPAT_MONGO_WIRE_SYNC=1. By default the server acknowledges a
# write before its journal record leaves the process: a SIGKILL lost up to 44 of ~1,700
# acknowledged inserts in trials (none with the flag, at no throughput cost measured here).
# SecantusDB is GPL-2.0: it lives in its own virtualenv and is reached over the wire only
# (never a dependency of Tepat). scripts/mongo-wire/README.md says what the patch fixes.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VENV=${TEPAT_MONGO_WIRE_VENV:-"$ROOT/.mongo-wire-venv"}
REQUIREMENTS="$HERE/mongo-wire/requirements.txt"
PATCH_FILE="$HERE/mongo-wire/secantusdb-upsert-race.patch"
# The version the patch is written for: install refuses any other.
PINNED_VERSION=0.7.0b3
BIND=127.0.0.1
# Written into the venv once installed and patched: a change of either reinstalls.
STAMP="$VENV/.tepat-installed"

die() { echo "mongo-wire.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

wanted_stamp() {
  cat "$REQUIREMENTS" "$PATCH_FILE" | sha256sum | cut -d' ' -f1
}

installed_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("secantusdb"))'
}

cmd_install() {
  local stamp site
  stamp=$(wanted_stamp)
  if [[ -x "$VENV/bin/secantusd-py" && "$(cat "$STAMP" 2>/dev/null)" == "$stamp" ]]; then
    echo "secantusdb $PINNED_VERSION already installed and patched ($VENV)"
    return 0
  fi
  grep -qx "SecantusDB==$PINNED_VERSION" "$REQUIREMENTS" ||
    die "$REQUIREMENTS does not pin SecantusDB==$PINNED_VERSION, the version $PATCH_FILE is written for"
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
  [[ "$(installed_version)" == "$PINNED_VERSION" ]] ||
    die "pip installed secantusdb $(installed_version), not $PINNED_VERSION"
  site=$("$VENV/bin/python" -c 'import secantus, pathlib; print(pathlib.Path(secantus.__file__).parent.parent)')
  # Dry run first: a patch that does not apply cleanly (fuzz, offsets of a changed
  # release) must stop the install, not half-apply.
  patch --dry-run --forward --fuzz=0 -p1 -d "$site" < "$PATCH_FILE" >/dev/null ||
    die "$PATCH_FILE does not apply cleanly to secantusdb $PINNED_VERSION in $site"
  patch --forward --fuzz=0 -p1 -d "$site" < "$PATCH_FILE" >/dev/null
  # the patched module must still compile (and its stale bytecode goes)
  "$VENV/bin/python" -m py_compile "$site/secantus/commands.py"
  echo "$stamp" > "$STAMP"
  echo "secantusdb $PINNED_VERSION installed and patched ($VENV)"
}

PIDFILE=server.pid
SERVER=server
STOP_SECONDS=10
pid_marker() { echo "--storage-path $1/data"; }
running_where() { echo "$1, $(cat "$1/url")"; }
# shellcheck source=scripts/lib/pidfile.sh
source "$HERE/lib/pidfile.sh"

free_port() {
  "$VENV/bin/python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

pings() {
  # succeeds once the server answers a ping over the wire
  "$VENV/bin/python" - "$1" <<'EOF' 2>/dev/null
import sys
from pymongo import MongoClient
client = MongoClient(sys.argv[1], serverSelectionTimeoutMS=500, connectTimeoutMS=500)
try:
    client.admin.command("ping")
finally:
    client.close()
EOF
}

cmd_start() {
  [[ $# -ge 1 ]] || usage
  launch "$1" fresh
}

cmd_restart() {
  # a stopped server (or one killed) too: only DIR/url must be there, for its port
  [[ $# -ge 1 ]] || usage
  [[ -f "$1/url" ]] || die "no $1/url: restart needs a server started on $1 before"
  cmd_stop "$1"
  launch "$1" keep
}

launch() {
  # DIR fresh|keep: fresh empties the storage and takes a new port unless one is given
  local dir pid port url i began storage=$2 sync=
  [[ ${TEPAT_MONGO_WIRE_SYNC:-0} == 1 ]] && sync=1
  [[ -x "$VENV/bin/secantusd-py" && -f "$STAMP" ]] || die "no patched server in $VENV: run '$0 install' first"
  mkdir -p "$1"
  dir=$(cd "$1" && pwd)
  if pid=$(running_pid "$dir"); then
    url=$(cat "$dir/url")
    echo "already running: pid $pid, $dir" >&2
    echo "$url"
    return 0
  fi
  if [[ $storage == keep ]]; then
    url=$(cat "$dir/url")
    port=${url##*:}
  else
    port=${TEPAT_MONGO_WIRE_PORT:-$(free_port)}
    url="mongodb://$BIND:$port"
  fi
  if pings "$url"; then
    die "a server already answers on $BIND:$port (not the one of $dir)"
  fi
  [[ $storage == keep ]] || rm -rf "$dir/data"
  mkdir -p "$dir/data"
  # An empty config of its own: --config stops the launcher from picking up a
  # secantusd.toml from the working directory or the home directory.
  : > "$dir/secantusd.toml"
  nohup "$VENV/bin/secantusd-py" --config "$dir/secantusd.toml" --host "$BIND" --port "$port" \
    --storage-path "$dir/data" --log-level WARNING ${sync:+--sync-on-commit} \
    > "$dir/server.log" 2>&1 < /dev/null &
  pid=$!
  echo "$pid" > "$dir/server.pid"
  echo "$url" > "$dir/url"
  began=$SECONDS
  for i in $(seq 1 300); do
    if pings "$url"; then
      echo "started: pid $pid, $dir, up after ~$((SECONDS - began)) s" >&2
      echo "$url"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$dir/server.pid"
      tail -n 40 "$dir/server.log" >&2 || true
      die "server at $dir died during start"
    fi
    sleep 0.2
  done
  tail -n 40 "$dir/server.log" >&2 || true
  kill -TERM "$pid" 2>/dev/null || true
  rm -f "$dir/server.pid"
  die "timeout: no answer to a ping on $url after $i tries (server stopped)"
}

run_command "$@"
