#!/usr/bin/env bash
# Runs the GPU tests as gtest shards side by side on one GPU. Most of a GPU test's time
# is on the CPU (NVRTC compiles, the fp32 reference), which shards spread over the
# machine's cores: 4 shards on a 16-core H200 machine ran 129 of bwd_wgmma's tests in
# 200 s, where one process had spent 420 s on 12 others, the heaviest (stop 78).
# Each shard logs to OUT_DIR/shard-K.txt.
# Usage: scripts/gpu-tests-sharded.sh GPU_TESTS OUT_DIR SHARDS [gtest args...]
#   e.g. scripts/gpu-tests-sharded.sh .gpu/gpu_tests out 4 --gtest_filter='Families/Bwd.*'
# Exit status: 0 when every shard passed; otherwise 1, naming the failed tests.
set -uo pipefail
[ $# -ge 3 ] || { echo "usage: $0 GPU_TESTS OUT_DIR SHARDS [gtest args...]" >&2; exit 2; }
tests=$1 out=$2 shards=$3
shift 3
[[ $shards =~ ^[1-9][0-9]*$ ]] || { echo "$0: SHARDS must be a positive integer" >&2; exit 2; }
mkdir -p "$out"
start=$(date +%s)
pids=()
for ((k = 0; k < shards; ++k)); do
  # Line-buffered, so that a shard killed by a time limit keeps what it printed.
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k stdbuf -oL "$tests" "$@" \
    >"$out/shard-$k.txt" 2>&1 &
  pids+=($!)
done
status=0
for ((k = 0; k < shards; ++k)); do
  wait "${pids[$k]}"
  rc=$?
  [ $rc -eq 0 ] || { status=1; echo "shard $k exited with status $rc"; }
done
passed=$(cat "$out"/shard-*.txt | grep -c '^\[       OK \]')
skipped=$(cat "$out"/shard-*.txt | grep -c '^\[  SKIPPED \] [^0-9]')
failed=$(cat "$out"/shard-*.txt | grep '^\[  FAILED  \] [^0-9]' | sed 's/ (.*//' | sort -u)
echo "$shards shards, $(($(date +%s) - start)) s: $passed passed, $skipped skipped," \
  "$(grep -c . <<<"$failed") failed"
[ -z "$failed" ] || { echo "$failed"; status=1; }
exit $status
