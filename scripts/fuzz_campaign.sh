#!/usr/bin/env bash
# scripts/fuzz_campaign.sh TARGET SECONDS: one libFuzzer target (fuzz_tokenizer_json, ...; see
# scripts/fuzz_common.sh) for a long time, into the persistent corpus build-fuzz/corpus/TARGET,
# so CPU-hours accumulate across runs; prints the executions and the coverage at the end. Not
# for CI (scripts/fuzz.sh is the short run of every target). FUZZ_FORK=N runs N worker
# processes (libFuzzer's -fork). A finding: build-fuzz/artifacts/TARGET-*; reproduce it with
# `build-fuzz/bin/TARGET FILE`, then keep the input in tests/fuzz/corpus/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 TARGET SECONDS (TARGET: fuzz_safetensors fuzz_gguf fuzz_tokenizer_json fuzz_chat_template fuzz_hf_config fuzz_checkpoint_index fuzz_server_json)"; exit 2; }
source scripts/fuzz_common.sh
target=$1 secs=$2
[[ " ${FUZZ_TARGETS[*]} " == *" $target "* ]] || { echo "[fuzz] unknown target $target"; exit 2; }

fuzz_build "$target"
log=build-fuzz/$target.campaign.log
mkdir -p build-fuzz/corpus/"$target"  # a fresh tree has none yet
before=$(find build-fuzz/corpus/"$target" -type f | wc -l)
echo "== fuzz campaign: $target for ${secs}s into build-fuzz/corpus/$target ($before inputs); log $log"
extra=""
if [ "${FUZZ_FORK:-0}" -gt 1 ]; then extra="-fork=$FUZZ_FORK"; fi
status=0
FUZZ_EXTRA="$extra" fuzz_run "$target" "$secs" "$log" || status=$?
after=$(find build-fuzz/corpus/"$target" -type f | wc -l)
fuzz_summary "$log"
echo "corpus: $before -> $after inputs"
if [ "$status" -ne 0 ]; then
  tail -60 "$log"
  echo "[fuzz] $target FAILED; reproducer under build-fuzz/artifacts/"
  exit 1
fi
