#!/usr/bin/env python3
"""Soak test of an OpenAI-compatible server on loopback: bounded load for --duration seconds while
the server process's resident memory (VmRSS of /proc/PID/status) is sampled every few seconds.
Passes (exit 0) when no request failed and the RSS at the end is within --max-rss-growth (default
5%) of the RSS right after the warm-up; prints the samples' summary, --json writes all of them.

The load (--concurrency workers, each one request at a time until the deadline) mixes chat and
text completions, streaming and not, prompts of 10-200 words cut from Debian's fortunes, some
with stop strings or logprobs, and every 7th stream dropped by the client after its first chunks
(the server must abort it: those count as `dropped`, not failed).

Either attach to a running server (--base-url and --pid), or let the script start one:
  PY=$(tools/venv.sh serve)
  "$PY" bench/serve_soak.py --bin build/bin/tensorpar --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --tp 2 --duration 1800
  "$PY" bench/serve_soak.py --base-url http://127.0.0.1:8080/v1 --pid $(pgrep -f llama-server) ...
When it started the server, it also stops it with SIGTERM at the end and requires exit status 0.

The warm-up must touch the whole KV pool: a server commits the pool's pages as its blocks are first
used (prefix caching keeps finished prompts' blocks, so distinct prompts walk the whole pool), and
that growth is no leak. Use a long --warmup or a small pool (e.g. --kv-cache-mb 48 in --server-args).
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import FORTUNES, load_words  # noqa: E402


def vmrss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(a):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tp-soak-server-", suffix=".log", delete=False)
    cmd = [a.bin, "serve", "--model", a.model, "--tp", str(a.tp), "--host", "127.0.0.1", "--port", str(port),
           *a.server_args.split()]
    print("soak: starting", " ".join(cmd), f"(log {log.name})", flush=True)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + a.start_timeout
    import urllib.request
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"soak: server exited with {proc.returncode}:\n{open(log.name).read()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, base + "/v1", log.name
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    sys.exit(f"soak: server not ready after {a.start_timeout} s:\n{open(log.name).read()[-3000:]}")


class Load:
    def __init__(self, a, session, words):
        self.a = a
        self.s = session
        self.words = words
        self.ok = self.failed = self.dropped = self.tokens = 0
        self.errors = {}
        self.base = a.base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}

    def prompt(self, rng):
        n = rng.randint(10, 200)
        i = rng.randrange(0, len(self.words) - n)
        return " ".join(self.words[i:i + n])

    async def one(self, rng, i):
        chat = rng.random() < 0.5
        stream = rng.random() < 0.6
        drop = stream and i % 7 == 6
        body = {"model": self.a.model_name, "max_tokens": rng.randint(1, self.a.max_tokens),
                "temperature": rng.choice([0.0, 0.7]), "seed": rng.randrange(1 << 30)}
        if rng.random() < 0.2:
            body["stop"] = [rng.choice(["\n", ".", " the "])]
        if chat:
            body["messages"] = [{"role": "user", "content": self.prompt(rng)}]
            if rng.random() < 0.2:
                body.update(logprobs=True, top_logprobs=3)
        else:
            body["prompt"] = self.prompt(rng)
            if rng.random() < 0.2:
                body["logprobs"] = 2
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        url = self.base + ("/chat/completions" if chat else "/completions")
        try:
            async with self.s.post(url, json=body, headers=self.headers) as r:
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:150]}")
                if not stream:
                    j = await r.json()
                    self.tokens += j["usage"]["completion_tokens"]
                else:
                    seen, done = 0, False
                    async for line in r.content:
                        line = line.strip()
                        if not line.startswith(b"data:"):
                            continue
                        seen += 1
                        if drop and seen >= 2:
                            r.close()  # the client goes away mid-stream
                            self.dropped += 1
                            return
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            break
                        ev = json.loads(payload)
                        if ev.get("usage"):
                            self.tokens += ev["usage"]["completion_tokens"]
                    if drop:  # ended before the drop point (short answer)
                        done = done or seen > 0
                    if not done:
                        raise RuntimeError("stream ended without [DONE]")
            self.ok += 1
        except Exception as e:
            self.failed += 1
            key = f"{type(e).__name__}: {e}"[:160]
            self.errors[key] = self.errors.get(key, 0) + 1
            await asyncio.sleep(0.5)  # no busy loop against a server that refuses or is gone

    async def worker(self, wid, deadline, gone):
        rng = random.Random(1000 + wid)
        i = 0
        while time.monotonic() < deadline and not gone.is_set():
            await self.one(rng, i)
            i += 1


async def soak(a, pid):
    words = load_words(a.text)
    timeout = aiohttp.ClientTimeout(total=a.timeout)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0, force_close=True)) as s:
        if not a.model_name:
            async with s.get(a.base_url.rstrip("/") + "/models",
                             headers={"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}) as r:
                a.model_name = (await r.json())["data"][0]["id"]
        load = Load(a, s, words)
        t0 = time.monotonic()
        deadline = t0 + a.duration
        samples = []
        gone = asyncio.Event()  # the server process ended: stop the load

        async def sampler():
            while time.monotonic() < deadline:
                try:
                    samples.append((time.monotonic() - t0, vmrss_kb(pid)))
                except (OSError, RuntimeError):
                    samples.append((time.monotonic() - t0, None))
                    gone.set()
                    return
                await asyncio.sleep(a.sample_every)

        last_print = [t0]

        async def progress():
            while time.monotonic() < deadline and not gone.is_set():
                await asyncio.sleep(5)
                if time.monotonic() - last_print[0] >= a.print_every:
                    last_print[0] = time.monotonic()
                    rss = samples[-1][1] if samples else None
                    rss_s = "-" if rss is None else f"{rss / 1024:.1f}"
                    print(f"soak: t={time.monotonic() - t0:6.0f}s ok={load.ok} failed={load.failed} "
                          f"dropped={load.dropped} tokens={load.tokens} rss={rss_s} MiB", flush=True)

        await asyncio.gather(sampler(), progress(), *(load.worker(w, deadline, gone) for w in range(a.concurrency)))
        wall = time.monotonic() - t0
        try:
            samples.append((wall, vmrss_kb(pid)))
        except (OSError, RuntimeError):
            samples.append((wall, None))
            gone.set()
    return load, samples, wall, gone.is_set()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", help="attach to this server (with --pid)")
    ap.add_argument("--pid", type=int, help="the server process to sample")
    ap.add_argument("--bin", help="start `BIN serve` instead")
    ap.add_argument("--model", help="with --bin: the model file")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--server-args", default="--ctx 1024", help="with --bin: more serve arguments")
    ap.add_argument("--start-timeout", type=float, default=120)
    ap.add_argument("--model-name", help="the request's model (default: first of GET /models)")
    ap.add_argument("--api-key")
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--warmup", type=float, default=None, help="seconds (default min(300, duration / 4))")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--print-every", type=float, default=60)
    ap.add_argument("--max-rss-growth", type=float, default=0.05)
    ap.add_argument("--timeout", type=float, default=300, help="seconds for one request")
    ap.add_argument("--text", default=FORTUNES)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.warmup is None:
        a.warmup = min(300.0, a.duration / 4)
    proc = None
    if a.bin:
        if not a.model:
            sys.exit("soak: --bin needs --model")
        proc, a.base_url, log = start_server(a)
        pid = proc.pid
    else:
        if not (a.base_url and a.pid):
            sys.exit("soak: give --base-url and --pid, or --bin and --model")
        pid = a.pid
    rc = None
    try:
        load, samples, wall, server_gone = asyncio.run(soak(a, pid))
        early_rc = proc.poll() if proc is not None else None
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "killed after 120 s"

    good = [(t, r) for t, r in samples if r is not None]
    after = [r for t, r in good if t >= a.warmup]
    rss_warm = after[0] if after else None
    rss_end = good[-1][1] if good else None
    growth = (rss_end / rss_warm - 1) if rss_warm else None
    res = {"duration_s": wall, "warmup_s": a.warmup, "concurrency": a.concurrency, "ok": load.ok,
           "failed": load.failed, "dropped": load.dropped, "output_tokens": load.tokens,
           "output_tok_s": load.tokens / wall if wall else 0, "errors": load.errors,
           "rss_after_warmup_mib": rss_warm and rss_warm / 1024, "rss_end_mib": rss_end and rss_end / 1024,
           "rss_max_mib": max(r for _, r in good) / 1024 if good else None,
           "rss_median_after_warmup_mib": statistics.median(after) / 1024 if after else None,
           "rss_growth": growth, "max_rss_growth": a.max_rss_growth, "server_exit": rc, "server_gone": server_gone,
           "samples": [{"t_s": round(t, 2), "rss_kb": r} for t, r in samples]}
    problems = []
    if server_gone or (proc is not None and early_rc is not None):
        problems.append(f"the server process ended during the soak (exit {early_rc if proc is not None else '?'}; "
                        "was it signalled from outside?)")
    if load.failed:
        problems.append(f"{load.failed} failed requests: {load.errors}")
    if load.ok == 0:
        problems.append("no request completed")
    if growth is None:
        problems.append("no RSS sample after the warm-up (server gone, or duration <= warmup)")
    elif growth > a.max_rss_growth:
        problems.append(f"RSS grew {100 * growth:.1f}% after the warm-up (limit {100 * a.max_rss_growth:.0f}%)")
    if proc is not None and rc != 0:
        problems.append(f"server exit status after SIGTERM: {rc} (log {log})")
    res["pass"] = not problems
    res["problems"] = problems
    print(f"soak: {wall:.0f} s, {a.concurrency} workers: {load.ok} ok, {load.failed} failed, {load.dropped} dropped "
          f"by the client, {load.tokens} tokens ({res['output_tok_s']:.1f}/s); RSS after {a.warmup:.0f} s warm-up "
          f"{res['rss_after_warmup_mib'] or 0:.1f} MiB, end {res['rss_end_mib'] or 0:.1f} MiB "
          f"({'-' if growth is None else f'{100 * growth:+.2f}%'}), max {res['rss_max_mib'] or 0:.1f} MiB"
          + (f"; server exit {rc}" if proc is not None else ""), flush=True)
    print("soak: PASS" if res["pass"] else "soak: FAIL: " + "; ".join(problems), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
