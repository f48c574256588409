#!/usr/bin/env bash
# Issue 29, without a GPU: scripts/build-system-cache.sh makes a system DB (here a small
# sweep); it verifies, it is in journal mode DELETE (read from a read-only directory with
# no file appearing), a winners file from another generator is skipped as stale, and a
# flashjit placed in <prefix>/bin finds <prefix>/share/flashjit/system.sqlite by itself.
# Usage: system_cache_test.sh FLASHJIT BUILD_SCRIPT
set -euo pipefail
flashjit=$1
script=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-system-test.XXXXXX")
trap 'chmod -R u+w "$dir"; rm -rf "$dir"' EXIT
prefix=$dir/prefix
db=$prefix/share/flashjit/system.sqlite
fail() { echo "FAIL: $*"; exit 1; }

# A winners file measured with a generator this build is not.
cat >"$dir/stale.json" <<'JSON'
{"format": "flashjit-winners", "version": 1, "winners": [
 {"spec": "fwd_mma.bf16.d64.dv64.nocausal.sm80", "bucket": "q1024.k1024.bh32",
  "device_key": "NVIDIA_A100-SXM4-80GB.sm80.108sm",
  "generator_fingerprint": "0000000000000000000000000000000000000000000000000000000000000000",
  "protocol_version": 2, "config": "bm64.bn64.w4.s2", "median_us": 100.0, "tflops": 100.0,
  "tuned_at": 1764000000, "flashjit_version": "0.1.0", "measured_binary_key": "aa",
  "clocks": null, "candidates": null}]}
JSON

FLASHJIT_SYSTEM_CACHE_ARGS="--head-dims 64 --dtypes bf16 --causal no --targets sm_80,sm_90a" \
  "$script" "$flashjit" "$db" "$dir/stale.json" | tee "$dir/build.log"
grep -q "winners $dir/stale.json: 0 imported (0 compiled now), 1 stale, 0 failed" "$dir/build.log" ||
  fail "the stale winner was not reported as such"
grep -q "$db: ok" "$dir/build.log" || fail "the DB did not verify"
# fwd_mma on both targets, fwd_wgmma on sm_90a, bwd_mma on sm_80 and bwd_wgmma on sm_90a
# (what fj_kernel_get loads for d64 there), and dec_mma on both.
binaries=$(sqlite3 "$db" "SELECT count(*) FROM binaries")
[ "$binaries" -eq 7 ] || fail "expected 7 binaries, found $binaries"
[ "$(sqlite3 "$db" "PRAGMA journal_mode")" = delete ] || fail "not in journal mode DELETE"

# Read-only: nothing appears beside it.
chmod a-w "$prefix/share/flashjit"
before=$(ls -a "$prefix/share/flashjit")
FLASHJIT_SYSTEM_CACHE=$db "$flashjit" cache ls --user "$dir/none.sqlite" | tee "$dir/ls.log"
grep -q "^system $db: schema" "$dir/ls.log" || fail "cache ls does not show the system DB"
[ "$(ls -a "$prefix/share/flashjit")" = "$before" ] || fail "reading it created files"
[ ! -e "$dir/none.sqlite" ] || fail "cache ls created a user DB"

# Found without configuration from <prefix>/bin.
mkdir -p "$prefix/bin"
cp "$flashjit" "$prefix/bin/flashjit"
env -u FLASHJIT_SYSTEM_CACHE "$prefix/bin/flashjit" info | tee "$dir/info.log"
grep -q "system $db" "$dir/info.log" || fail "flashjit in $prefix/bin did not find $db"
FLASHJIT_SYSTEM_CACHE= "$prefix/bin/flashjit" info | grep -q "FLASHJIT_SYSTEM_CACHE is empty" ||
  fail "an empty FLASHJIT_SYSTEM_CACHE does not turn it off"
echo "system cache: ok"
