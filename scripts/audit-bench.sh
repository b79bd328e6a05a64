#!/usr/bin/env bash
# kadmit audit throughput (docs/benchmarks.md, "kadmit audit"): objects per
# second on a List of COUNT Pods (default 100,000) with the bundled rules, the
# release binary pinned to one CPU, every output format, REPEAT runs each.
#
# The Pods are the recorded create-pod fixture's object with distinct
# names, about 1.25 KB each, as `kubectl get pods -A -o json` writes a List.
#
#   scripts/audit-bench.sh                 # about a minute after the build
#   COUNT=20000 REPEAT=1 scripts/audit-bench.sh
#   INSTRUCTIONS=1 scripts/audit-bench.sh  # instructions per Pod instead
#
# INSTRUCTIONS=1 counts instructions with callgrind (repeatable, unlike
# time) on Lists of 1,000 and 3,000 Pods, `--output json`, and prints the
# difference per Pod, so that start-up (compiling the rules) drops out. It
# takes about a minute; the profiles stay in $CARGO_TARGET_DIR/audit-callgrind/
# for callgrind_annotate.
set -euo pipefail

cd "$(dirname "$0")/.."
COUNT=${COUNT:-100000}
REPEAT=${REPEAT:-3}
CPU=${CPU:-1}
case $COUNT in
  '' | *[!0-9]*) echo "COUNT must be a number" >&2; exit 2 ;;
esac
[ "$COUNT" -le 1000000 ] || { echo "COUNT is at most 1,000,000" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed to write the List" >&2; exit 2; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

cargo build --release --bin kadmit
BIN=$CARGO_TARGET_DIR/release/kadmit
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# pods COUNT PATH: a List of COUNT Pods.
pods() {
  python3 - "$1" "$2" <<'PY'
import json, sys
count, path = int(sys.argv[1]), sys.argv[2]
review = json.load(open("tests/fixtures/admission-reviews/create-pod.json"))
pod = review["request"]["object"]
with open(path, "w") as out:
    out.write('{"apiVersion":"v1","kind":"List","metadata":{},"items":[')
    for i in range(count):
        pod["metadata"]["name"] = f"pod-{i}"
        out.write(("," if i else "") + json.dumps(pod, separators=(",", ":")))
    out.write("]}")
PY
}

if [ "${INSTRUCTIONS:-0}" = 1 ]; then
  command -v valgrind >/dev/null || { echo "valgrind is needed for INSTRUCTIONS=1" >&2; exit 2; }
  OUT=$CARGO_TARGET_DIR/audit-callgrind
  mkdir -p "$OUT"
  for count in 1000 3000; do
    pods "$count" "$WORK/pods-$count.json"
    status=0
    timeout 600 valgrind --tool=callgrind --callgrind-out-file="$OUT/pods-$count.out" \
      "$BIN" audit rules "$WORK/pods-$count.json" --output json >/dev/null 2>"$WORK/valgrind-$count" || status=$?
    [ "$status" -le 1 ] || { cat "$WORK/valgrind-$count" >&2; exit 1; }
  done
  total() { sed -n 's/^summary: //p' "$OUT/pods-$1.out"; }
  echo "instructions: $(total 1000) for 1,000 Pods, $(total 3000) for 3,000 Pods"
  echo "per Pod: $(( ($(total 3000) - $(total 1000)) / 2000 ))"
  exit 0
fi

pods "$COUNT" "$WORK/pods.json"
echo "input: $COUNT Pods, $(du -h "$WORK/pods.json" | cut -f1)"
echo "| output | run | seconds | objects/s | peak RSS MiB |"
echo "|---|---:|---:|---:|---:|"
for format in table json openreports; do
  for run in $(seq "$REPEAT"); do
    status=0
    /usr/bin/time -f "%e %M" -o "$WORK/time" \
      taskset -c "$CPU" "$BIN" audit rules "$WORK/pods.json" --output "$format" >/dev/null || status=$?
    # 0: nothing denied, 1: something denied; anything else is a failure.
    [ "$status" -le 1 ] || { echo "kadmit audit exited with $status" >&2; exit 1; }
    read -r seconds kib <"$WORK/time"
    python3 -c "import sys; c,s,k=int(sys.argv[1]),float(sys.argv[2]),int(sys.argv[3]); print(f'| {sys.argv[4]} | {sys.argv[5]} | {s:.2f} | {c/s:,.0f} | {k/1024:.0f} |')" \
      "$COUNT" "$seconds" "$kib" "$format" "$run"
  done
done
