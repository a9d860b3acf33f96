#!/usr/bin/env bash
# Checks deploy/systemd/pgoutbox.service with `systemd-analyze verify`
# (Debian: part of the systemd package). The unit names
# /usr/local/bin/pgoutbox and /etc/pgoutbox/relay.env; verify needs the
# executable to exist, so the unit is checked from a temp copy pointing at
# the binary given as $1 (default: dist/pgoutbox-linux-amd64).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="$(realpath "${1:-dist/pgoutbox-linux-amd64}")"
[ -x "$bin" ] || { echo "verify.sh: $bin is not an executable (run make release first)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed -e "s|/usr/local/bin/pgoutbox|$bin|" -e "s|/etc/pgoutbox/relay.env|$tmp/relay.env|" \
  deploy/systemd/pgoutbox.service > "$tmp/pgoutbox.service"
cp deploy/systemd/pgoutbox.env "$tmp/relay.env"
out="$(systemd-analyze verify "$tmp/pgoutbox.service" 2>&1)" || { echo "$out"; exit 1; }
# verify exits 0 on some warnings; treat any line about the unit as failure.
if echo "$out" | grep -q "pgoutbox.service"; then echo "$out"; exit 1; fi
echo "systemd-analyze verify: deploy/systemd/pgoutbox.service OK"
