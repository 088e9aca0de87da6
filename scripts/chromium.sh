#!/usr/bin/env bash
# Install Debian's chromium (and a font family for readable screenshots) for the
# dashboard's browser test (tests/browser/). Playwright drives this browser
# (executable_path); its own browser download is never used. Idempotent.
set -euo pipefail

if command -v chromium >/dev/null && fc-list 2>/dev/null | grep -qi liberation; then
  exit 0
fi
command -v apt-get >/dev/null || {
  echo "chromium.sh: apt-get not found; install Chromium and set TEPAT_TEST_CHROMIUM to its path" >&2
  exit 1
}
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  chromium fonts-liberation >/dev/null
command -v chromium >/dev/null || { echo "chromium.sh: chromium is still missing" >&2; exit 1; }
