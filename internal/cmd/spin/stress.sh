#!/usr/bin/env bash
# make stress: runs `make test` STRESS_RUNS times (default 5) while a
# CPU-bound process keeps every core busy, and stops at the first failure.
# The load is stress-ng (Debian: apt-get install stress-ng) when installed,
# else internal/cmd/spin. Each run's log is kept in $STRESS_LOGS (default a
# temp directory) and its path printed.
set -euo pipefail
cd "$(dirname "$0")/../../.."
runs="${STRESS_RUNS:-5}"
go="${GO:-go}"
logs="${STRESS_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/pgoutbox-stress-XXXXXX")}"
mkdir -p "$logs"
cores="$(nproc 2>/dev/null || echo 2)"

# One CPU-bound process per core.
loadpids=()
if command -v stress-ng >/dev/null 2>&1; then
  load="stress-ng --cpu $cores ($cores workers)"
  stress-ng --cpu "$cores" --timeout 0 --quiet &
  loadpids+=($!)
else
  load="$cores processes of internal/cmd/spin -n 1"
  "$go" build -o "$logs/spin" ./internal/cmd/spin
  for _ in $(seq 1 "$cores"); do
    "$logs/spin" -n 1 &
    loadpids+=($!)
  done
fi
cleanup() {
  for p in "${loadpids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${loadpids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "stress: $runs x make test beside $load (pids ${loadpids[*]}) on $cores cores; logs in $logs"
total_start=$(date +%s)
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  echo "stress: run $i/$runs starts $(date -u +%H:%M:%S), load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
  if ! make test GO="$go" >"$logs/run-$i.log" 2>&1; then
    echo "stress: run $i/$runs FAILED after $(( $(date +%s) - start ))s; failures:"
    grep -E '^(--- FAIL|FAIL|panic:)|timed out' "$logs/run-$i.log" | head -40 || true
    echo "stress: full log $logs/run-$i.log"
    exit 1
  fi
  echo "stress: run $i/$runs passed in $(( $(date +%s) - start ))s"
done
echo "stress: all $runs runs passed under CPU load in $(( $(date +%s) - total_start ))s"
