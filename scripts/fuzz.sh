#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan+UBSan and coverage in build-fuzz,
# then runs each for FUZZ_SECONDS (default 60) from seeds made of the valid io fixtures.
# Fails on any crash, sanitizer report, leak or timeout; the input is kept in build-fuzz/artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-2}"
command -v clang++ >/dev/null || { echo "[fuzz] clang++ not found (scripts/setup.sh installs clang)"; exit 1; }

echo "== fuzz: build (clang, ASan+UBSan, libFuzzer)"
mkdir -p build-fuzz
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DTENSORPAR_FUZZ=ON -DTENSORPAR_SANITIZE=ON -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  >build-fuzz/configure.log 2>&1 || { tail -30 build-fuzz/configure.log; exit 1; }
cmake --build build-fuzz --target fuzz_safetensors fuzz_gguf -j "$jobs"

run() {
  local target=$1 pattern=$2
  local corpus=build-fuzz/corpus/$target log=build-fuzz/$target.log
  mkdir -p "$corpus" build-fuzz/artifacts
  cp tests/fixtures/io/$pattern "$corpus"/ 2>/dev/null || true
  echo "== fuzz: $target for ${secs}s"
  if ! build-fuzz/bin/"$target" "$corpus" -max_total_time="$secs" -max_len=16384 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$target"- \
      >"$log" 2>&1; then
    tail -60 "$log"
    echo "[fuzz] $target FAILED; reproducer under build-fuzz/artifacts/"
    exit 1
  fi
  grep -E "stat::number_of_executed_units|cov:" "$log" | tail -2
}
run fuzz_safetensors '*.safetensors'
run fuzz_gguf '*.gguf'
echo "== fuzz: passed"
