#!/usr/bin/env bash
# A `flashjit tune` sweep as a Slurm job array: N tasks, one GPU each, task I tuning the
# I-th of N disjoint parts of the sweep (--shard I/N) into its own DB, then one job that
# starts when every task has succeeded, merges the shard DBs (`flashjit cache merge`: the
# faster winner per key), verifies the result and writes its winners as JSON (what
# data/winners/ and the system cache take). A task that is re-queued, or the whole array
# submitted again, resumes from its shard DB.
#
# Usage: scripts/slurm-tune.sh --out DIR [--shards N] [--flashjit PATH]
#                              [--sbatch OPTION]... [--dry-run] [-- TUNE OPTIONS...]
#   --out DIR       shared directory for shard-I.sqlite, tune-I.log, tuned.sqlite,
#                   winners.json, merge.log (every node must see it)
#   --shards N      array size (default 8)
#   --flashjit P    the flashjit CLI on the nodes (default: `flashjit` on PATH)
#   --sbatch OPT    passed to both sbatch calls, e.g. --sbatch --partition=gpu
#                   --sbatch --time=02:00:00 --sbatch --account=me (repeatable)
#   --dry-run       print the job scripts and the sbatch commands; submit nothing
#   TUNE OPTIONS    what to sweep, as for `flashjit tune` (default: its default sweep)
# Example:
#   scripts/slurm-tune.sh --out /shared/fj --shards 8 --sbatch --partition=h100 -- \
#     --head-dims 64,128,256 --dtypes bf16,fp16 --causal both --seqlens 1024,4096,16384
set -euo pipefail
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

out="" shards=8 flashjit=flashjit dry=0
sbatch_options=() tune_options=()
while (($#)); do
  case $1 in
  --out) out=${2:?--out needs a directory}; shift 2 ;;
  --shards) shards=${2:?--shards needs a number}; shift 2 ;;
  --flashjit) flashjit=${2:?--flashjit needs a path}; shift 2 ;;
  --sbatch) sbatch_options+=("${2:?--sbatch needs an option}"); shift 2 ;;
  --dry-run) dry=1; shift ;;
  -h|--help) usage 0 ;;
  --) shift; tune_options=("$@"); break ;;
  *) echo "slurm-tune: unknown option '$1'" >&2; usage ;;
  esac
done
[ -n "$out" ] || { echo "slurm-tune: --out is required" >&2; usage; }
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "slurm-tune: --shards '$shards': a positive number" >&2; exit 2; }
for option in "${tune_options[@]}"; do
  case $option in
  --shard|--shard=*|--cache|--cache=*)
    echo "slurm-tune: '$option' is set per task; leave it out" >&2; exit 2 ;;
  esac
done
command -v sbatch >/dev/null || [ "$dry" = 1 ] || { echo "slurm-tune: no sbatch on PATH" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

quoted() { printf ' %q' "$@"; }
fj=$(printf '%q' "$flashjit") # the CLI as the job scripts name it
task_script=$out/tune-array.sbatch
merge_script=$out/merge.sbatch
cat >"$task_script" <<SCRIPT
#!/bin/bash
#SBATCH --job-name=flashjit-tune
#SBATCH --array=0-$((shards - 1))
#SBATCH --gres=gpu:1
#SBATCH --output=$out/tune-%a.log
set -euo pipefail
exec $fj tune${tune_options[*]:+$(quoted "${tune_options[@]}")} \\
  --shard "\${SLURM_ARRAY_TASK_ID}/$shards" --cache "$out/shard-\${SLURM_ARRAY_TASK_ID}.sqlite"
SCRIPT
cat >"$merge_script" <<SCRIPT
#!/bin/bash
#SBATCH --job-name=flashjit-merge
#SBATCH --output=$out/merge.log
set -euo pipefail
shopt -s nullglob
shards=("$out"/shard-*.sqlite)
[ \${#shards[@]} -gt 0 ] || { echo "no shard DB in $out"; exit 1; }
$fj cache merge "\${shards[@]}" --out "$out/tuned.sqlite"
$fj cache verify "$out/tuned.sqlite"
# The winners of every device, as text; only this sweep's (no installed system DB).
FLASHJIT_SYSTEM_CACHE= $fj cache export --user "$out/tuned.sqlite" \\
  --format json --out "$out/winners.json"
SCRIPT
chmod +x "$task_script" "$merge_script"

if [ "$dry" = 1 ]; then
  echo "== $task_script"; cat "$task_script"
  echo "== $merge_script"; cat "$merge_script"
  echo "== would run: sbatch --parsable${sbatch_options[*]:+$(quoted "${sbatch_options[@]}")} $task_script"
  echo "== then:      sbatch --parsable --dependency=afterok:<array job>${sbatch_options[*]:+$(quoted "${sbatch_options[@]}")} $merge_script"
  exit 0
fi
array=$(sbatch --parsable "${sbatch_options[@]}" "$task_script")
array=${array%%;*}
merge=$(sbatch --parsable --dependency="afterok:$array" "${sbatch_options[@]}" "$merge_script")
merge=${merge%%;*}
echo "slurm-tune: array job $array ($shards tasks), merge job $merge -> $out/tuned.sqlite"
echo "  follow: squeue -j $array,$merge; logs: $out/tune-*.log, $out/merge.log"
