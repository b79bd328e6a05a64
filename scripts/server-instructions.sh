#!/usr/bin/env bash
# Instructions per request of the whole server process (TLS, HTTP, handler,
# every thread) under the load test's traffic, counted with callgrind: kadmit
# serve and the transport floor (examples/floor.rs), on loopback only.
#
# Requests/s on a shared VM drift by more than the changes they are meant to
# show (scripts/load.sh); an instruction count repeats to within a fraction
# of a percent. It cannot show what an instruction costs (cache misses, the
# kernel's work, copies done by `rep movsb`), so it complements load.sh rather
# than replacing it. Each server runs twice under valgrind, answering N1 and
# then N2 requests, and the difference divided by N2 - N1 leaves out startup.
#
#   scripts/server-instructions.sh                 # about 4 minutes after the build
#   N1=1000 N2=3000 PROTO=http1.1 scripts/server-instructions.sh
#
# Compare counts taken with the same N1 and N2 only: with a few hundred
# requests, warm-up and the batching of the first connections still show
# (N1=100 N2=300 gave 162,640 for kadmit's /mutate, the defaults 183,078).
#
# kadmit runs with --shadow-reviews 0: the shadow thread keeps up to 200
# reviews a second, and under valgrind's slowdown that is one review in
# three instead of one in two hundred.
#
# CACHE_SIM=1 also simulates this machine's first-level caches (32 KiB of
# instructions and 32 KiB of data per core, 64-byte lines) and prints, per
# request, the misses in each and an estimate of cycles: instructions plus
# ten per first-level miss, what a miss served by the second level costs.
# It runs about twice as long. The misses are where the instruction count
# and the requests/s part: a handler whose code does not fit the
# instruction cache runs as many instructions as one that does, and slower.
#
# Bounds: 100 <= N1 < N2 <= 100000 requests; each server runs under valgrind
# for at most RUN_SECONDS (default 900, at most 3600), start included, after
# which it is stopped, its requests fail and the script fails.
set -euo pipefail
# Failures inside $(...) (the runs are in them) stop the script too.
shopt -s inherit_errexit

cd "$(dirname "$0")/.."
ROOT=$PWD
N1=${N1:-2000}
N2=${N2:-6000}
PROTO=${PROTO:-h2}
BODY=${BODY:-$ROOT/tests/fixtures/admission-reviews/create-pod.json}
RULES=${RULES:-$ROOT/rules}
PATCH_BYTES=${PATCH_BYTES:-1000}
RUN_SECONDS=${RUN_SECONDS:-900}
CACHE_SIM=${CACHE_SIM:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

[ "$N1" -ge 100 ] && [ "$N2" -gt "$N1" ] && [ "$N2" -le 100000 ] ||
  { echo "need 100 <= N1 < N2 <= 100000, got N1=$N1 N2=$N2" >&2; exit 2; }
[ "$RUN_SECONDS" -ge 1 ] && [ "$RUN_SECONDS" -le 3600 ] ||
  { echo "need 1 <= RUN_SECONDS <= 3600, got $RUN_SECONDS" >&2; exit 2; }
case $PROTO in h2 | http1.1) ;; *) echo "PROTO is h2 or http1.1, got $PROTO" >&2; exit 2 ;; esac
case $CACHE_SIM in
  0) SIM=() ;;
  1) SIM=(--cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=2097152,16,64) ;;
  *) echo "CACHE_SIM is 0 or 1, got $CACHE_SIM" >&2; exit 2 ;;
esac
[ -f "$BODY" ] || { echo "no request body at $BODY (set BODY=...)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
command -v callgrind_annotate >/dev/null || { echo "callgrind_annotate is needed (valgrind)" >&2; exit 2; }
# valgrind runs every thread on one CPU of its own choosing; oha may use any.
SERVER_CPU=0 LOAD_CPU=0-$(($(nproc) - 1))
. scripts/lib.sh
require_load_tools

cargo build --release --bin kadmit --example floor
BIN=$CARGO_TARGET_DIR/release
mkdir "$WORK/no-rules"

# total NAME COUNT ENDPOINT CMD...: runs CMD under callgrind, sends COUNT
# requests, stops it and prints the instructions it ran in all (with
# CACHE_SIM=1, then the first-level misses: instructions, data read, data
# written).
total() {
  local name=$1 count=$2 endpoint=$3; shift 3
  local out=$WORK/$name-$count
  # timeout passes the SIGINT that stops the server on to valgrind, which
  # then writes its counts.
  timeout -s INT "$RUN_SECONDS" \
    valgrind --tool=callgrind "${SIM[@]}" --callgrind-out-file="$out.cg" "$@" >"$out.out" 2>"$out.err" &
  local pid=$!
  # Called in a subshell ($(total ...)): the script's own cleanup does not
  # see this server, so every way out of here stops it.
  fail() {
    echo "$name: $1" >&2
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    exit 1
  }
  local addr=""
  while [ -z "$addr" ]; do
    kill -0 "$pid" 2>/dev/null || { cat "$out.err" >&2; fail "did not start under valgrind within RUN_SECONDS=$RUN_SECONDS"; }
    sleep 0.2
    addr=$(sed -n 's/^listening tls=\([^ ]*\).*/\1/p' "$out.out" 2>/dev/null)
  done
  local conns=(-c 4 -p 16 --http2)
  [ "$PROTO" = http1.1 ] && conns=(-c 64 --http-version 1.1)
  # oha_pinned fails on any error or non-200 answer, and every request
  # fails once RUN_SECONDS have stopped the server.
  oha_pinned "https://$addr/$endpoint?timeout=10s" "${conns[@]}" -n "$count" >/dev/null ||
    fail "did not answer $count requests within RUN_SECONDS=$RUN_SECONDS"
  kill -INT "$pid"
  wait "$pid" || true
  local total
  # The totals line: each count, then its share in parentheses. With the
  # cache simulated, the 4th, 5th and 6th counts are I1mr, D1mr and D1mw.
  total=$(callgrind_annotate --auto=no "$out.cg" | awk -v sim="$CACHE_SIM" '
    /PROGRAM TOTALS/ && !seen {
      gsub(",", ""); gsub(/\([^)]*\)/, "")
      if (sim == 1) print $1, $4, $5, $6; else print $1
      seen = 1
    }')
  [ -n "$total" ] || { echo "no instruction count in $out.cg:" >&2; cat "$out.err" >&2; exit 1; }
  echo "$total"
}

# per_request NAME ENDPOINT CMD...: instructions per request, startup left
# out (with CACHE_SIM=1, then the misses per request and the estimated
# cycles).
per_request() {
  local name=$1 endpoint=$2; shift 2
  local a b
  a=($(total "$name" "$N1" "$endpoint" "$@"))
  b=($(total "$name" "$N2" "$endpoint" "$@"))
  local each=() i
  for i in "${!b[@]}"; do each+=($(((b[i] - a[i]) / (N2 - N1)))); done
  [ "$CACHE_SIM" = 1 ] && each+=($((each[0] + 10 * (each[1] + each[2] + each[3]))))
  echo "${each[*]}"
}

# kadmit serve on a rules directory, as one array each.
kadmit_serve=("$BIN/kadmit" serve --listen 127.0.0.1:0 --plain-listen 127.0.0.1:0 --workers 1
  --self-signed-dir "$WORK/ca" --log-format json --shadow-reviews 0)
kadmit_no_rules=("${kadmit_serve[@]}" --rules "$WORK/no-rules")
kadmit_rules=("${kadmit_serve[@]}" --rules "$RULES")

# One table row: the counts, and the share of the floor's (of its estimated
# cycles with CACHE_SIM=1).
if [ "$CACHE_SIM" = 1 ]; then
  echo "| server | endpoint | protocol | instructions | I1 misses | D1 read misses | D1 write misses | estimated cycles | % of the floor's cycles |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
else
  echo "| server | endpoint | protocol | instructions per request | % of the floor |"
  echo "|---|---|---|---:|---:|"
fi
print_row() {
  local label=$1 endpoint=$2 share=$3; shift 3
  echo "| $label | /$endpoint | $PROTO |$(printf ' %s |' "$@") $share |"
}
floor=($(per_request floor mutate "$BIN/examples/floor" 127.0.0.1:0 1))
print_row floor mutate "" "${floor[@]}"
row() {
  local label=$1 name=$2 endpoint=$3; shift 3
  local count
  count=($(per_request "$name" "$endpoint" "$@"))
  local last=$((${#count[@]} - 1))
  print_row "$label" "$endpoint" "$(((200 * count[last] + floor[last]) / (2 * floor[last]))) %" "${count[@]}"
}
row "floor, answering a $PATCH_BYTES-byte patch" floor-patch mutate \
  "$BIN/examples/floor" 127.0.0.1:0 1 "$PATCH_BYTES"
row "kadmit, no rules" no-rules validate "${kadmit_no_rules[@]}"
row "kadmit, $(basename "$RULES")/" validate validate "${kadmit_rules[@]}"
row "kadmit, $(basename "$RULES")/" mutate mutate "${kadmit_rules[@]}"
