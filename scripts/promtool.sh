#!/usr/bin/env bash
# promtool (checks and unit-tests deploy/prometheus/alerts.yml) from Debian's `prometheus`
# package, unpacked into .venv/bin: installing the package would also start a Prometheus
# server where systemd runs, and the tests need only this one static binary.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=.venv/bin/promtool
if [ -x "$TARGET" ]; then exit 0; fi
if command -v promtool >/dev/null; then ln -sf "$(command -v promtool)" "$TARGET"; exit 0; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK"  # apt's download user must be able to write there
if ! (cd "$WORK" && apt-get download -q prometheus >/dev/null 2>&1); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  (cd "$WORK" && apt-get download -q prometheus >/dev/null 2>&1)
fi
dpkg-deb -x "$WORK"/prometheus_*.deb "$WORK/x"
install -m 755 "$WORK/x/usr/bin/promtool" "$TARGET"
"$TARGET" --version | head -1
