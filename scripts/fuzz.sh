#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz) with clang, ASan+UBSan and coverage in build-fuzz,
# then runs each for FUZZ_SECONDS (default 20) from its seeds (tests/fuzz/corpus/<target>/, and
# the io fixtures for the safetensors and GGUF parsers). Fails on any crash, sanitizer report,
# leak or timeout; the input is kept in build-fuzz/artifacts. FUZZ_JOBS: build parallelism.
# Long runs that grow a corpus: scripts/fuzz_campaign.sh (not for CI).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/fuzz_common.sh
secs="${FUZZ_SECONDS:-20}"

fuzz_build fuzz_all
for target in "${FUZZ_TARGETS[@]}"; do
  log=build-fuzz/$target.log
  echo "== fuzz: $target for ${secs}s"
  if ! fuzz_run "$target" "$secs" "$log"; then
    tail -60 "$log"
    echo "[fuzz] $target FAILED; reproducer under build-fuzz/artifacts/"
    exit 1
  fi
  fuzz_summary "$log"
done
echo "== fuzz: passed"
