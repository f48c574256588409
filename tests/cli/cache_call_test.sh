#!/usr/bin/env bash
# Issue 31, without a GPU: `flashjit cache ls --call Q,K,BH` says, per spec, which tuned
# bucket a handle runs a call of that shape on and whether it is the call's own. Two
# winners of this build's generator (buckets q1024 and q4096 of one spec) are imported
# into a fresh DB (one NVRTC compilation: the same tile), then asked about. Issue 27: a
# decode winner with a tuned split count is imported too, and `--decode-call` maps a
# GQA step to its packed-row bucket, while `--call` leaves the decode spec out.
# Usage: cache_call_test.sh FLASHJIT
set -euo pipefail
flashjit=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-cache-call.XXXXXX")
trap 'rm -rf "$dir"' EXIT
# shellcheck source=build_keys.sh
source "$(dirname "$0")/build_keys.sh"

build_keys "$flashjit"
spec=fwd_mma.bf16.d64.dv64.nocausal.sm80
decode=dec_mma.bf16.d64.dv64.nocausal.sm80
row() {
  local s=${3:-$spec} # its family's fingerprint: the spec key's first field
  echo "{\"spec\": \"$s\", \"bucket\": \"$1\", \"device_key\": \"NVIDIA_A100-SXM4-80GB.sm80.108sm\",
   \"generator_fingerprint\": \"${fingerprints[${s%%.*}]}\", \"protocol_version\": $protocol,
   \"config\": \"${4:-bm64.bn64.w4.s2}\", \"median_us\": $2, \"tflops\": 100.0, \"tuned_at\": 1764000000,
   \"flashjit_version\": \"0.5.0\", \"measured_binary_key\": \"aa\", \"clocks\": null,
   \"candidates\": null}"
}
echo "{\"format\": \"flashjit-winners\", \"version\": 1, \"winners\": [
 $(row q1024.k1024.bh32 100.0), $(row q4096.k4096.bh32 900.0),
 $(row q4.k4096.bh128 95.0 $decode bm16.bn64.w4.s3+splits8)]}" >"$dir/winners.json"
FLASHJIT_SYSTEM_CACHE= "$flashjit" tune --compile-only --targets sm_80 --head-dims 64 \
  --dtypes bf16 --causal no --family fwd_mma --winners "$dir/winners.json" \
  --cache "$dir/db.sqlite" >"$dir/tune.log" 2>&1 || { cat "$dir/tune.log"; fail "import"; }
grep -q "3 imported" "$dir/tune.log" || { cat "$dir/tune.log"; fail "the winners were not imported"; }

ls_call() { FLASHJIT_SYSTEM_CACHE= "$flashjit" cache ls --user "$dir/db.sqlite" --call "$1"; }
ls_call 4096,4096,32 | tee "$dir/own.log"
grep -Eq "^$spec +NVIDIA_A100-SXM4-80GB.sm80.108sm +q4096.k4096.bh32 +yes$" "$dir/own.log" ||
  fail "a call in a tuned bucket is not reported as running on it"
# 2048 is one doubling from each: the smaller bucket, as fj_forward picks.
ls_call 2000,2048,20 | tee "$dir/near.log"
grep -q "is bucket q2048.k2048.bh32" "$dir/near.log" || fail "the call's bucket is wrong"
grep -Eq "^$spec .* q1024.k1024.bh32 +no \(nearest of 2 tuned\)$" "$dir/near.log" ||
  fail "an untuned bucket is not reported as the nearest"
for bad in 1024,1024 0,1,1 a,b,c; do
  if ls_call "$bad" >"$dir/bad.log" 2>&1; then fail "--call $bad was accepted"; fi
  grep -q "expected seqlen_q,seqlen_k,batch\*heads_q" "$dir/bad.log" || fail "--call $bad: no clear error"
done
sed -n '/^a call of/,$p' "$dir/own.log" | grep -q "^$decode " && fail "--call lists the decode spec"

ls_decode() { FLASHJIT_SYSTEM_CACHE= "$flashjit" cache ls --user "$dir/db.sqlite" --decode-call "$1"; }
FLASHJIT_SYSTEM_CACHE= "$flashjit" cache ls --user "$dir/db.sqlite" | tee "$dir/ls.log"
grep -q "bm16.bn64.w4.s3+splits8" "$dir/ls.log" || fail "the decode winner's split count is not listed"
# 16 sequences of 32 query / 8 KV heads: 4 rows packed per KV head, 128 (sequence, KV head)
# pairs.
ls_decode 16,1,4000,32/8 | tee "$dir/decode.log"
grep -q "is bucket q4.k4096.bh128" "$dir/decode.log" || fail "the decode step's bucket is wrong"
grep -Eq "^$decode +NVIDIA_A100-SXM4-80GB.sm80.108sm +q4.k4096.bh128 +yes$" "$dir/decode.log" ||
  fail "a decode step in its tuned bucket is not reported as running on it"
sed -n '/^a decode step/,$p' "$dir/decode.log" | grep -q "^$spec " &&
  fail "--decode-call lists a forward spec"
for bad in 16,1,4000 16,1,4000,32/5 0,1,4000,32/8 16,1,4000,32 a,b,c,d; do
  if ls_decode "$bad" >"$dir/bad.log" 2>&1; then fail "--decode-call $bad was accepted"; fi
  grep -q "expected batch,seqlen_q,seqlen_k,heads_q/heads_kv" "$dir/bad.log" ||
    fail "--decode-call $bad: no clear error"
done
echo "cache ls --call: ok"
