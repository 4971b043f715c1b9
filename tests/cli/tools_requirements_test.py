#!/usr/bin/env python3
"""tools/requirements.txt installs every third-party module that a script in tools/ imports.

Reads each tools/*.py with ast (nothing is imported), keeps top-level modules that are neither in
the standard library nor files of tools/ itself (nor built elsewhere, see ELSEWHERE), and checks
each names a requirement.
"""
import ast
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
# Import name -> PyPI name, where they differ.
PYPI_NAME = {"yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn"}
# Modules another environment provides, and which.
ELSEWHERE = {"llama_cpp": "llama-cpp-python, built from source by bench/infer_bench.sh into .venv-bench"}


def imported_modules(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def main():
    required = set()
    for line in (TOOLS / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            required.add(line.split("==")[0].split(">=")[0].strip().lower())
    local = {p.stem for p in TOOLS.glob("*.py")}
    missing = []
    for script in sorted(TOOLS.glob("*.py")):
        for mod in sorted(set(imported_modules(script))):
            if mod in sys.stdlib_module_names or mod in local or mod in ELSEWHERE:
                continue
            if PYPI_NAME.get(mod, mod).lower() not in required:
                missing.append(f"{script.name} imports {mod}")
    if missing:
        print("tools/requirements.txt lacks: " + "; ".join(missing), file=sys.stderr)
        return 1
    print(f"tools/requirements.txt covers every import of {len(local)} scripts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
