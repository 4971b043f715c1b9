#!/usr/bin/env bash
# Serving benchmark: `tensorpar serve` at tp 1 (2 threads) and tp 2 (1 thread per rank) beside
# llama.cpp's llama-server (same GGUF, 2 threads, --parallel 16 --cont-batching), one server at a
# time, each pinned to the same cores with taskset; bench/serve_bench.py drives each with streaming
# chat completions: concurrency levels (output tok/s, req/s, TTFT/ITL p50/p99), long prompts
# arriving during decode (ITL p99/p50), and a shared ~500-token system prompt (cold vs warm TTFT).
# Writes one JSON (--out) with every measurement and the versions of everything involved.
#
# Usage: bench/serve_bench.sh [--bin build/bin/tensorpar] [--out serve_bench.json] [--no-llama]
#                             [--only tp1|tp2|llama] [--ctx 2048] [--cpus 0,1] [-- serve_bench.py args]
#   e.g. bench/serve_bench.sh --out /tmp/sb.json -- --concurrency 1,4,16,64 --max-tokens 64
# Needs: tools/venv.sh serve (aiohttp), tools/fetch_model.sh, bench/build_llama_server.sh (builds
# llama-server from the llama-cpp-python sdist on first use: 15-30 minutes on 2 cores).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$REPO/build/bin/tensorpar"
OUT="serve_bench.json"
LLAMA=1
ONLY=""
CTX=2048
CPUS="0,1"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --no-llama) LLAMA=0; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    --ctx) CTX="$2"; shift 2 ;;
    --cpus) CPUS="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "serve_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BENCH_ARGS=("$@")
NTHREADS=$(( $(tr ',' '\n' <<<"$CPUS" | wc -l) ))

PY="$(bash "$REPO/tools/venv.sh" serve)"
MODEL="$(bash "$REPO/tools/fetch_model.sh" --quiet)"
[[ -x "$BIN" ]] || { echo "serve_bench.sh: no $BIN (build first)" >&2; exit 1; }
LLAMA_BIN=""
if [[ $LLAMA == 1 && ( -z "$ONLY" || "$ONLY" == llama ) ]]; then
  LLAMA_BIN="$(bash "$REPO/bench/build_llama_server.sh")"
fi
TMP="$(mktemp -d /tmp/serve_bench.XXXXXX)"
SERVER_PID=""
cleanup() { [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null || true; }
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start NAME CMD... : runs CMD pinned to $CPUS with --port appended, waits for /health 200.
start() {
  local name="$1"; shift
  PORT="$(free_port)"
  echo "== $name: $* --port $PORT (pinned to cpus $CPUS)" >&2
  taskset -c "$CPUS" "$@" --port "$PORT" >"$TMP/$name.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "serve_bench.sh: $name exited:" >&2; tail -30 "$TMP/$name.log" >&2; exit 1
    fi
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health" || true)" == 200 ]] && return 0
    sleep 0.5
  done
  echo "serve_bench.sh: $name not ready after 300 s" >&2; tail -30 "$TMP/$name.log" >&2; exit 1
}

stop() {
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

run_modes() {
  local name="$1" url="http://127.0.0.1:$PORT/v1"
  "$PY" "$REPO/bench/serve_bench.py" --base-url "$url" --label "$name" --json "$TMP/$name.levels.json" \
    "${BENCH_ARGS[@]}"
  "$PY" "$REPO/bench/serve_bench.py" --base-url "$url" --label "$name" --json "$TMP/$name.long.json" \
    --long-prompts --concurrency 4 --max-tokens 64 --long-seconds 60
  "$PY" "$REPO/bench/serve_bench.py" --base-url "$url" --label "$name" --json "$TMP/$name.prefix.json" \
    --system-prompt-tokens 500 --max-tokens 16 --prefix-requests 8
  # Peak resident memory of the server so far (VmHWM), for the record.
  grep -E '^VmHWM' "/proc/$SERVER_PID/status" | awk '{print $2}' >"$TMP/$name.hwm_kb" || true
}

want() { [[ -z "$ONLY" || "$ONLY" == "$1" ]]; }
NAMES=()
if want tp1; then
  start "tensorpar-tp1" "$BIN" serve --model "$MODEL" --tp 1 --threads-per-rank "$NTHREADS" --ctx "$CTX" --max-seqs 16
  run_modes "tensorpar-tp1"; stop; NAMES+=("tensorpar-tp1")
fi
if want tp2; then
  start "tensorpar-tp2" "$BIN" serve --model "$MODEL" --tp 2 --threads-per-rank $(( NTHREADS / 2 > 0 ? NTHREADS / 2 : 1 )) \
    --ctx "$CTX" --max-seqs 16
  run_modes "tensorpar-tp2"; stop; NAMES+=("tensorpar-tp2")
fi
if [[ -n "$LLAMA_BIN" ]]; then
  # -c is the whole KV cache, shared by the 16 slots: 16 x ctx so each slot has a full context.
  # --no-repack: with the weights repacked for AMX (this CPU reports amx_int8) llama.cpp 0c1e570
  # crashes in ggml_backend_amx_mul_mat on the first decode; unpacked Q4_1 runs its AVX-512 path.
  start "llama-server" "$LLAMA_BIN" -m "$MODEL" -t "$NTHREADS" -tb "$NTHREADS" -c $(( 16 * CTX )) \
    --parallel 16 --cont-batching --no-repack --host 127.0.0.1 --no-webui
  run_modes "llama-server"; stop; NAMES+=("llama-server")
fi

LLAMA_VERSION=""
[[ -n "$LLAMA_BIN" ]] && LLAMA_VERSION="$(cat "$(dirname "$(dirname "$(dirname "$LLAMA_BIN")")")/version.txt" 2>/dev/null || true)"
"$PY" - "$TMP" "$OUT" "$BIN" "$MODEL" "$CPUS" "$CTX" "$LLAMA_VERSION" "$REPO" "${NAMES[@]}" <<'EOF'
import json, os, platform, subprocess, sys, time
tmp, out, binary, model, cpus, ctx, llama_version, repo, *names = sys.argv[1:]
def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        return f"({e})"
cpu = next((l.split(":", 1)[1].strip() for l in sh("lscpu").splitlines() if l.startswith("Model name")), "")
import aiohttp
res = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpus": cpus, "ctx": int(ctx), "cpu_model": cpu,
       "nproc": os.cpu_count(), "loadavg_end": os.getloadavg(), "model": os.path.basename(model),
       "versions": {"tensorpar": sh(binary, "--version"), "tensorpar_commit": sh("git", "-C", repo, "rev-parse", "HEAD"),
                    "tensorpar_worktree_changes": len(sh("git", "-C", repo, "status", "--porcelain").splitlines()),
                    "llama_server": llama_version, "python": platform.python_version(), "aiohttp": aiohttp.__version__,
                    "kernel": platform.release()},
       "servers": {}}
for n in names:
    r = {}
    for mode in ("levels", "long", "prefix"):
        p = os.path.join(tmp, f"{n}.{mode}.json")
        if os.path.exists(p):
            with open(p) as f:
                r[mode] = json.load(f)
    p = os.path.join(tmp, f"{n}.hwm_kb")
    if os.path.exists(p) and open(p).read().strip():
        r["peak_rss_mib"] = int(open(p).read().strip()) / 1024
    res["servers"][n] = r
with open(out, "w") as f:
    json.dump(res, f, indent=1)
print(f"serve_bench.sh: wrote {out}")
# Side-by-side summary of the levels.
print(f"{'server':<15} {'conc':>5} {'out tok/s':>10} {'req/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'fail':>5}")
for n, r in res["servers"].items():
    for L in r.get("levels", {}).get("levels", []):
        print(f"{n:<15} {L['concurrency']:>5} {L['output_tok_s']:>10.1f} {L['req_s']:>7.2f} {L['ttft_p50_ms']:>9.1f} "
              f"{L['ttft_p99_ms']:>9.1f} {L['itl_p50_ms']:>8.1f} {L['itl_p99_ms']:>8.1f} {L['failed']:>5}")
for n, r in res["servers"].items():
    lp, pc = r.get("long", {}).get("long_prompts"), r.get("prefix", {}).get("prefix_cache")
    if lp:
        print(f"{n:<15} long prompts: ITL p50 {lp['itl_p50_ms']:.1f} ms p99 {lp['itl_p99_ms']:.1f} ms "
              f"(p99/p50 {lp['itl_p99_over_p50'] or float('nan'):.2f})")
    if pc:
        print(f"{n:<15} prefix cache: cold TTFT {pc['cold_ttft_ms'] or float('nan'):.1f} ms, warm p50 {pc['warm_ttft_p50_ms']:.1f} ms")
EOF
