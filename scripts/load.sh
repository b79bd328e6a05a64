#!/usr/bin/env bash
# Load test: kadmit serve against the transport floor (examples/floor.rs), over
# HTTPS h2 and http/1.1, on loopback only.
#
# The server under test is pinned to CPU 0 with one worker and the load tool to
# CPU 1, so requests/s is 1 / (server CPU per request) and runs are comparable.
# Every run is bounded in time (DURATION, at most 10 s) and each request has a
# timeout; servers are stopped on exit.
#
#   scripts/load.sh                       # all runs (about 3 minutes after the build), prints markdown tables
#   DURATION=5s BODY=path/to/review.json scripts/load.sh
#   PATCH_BYTES=1000 scripts/load.sh      # the size of the patch the second floor answers with
#   ROUNDS=3 DURATION=4s scripts/load.sh  # every server measured once a round, in turn; the
#                                         # table gives each round's share of the floor and the median
#
# Goals (docs/benchmarks.md, "Load test"): /validate >= 80 % and /mutate >= 65 % of the
# floor's requests/s; p99 < 1 ms at half of kadmit's peak rate.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
DURATION=${DURATION:-8s}
ROUNDS=${ROUNDS:-1}
WARMUP=${WARMUP:-1s}
BODY=${BODY:-$ROOT/tests/fixtures/admission-reviews/create-pod.json}
RULES=${RULES:-$ROOT/rules}
PATCH_BYTES=${PATCH_BYTES:-1000}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

case $DURATION in
  [1-9]s | 10s) ;;
  *) echo "DURATION must be between 1s and 10s, got $DURATION" >&2; exit 2 ;;
esac
case $ROUNDS in
  [1-5]) ;;
  *) echo "ROUNDS must be between 1 and 5, got $ROUNDS" >&2; exit 2 ;;
esac
[ -f "$BODY" ] || { echo "no request body at $BODY (set BODY=...)" >&2; exit 2; }
. scripts/lib.sh
require_load_tools

cargo build --release --bin kadmit --example floor
BIN=$CARGO_TARGET_DIR/release


start_pinned kadmit "$BIN/kadmit" serve --listen 127.0.0.1:0 --plain-listen 127.0.0.1:0 \
  --workers 1 --rules "$RULES" --self-signed-dir "$WORK/ca" --log-format json
KADMIT=$TLS
start_pinned floor "$BIN/examples/floor" 127.0.0.1:0 1
FLOOR=$TLS
# The floor answering with a patch as large as kadmit's answer to the body on
# /mutate: what a larger answer costs a webhook written the plain way (over h2
# including a write per answer that kadmit avoids, examples/floor.rs).
start_pinned floor-patch "$BIN/examples/floor" 127.0.0.1:0 1 "$PATCH_BYTES"
FLOOR_PATCH=$TLS
# kadmit with no rules: the server's own cost (TLS, routing, decoding, metrics)
# apart from the rules' (the difference to the row with the rules).
mkdir "$WORK/no-rules"
start_pinned no-rules "$BIN/kadmit" serve --listen 127.0.0.1:0 --plain-listen 127.0.0.1:0 \
  --workers 1 --rules "$WORK/no-rules" --self-signed-dir "$WORK/ca0" --log-format json
NO_RULES=$TLS
if ! grep -q '"Loaded a new rule plan"' "$WORK/kadmit.err"; then
  echo "kadmit did not load $RULES:" >&2; cat "$WORK/kadmit.err" >&2; exit 1
fi

# oha_run URL PROTO [extra oha args...]: oha_pinned with the connections of
# PROTO (h2: 4 x 16 streams, h2-8: 2 x 4, http1.1: 64 connections).
oha_run() {
  local url=$1 proto=$2; shift 2
  local conns=(-c 64)
  [ "$proto" = h2 ] && conns=(-c 4 -p 16 --http2)
  [ "$proto" = h2-8 ] && conns=(-c 2 -p 4 --http2)
  [ "$proto" = http1.1 ] && conns+=(--http-version 1.1)
  oha_pinned "$url" "${conns[@]}" "$@"
}

# One measurement: RPS, P50 and P99 of TARGET on ENDPOINT over PROTO, run
# ROUND, and its share of the floor's rate in the same round.
declare -A RPS P50 P99 PCT
measure() {
  local target=$1 endpoint=$2 proto=$3 round=$4 addr
  case $target in
    floor) addr=$FLOOR ;;
    floor-patch) addr=$FLOOR_PATCH ;;
    no-rules) addr=$NO_RULES ;;
    kadmit) addr=$KADMIT ;;
  esac
  local url="https://$addr/$endpoint?timeout=10s" key=$target/$endpoint/$proto/$round
  oha_run "$url" "$proto" -z "$WARMUP" >/dev/null
  read -r rps p50 p99 _ < <(oha_run "$url" "$proto" -z "$DURATION")
  [ -n "${rps:-}" ] || { echo "oha failed against $url" >&2; exit 1; }
  RPS[$key]=$rps P50[$key]=$p50 P99[$key]=$p99
  PCT[$key]=$(python3 -c "print(round(100 * $rps / ${RPS[floor/$endpoint/$proto/$round]}))")
  if [ "$target" = kadmit ] && [ "$endpoint" = mutate ]; then
    PCT[$key/patch]=$(python3 -c "print(round(100 * $rps / ${RPS[floor-patch/$endpoint/$proto/$round]}))")
  fi
}

# median VALUES...: the middle value (the lower middle of an even count).
median() {
  printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

# Every server once a round, in turn, so that a drift of the machine's
# speed (runs of one server spread by ten per cent and more here) reaches
# all of them alike.
for round in $(seq "$ROUNDS"); do
  for proto in h2 http1.1; do
    for endpoint in validate mutate; do
      targets=(floor no-rules kadmit)
      [ $endpoint = mutate ] && targets=(floor floor-patch no-rules kadmit)
      for target in "${targets[@]}"; do
        measure "$target" "$endpoint" "$proto" "$round"
      done
    done
  done
done

echo "| server | endpoint | protocol | requests/s | p50 ms | p99 ms | % of floor |"
echo "|---|---|---|---:|---:|---:|---:|"
for proto in h2 http1.1; do
  for endpoint in validate mutate; do
    targets=(floor no-rules kadmit)
    [ $endpoint = mutate ] && targets=(floor floor-patch no-rules kadmit)
    for target in "${targets[@]}"; do
      rates=() pcts=() patch_pcts=() p50s=() p99s=()
      for round in $(seq "$ROUNDS"); do
        key=$target/$endpoint/$proto/$round
        rates+=("${RPS[$key]}") pcts+=("${PCT[$key]}") p50s+=("${P50[$key]}") p99s+=("${P99[$key]}")
        [ -n "${PCT[$key/patch]:-}" ] && patch_pcts+=("${PCT[$key/patch]}")
      done
      label=$target
      [ $target = no-rules ] && label="kadmit, no rules"
      [ $target = kadmit ] && label="kadmit, $(basename "$RULES")/"
      [ $target = floor-patch ] && label="floor, answering a $PATCH_BYTES-byte patch"
      # One round: its figures. More: the median, and each round's share.
      pct="$(median "${pcts[@]}") %"
      [ "$ROUNDS" -gt 1 ] && pct="$pct (${pcts[*]})"
      [ $target = floor ] && pct=""
      rps=$(median "${rates[@]}")
      [ "$ROUNDS" -gt 1 ] && rps="$rps (${rates[*]})"
      echo "| $label | /$endpoint | $proto | $rps | $(median "${p50s[@]}") | $(median "${p99s[@]}") | $pct |"
      if [ ${#patch_pcts[@]} -gt 0 ]; then
        pct="$(median "${patch_pcts[@]}") %"
        [ "$ROUNDS" -gt 1 ] && pct="$pct (${patch_pcts[*]})"
        echo "| … of the floor answering as much | /$endpoint | $proto | | | | $pct |"
      fi
    done
  done
done

echo
# Latency at half of kadmit's peak, with 8 requests in flight (h2: 2
# connections x 4 streams). With 64 in flight oha's rate limiter releases them
# in bursts, and p99 measures the burst, for the floor as much as for kadmit.
# (--latency-correction is left off: one scheduling stall of the shared VM
# then inflates every later sample.)
echo "| at half of kadmit's peak (h2, 8 in flight) | requests/s | p50 ms | p99 ms |"
echo "|---|---:|---:|---:|"
for endpoint in validate mutate; do
  rates=()
  for round in $(seq "$ROUNDS"); do rates+=("${RPS[kadmit/$endpoint/h2/$round]}"); done
  half=$(( $(median "${rates[@]}") / 2 ))
  for target in floor kadmit; do
    addr=$FLOOR; [ $target = kadmit ] && addr=$KADMIT
    read -r rps p50 p99 _ < <(oha_run "https://$addr/$endpoint?timeout=10s" h2-8 \
      -z "$DURATION" -q "$half")
    [ -n "${rps:-}" ] || { echo "oha failed against $addr" >&2; exit 1; }
    echo "| $target /$endpoint at $half/s | $rps | $p50 | $p99 |"
  done
done
