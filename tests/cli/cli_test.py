#!/usr/bin/env python3
"""The tensorpar binary as a user meets it, run as a subprocess.

Bad input of every kind must end with an `error: ...` line on stderr naming what is wrong (and,
where there is one, the fix) and a non-zero exit status below 128: never a signal, a hang or a
stack trace. A resumed training run must keep its settings and save into its own directory; the
CLI must say what it does (defaults in --help, warnings for flags that cannot act, --json output).

Environment (set by tests/cli/CMakeLists.txt): TENSORPAR_BIN, TP_FIXTURES_DIR, TP_MPIEXEC
(optional), TENSORPAR_COMM_TIMEOUT (every wait inside the binary ends by then; the timeouts here
are derived from it, with a wide margin for a loaded machine).
Usage: python3 tests/cli/cli_test.py [-v] [-k BadInput|Launch|Resume|Output|Pipeline|AutoSizes|Faults|Docs|ReadmeCommands]
(ReadmeCommands, in tests/cli/readme_commands.py: README.md's commands run on tiny fixtures and what
the README says about them checked.)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = os.environ.get("TENSORPAR_BIN", "build/bin/tensorpar")
FIXTURES = Path(os.environ.get("TP_FIXTURES_DIR", Path(__file__).resolve().parents[1] / "fixtures"))
MPIEXEC = os.environ.get("TP_MPIEXEC", "")
COMM_TIMEOUT = float(os.environ.get("TENSORPAR_COMM_TIMEOUT", "300"))
# A hung collective fails after COMM_TIMEOUT; a run that takes 4x that plus two minutes is stuck.
RUN_TIMEOUT = 4 * COMM_TIMEOUT + 120
TOKENIZER = FIXTURES / "tokenizer" / "gpt2_trained.tokenizer.json"
TEXT = FIXTURES / "README.md"
# The environment without any MPI launcher's variables (ctest may itself run under one).
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE")
BASE_ENV = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}

# The tiny model every test trains: 1 layer, hidden 32, 2 heads, 128 positions.
TINY = ["--arch", "llama", "--layers", "1", "--hidden", "32", "--heads", "2", "--seq", "128",
        "--vocab-from", str(TOKENIZER), "--data", str(TEXT), "--threads-per-rank", "1"]


def run(args, stdin=None, env_extra=None, prefix=()):
    env = dict(BASE_ENV, **(env_extra or {}))
    return subprocess.run([*prefix, BIN, *map(str, args)], input=stdin, capture_output=True, text=True,
                          env=env, timeout=RUN_TIMEOUT)


def lines(text):
    return [l for l in text.splitlines() if l.strip()]


class CliCase(unittest.TestCase):
    def assert_ok(self, r):
        self.assertEqual(r.returncode, 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}")

    def assert_fails(self, r, *keywords, only_line=True):
        """Non-zero exit by the program itself (not a signal), one error line with the keywords."""
        where = f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        self.assertNotEqual(r.returncode, 0, where)
        self.assertGreater(r.returncode, 0, "killed by a signal: " + where)
        self.assertLess(r.returncode, 128, "killed by a signal: " + where)
        err = lines(r.stderr)
        errors = [l for l in err if l.startswith("error: ")]
        self.assertTrue(errors, "no 'error: ' line: " + where)
        if only_line:
            self.assertEqual(len(err), 1, "more than one line on stderr: " + where)
        line = errors[-1]
        for k in keywords:
            self.assertIn(k, line, where)
        for bad in ("terminate called", "[launch_ranks]", "Aborted", "what():", "Segmentation"):
            self.assertNotIn(bad, r.stderr, where)
        return line


class Workdir(CliCase):
    """A temporary directory with a trained and exported tiny model (once per class)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="tensorpar-cli-"))
        cls.run_dir = cls.tmp / "run"
        r = run(["train", *TINY, "--batch", "4", "--micro-batch", "2", "--bf16", "--steps", "2", "--lr", "3e-3",
                 "--warmup", "1", "--save-every", "1", "--out", cls.run_dir, "--json"])
        assert r.returncode == 0, r.stderr
        cls.train_log = [json.loads(l) for l in lines(r.stdout)]
        cls.model_dir = cls.tmp / "model"
        r = run(["export", "--checkpoint", cls.run_dir, "--out", cls.model_dir])
        assert r.returncode == 0, r.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def fresh(self, name):
        """A copy of the trained run, for a test that writes into it."""
        dst = self.tmp / name
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(self.run_dir, dst, symlinks=True)
        return dst


class BadInput(Workdir):
    def test_unknown_flag(self):
        self.assert_fails(run(["generate", "-m", self.model_dir, "-p", "hi", "--bogus"]), "--bogus")

    def test_out_of_range_value(self):
        self.assert_fails(run(["generate", "-m", self.model_dir, "-p", "hi", "--tp", "0"]), "--tp")

    def test_missing_subcommand_argument(self):
        self.assert_fails(run(["generate", "-p", "hi"]), "--model")

    def test_missing_model_file(self):
        self.assert_fails(run(["generate", "-m", self.tmp / "nope.gguf", "-p", "hi"]), "nope.gguf",
                          "no such file")

    def test_directory_without_config(self):
        d = self.tmp / "empty_dir"
        d.mkdir(exist_ok=True)
        self.assert_fails(run(["generate", "-m", d, "-p", "hi"]), "empty_dir", "no config.json")
        self.assert_fails(run(["inspect", "-m", d]), "empty_dir", "no config.json")

    def test_corrupt_gguf(self):
        good = (FIXTURES / "models" / "llama_gqa_gguf" / "model-f16.gguf").read_bytes()
        for name, data in {"garbage.gguf": b"GGUF" + bytes(range(256)) * 4,
                           "truncated.gguf": good[: len(good) // 3],
                           "not_gguf.gguf": b"this is a text file\n"}.items():
            path = self.tmp / name
            path.write_bytes(data)
            self.assert_fails(run(["generate", "-m", path, "-p", "hi", "--tokenizer", TOKENIZER]), name)
            self.assert_fails(run(["inspect", "-m", path]), name)

    def test_checkpoint_given_as_model(self):
        for cmd in (["generate", "-m", self.run_dir, "-p", "hi"], ["inspect", "-m", self.run_dir],
                    ["perplexity", "-m", self.run_dir / "step-2", "--file", TEXT]):
            self.assert_fails(run(cmd), "training checkpoint", "export it first")

    def test_model_without_tokenizer_names_the_flag(self):
        d = self.tmp / "no_tokenizer"
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.model_dir, d)
        (d / "tokenizer.json").unlink()
        self.assert_fails(run(["generate", "-m", d, "-p", "hi"]), "no tokenizer.json", "--tokenizer")
        # ... and with it, it runs.
        self.assert_ok(run(["generate", "-m", d, "-p", "hi", "--tokenizer", TOKENIZER, "-n", "2"]))

    def test_ctx_beyond_the_models_positions(self):
        # The tiny model was trained with 128 positions.
        line = self.assert_fails(run(["generate", "-m", self.model_dir, "-p", "hi", "--ctx", "129"]), "--ctx 129",
                                 "128")
        self.assertIn("exceeds", line)
        self.assert_ok(run(["generate", "-m", self.model_dir, "-p", "hi", "--ctx", "128", "-n", "2"]))

    def test_tp_beyond_what_the_model_allows(self):
        # More ranks than the tiny model's 2 attention heads.
        r = run(["generate", "-m", self.model_dir, "-p", "hi", "--tp", "64", "-n", "2"])
        self.assert_fails(r, "--tp 64", "2 attention heads")
        self.assert_fails(run(["inspect", "-m", self.model_dir, "--tp", "3"]), "--tp 3", "2 attention heads")
        self.assert_fails(run(["train", *TINY, "--tp", "3", "--steps", "1"]), "--tp 3", "2 attention heads",
                          only_line=False)

    def test_resume_of_a_missing_directory(self):
        self.assert_fails(run(["train", "--resume", self.tmp / "no_such_run", "--data", TEXT]), "no_such_run",
                          "no such directory")

    def test_checkpoint_of_another_model(self):
        other = self.tmp / "other_model"
        if not other.exists():
            shape = TINY.copy()
            shape[shape.index("--hidden") + 1] = "48"
            r = run(["train", *shape, "--batch", "2", "--steps", "1",
                     "--out", self.tmp / "other_run"])
            self.assert_ok(r)
            self.assert_ok(run(["export", "--checkpoint", self.tmp / "other_run", "--out", other]))
        r = run(["train", "--resume", self.fresh("run_other"), "--model", other, "--steps", "3"])
        self.assert_fails(r, "global shape", "[1503,32]", "[1503,48]", only_line=False)

    def test_prompt_sources_are_exclusive(self):
        self.assert_fails(run(["generate", "-m", self.model_dir]), "--prompt")
        self.assert_fails(run(["generate", "-m", self.model_dir, "-p", "-"], stdin=""), "empty")


class Launch(Workdir):
    def test_launcher_environment_without_mpi_backend_is_refused(self):
        env = {"OMPI_COMM_WORLD_SIZE": "2"}
        self.assert_fails(run(["generate", "-m", self.model_dir, "-p", "hi"], env_extra=env), "MPI launcher",
                          "OMPI_COMM_WORLD_SIZE=2", "--backend mpi")
        self.assert_fails(run(["train", *TINY, "--steps", "1"], env_extra={"PMI_SIZE": "3"}), "PMI_SIZE=3",
                          "--backend mpi")
        # One process under a launcher is one process: threads are fine.
        self.assert_ok(run(["generate", "-m", self.model_dir, "-p", "hi", "-n", "2"],
                           env_extra={"OMPI_COMM_WORLD_SIZE": "1"}))

    def mpirun(self, n):
        if not MPIEXEC or not Path(MPIEXEC).exists():
            self.skipTest("no mpiexec")
        return [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", str(n)]

    def test_mpirun_without_backend(self):
        r = run(["generate", "-m", self.model_dir, "-p", "hi"], prefix=self.mpirun(2))
        self.assert_fails(r, "--backend mpi", only_line=False)

    def test_mpirun_world_not_tp_times_dp(self):
        r = run(["train", *TINY, "--steps", "1", "--backend", "mpi", "--tp", "3"], prefix=self.mpirun(2))
        self.assert_fails(r, "--tp 3 x --dp 1", "MPI world of 2", only_line=False)
        r = run(["generate", "-m", self.model_dir, "-p", "hi", "--backend", "mpi", "--tp", "3"],
                prefix=self.mpirun(2))
        self.assert_fails(r, "--tp 3", "MPI world of 2", only_line=False)


def checkpoint_state(root):
    step = (Path(root) / "latest").read_text().strip()
    return step, json.loads((Path(root) / step / "index.json").read_text())["state"]


class Resume(Workdir):
    def test_first_run_announces_every_checkpoint(self):
        self.assertEqual([l.get("checkpoint") for l in self.train_log],
                         [str(self.run_dir / "step-1"), str(self.run_dir / "step-2")])

    def test_resume_keeps_the_settings_and_saves_into_the_run(self):
        d = self.fresh("run_keep")
        r = run(["train", "--resume", d, "--steps", "4", "--tp", "2", "--threads-per-rank", "1"])
        self.assert_ok(r)
        self.assertIn("changed by flags: --steps 2 -> 4", r.stderr)
        self.assertIn(f"saving into {d}", r.stderr)
        self.assertIn(f"saved checkpoint {d / 'step-4'}", r.stderr)
        step, state = checkpoint_state(d)
        self.assertEqual(step, "step-4")
        run_settings = state["run"]
        # The first run's flags, kept; --steps the one change.
        self.assertEqual(run_settings["batch"], 4)
        self.assertEqual(run_settings["micro-batch"], 2)
        self.assertEqual(run_settings["bf16"], True)
        self.assertAlmostEqual(run_settings["lr"], 3e-3, places=9)
        self.assertEqual(run_settings["warmup"], 1)
        self.assertEqual(run_settings["seq"], 128)
        self.assertEqual(run_settings["save-every"], 1)
        self.assertEqual(run_settings["steps"], 4)
        self.assertEqual(run_settings["data"], str(TEXT))
        self.assertTrue((d / "step-3").is_dir())

    def test_a_bare_resume_continues_exactly_as_the_uninterrupted_run(self):
        # The reference: 4 uninterrupted steps (bf16, batch 4 in micro-batches of 2, save at 2).
        full = self.tmp / "full"
        shutil.rmtree(full, ignore_errors=True)
        r = run(["train", *TINY, "--batch", "4", "--micro-batch", "2", "--bf16", "--steps", "4", "--lr", "3e-3",
                 "--warmup", "1", "--save-every", "2", "--out", full, "--json"])
        self.assert_ok(r)
        reference = {l["step"]: l["loss"] for l in map(json.loads, lines(r.stdout))}
        # Its step-2 checkpoint alone, resumed with no flag but the thread count: every setting
        # (bf16, batch, schedule, data, seed) must come from the checkpoint for the losses to match.
        part = self.tmp / "part"
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(full / "step-2", part / "step-2")
        (part / "latest").write_text("step-2\n")
        r = run(["train", "--resume", part, "--threads-per-rank", "1", "--json"])
        self.assert_ok(r)
        resumed = {l["step"]: l["loss"] for l in map(json.loads, lines(r.stdout))}
        self.assertEqual(resumed, {3: reference[3], 4: reference[4]})
        self.assertEqual(checkpoint_state(part)[0], "step-4")

    def test_a_checkpoint_without_settings_says_so(self):
        d = self.fresh("run_old")
        index = d / "step-2" / "index.json"
        j = json.loads(index.read_text())
        del j["state"]["run"]
        index.write_text(json.dumps(j))
        r = run(["train", "--resume", d, "--steps", "3"])
        self.assert_ok(r)
        self.assertIn("records no run settings", r.stderr)
        self.assertEqual(checkpoint_state(d)[0], "step-3")

    def test_a_flag_given_again_overrides_and_is_reported(self):
        d = self.fresh("run_override")
        r = run(["train", "--resume", d, "--steps", "3", "--batch", "2", "--no-bf16", "--json"])
        self.assert_ok(r)
        self.assertIn("--batch 4 -> 2", r.stderr)
        self.assertIn("--bf16 true -> false", r.stderr)
        self.assertIn("matmuls f32", r.stderr)
        _, state = checkpoint_state(d)
        self.assertEqual(state["run"]["batch"], 2)
        self.assertEqual(state["run"]["bf16"], False)
        log = [json.loads(l) for l in lines(r.stdout)]
        self.assertEqual([(l["step"], l.get("checkpoint")) for l in log], [(3, str(d / "step-3"))])

    def test_resume_with_nothing_left_to_train(self):
        self.assert_fails(run(["train", "--resume", self.fresh("run_done")]), "at step 2", "--steps is 2",
                          "nothing to train")

    def test_a_new_run_never_overwrites_an_old_one(self):
        d = self.fresh("run_taken")
        self.assert_fails(run(["train", *TINY, "--steps", "1", "--out", d]), "already holds a run", "--resume")

    def test_resuming_an_older_step_does_not_move_latest_back(self):
        d = self.fresh("run_branch")
        self.assert_fails(run(["train", "--resume", d / "step-1", "--steps", "3"]), "move latest back", "--out")
        self.assertEqual(checkpoint_state(d)[0], "step-2")
        branch = self.tmp / "branch"
        shutil.rmtree(branch, ignore_errors=True)
        self.assert_ok(run(["train", "--resume", d / "step-1", "--steps", "3", "--out", branch]))
        self.assertEqual(checkpoint_state(branch)[0], "step-3")
        self.assertEqual(checkpoint_state(d)[0], "step-2")

    def test_keep_last_and_keep_every_remove_old_checkpoints_after_each_save(self):
        d = self.tmp / "run_retention"
        shutil.rmtree(d, ignore_errors=True)
        r = run(["train", *TINY, "--batch", "2", "--steps", "7", "--save-every", "1", "--keep-last", "2",
                 "--keep-every", "3", "--out", d, "--json"])
        self.assert_ok(r)
        log = [json.loads(l) for l in lines(r.stdout)]
        self.assertEqual([l["checkpoint"] for l in log], [str(d / f"step-{s}") for s in range(1, 8)])
        # At step k the checkpoint of step k-2 leaves the newest two, and goes unless a multiple of 3.
        self.assertEqual([l.get("removed_checkpoints", []) for l in log],
                         [[], [], [str(d / "step-1")], [str(d / "step-2")], [], [str(d / "step-4")],
                          [str(d / "step-5")]])
        self.assertEqual(sorted(p.name for p in d.iterdir()), ["latest", "step-3", "step-6", "step-7"])
        step, state = checkpoint_state(d)
        self.assertEqual((step, state["run"]["keep-last"], state["run"]["keep-every"]), ("step-7", 2, 3))
        # The resumed run keeps the policy it stored and continues from latest.
        r = run(["train", "--resume", d, "--steps", "9", "--threads-per-rank", "1"])
        self.assert_ok(r)
        self.assertIn(f"resuming {d / 'step-7'} at step 7", r.stderr)
        self.assertIn(f"removed checkpoint {d / 'step-7'}", r.stderr)
        self.assertEqual(sorted(p.name for p in d.iterdir()), ["latest", "step-3", "step-6", "step-8", "step-9"])
        self.assertEqual(checkpoint_state(d)[0], "step-9")

    def test_keep_every_without_keep_last_is_refused(self):
        self.assert_fails(run(["train", *TINY, "--steps", "1", "--keep-every", "5", "--out", self.tmp / "ke"]),
                          "--keep-every 5", "--keep-last N")

    def test_model_shape_flags_conflict_with_resume(self):
        self.assert_fails(run(["train", "--resume", self.fresh("run_shape"), "--hidden", "64", "--steps", "3"]),
                          "--hidden", "drop --hidden")

    def test_a_run_without_out_says_it_saves_nothing(self):
        r = run(["train", *TINY, "--steps", "1"])
        self.assert_ok(r)
        self.assertIn("no --out: this run saves no checkpoint", r.stderr)


class Output(Workdir):
    def test_help_shows_the_defaults(self):
        def option_line(help_text, flag):
            for l in help_text.splitlines():
                if flag + " " in l or l.rstrip().endswith(flag):
                    return l
            self.fail(f"{flag} not in help:\n{help_text}")

        r = run(["generate", "--help"])
        self.assert_ok(r)
        for flag, default in (("--max-tokens", "128"), ("--temperature", "0"), ("--seed", "0"),
                              ("--tp", "1"), ("--top-p", "1")):
            self.assertRegex(option_line(r.stdout, flag), rf"={default}\b")
        r = run(["train", "--help"])
        self.assert_ok(r)
        for flag, default in (("--lr", "0.001"), ("--steps", "100"), ("--batch", "8"), ("--seq", "128")):
            self.assertRegex(option_line(r.stdout, flag), rf"={default}\b")
        r = run(["chat", "--help"])
        self.assertRegex(option_line(r.stdout, "--max-tokens"), r"=512\b")

    def test_json_is_one_object_instead_of_the_text(self):
        r = run(["generate", "-m", self.model_dir, "-p", "The", "-n", "4", "--json"])
        self.assert_ok(r)
        out = lines(r.stdout)
        self.assertEqual(len(out), 1, r.stdout)
        j = json.loads(out[0])
        for key in ("text", "tokens", "prompt_tokens", "stop_reason", "prefill_tok_s", "decode_tok_s", "ttft_ms",
                    "weights_kv_mb_per_rank", "process_peak_rss_mb"):
            self.assertIn(key, j)
        self.assertEqual(len(j["weights_kv_mb_per_rank"]), 1)

    def test_metrics_port_serves_a_live_run(self):
        """--metrics-port 0: the run says where its metrics are; a scrape while it trains shows the
        steps taken, a finite loss, and both ranks' time in collectives (tp 2). The run is stopped
        by the test once it has seen three steps."""
        import signal
        import time
        import urllib.request
        p = subprocess.Popen([BIN, "train", *TINY, "--batch", "2", "--steps", "1000000", "--tp", "2", "--json",
                              "--metrics-port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env=BASE_ENV)
        try:
            url = None
            deadline = time.monotonic() + RUN_TIMEOUT
            while url is None and time.monotonic() < deadline:
                line = p.stderr.readline()
                self.assertTrue(line, f"the run ended before announcing its metrics (exit {p.poll()})")
                m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", line)
                url = m.group(1) if m else None
            self.assertIsNotNone(url)
            values = {}
            while time.monotonic() < deadline:
                with urllib.request.urlopen(url, timeout=COMM_TIMEOUT) as resp:
                    self.assertIn("text/plain; version=0.0.4", resp.headers["Content-Type"])
                    text = resp.read().decode()
                values = dict(l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))
                if float(values["tensorpar:train_step"]) >= 3:
                    break
                time.sleep(0.05)
            self.assertGreaterEqual(float(values["tensorpar:train_step"]), 3, text)
            self.assertLess(float(values["tensorpar:train_loss"]), 20, text)  # finite, a real loss
            self.assertEqual(float(values["tensorpar:train_incidents_total"]), 0, text)
            self.assertGreater(float(values["tensorpar:train_tokens_per_second"]), 0, text)
            for rank in (0, 1):
                self.assertGreater(float(values[f'tensorpar:train_collective_seconds_total{{rank="{rank}"}}']), 0, text)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=RUN_TIMEOUT)
            p.stderr.close()

    def test_train_ends_with_a_summary(self):
        r = run(["train", *TINY, "--batch", "2", "--steps", "3", "--tp", "2"])
        self.assert_ok(r)
        self.assertRegex(r.stderr, r"\[train\] done: step 0 -> 3, 3 optimizer steps, 0 incidents \(0 rollbacks\), "
                                   r"batches skipped: none, 0 checkpoints written, [\d.]+ s \(rank 0: [\d.]+ s in collectives\)")

    def test_prompt_from_stdin_and_file_equals_the_flag(self):
        f = self.tmp / "prompt.txt"
        f.write_text("The model\n")
        texts = []
        for args, stdin in ((["-p", "The model"], None), (["-p", "-"], "The model\n"), (["--prompt-file", f], None)):
            r = run(["generate", "-m", self.model_dir, *args, "-n", "5", "--json"], stdin=stdin)
            self.assert_ok(r)
            j = json.loads(r.stdout)
            texts.append((j["prompt_tokens"], j["text"]))
        self.assertEqual(texts[0], texts[1])
        self.assertEqual(texts[0], texts[2])

    def test_sampling_flags_at_temperature_zero_warn(self):
        r = run(["generate", "-m", self.model_dir, "-p", "hi", "-n", "2", "--top-k", "5", "--seed", "3"])
        self.assert_ok(r)
        warn = [l for l in lines(r.stderr) if "warning" in l]
        self.assertEqual(len(warn), 1, r.stderr)
        self.assertIn("--top-k, --seed", warn[0])
        self.assertIn("--temperature 0", warn[0])
        r = run(["generate", "-m", self.model_dir, "-p", "hi", "-n", "2", "--top-k", "5", "--temperature", "0.7"])
        self.assert_ok(r)
        self.assertNotIn("warning", r.stderr)

    def test_chat_template_fallback_is_said_once(self):
        r = run(["generate", "-m", self.model_dir, "-p", "hi", "-n", "2", "--chat"])
        self.assert_ok(r)
        notes = [l for l in lines(r.stderr) if "no chat template" in l]
        self.assertEqual(len(notes), 1, r.stderr)
        self.assertIn("ChatML", notes[0])

    def test_chat_json_is_one_object_per_turn(self):
        r = run(["chat", "-m", self.model_dir, "--json", "--temperature", "0", "-n", "3"], stdin="Hello\nAgain\n")
        self.assert_ok(r)
        turns = [json.loads(l) for l in lines(r.stdout)]
        self.assertEqual([t["turn"] for t in turns], [1, 2])
        for t in turns:
            self.assertLessEqual(t["tokens"], 3)
            self.assertIn(t["stop_reason"], ("length", "eos", "stop"))
        # The second turn's context holds the first exchange, which it did not run again.
        self.assertGreater(turns[1]["context_tokens"], turns[0]["context_tokens"])
        self.assertLess(turns[1]["prompt_tokens"] + turns[1]["tokens"], turns[1]["context_tokens"] - turns[0]["tokens"])

    def test_chat_keeps_going_when_the_context_fills(self):
        # An 80-token context holds one turn (~37 tokens of ChatML markup and text) but not two.
        r = run(["chat", "-m", self.model_dir, "--json", "--temperature", "0", "-n", "4", "--ctx", "80"],
                stdin="one two\nthree four\nfive six\nseven\n")
        self.assert_ok(r)
        turns = [json.loads(l) for l in lines(r.stdout)]
        self.assertEqual(len(turns), 4, r.stderr)
        self.assertIn("dropped the", r.stderr)

    def test_bench_decode_interleaves_its_row_counts(self):
        # Every row count is timed in each round; a row count's ratio is the median of its rounds'.
        r = run(["bench", "decode", "-m", self.model_dir, "--rows", "1,3", "--steps", "2", "--context", "4",
                 "--repeats", "3", "--tp", "2"])
        self.assert_ok(r)
        rows = [l.split() for l in lines(r.stdout) if re.match(r"\s*\d+\s", l)]
        self.assertEqual([x[0] for x in rows], ["1", "3"], r.stdout)
        self.assertEqual(rows[0][3], "1.000x", r.stdout)
        for row in rows:
            per_round = [float(x.strip("()")) for x in row[4:]]
            self.assertEqual(len(per_round), 3, r.stdout)
            self.assertAlmostEqual(float(row[3].rstrip("x")), sorted(per_round)[1], delta=0.006)

    def test_bench_decode_random_model_rows_are_what_calibrate_reads(self):
        # No --model: a random Llama of the given shape; one JSON row per row count, with the
        # mean context a timed step attends over (the prompt and half the steps).
        r = run(["bench", "decode", "--json", "--layers", "3", "--hidden", "32", "--heads", "2",
                 "--ffn", "48", "--vocab", "64", "--rows", "1,2", "--context", "8", "--steps", "4",
                 "--repeats", "2", "--threads-per-rank", "1"])
        self.assert_ok(r)
        rows = [json.loads(l) for l in lines(r.stdout)]
        self.assertEqual([x["rows"] for x in rows], [1, 2], r.stdout)
        for x in rows:
            self.assertEqual((x["bench"], x["layers"], x["hidden"], x["heads"], x["head_dim"]),
                             ("decode", 3, 32, 2, 16))
            self.assertEqual(x["mean_context"], 8 + 4 * 2 / 2)
            # f32: 3 layers of q, k, v, o (32 x 32 each) and gate, up, down (32 x 48), norms, and
            # the tied 64 x 32 embedding, 4 bytes each.
            params = 3 * (4 * 32 * 32 + 3 * 32 * 48 + 2 * 32) + 32 + 64 * 32
            self.assertEqual(x["weight_bytes_per_rank"], 4 * params)
            self.assertGreater(x["ms_per_step"], 0)
        self.assertEqual(rows[0]["vs_one_row"], 1.0)
        # A model file and a random shape at once is a usage error, not a silent choice.
        r = run(["bench", "decode", "-m", self.model_dir, "--layers", "2"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("excludes", r.stderr)

    def test_bench_attention_rows_are_what_calibrate_reads(self):
        r = run(["bench", "attention", "--json", "--threads", "1", "--seq", "16,48", "--head-size", "8",
                 "--naive"])
        self.assert_ok(r)
        rows = [json.loads(l) for l in lines(r.stdout)]
        self.assertEqual([x["seq"] for x in rows], [16, 48], r.stdout)
        for x in rows:
            self.assertEqual((x["bench"], x["batch"], x["head_size"]), ("attention", 2048 // x["seq"], 8))
            for key in ("forward_gflops", "backward_gflops", "train_gflops", "reference_train_gflops"):
                self.assertGreater(x[key], 0, key)
            # Both passes together: between the two rates (3 units of work at 1 + 2 of them).
            lo, hi = sorted((x["forward_gflops"], x["backward_gflops"]))
            self.assertTrue(lo * 0.999 <= x["train_gflops"] <= hi * 1.001, x)
        self.assert_fails(run(["bench", "attention", "--seq", "0"]), "--seq")

    def test_errors_from_the_ranks_have_no_launcher_prefix(self):
        line = self.assert_fails(run(["generate", "-m", self.model_dir, "-p", "hi", "--ctx", "1000"]), "--ctx")
        self.assertFalse(line.startswith("error: [launch_ranks]"), line)


class Pipeline(CliCase):
    """`train --pp`: the losses of a pipeline equal those of the whole model on one rank, and its
    checkpoint resumes at another tp x pp."""

    ARGS = ["train", "--arch", "llama", "--layers", "3", "--hidden", "32", "--heads", "2", "--seq", "32",
            "--vocab-from", str(TOKENIZER), "--data", str(TEXT), "--threads-per-rank", "1", "--batch", "8",
            "--micro-batch", "2", "--lr", "3e-3", "--warmup", "1", "--json"]

    def losses(self, r):
        self.assert_ok(r)
        return [json.loads(l)["loss"] for l in lines(r.stdout)]

    def test_pp_losses_equal_the_whole_model_and_resume_at_another_shape(self):
        tmp = Path(tempfile.mkdtemp(prefix="tensorpar-pp-"))
        try:
            whole = self.losses(run([*self.ARGS, "--steps", "3"]))
            self.assertEqual(len(whole), 3)
            r = run([*self.ARGS, "--steps", "3", "--pp", "3"])
            self.assertIn("pp 3", r.stderr)
            for got, want in zip(self.losses(r), whole):
                self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))
            r = run([*self.ARGS, "--steps", "2", "--tp", "2", "--pp", "2", "--pp-layers", "1,2",
                      "--out", tmp / "run"])
            for got, want in zip(self.losses(r), whole[:2]):
                self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))
            r = run(["train", "--resume", tmp / "run", "--steps", "3", "--pp", "3",
                     "--threads-per-rank", "1", "--json"])
            (third,) = self.losses(r)
            self.assertAlmostEqual(third, whole[2], delta=1e-5 * abs(whole[2]))
            r = run([*self.ARGS, "--steps", "1", "--pp", "2", "--pp-layers", "1,1"])
            self.assert_fails(r, "--pp-layers 1,1", "sums to 2", "3 layers", only_line=False)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


    def test_interleaved_stages_equal_the_whole_model(self):
        """--pp-virtual: 2 stages x 2 chunks of one layer train as the whole model does; the sizes it
        cannot run are refused with the reason."""
        args = [("4" if a == "3" and i > 0 and self.ARGS[i - 1] == "--layers" else a) for i, a in enumerate(self.ARGS)]
        whole = self.losses(run([*args, "--steps", "3"]))
        r = run([*args, "--steps", "3", "--pp", "2", "--pp-virtual", "2"])
        self.assertEqual(len(self.losses(r)), 3)
        for got, want in zip(self.losses(r), whole):
            self.assertAlmostEqual(got, want, delta=1e-5 * abs(want))
        self.assert_fails(run([*args, "--steps", "1", "--pp-virtual", "2"]), "--pp-virtual 2", "--pp 2 or more")
        self.assert_fails(run([*args, "--steps", "1", "--pp", "2", "--pp-virtual", "3"]), "4 layers",
                          "2 stages x 3 chunks", "every chunk needs at least one layer", only_line=False)
        six = [("6" if i > 0 and args[i - 1] == "--batch" else a) for i, a in enumerate(args)]
        self.assert_fails(run([*six, "--steps", "1", "--pp", "2", "--pp-virtual", "2"]),
                          "interleaved pipeline schedule", "= 3", "multiple of the 2 pipeline stages", only_line=False)

    def test_inference_stages_equal_the_whole_model(self):
        """generate / perplexity / chat --pp: each rank holds its stage's layers; the text, the
        perplexity and the chat replies equal the whole model's (the logits are the same floats:
        the stages run the same layer forward in order); --tp auto and a split with an empty stage
        are refused. (The server's engine over stages: tests/serve/engine_test.cpp.)"""
        tmp = Path(tempfile.mkdtemp(prefix="tensorpar-pp-infer-"))
        try:
            self.assert_ok(run([*self.ARGS, "--steps", "2", "--out", tmp / "run"]))
            self.assert_ok(run(["export", "--checkpoint", tmp / "run", "--out", tmp / "model"]))
            base = ["--model", tmp / "model", "--threads-per-rank", "1"]
            gen = ["generate", *base, "-p", "Hello world", "-n", "12", "--temperature", "0"]
            # tp 2 sums row-parallel partial products in its own order: its stages equal tp 2.
            want = {tp: run([*gen, "--tp", tp]) for tp in ("1", "2")}
            for tp, layout in (("1", ["--pp", "2"]), ("1", ["--pp", "3"]), ("1", ["--pp", "2", "--pp-layers", "1,2"]),
                               ("2", ["--pp", "2"])):
                self.assert_ok(want[tp])
                r = run([*gen, "--tp", tp, *layout])
                self.assert_ok(r)
                self.assertEqual(r.stdout, want[tp].stdout, layout)
            # Weights and cache per rank: a stage holds its layers only.
            def per_rank(*layout):
                r = run([*gen, "--json", *layout])
                self.assert_ok(r)
                return json.loads(r.stdout)["weights_kv_mb_per_rank"]
            (whole_mb,) = per_rank()
            staged_mb = per_rank("--pp", "3")
            self.assertEqual(len(staged_mb), 3)
            self.assertLess(max(staged_mb), whole_mb)
            ppl = ["perplexity", *base, "--file", TEXT, "--json"]
            for tp, pp in (("1", "3"), ("2", "2")):
                want = run([*ppl, "--tp", tp])
                self.assert_ok(want)
                r = run([*ppl, "--tp", tp, "--pp", pp])
                self.assert_ok(r)
                self.assertEqual(json.loads(r.stdout)["ppl"], json.loads(want.stdout)["ppl"], (tp, pp))
            # --tp-invariant reaches the model at tp 2, alone and in stages: tp 1's greedy text, and
            # its perplexity but for the log-sum-exp over the vocabulary shards, which still sums in
            # pieces (the logits themselves are bitwise tp 1's: test_model's TpInvariant test).
            one, one_text = run([*ppl, "--tp", "1"]), run([*gen, "--tp", "1"])
            self.assert_ok(one)
            self.assert_ok(one_text)
            for layout in (["--tp", "2"], ["--tp", "2", "--pp", "2"]):
                r = run([*ppl, "--tp-invariant", *layout])
                self.assert_ok(r)
                want_ppl = json.loads(one.stdout)["ppl"]
                self.assertAlmostEqual(json.loads(r.stdout)["ppl"], want_ppl, delta=1e-7 * want_ppl, msg=layout)
                r = run([*gen, "--tp-invariant", *layout])
                self.assert_ok(r)
                self.assertEqual(r.stdout, one_text.stdout, layout)
            chat = ["chat", *base, "-n", "6", "--temperature", "0", "--json"]
            turns = "Hi there\nAnd again\n"
            want = run(chat, stdin=turns)
            self.assert_ok(want)
            r = run([*chat, "--pp", "2"], stdin=turns)
            self.assert_ok(r)
            self.assertEqual([json.loads(l)["text"] for l in lines(r.stdout)],
                             [json.loads(l)["text"] for l in lines(want.stdout)])
            self.assert_fails(run([*gen, "--tp", "auto", "--pp", "2"]), "--tp auto", "--pp 2", only_line=False)
            self.assert_fails(run([*gen, "--pp", "4"]), "3 layers over 4 pipeline stages", only_line=False)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class AutoSizes(Workdir):
    """`--tp auto` (train: also --pp / --dp auto): the command runs the planner's best plan among
    those tensorpar runs, for the ranks it has (this process's cores), and says so."""

    ARGS = ["train", "--arch", "llama", "--layers", "3", "--hidden", "32", "--heads", "2", "--seq", "32",
            "--vocab-from", str(TOKENIZER), "--data", str(TEXT), "--threads-per-rank", "1", "--steps", "1"]
    CHOSE = r"the planner chose tp (\d+) x pp (\d+) x dp (\d+), micro-batch (\d+)"

    def world(self):
        return len(os.sched_getaffinity(0))

    def plan_json(self, *args):
        r = run(["plan", "--json", "--top", "1000", *args])
        self.assert_ok(r)
        return json.loads(r.stdout)["plans"]

    def test_train_runs_the_planners_best_runnable_plan(self):
        # Without gradient buckets the trainer prices dp like `plan` does (no overlap with the
        # backward), so both searches see the same cluster.
        r = run([*self.ARGS, "--batch", "8", "--tp", "auto", "--pp", "auto", "--dp", "auto",
                 "--dp-bucket-mb", "0"])
        self.assert_ok(r)
        m = re.search(self.CHOSE, r.stderr)
        self.assertIsNotNone(m, r.stderr)
        tp, pp, dp, mb = map(int, m.groups())
        self.assertEqual(tp * pp * dp, self.world())
        self.assertRegex(r.stderr, rf"tp {tp}\b.*pp {pp}\b.*dp {dp}\b")  # the run's own mesh line
        # The same search from `tensorpar plan`, filtered to what `train` runs (no SP, ZeRO,
        # interleaving or selective recomputation; every rank an attention head).
        vocab = re.search(r"\(vocab (\d+)\)", r.stderr).group(1)
        plans = self.plan_json("--layers", "3", "--hidden", "32", "--heads", "2", "--vocab", vocab, "--tied",
                               "--devices", self.world(), "--global-batch", "8", "--seq", "32",
                               "--precision", "f32")
        runnable = [p for p in plans if not p["sp"] and p["zero"] == 0 and p["interleave"] == 1
                    and p["recompute"] == "none" and p["ep"] == 1 and p["tp"] <= 2]
        want = runnable[0]
        self.assertEqual((tp, pp, dp, mb), (want["tp"], want["pp"], want["dp"], want["micro_batch"]))

    def test_given_sizes_are_kept(self):
        r = run([*self.ARGS, "--batch", "8", "--tp", "1", "--pp", "1", "--dp", "auto"])
        self.assert_ok(r)
        m = re.search(self.CHOSE, r.stderr)
        self.assertIsNotNone(m, r.stderr)
        self.assertEqual(m.group(1, 2, 3), ("1", "1", str(self.world())))
        # A batch no data-parallel size of the world divides except 1, with tp and pp pinned.
        if self.world() > 1:
            r = run([*self.ARGS, "--tp", "1", "--pp", "1", "--dp", "auto", "--batch", "1", "--micro-batch", "1"])
            self.assert_fails(r, "auto", "--batch 1", only_line=False)

    def test_fine_tuning_keeps_one_pipeline_stage(self):
        r = run(["train", "--model", self.model_dir, "--data", TEXT, "--threads-per-rank", "1", "--batch", "4",
                 "--seq", "16", "--steps", "1", "--pp", "auto", "--tp", "auto", "--dp", "auto"])
        self.assert_ok(r)
        self.assertEqual(re.search(self.CHOSE, r.stderr).group(2), "1")

    def test_generate_with_tp_auto_equals_the_chosen_tp(self):
        model = self.model_dir
        args = ["generate", "--model", model, "-p", "Hello world", "-n", "8", "--threads-per-rank", "1"]
        r = run([*args, "--tp", "auto"])
        self.assert_ok(r)
        m = re.search(r"\[generate\] --tp auto: the planner chose tp (\d+) of (\d+) ranks", r.stderr)
        self.assertIsNotNone(m, r.stderr)
        self.assertEqual(int(m.group(2)), self.world())
        self.assertLessEqual(int(m.group(1)), self.world())
        fixed = run([*args, "--tp", m.group(1)])
        self.assert_ok(fixed)
        self.assertEqual(r.stdout, fixed.stdout)
        r = run(["inspect", "-m", model, "--tp", "auto"])
        self.assert_ok(r)
        self.assertIn("--tp auto: the planner chose", r.stderr)

    def test_bad_values_are_refused(self):
        for bad in ("0", "automatic", "-2"):
            r = run(["generate", "--model", self.model_dir, "-p", "x", "--tp", bad])
            self.assert_fails(r, "--tp", bad)
        r = run([*self.ARGS, "--batch", "8", "--tp", "auto", "--cluster", "no-such-cluster"])
        self.assert_fails(r, "no-such-cluster", only_line=False)


def processes_with(marker):
    """PIDs of live processes whose environment holds `marker` (a run's unique variable)."""
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in env.read_bytes():
                found.append(int(env.parent.name))
        except OSError:
            pass  # gone, or not ours to read
    return found


class FaultCase(CliCase):
    """TENSORPAR_FAULT (one rank killed, stalled or throwing at its 38th all-reduce of a training
    run), a full disk during a save, and a corrupt or missing shard at resume. Every failure must
    end the run (no hang: subprocess timeouts derived from TENSORPAR_COMM_TIMEOUT catch one), with
    each surviving rank's error naming the failed rank and the operation, and leave no process
    behind. docs/reliability.md tabulates these cases."""

    FAULT = "rank:1,op:all_reduce,after:37,action:{}"
    ARGS = [*TINY, "--batch", "2"]
    # Four heads, so that the whole MPI world (up to 4 ranks) is one TP group.
    MPI_ARGS = [*ARGS[:ARGS.index("--heads")], "--heads", "4", *ARGS[ARGS.index("--heads") + 2:]]

    @classmethod
    def setUpClass(cls):
        cls.tmp = Path(tempfile.mkdtemp(prefix="tensorpar-faults-"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def faulty_run(self, action, args, prefix=(), fault=None):
        marker = f"TP_FAULT_RUN={os.getpid()}-{action}-{len(args)}-{len(prefix)}"
        name, value = marker.split("=")
        r = run(args, prefix=prefix, env_extra={"TENSORPAR_FAULT": (fault or self.FAULT).format(action), name: value})
        self.assertEqual(processes_with(marker), [], f"processes left behind:\n{r.stderr}")
        return r

    def mpirun(self, n, *flags):
        if not MPIEXEC or not Path(MPIEXEC).exists():
            self.skipTest("no mpiexec")
        return [MPIEXEC, "--oversubscribe", "--allow-run-as-root", *flags, "-np", str(n)]

    def assert_survivor_errors(self, r, ranks, n, how, said):
        """Each survivor rank printed an error for its all_reduce: `how` (aborted | timed out after
        T s), then `said` (a regex)."""
        for rank in ranks:
            pattern = (rf"error: (rank {rank}: )?\[mpi all_reduce\] {how} \(group mpi:world\S*, rank {rank} of {n}, "
                       rf"op #\d+ all_reduce\): {said}")
            self.assertRegex(r.stderr, pattern, f"survivor rank {rank}:\n{r.stderr}")


class Faults(FaultCase):
    """The failures that end a run at once: a killed or throwing rank, a poisoned batch, a full disk,
    a damaged checkpoint."""

    # -- threads backend (--tp 3 / 2): one process, the ranks are threads

    def test_threads_kill(self):
        r = self.faulty_run("kill", ["train", *self.ARGS, "--steps", "6", "--tp", "2"])
        line = self.assert_fails(r, "rank 1", "killed at its all_reduce call #38", only_line=False)
        self.assertIn("TENSORPAR_FAULT=", line)

    def test_threads_throw(self):
        r = self.faulty_run("throw", ["train", *self.ARGS, "--steps", "6", "--tp", "2"])
        self.assert_fails(r, "rank 1", "threw at its all_reduce call #38", only_line=False)

    def test_threads_kill_on_the_gradient_bucket_thread(self):
        # --dp 2 with 1 KiB buckets: most all-reduces run on each rank's communication thread,
        # and the kill may land there; the rank still dies as a whole and the run ends.
        r = self.faulty_run("kill", ["train", *self.ARGS, "--steps", "6", "--dp", "2", "--dp-bucket-mb", "0.001"])
        self.assert_fails(r, "rank 1", "killed at its all_reduce call #38", only_line=False)

    def test_bad_spec_is_one_clear_error(self):
        r = run(["train", *self.ARGS, "--steps", "6", "--tp", "2"], env_extra={"TENSORPAR_FAULT": "rank:1,op:all_reduce,action:kill"})
        self.assert_fails(r, "[TENSORPAR_FAULT]", "must all be given", "rank:R,op:OP,after:N,action:kill|stall|throw")

    # -- training incidents: a poisoned batch (TENSORPAR_POISON_BATCH, a test-only hook)

    def test_poisoned_batch_rolls_back_and_ends_like_a_run_without_it(self):
        """Batch 5's gradients are NaN: with --on-divergence rollback the run goes back to step-4,
        skips batch 5, logs the incident in the --json stream and in its summary (step-0 and steps
        2, 4, 6, 8 saved), and ends with the
        loss of a run given --skip-batches 5; the skip is kept in its checkpoints."""
        common = ["train", *self.ARGS, "--steps", "8", "--tp", "2", "--json"]
        out = self.tmp / "poisoned"
        r = run([*common, "--save-every", "2", "--on-divergence", "rollback", "--out", out],
                env_extra={"TENSORPAR_POISON_BATCH": "batch:5,kind:nan"})
        self.assert_ok(r)
        objs = [json.loads(l) for l in lines(r.stdout)]
        incidents = [o["incident"] for o in objs if "incident" in o]
        self.assertEqual(len(incidents), 1, r.stdout)
        self.assertEqual((incidents[0]["step"], incidents[0]["batch"], incidents[0]["action"],
                          incidents[0]["skipped_batches"]), (5, 5, "rollback", [5]))
        self.assertIn("non-finite gradient norm", incidents[0]["reason"])
        self.assertEqual(Path(incidents[0]["rolled_back_to"]).name, "step-4")
        self.assertIn("[train] done: step 0 -> 8, 8 optimizer steps, 1 incidents (1 rollbacks), batches skipped: 5, "
                      "5 checkpoints written", r.stderr)
        steps = [o for o in objs if "step" in o]
        self.assertEqual([o["step"] for o in steps], [1, 2, 3, 4, 5, 6, 7, 8])
        index = json.loads((out / "step-8" / "index.json").read_text())
        self.assertEqual(index["state"]["divergence"]["skipped_batches"], [5])

        clean = run([*common, "--skip-batches", "5"])
        self.assert_ok(clean)
        want = [json.loads(l) for l in lines(clean.stdout)]
        self.assertEqual(steps[-1]["loss"], [o for o in want if "step" in o][-1]["loss"])
        self.assertIn("0 incidents (0 rollbacks), batches skipped: 5,", clean.stderr)

    def test_poisoned_batch_stops_by_default(self):
        r = run(["train", *self.ARGS, "--steps", "6", "--tp", "2"], env_extra={"TENSORPAR_POISON_BATCH": "batch:3,kind:nan"})
        self.assert_fails(r, "step 3 (batch 3) diverged: non-finite gradient norm", "--skip-batches 3",
                          "--on-divergence rollback", only_line=False)

    def test_rollback_needs_an_output_directory(self):
        r = run(["train", *self.ARGS, "--steps", "2", "--on-divergence", "rollback"])
        self.assert_fails(r, "--on-divergence rollback", "--out DIR", only_line=False)

    # -- checkpoints: a full disk while saving, a damaged shard at resume

    def test_full_disk_during_a_save_loses_nothing(self):
        """A real full disk: a tmpfs sized for one and a half checkpoints, mounted in a private
        mount namespace (`unshare -Urm`, no root needed where user namespaces are enabled). With
        --keep-last 1 the save of step 2 runs out of space while step 1 is still there."""
        if not shutil.which("unshare") or subprocess.run(["unshare", "-Urm", "true"]).returncode != 0:
            self.skipTest("unshare -Urm (a private mount namespace) is not available here")
        probe = self.tmp / "probe"
        self.assert_ok(run(["train", *self.ARGS, "--steps", "1", "--out", probe]))
        one = sum(f.stat().st_size for f in (probe / "step-1").iterdir())
        mnt, out = self.tmp / "mnt", self.tmp / "disk_out"
        mnt.mkdir()
        out.mkdir()
        script = f"""
            mount -t tmpfs -o size={one * 3 // 2 // 1024}k tmpfs {mnt} || exit 90
            {BIN} train {' '.join(map(str, self.ARGS))} --steps 3 --save-every 1 --keep-last 1 \
                --out {mnt}/run --json > {out}/train.out 2> {out}/train.err
            echo $? > {out}/rc
            ls -A {mnt}/run > {out}/ls
            {BIN} export --checkpoint {mnt}/run --out {out}/hf > /dev/null 2> {out}/export.err
            echo $? > {out}/export_rc
        """
        r = subprocess.run(["unshare", "-Urm", "bash", "-c", script], capture_output=True, text=True,
                           env=BASE_ENV, timeout=RUN_TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        err = (out / "train.err").read_text()
        self.assertEqual((out / "rc").read_text().strip(), "1", err)
        (line,) = [l for l in lines(err) if l.startswith("error: ")]
        for said in ("[save_checkpoint] saving step-2", "latest still names step-1", "No space left on device",
                     ".tmp-step-2/rank-00000-of-00001.safetensors"):
            self.assertIn(said, line)
        self.assertEqual([json.loads(l).get("checkpoint") for l in lines((out / "train.out").read_text())],
                         [f"{mnt}/run/step-1"])
        # step-1 whole and named by latest; no partial step-2 left to be taken for a checkpoint.
        self.assertEqual((out / "ls").read_text().split(), ["latest", "step-1"])
        self.assertEqual((out / "export_rc").read_text().strip(), "0", (out / "export.err").read_text())

    def saved_run(self, name):
        d = self.tmp / name
        self.assert_ok(run(["train", *self.ARGS, "--steps", "2", "--save-every", "1", "--tp", "2", "--out", d]))
        return d

    def assert_resume_refused(self, d, *said):
        before = sorted(p.name for p in d.iterdir())
        r = run(["train", "--resume", d, "--steps", "3", "--tp", "2"])
        self.assert_fails(r, *said, "resume from an earlier step-N directory", only_line=False)
        self.assertEqual(sorted(p.name for p in d.iterdir()), before, "a refused resume changed the run")
        self.assertEqual(checkpoint_state(d)[0], "step-2")
        # The earlier checkpoint still resumes (into a new root: latest of d is newer).
        self.assert_ok(run(["train", "--resume", d / "step-1", "--steps", "2", "--out", self.tmp / (d.name + "_b")]))

    def test_corrupt_shard_is_refused_at_resume(self):
        d = self.saved_run("corrupt")
        shard = d / "step-2" / "rank-00001-of-00002.safetensors"
        data = bytearray(shard.read_bytes())
        data[-3] ^= 0x40  # one bit of the last tensor's data: the file still parses
        shard.write_bytes(bytes(data))
        self.assert_resume_refused(d, str(shard), "is corrupt", "xxh64")

    def test_truncated_shard_is_refused_at_resume(self):
        d = self.saved_run("truncated")
        shard = d / "step-2" / "rank-00000-of-00002.safetensors"
        shard.write_bytes(shard.read_bytes()[:1000])
        self.assert_resume_refused(d, str(shard), "is 1000 bytes but index.json recorded")

    def test_missing_shard_is_refused_at_resume(self):
        d = self.saved_run("missing")
        (d / "step-2" / "rank-00001-of-00002.safetensors").unlink()
        self.assert_resume_refused(d, "is missing its shard file rank-00001-of-00002.safetensors")

    # -- mpi backend: one process per rank

    def test_mpi_kill_np2(self):
        # Plain mpirun ends the job as soon as a process dies: mpirun names the rank and the signal,
        # and terminates the survivor, which gets no chance to speak.
        r = self.faulty_run("kill", ["train", *self.MPI_ARGS, "--steps", "6", "--backend", "mpi"], prefix=self.mpirun(2))
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertIn("rank 1 killed at its all_reduce call #38 on mpi:world", r.stderr)
        self.assertRegex(r.stderr, r"rank 1 with PID \d+ on node \S+ exited on signal 9")

    def test_mpi_throw_np4(self):
        r = self.faulty_run("throw", ["train", *self.MPI_ARGS, "--steps", "6", "--backend", "mpi"], prefix=self.mpirun(4))
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"error: rank 1: \[fault\] TENSORPAR_FAULT=\S+: rank 1 threw at its all_reduce call #38")
        self.assert_survivor_errors(r, (0, 2, 3), 4, "aborted",
                                    r"world rank 1 failed: \[fault\] .*rank 1 threw at its all_reduce call #38")


class FaultTimeouts(FaultCase):
    """The failures that only the communication timeout ends (a stalled rank; a killed one whose
    survivors live on under --enable-recovery): each waits TENSORPAR_COMM_TIMEOUT, then the
    failure channel's probe, so ctest runs each alone and beside other tests
    (tests/cli/CMakeLists.txt)."""

    def test_threads_stall(self):
        r = self.faulty_run("stall", ["train", *self.ARGS, "--steps", "6", "--tp", "2"])
        self.assert_fails(r, f"timed out after {COMM_TIMEOUT:g} s waiting for rank 1 in all_reduce", only_line=False)

    def test_mpi_kill_np3_survivors_report(self):
        # Under --enable-recovery the survivors live on: their all_reduce times out and the failure
        # channel's probe names the rank that does not answer.
        r = self.faulty_run("kill", ["train", *self.MPI_ARGS, "--steps", "6", "--backend", "mpi"],
                            prefix=self.mpirun(3, "--enable-recovery"))
        self.assertIn("rank 1 killed at its all_reduce call #38 on mpi:world", r.stderr)
        self.assert_survivor_errors(r, (0, 2), 3, rf"timed out after {COMM_TIMEOUT:g} s", r"no answer from world rank 1 ")

    def test_mpi_kill_np3_with_gradient_buckets(self):
        # The same with --dp 3 and 1 KiB buckets: the survivors' pending all-reduces (on their
        # communication threads or their own) time out and name the rank that does not answer.
        r = self.faulty_run("kill", ["train", *self.MPI_ARGS[:-2], "--batch", "3", "--steps", "6", "--dp", "3",
                                     "--dp-bucket-mb", "0.001", "--backend", "mpi"],
                            prefix=self.mpirun(3, "--enable-recovery"))
        self.assertIn("rank 1 killed at its all_reduce call #38 on mpi:", r.stderr)
        self.assert_survivor_errors(r, (0, 2), 3, rf"timed out after {COMM_TIMEOUT:g} s", r"no answer from world rank 1 ")

    def test_mpi_kill_np2_interleaved_pipeline(self):
        # Interleaved pipeline stages (--pp-virtual: buffered sends in flight between the two
        # processes, both ways): the second stage killed at its 4th send; the first stage's
        # receive times out naming it, and its exit does not wait on sends never to be received.
        args = [*TINY[:TINY.index("--layers")], "--layers", "4", *TINY[TINY.index("--layers") + 2:]]
        r = self.faulty_run("kill", ["train", *args, "--batch", "4", "--micro-batch", "1", "--steps", "6", "--pp", "2",
                                     "--pp-virtual", "2", "--backend", "mpi"],
                            prefix=self.mpirun(2, "--enable-recovery"), fault="rank:1,op:send,after:3,action:{}")
        self.assertIn("rank 1 killed at its send call #4 on mpi:", r.stderr)
        self.assertRegex(r.stderr, rf"error: (rank 0: )?\[mpi recv\] timed out after {COMM_TIMEOUT:g} s \(group mpi:world\S*, "
                                   r"rank 0 of 2, op #\d+ recv\): no answer from world rank 1 ")

    def test_mpi_stall_np3(self):
        r = self.faulty_run("stall", ["train", *self.MPI_ARGS, "--steps", "6", "--backend", "mpi"], prefix=self.mpirun(3))
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assert_survivor_errors(r, (0, 2), 3, rf"timed out after {COMM_TIMEOUT:g} s", r"no answer from world rank 1 ")


class Docs(Workdir):
    """Every command line the README and scripts/demo.sh show uses flags the binary has; the
    README's demo transcript is what scripts/demo.sh prints."""

    STATS = re.compile(r"^\[\d+ tokens, \w+; prefill [\d.]+ tok/s, decode [\d.]+ tok/s, ttft \d+ ms; "
                       r"weights\+KV per rank:( [\d.]+ MiB)+\]$")

    def test_demo_transcript_is_what_the_script_prints(self):
        demo = (ROOT / "scripts" / "demo.sh").read_text()
        prompt = re.search(r'prompt="\$\{1:-(.*)\}"', demo).group(1)
        fetch = (ROOT / "tools" / "fetch_model.sh").read_text()  # the demo's default model
        model = "models/" + re.search(r'OUT="\$MODELS_DIR/(SmolLM2[^"]+)"', fetch).group(1)
        readme = [l.strip() for l in (ROOT / "README.md").read_text().splitlines()]
        header = f"== tensorpar generate --tp 2 --chat  (model: {model})"
        self.assertIn('echo "== tensorpar generate --tp 2 --chat  (model: $model)"', demo)
        self.assertIn(header, readme)
        at = readme.index(header)
        self.assertEqual(readme[at + 1], "> " + prompt)
        self.assertRegex(readme[at + 3], self.STATS)
        # ... and the binary prints its statistics line in that form.
        r = run(["generate", "-m", self.model_dir, "-p", "hi", "-n", "3"])
        self.assert_ok(r)
        self.assertRegex(lines(r.stderr)[-1], self.STATS)

    def commands(self, path):
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            m = re.search(r"build/bin/tensorpar (\w+)(.*)", line)
            if m and m.group(1) != "bench":
                yield m.group(1), m.group(2).split("#")[0]

    def test_documented_flags_exist(self):
        helps = {}
        checked = 0
        for path in (ROOT / "README.md", ROOT / "scripts" / "demo.sh"):
            for sub, rest in self.commands(path):
                if sub not in helps:
                    r = run([sub, "--help"])
                    self.assert_ok(r)
                    helps[sub] = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", r.stdout))
                for flag in re.findall(r"(?:^|\s)(--?[a-zA-Z][\w-]*)", rest):
                    self.assertIn(flag, helps[sub], f"{path.name}: tensorpar {sub} has no {flag}")
                    checked += 1
        self.assertGreater(checked, 50)


from readme_commands import ReadmeCommands  # noqa: E402,F401  (the -k ReadmeCommands group)

if __name__ == "__main__":
    # A -k pattern that matches nothing (a renamed test) fails instead of passing with no tests.
    result = unittest.main(exit=False).result
    sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
