# Sourced by the multihost tests (after `set -euo pipefail`, with bin, mpirun and root set): two
# simulated hosts of scripts/hosts.sh named after the build tree (exit 77, skip, where network
# namespaces cannot be made; removed at exit with the work directory), their mpirun placement in
# `placement`, a corpus, the tiny model's train arguments, and `losses FILE` (--json records
# without their timing fields).
work="$(mktemp -d)"
name="t$(printf '%s' "$bin" | cksum | cut -c1-6)"  # one set of hosts per build tree
hosts() { bash "$root/scripts/hosts.sh" "$@" --name "$name"; }
trap 'hosts down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

set +e
up="$(hosts up 2 2>&1)"
rc=$?
set -e
if [[ $rc -eq 3 ]]; then
  echo "SKIP: simulated hosts are not possible here: $up"
  exit 77
fi
[[ $rc -eq 0 ]] || { echo "FAILED: scripts/hosts.sh up 2: $up"; exit 1; }
echo "$up" | head -n 1
read -r -a placement <<<"$(echo "$up" | tail -n 1)"

for i in $(seq 1 300); do
  echo "Line $i: the quick brown fox jumps over $((i * 7 % 13)) lazy dogs; def f(x): return x + $i"
done >"$work/corpus.txt"
train_args=(train --arch llama --layers 2 --hidden 64 --heads 4 --kv-heads 2 --ffn 128 --seq 32
  --vocab-from "$root/tests/fixtures/tokenizer/gpt2_trained.tokenizer.json" --data "$work/corpus.txt"
  --batch 4 --lr 3e-3 --warmup 1 --eval-every 2 --threads-per-rank 1 --json)
losses() {
  sed -E 's/"(tokens_per_s|ms_per_step|compute_s|activation_bytes)":[^,}]*,?//g; s/"(comm_s|dp_reduce)":\{[^}]*\},?//g; s/,}/}/g' "$1"
}
