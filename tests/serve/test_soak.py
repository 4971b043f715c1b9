"""A CI-sized soak of `tensorpar serve` (bench/serve_soak.py): 60 s of mixed loopback load
(TP_SOAK_SECONDS) at --tp 2 with a 20 s warm-up; no request may fail, the server's RSS at the end
must be within 5% of its RSS after the warm-up, and SIGTERM must end it with status 0. The KV pool
is small (48 MiB per rank, ~1600 tokens) so that the warm-up touches all of it: its pages are
committed as blocks are first used, which is growth but no leak.

Run: tests/serve/run_python_tests.sh build/bin/tensorpar tests/serve/test_soak.py -s
"""
import json
import os
import subprocess
import sys
import tempfile

from conftest import REPO, _binary, _model

SECONDS = float(os.environ.get("TP_SOAK_SECONDS", "60"))


def test_soak_rss_flat_and_no_failures():
    out = os.path.join(tempfile.mkdtemp(prefix="tp-soak-"), "soak.json")
    cmd = [sys.executable, os.path.join(REPO, "bench", "serve_soak.py"), "--bin", _binary(), "--model", _model(),
           "--tp", "2", "--server-args", "--ctx 1024 --kv-cache-mb 48", "--duration", str(SECONDS),
           "--warmup", str(min(20.0, SECONDS / 3)), "--concurrency", "4", "--max-tokens", "32",
           "--print-every", "20", "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=SECONDS + 300)
    print(p.stdout, p.stderr)
    assert os.path.exists(out), f"soak wrote no result (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    with open(out) as f:
        res = json.load(f)
    assert res["pass"], res["problems"]
    assert p.returncode == 0
