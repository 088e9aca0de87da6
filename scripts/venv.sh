#!/usr/bin/env bash
# Make ./.venv and install Tepat into it with the pinned versions (constraints.txt).
#
#   scripts/venv.sh          the service:            pip install -e .
#   scripts/venv.sh test     the test dependencies:  pip install -e '.[test]'
#
# Safe to run again after any failure: a .venv whose python does not run, or that has
# no pip (python3 -m venv stopped half way), is removed and made again. Without
# Debian's python3-venv it stops with one line saying so, before touching .venv.
# PYTHON names the interpreter (default python3, 3.11 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

die() { echo "venv.sh: $*" >&2; exit 1; }

venv_works() {
  [[ -x "$VENV/bin/python" ]] &&
    "$VENV/bin/python" -c 'import sys; assert sys.version_info >= (3, 11)' >/dev/null 2>&1 &&
    "$VENV/bin/python" -m pip --version >/dev/null 2>&1
}

make_venv() {
  command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11 or newer (Debian: apt-get install python3 python3-venv)"
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    die "$PYTHON is $("$PYTHON" -V 2>&1); Tepat needs Python 3.11 or newer (set PYTHON=python3.11)"
  # Debian ships venv's pip bootstrap (ensurepip) in python3-venv; without it
  # `python3 -m venv` prints a page and leaves a .venv without pip behind.
  "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 ||
    die "$PYTHON cannot make a virtual environment: install python3-venv (sudo apt-get install python3-venv), then run this again"
  if [[ -e "$VENV" ]]; then
    echo "venv.sh: $VENV is incomplete (a failed earlier attempt?): making it again" >&2
    rm -rf "$VENV"
  fi
  local log
  log=$(mktemp)
  if ! "$PYTHON" -m venv "$VENV" >"$log" 2>&1; then
    rm -rf "$VENV"
    die "$PYTHON -m venv $VENV failed: $(grep -v '^\s*$' "$log" | tail -n 1) (full output: $log)"
  fi
  rm -f "$log"
}

venv_works || make_venv

target=.
case "${1:-}" in
  "") ;;
  test) target=.[test] ;;
  *) die "usage: scripts/venv.sh [test]" ;;
esac

"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt -e "$target"
