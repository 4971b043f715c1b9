#!/usr/bin/env bash
# Set-up, build and the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh release
build/bin/tensorpar bench gemm
