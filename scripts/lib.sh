# Shared by scripts/load.sh and scripts/reload-bench.sh (sourced, not run):
# the tool checks, a work directory cleaned up on exit, starting a server
# pinned to SERVER_CPU that announces itself with a `listening tls=... plain=...`
# line on stdout, and one oha run pinned to LOAD_CPU.

# require_load_tools: python3 (to read oha's JSON) and oha (installed with
# cargo when missing).
require_load_tools() {
  command -v python3 >/dev/null || { echo "python3 is needed to read oha's JSON" >&2; exit 2; }
  if ! command -v oha >/dev/null; then
    echo "installing oha (cargo install oha --locked)" >&2
    cargo install oha --locked
  fi
}

# WORK: a temporary directory; every started server is stopped and WORK
# removed on exit.
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# start_pinned NAME CMD...: runs CMD pinned to SERVER_CPU, logs in
# $WORK/NAME.{out,err}, and sets PID, TLS and PLAIN (empty when the server
# has no plain listener) from its listening line; waits at most 20 s.
start_pinned() {
  local name=$1; shift
  taskset -c "$SERVER_CPU" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 200); do
    if grep -q '^listening tls=' "$WORK/$name.out" 2>/dev/null; then
      TLS=$(sed -n 's/^listening tls=\([^ ]*\).*/\1/p' "$WORK/$name.out")
      PLAIN=$(sed -n 's/.* plain=\([^ ]*\).*/\1/p' "$WORK/$name.out")
      return
    fi
    kill -0 "$PID" 2>/dev/null || { cat "$WORK/$name.err" >&2; exit 1; }
    sleep 0.1
  done
  echo "$name did not start" >&2; cat "$WORK/$name.err" >&2; exit 1
}

# oha_pinned URL [oha args...]: POSTs $BODY to URL with oha pinned to
# LOAD_CPU (5 s timeout per request) and prints
# "rps p50_ms p99_ms p99.9_ms max_ms"; fails on any error or non-200 answer,
# so a broken server never passes for a fast one.
oha_pinned() {
  local url=$1; shift
  taskset -c "$LOAD_CPU" oha --no-tui --worker-threads 1 --insecure -t 5s \
    -m POST -H 'Content-Type: application/json' -D "$BODY" "$@" \
    --output-format json "$url" |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
s, p = r["summary"], r["latencyPercentiles"]
codes = r.get("statusCodeDistribution", {})
bad = {c: n for c, n in codes.items() if c != "200"}
if bad or s.get("successRate", 1) < 1:
    sys.exit("non-200 answers or errors: %s %s" % (codes, r.get("errorDistribution")))
print("%.0f %.3f %.3f %.3f %.3f" % (s["requestsPerSec"], p["p50"] * 1000, p["p99"] * 1000,
                                    p["p99.9"] * 1000, s["slowest"] * 1000))'
}
