# Shared by scripts/fuzz.sh and scripts/fuzz_campaign.sh (sourced, from the repository root): the
# build of the libFuzzer targets (tests/fuzz) with clang, ASan+UBSan and coverage in build-fuzz,
# and each target's seeds and flags.

FUZZ_TARGETS=(fuzz_safetensors fuzz_gguf fuzz_tokenizer_json fuzz_chat_template fuzz_hf_config
  fuzz_checkpoint_index fuzz_server_json)

fuzz_build() {  # fuzz_build TARGET...
  command -v clang++ >/dev/null || { echo "[fuzz] clang++ not found (scripts/setup.sh installs clang)"; exit 1; }
  echo "== fuzz: build (clang, ASan+UBSan, libFuzzer)"
  mkdir -p build-fuzz
  # The targets link the model, train and serve parts, so all of src/ is built here with clang.
  # -Wno-pass-failed: under the sanitizers and coverage instrumentation clang does not vectorize
  # some `omp simd` loops of the kernels and says so in a warning (an error under -Werror);
  # -Wno-unknown-warning-option: the kernels' pragmas name GCC-only warnings.
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DTENSORPAR_FUZZ=ON -DTENSORPAR_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link -Wno-pass-failed -Wno-unknown-warning-option" \
    >build-fuzz/configure.log 2>&1 || { tail -30 build-fuzz/configure.log; exit 1; }
  cmake --build build-fuzz --target "$@" -j "${FUZZ_JOBS:-2}"
}

# libFuzzer flags of one target: its input size cap and dictionary.
fuzz_flags() {
  case "$1" in
    fuzz_safetensors | fuzz_gguf) echo "-max_len=16384" ;;
    fuzz_chat_template) echo "-max_len=16384 -dict=tests/fuzz/json.dict" ;;
    *) echo "-max_len=65536 -dict=tests/fuzz/json.dict" ;;
  esac
}

# fuzz_run TARGET SECONDS LOG: runs TARGET into build-fuzz/corpus/TARGET (kept between runs), read
# with its seeds in tests/fuzz/corpus/TARGET (and the io fixtures for the file parsers). A crash,
# sanitizer report, leak or timeout fails it; the input is kept in build-fuzz/artifacts.
# FUZZ_EXTRA: more libFuzzer flags.
fuzz_run() {
  local target=$1 secs=$2 log=$3
  local corpus=build-fuzz/corpus/$target seeds=tests/fuzz/corpus/$target
  mkdir -p "$corpus" build-fuzz/artifacts
  case "$target" in
    fuzz_safetensors) cp tests/fixtures/io/*.safetensors "$corpus"/ ;;
    fuzz_gguf) cp tests/fixtures/io/*.gguf "$corpus"/ ;;
  esac
  # shellcheck disable=SC2046,SC2086  # the flags are words
  build-fuzz/bin/"$target" "$corpus" "$seeds" $(fuzz_flags "$target") ${FUZZ_EXTRA:-} \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/"$target"- >"$log" 2>&1
}

# The executions and the coverage of a finished run's log (-fork runs print no final stats: their
# last "#N: cov: ..." line counts the executions of all workers).
fuzz_summary() {
  local log=$1
  local execs cov
  execs=$(grep -E "stat::number_of_executed_units" "$log" | awk '{print $2}' | tail -1 || true)
  [ -n "$execs" ] || execs=$(grep -oE "^#[0-9]+" "$log" | tail -1 | tr -d '#' || true)
  cov=$(grep -E "^#[0-9]+.*cov: " "$log" | tail -1 | sed -E 's/.*(cov: [0-9]+ ft: [0-9]+ corp: [^ ]+).*/\1/' || true)
  echo "executions: ${execs:-?}  ${cov:-cov: ?}"
}
