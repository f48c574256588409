#!/usr/bin/env bash
# Issue 29: a sweep split into N = 8 shards (`flashjit tune --compile-only --shard I/8`,
# one DB each, as a job array runs it) and merged (`flashjit cache merge`) gives exactly
# the rows of one unsharded run: no item lost, none made twice, and the merged DB
# verifies. Then the same through scripts/slurm-tune.sh, the job-array launcher, with a
# stand-in sbatch that runs the 8 tasks and the merge job here.
# Usage: shard_merge_test.sh FLASHJIT SLURM_LAUNCHER FAKE_SBATCH
set -euo pipefail
flashjit=$1
launcher=$2
fake_sbatch=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-shard-test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export FLASHJIT_SYSTEM_CACHE=  # a system DB must not stand in for the sweep's rows
sweep=(tune --compile-only --head-dims 64,96 --dtypes bf16,fp16 --causal both --targets sm_80)
keys() { sqlite3 "$1" "SELECT key_text FROM binaries ORDER BY key_text"; }

"$flashjit" "${sweep[@]}" --cache "$dir/whole.sqlite" >"$dir/whole.log" 2>&1 ||
  { cat "$dir/whole.log"; exit 1; }
for i in 0 1 2 3 4 5 6 7; do
  "$flashjit" "${sweep[@]}" --shard "$i/8" --cache "$dir/shard-$i.sqlite" >"$dir/shard-$i.log" 2>&1 ||
    { cat "$dir/shard-$i.log"; exit 1; }
done
"$flashjit" cache merge "$dir"/shard-*.sqlite --out "$dir/merged.sqlite"
"$flashjit" cache verify "$dir/merged.sqlite"

whole=$(keys "$dir/whole.sqlite")
merged=$(keys "$dir/merged.sqlite")
count=$(printf '%s\n' "$whole" | grep -c . || true)
sum=0
for i in 0 1 2 3 4 5 6 7; do
  n=$(sqlite3 "$dir/shard-$i.sqlite" "SELECT count(*) FROM binaries")
  sum=$((sum + n))
done
echo "unsharded: $count binaries; 8 shards: $sum in all; merged: $(printf '%s\n' "$merged" | grep -c . || true)"
[ "$count" -eq 8 ] || { echo "FAIL: expected 8 items (2 head dims x 2 dtypes x 2 causal)"; exit 1; }
[ "$sum" -eq "$count" ] || { echo "FAIL: the shards made $sum binaries, the sweep has $count"; exit 1; }
[ "$whole" = "$merged" ] || { echo "FAIL: merged keys differ:"; diff <(echo "$whole") <(echo "$merged"); exit 1; }

# The launcher, as Slurm would run it.
mkdir -p "$dir/bin" "$dir/slurm-state"
cp "$fake_sbatch" "$dir/bin/sbatch"
PATH="$dir/bin:$PATH" FAKE_SBATCH_STATE="$dir/slurm-state" \
  "$launcher" --out "$dir/array" --shards 8 --flashjit "$flashjit" --sbatch --partition=test \
  -- "${sweep[@]:1}"
cat "$dir/array/merge.log"
ls "$dir/array"/shard-*.sqlite | wc -l | grep -qx 8 || { echo "FAIL: not 8 shard DBs"; exit 1; }
[ "$(keys "$dir/array/tuned.sqlite")" = "$whole" ] ||
  { echo "FAIL: the job array's merged DB differs from the unsharded run"; exit 1; }
grep -q '"format": "flashjit-winners"' "$dir/array/winners.json" ||
  { echo "FAIL: no winners file"; exit 1; }
echo "shard -> merge round trip: ok"
