#!/usr/bin/env bash
# Short coverage-guided fuzz runs of the inputs kadmit takes from outside:
# request bodies (decode, evaluate against the bundled rules in both modes,
# encode), rule files (load, compile) and the CEL expressions in them
# (compile, evaluate on a real Pod under the review budget), and the JSON
# index (`src/json.rs`) against serde_json on any text. Seeded from the real API-server
# reviews and the bundled and golden rule files; the corpus it grows is kept
# in a temporary directory, so the repository is not changed.
#
#   scripts/fuzz.sh            # 60 s per target
#   FUZZ_SECONDS=600 scripts/fuzz.sh review
#
# A crash, a timeout (10 s for one input) or more than 1 GiB of memory fails
# the run, with the input saved under fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(review rules cel json)

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# cargo fuzz builds with sanitizer flags that are unstable options of rustc;
# this lets the stable toolchain take them.
export RUSTC_BOOTSTRAP=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for target in "${targets[@]}"; do
  case "$target" in
    review) seeds=(tests/fixtures/admission-reviews) ;;
    rules) seeds=(rules tests/golden-diagnostics/*/) ;;
    cel) seeds=(fuzz/seeds/cel) ;;
    json) seeds=(tests/fixtures/admission-reviews) ;;
    *) echo "unknown fuzz target: $target (review, rules, cel, json)" >&2; exit 2 ;;
  esac
  mkdir -p "$work/$target"
  echo "== fuzz $target for ${seconds}s"
  cargo fuzz run --fuzz-dir fuzz "$target" "$work/$target" "${seeds[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1
done
