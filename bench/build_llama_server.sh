#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (the OpenAI-compatible server that bench/serve_bench.sh runs
# beside `tensorpar serve`) from the llama.cpp sources vendored in the PyPI sdist of
# llama-cpp-python: pip download (source only) -> unpack -> cmake, CPU only, native ISA, no web UI
# assets (nothing is downloaded at build time), no OpenSSL. Idempotent: prints the binary's path
# and does nothing else when it is already built. 15-30 minutes on 2 cores.
# Run it with --no-repack on this machine: with weights repacked for AMX (the CPU reports amx_int8;
# GGML_NATIVE compiles the AMX kernels in) llama.cpp 0c1e570 crashes in ggml_backend_amx_mul_mat on
# the first decode. bench/serve_bench.sh passes it.
#
# Usage: bench/build_llama_server.sh            (prints the path of llama-server)
#   env: LLAMA_CPP_PYTHON_VERSION (default 0.3.36, as tools/requirements-bench.txt),
#        LLAMA_SERVER_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/tensorpar), JOBS (default 2),
#        NICE (default 10: the build leaves room for other work on the machine)
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${LLAMA_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorpar}"
ROOT="$CACHE/llama-server-$VERSION"
BIN="$ROOT/build/bin/llama-server"
JOBS="${JOBS:-2}"
NICE="${NICE:-10}"
log() { echo "build_llama_server: $*" >&2; }

if [[ -x "$BIN" && -f "$ROOT/version.txt" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$ROOT"

SRC="$ROOT/llama_cpp_python-$VERSION"
if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
  if python3 -m pip --version >/dev/null 2>&1; then
    PIP=(python3 -m pip)
  else  # Debian's python3 has no pip: a throwaway venv's
    [[ -x "$ROOT/.pip-venv/bin/pip" ]] || python3 -m venv "$ROOT/.pip-venv" >&2
    PIP=("$ROOT/.pip-venv/bin/pip")
  fi
  log "downloading the llama-cpp-python==$VERSION sdist (about 75 MB)"
  "${PIP[@]}" download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$ROOT" >&2
  tar -xzf "$ROOT/llama_cpp_python-$VERSION.tar.gz" -C "$ROOT"
fi

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
log "configuring $SRC/vendor/llama.cpp"
cmake -S "$SRC/vendor/llama.cpp" -B "$ROOT/build" "${GEN[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_CURL=OFF >"$ROOT/configure.log" 2>&1 || { tail -30 "$ROOT/configure.log" >&2; exit 1; }
log "building llama-server with -j$JOBS (log: $ROOT/build.log)"
nice -n "$NICE" cmake --build "$ROOT/build" --target llama-server -j "$JOBS" >"$ROOT/build.log" 2>&1 || {
  tail -30 "$ROOT/build.log" >&2; exit 1; }

{
  echo "llama-cpp-python $VERSION (PyPI sdist, vendor/llama.cpp)"
  "$BIN" --version 2>&1 || true
} >"$ROOT/version.txt"
log "built: $(tr '\n' ' ' <"$ROOT/version.txt")"
echo "$BIN"
