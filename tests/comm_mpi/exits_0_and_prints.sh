#!/usr/bin/env bash
# Passes when a command exits 0 AND its stdout matches an extended regex (ctest's
# PASS_REGULAR_EXPRESSION alone would ignore the exit status). grep reads to the end, so the
# command never sees SIGPIPE. Usage: exits_0_and_prints.sh REGEX COMMAND [ARGS...]
set -uo pipefail
regex="$1"
shift
"$@" | tee /dev/stderr | grep -E -- "$regex" >/dev/null
