#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server (`tensorpar serve`, llama.cpp's llama-server, ...):
streaming chat (or text) completions over asyncio + aiohttp, on loopback only.

Prompts are cut from a real text (Debian's fortunes, /usr/share/games/fortunes, or --text FILE|DIR):
each request gets a window of 20-200 words at a seeded position. Every request streams with
stream_options.include_usage; per request the client records

  ttft     arrival of the first chunk with text, from the moment the request was sent
  itl      gaps between successive chunks with text (a chunk may hold more than one token when the
           server holds text back, e.g. for stop strings or unfinished UTF-8)
  e2e      send to the end of the stream
  tokens   usage.completion_tokens (else the number of chunks with text)

Modes (each prints a table; --json FILE writes every measurement):
  levels (default)         for each --concurrency level C, N requests (--requests-per-level, default
                           max(16, 2C)) with at most C in flight: output tok/s, req/s, TTFT and ITL
                           p50/p99, failures.
  --long-prompts           for --long-seconds (60), C short-prompt streams decode back to back while
                           a long prompt (--long-prompt-words, ~1000 tokens) arrives every
                           --long-prompt-interval (5) s: the decode streams' ITL p50/p99 and their
                           ratio (how much prefill stalls decode).
  --system-prompt-tokens N a shared system prompt of about N tokens ahead of different questions,
                           sent one at a time: the first (cold) TTFT against the median warm one
                           (prefix caching).

Usage: PY=$(tools/venv.sh serve) && "$PY" bench/serve_bench.py --base-url http://127.0.0.1:8080/v1 \
           [--concurrency 1,4,16,64] [--max-tokens 64] [--json out.json]
"""
import argparse
import asyncio
import glob
import json
import math
import os
import random
import statistics
import sys
import time

import aiohttp

FORTUNES = "/usr/share/games/fortunes"


# ------------------------------------------------------------------------------------------------
# Text


def load_words(path):
    """The words of a text file, or of every text file of a directory (fortune index files *.dat
    and symlinks skipped, '%' separators dropped)."""
    files = [path] if os.path.isfile(path) else sorted(
        f for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
        if os.path.isfile(f) and not os.path.islink(f) and not f.endswith((".dat", ".u8")))
    out = []
    for f in files:
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                out.extend(w for w in fh.read().split() if w != "%")
        except OSError:
            continue
    if len(out) < 1000:
        sys.exit(f"serve_bench: too little text in {path} ({len(out)} words); give --text FILE")
    return out


class Prompts:
    def __init__(self, words, seed):
        self.words = words
        self.rng = random.Random(seed)

    def cut(self, n):
        start = self.rng.randrange(0, len(self.words) - n - 1)
        return " ".join(self.words[start:start + n])

    def short(self, lo=20, hi=200):
        return self.cut(self.rng.randint(lo, hi))


# ------------------------------------------------------------------------------------------------
# One request


def percentile(xs, q):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    f, c = math.floor(k), math.ceil(k)
    return s[f] + (s[c] - s[f]) * (k - f)


class Client:
    def __init__(self, args, session):
        self.a = args
        self.session = session
        self.url = args.base_url.rstrip("/") + ("/chat/completions" if args.endpoint == "chat" else "/completions")
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = f"Bearer {args.api_key}"

    def body(self, prompt, max_tokens, system=None):
        b = {"model": self.a.model, "max_tokens": max_tokens, "temperature": self.a.temperature, "stream": True,
             "stream_options": {"include_usage": True}, "seed": self.a.seed}
        if self.a.ignore_eos:
            b["ignore_eos"] = True
        if self.a.endpoint == "chat":
            msgs = [{"role": "system", "content": system}] if system else []
            b["messages"] = msgs + [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = (system + "\n\n" if system else "") + prompt
        return b

    async def run(self, prompt, max_tokens, system=None, kind="short"):
        """Streams one request; returns its record (never raises)."""
        rec = {"kind": kind, "ok": False, "ttft_s": None, "itl_s": [], "e2e_s": None, "output_tokens": 0,
               "prompt_tokens": None, "chunks": 0, "error": None}
        body = self.body(prompt, max_tokens, system)
        t0 = time.perf_counter()
        rec["start_s"] = t0
        last = None
        try:
            async with self.session.post(self.url, json=body, headers=self.headers) as r:
                if r.status != 200:
                    rec["error"] = f"HTTP {r.status}: {(await r.text())[:200]}"
                    rec["status"] = r.status
                    return rec
                buf = b""
                done = False
                async for data in r.content.iter_any():
                    now = time.perf_counter()
                    buf += data
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        line = line.strip()
                        if not line.startswith(b"data:"):
                            continue
                        payload = line[5:].strip()
                        if payload == b"[DONE]":
                            done = True
                            continue
                        ev = json.loads(payload)
                        if ev.get("usage"):
                            rec["output_tokens"] = ev["usage"].get("completion_tokens") or 0
                            rec["prompt_tokens"] = ev["usage"].get("prompt_tokens")
                        if "error" in ev:
                            rec["error"] = str(ev["error"])[:200]
                        for ch in ev.get("choices") or []:
                            text = (ch.get("delta") or {}).get("content") if "delta" in ch else ch.get("text")
                            if text:
                                rec["chunks"] += 1
                                if last is None:
                                    rec["ttft_s"] = now - t0
                                else:
                                    rec["itl_s"].append(now - last)
                                last = now
                            if ch.get("finish_reason"):
                                rec["finish_reason"] = ch["finish_reason"]
                rec["e2e_s"] = time.perf_counter() - t0
                if not rec["output_tokens"]:
                    rec["output_tokens"] = rec["chunks"]
                if not done and rec["error"] is None:
                    rec["error"] = "stream ended without [DONE]"
                rec["ok"] = rec["error"] is None and rec["ttft_s"] is not None
                if rec["ok"] is False and rec["error"] is None:
                    rec["error"] = "no text"
        except Exception as e:  # connection refused/reset, timeouts, bad JSON
            rec["error"] = f"{type(e).__name__}: {e}"[:200]
        return rec


# ------------------------------------------------------------------------------------------------
# Modes


def summarize(recs, wall):
    ok = [r for r in recs if r["ok"]]
    ttft = [r["ttft_s"] for r in ok]
    itl = [x for r in ok for x in r["itl_s"]]
    e2e = [r["e2e_s"] for r in ok]
    toks = sum(r["output_tokens"] for r in ok)
    return {
        "requests": len(recs), "ok": len(ok), "failed": len(recs) - len(ok), "wall_s": wall,
        "output_tokens": toks, "output_tok_s": toks / wall if wall > 0 else 0.0,
        "req_s": len(ok) / wall if wall > 0 else 0.0,
        "ttft_p50_ms": 1e3 * percentile(ttft, 0.5), "ttft_p99_ms": 1e3 * percentile(ttft, 0.99),
        "itl_p50_ms": 1e3 * percentile(itl, 0.5), "itl_p99_ms": 1e3 * percentile(itl, 0.99),
        "e2e_p50_s": percentile(e2e, 0.5), "e2e_p99_s": percentile(e2e, 0.99),
        "errors": sorted({r["error"] for r in recs if r["error"]})[:5],
    }


async def run_level(client, prompts, conc, n, max_tokens):
    sem = asyncio.Semaphore(conc)
    texts = [prompts.short() for _ in range(n)]

    async def one(p):
        async with sem:
            return await client.run(p, max_tokens)

    t0 = time.perf_counter()
    recs = await asyncio.gather(*(one(p) for p in texts))
    return recs, time.perf_counter() - t0


async def run_long_prompts(client, prompts, a):
    """For --long-seconds, `conc` streams of short prompts decode back to back while a long prompt
    (--long-prompt-words) arrives every --long-prompt-interval seconds (open loop, at most 2 in
    flight). Requests still running --long-seconds after the window are cancelled (`unfinished`)."""
    conc = a.concurrency[0] if len(a.concurrency) == 1 else 4
    t0 = time.perf_counter()
    deadline = t0 + a.long_seconds
    recs, longs, tasks = [], [], []

    async def decoder():
        while time.perf_counter() < deadline:
            recs.append(await client.run(prompts.short(), a.max_tokens))

    async def feeder():
        inflight = set()
        while time.perf_counter() < deadline:
            if len(inflight) < 2:
                t = asyncio.create_task(client.run(prompts.cut(a.long_prompt_words), a.long_prompt_max_tokens,
                                                   kind="long"))
                inflight.add(t)
                t.add_done_callback(lambda t: (inflight.discard(t), longs.append(t.result())
                                               if not t.cancelled() else None))
                tasks.append(t)
            await asyncio.sleep(a.long_prompt_interval)

    tasks += [asyncio.create_task(decoder()) for _ in range(conc)]
    feed = asyncio.create_task(feeder())
    await feed
    _, pending = await asyncio.wait(tasks, timeout=a.long_seconds)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return conc, recs, longs, len(pending), time.perf_counter() - t0


async def run_prefix(client, prompts, n, sys_tokens, max_tokens):
    """A shared system prompt of ~sys_tokens tokens (fortunes text is ~1.4 tokens a word), then n
    different short questions one at a time: request 0 is cold, the others can reuse its prefix."""
    system = "You are a helpful assistant. Keep this text in mind: " + prompts.cut(max(1, int(sys_tokens / 1.4)))
    recs = []
    for _ in range(n):
        recs.append(await client.run("In one sentence: " + prompts.short(8, 16), max_tokens, system=system,
                                     kind="prefix"))
    return recs


def fmt(x, nd=1):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


async def amain(a):
    timeout = aiohttp.ClientTimeout(total=a.timeout)
    # A new connection per request: reusing kept-alive ones races with servers that close idle
    # connections (llama-server: "Server disconnected" on the next request).
    conn = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as session:
        if not a.model:
            async with session.get(a.base_url.rstrip("/") + "/models",
                                   headers={"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}) as r:
                a.model = (await r.json())["data"][0]["id"]
        client = Client(a, session)
        prompts = Prompts(load_words(a.text), a.seed)
        out = {"label": a.label, "base_url": a.base_url, "model": a.model, "endpoint": a.endpoint,
               "max_tokens": a.max_tokens, "ignore_eos": a.ignore_eos, "temperature": a.temperature,
               "text": a.text, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg_start": os.getloadavg()}
        # Warm-up (not counted): the first request pays one-time costs on some servers.
        w = await client.run(prompts.short(), min(8, a.max_tokens))
        if not w["ok"]:
            sys.exit(f"serve_bench: warm-up request failed: {w['error']}")
        label = f"[{a.label}] " if a.label else ""

        if a.system_prompt_tokens:
            recs = await run_prefix(client, prompts, a.prefix_requests, a.system_prompt_tokens, a.max_tokens)
            ok = [r for r in recs if r["ok"]]
            cold = recs[0]["ttft_s"] if recs[0]["ok"] else None
            warm = [r["ttft_s"] for r in ok[1:]] if recs[0]["ok"] else [r["ttft_s"] for r in ok]
            res = {"system_prompt_tokens": a.system_prompt_tokens,
                   "prompt_tokens": recs[0].get("prompt_tokens"), "cold_ttft_ms": cold and 1e3 * cold,
                   "warm_ttft_p50_ms": 1e3 * percentile(warm, 0.5), "failed": len(recs) - len(ok),
                   "requests": recs}
            res["cold_over_warm"] = (res["cold_ttft_ms"] / res["warm_ttft_p50_ms"]
                                     if cold and warm else None)
            out["prefix_cache"] = res
            print(f"{label}prefix cache: system prompt ~{a.system_prompt_tokens} tokens "
                  f"(request: {res['prompt_tokens']} prompt tokens): cold TTFT {fmt(res['cold_ttft_ms'])} ms, "
                  f"warm TTFT p50 {fmt(res['warm_ttft_p50_ms'])} ms "
                  f"(x{fmt(res['cold_over_warm'], 2)}), failures {res['failed']}", flush=True)
        elif a.long_prompts:
            conc, recs, longs, unfinished, wall = await run_long_prompts(client, prompts, a)
            s = summarize(recs, wall)
            okl = [r for r in longs if r["ok"]]
            s["itl_p99_over_p50"] = s["itl_p99_ms"] / s["itl_p50_ms"] if s["itl_p50_ms"] > 0 else None
            s.update(concurrency=conc, seconds=a.long_seconds, interval_s=a.long_prompt_interval,
                     unfinished=unfinished, long_prompts=len(longs), long_failed=len(longs) - len(okl),
                     long_prompt_tokens_p50=percentile([r["prompt_tokens"] for r in okl if r["prompt_tokens"]], 0.5),
                     long_ttft_p50_ms=1e3 * percentile([r["ttft_s"] for r in okl], 0.5),
                     requests_detail=recs, long_detail=longs)
            out["long_prompts"] = s
            print(f"{label}long prompts: {conc} decode streams, {len(longs)} long prompts "
                  f"(~{fmt(s['long_prompt_tokens_p50'], 0)} tokens, TTFT p50 {fmt(s['long_ttft_p50_ms'], 0)} ms) "
                  f"arriving meanwhile: decode ITL p50 {fmt(s['itl_p50_ms'])} ms, p99 {fmt(s['itl_p99_ms'])} ms, "
                  f"p99/p50 {fmt(s['itl_p99_over_p50'], 2)}; {s['output_tok_s']:.1f} output tok/s; "
                  f"failures {s['failed']} + {s['long_failed']}, cancelled at the time limit {unfinished}",
                  flush=True)
        else:
            out["levels"] = []
            print(f"{label}{'conc':>5} {'reqs':>5} {'fail':>4} {'out tok/s':>10} {'req/s':>7} {'TTFT p50':>9} "
                  f"{'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'e2e p50':>8}  (ms, e2e s)", flush=True)
            for conc in a.concurrency:
                n = a.requests_per_level or max(16, 2 * conc)
                recs, wall = await run_level(client, prompts, conc, n, a.max_tokens)
                s = summarize(recs, wall)
                s["concurrency"] = conc
                print(f"{label}{conc:>5} {s['requests']:>5} {s['failed']:>4} {s['output_tok_s']:>10.1f} "
                      f"{s['req_s']:>7.2f} {fmt(s['ttft_p50_ms']):>9} {fmt(s['ttft_p99_ms']):>9} "
                      f"{fmt(s['itl_p50_ms']):>8} {fmt(s['itl_p99_ms']):>8} {fmt(s['e2e_p50_s'], 2):>8}", flush=True)
                for e in s["errors"]:
                    print(f"{label}      error: {e}", flush=True)
                s["requests_detail"] = recs
                out["levels"].append(s)
        out["loadavg_end"] = os.getloadavg()
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--model", help="default: the first of GET /models")
    ap.add_argument("--api-key")
    ap.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests-per-level", type=int, default=0, help="default max(16, 2 x concurrency)")
    ap.add_argument("--concurrency", default="1,4,16,64", help="comma-separated levels")
    ap.add_argument("--text", default=FORTUNES, help="file or directory the prompts are cut from")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="let requests end at EOS (default: every request makes --max-tokens tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--long-prompts", action="store_true")
    ap.add_argument("--long-prompt-words", type=int, default=700, help="about 1000 tokens")
    ap.add_argument("--long-prompt-max-tokens", type=int, default=1)
    ap.add_argument("--long-prompt-interval", type=float, default=5.0, help="seconds between long prompts")
    ap.add_argument("--long-seconds", type=float, default=60.0, help="length of the --long-prompts run")
    ap.add_argument("--system-prompt-tokens", type=int, default=0)
    ap.add_argument("--prefix-requests", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=600, help="seconds for one request")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", help="write every measurement here")
    a = ap.parse_args(argv)
    a.concurrency = [int(x) for x in a.concurrency.split(",") if x]
    out = asyncio.run(amain(a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
