#!/usr/bin/env bash
# Installs every system dependency from Debian packages. Idempotent and quiet when all is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libdnnl-dev libomp-dev
  libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libpcre2-dev libicu-dev   # tokenizer: Split regexes, Unicode normalization
  libxxhash-dev             # checkpoint shard checksums (XXH64)
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang libclang-rt-14-dev
  python3 python3-venv
  fortunes time
  iproute2 util-linux        # scripts/hosts.sh: simulated hosts (ip netns, tc, unshare, taskset)
  chromium chromium-driver   # headless browser for tests/serve/test_web_page.py
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}" >/tmp/tensorpar-apt.log 2>&1 || {
    "${sudo_cmd[@]}" apt-get update -q >/dev/null 2>&1
    "${sudo_cmd[@]}" apt-get install -y -q "${missing[@]}" >/tmp/tensorpar-apt.log 2>&1 || {
      tail -20 /tmp/tensorpar-apt.log; exit 1; }
  }
fi
