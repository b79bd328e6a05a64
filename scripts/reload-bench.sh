#!/usr/bin/env bash
# Reload figures (docs/reload.md), on loopback only, with the release binary
# and 1,000 synthetic rules in a kubelet-style ConfigMap volume
# (examples/reload_bench.rs generates them and does the kubelet swaps):
#
#   1. change to served: SWAPS kubelet swaps, each timed from just before the
#      swap until GET /status shows the new generation; with the default
#      --watch-debounce-ms 200 and with 50. Also the server's own reload
#      time (read + compile + store) from its "Loaded a new rule plan" logs.
#   2. review latency while the rules are swapped every 100 ms, against the
#      same load without swaps: oha drives POST /validate over h2 at a fixed
#      RATE (8 in flight), then at full speed (64 in flight).
#
# Like scripts/load.sh, the server runs pinned to CPU 0 with one worker (its
# reload thread shares that CPU, as in a pod limited to one CPU), and oha and
# the swapper to CPU 1. Every run is bounded: oha by DURATION (at most 20 s),
# the swap loop by DURATION + 1 s and 1,000 swaps, each wait by 10 s.
#
#   scripts/reload-bench.sh              # about 2 minutes after the build
#   SWAPS=20 DURATION=10s RATE=5000 REPEAT=2 scripts/reload-bench.sh
#
# Each load runs REPEAT times without and with swaps, alternating, so that
# noise from other work on the machine shows as a spread between runs.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
SWAPS=${SWAPS:-20}
DURATION=${DURATION:-10s}
RATE=${RATE:-5000}
REPEAT=${REPEAT:-2}
BODY=${BODY:-$ROOT/tests/fixtures/admission-reviews/create-pod.json}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

case $DURATION in
  [1-9]s | 1[0-9]s | 20s) ;;
  *) echo "DURATION must be between 1s and 20s, got $DURATION" >&2; exit 2 ;;
esac
SECONDS_OF_LOAD=${DURATION%s}
[ -f "$BODY" ] || { echo "no request body at $BODY (set BODY=...)" >&2; exit 2; }
. scripts/lib.sh
require_load_tools

cargo build --release --bin kadmit --example reload_bench
KADMIT=$CARGO_TARGET_DIR/release/kadmit
BENCH=$CARGO_TARGET_DIR/release/examples/reload_bench


# start NAME ARGS...: runs kadmit serve on the rules, pinned to SERVER_CPU,
# and sets TLS, PLAIN and PID.
start() {
  local name=$1; shift
  start_pinned "$name" "$KADMIT" serve --listen 127.0.0.1:0 --plain-listen 127.0.0.1:0 \
    --workers 1 --rules "$WORK/rules" --self-signed-dir "$WORK/ca-$name" --log-format json \
    --reload-interval-secs 0 "$@"
}

stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; }

# reload_seconds LOG: p50 and max of the server's own reload time.
reload_seconds() {
  python3 - "$1" <<'EOF'
import json, sys
seconds = []
for line in open(sys.argv[1]):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    fields = entry.get("fields", entry)
    if fields.get("message") == "Loaded a new rule plan" and fields.get("trigger") != "startup":
        seconds.append(float(fields["seconds"]))
seconds.sort()
if seconds:
    print("server reload (read + compile + store), %d reloads: p50 %.1f ms, max %.1f ms"
          % (len(seconds), seconds[len(seconds) // 2] * 1000, seconds[-1] * 1000))
EOF
}

# oha_run URL [oha args...]: oha_pinned over h2.
oha_run() {
  local url=$1; shift
  oha_pinned "$url" --http2 "$@"
}

"$BENCH" generate "$WORK/rules"

echo "## 1. change to served, $SWAPS kubelet swaps of 1,000 rules"
for debounce in 200 50; do
  echo
  echo "### --watch-debounce-ms $debounce"
  start "debounce-$debounce" --watch-debounce-ms "$debounce"
  taskset -c "$LOAD_CPU" "$BENCH" latency "$WORK/rules" "$PLAIN" "$SWAPS"
  reload_seconds "$WORK/debounce-$debounce.err"
  stop
done

echo
echo "## 2. POST /validate over h2 while the rules are swapped every 100 ms (--watch-debounce-ms 50)"
start load --watch-debounce-ms 50
URL="https://$TLS/validate?timeout=10s"
oha_run "$URL" -c 2 -p 4 -z 1s >/dev/null # warm-up
echo
echo "| load | rule swaps | run | requests/s | p50 ms | p99 ms | p99.9 ms | max ms |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for load in "rate" "peak"; do
  case $load in
    rate) args=(-c 2 -p 4 -q "$RATE" --latency-correction); label="$RATE/s, 8 in flight" ;;
    peak) args=(-c 4 -p 16); label="full speed, 64 in flight" ;;
  esac
  for run in $(seq "$REPEAT"); do
    for swaps in none "every 100 ms"; do
      SWAPPER=""
      if [ "$swaps" != none ]; then
        taskset -c "$LOAD_CPU" "$BENCH" swap-loop "$WORK/rules" "$PLAIN" 100 $((SECONDS_OF_LOAD + 1)) \
          >"$WORK/swaps-$load-$run.txt" &
        SWAPPER=$!
        PIDS+=("$SWAPPER")
      fi
      read -r rps p50 p99 p999 max < <(oha_run "$URL" "${args[@]}" -z "$DURATION")
      [ -n "${rps:-}" ] || { echo "oha failed against $URL" >&2; exit 1; }
      if [ -n "$SWAPPER" ]; then
        wait "$SWAPPER"
      fi
      echo "| $label | $swaps | $run | $rps | $p50 | $p99 | $p999 | $max |"
    done
  done
done
echo
for load in rate peak; do
  for run in $(seq "$REPEAT"); do
    echo "swaps during $load run $run: $(cat "$WORK/swaps-$load-$run.txt")"
  done
done
reload_seconds "$WORK/load.err"
