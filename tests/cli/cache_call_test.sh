#!/usr/bin/env bash
# Issue 31, without a GPU: `flashjit cache ls --call Q,K,BH` says, per spec, which tuned
# bucket a handle runs a call of that shape on and whether it is the call's own. Two
# winners of this build's generator (buckets q1024 and q4096 of one spec) are imported
# into a fresh DB (one NVRTC compilation: the same tile), then asked about.
# Usage: cache_call_test.sh FLASHJIT
set -euo pipefail
flashjit=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-cache-call.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

keys=$("$flashjit" info | sed -n 's/^Keys: *generator \([0-9a-f]*\), measurement protocol \([0-9]*\)$/\1 \2/p')
read -r fingerprint protocol <<<"$keys"
[ -n "${protocol:-}" ] || fail "flashjit info does not print the generator and protocol"
spec=fwd_mma.bf16.d64.dv64.nocausal.sm80
row() {
  echo "{\"spec\": \"$spec\", \"bucket\": \"$1\", \"device_key\": \"NVIDIA_A100-SXM4-80GB.sm80.108sm\",
   \"generator_fingerprint\": \"$fingerprint\", \"protocol_version\": $protocol,
   \"config\": \"bm64.bn64.w4.s2\", \"median_us\": $2, \"tflops\": 100.0, \"tuned_at\": 1764000000,
   \"flashjit_version\": \"0.5.0\", \"measured_binary_key\": \"aa\", \"clocks\": null,
   \"candidates\": null}"
}
echo "{\"format\": \"flashjit-winners\", \"version\": 1, \"winners\": [
 $(row q1024.k1024.bh32 100.0), $(row q4096.k4096.bh32 900.0)]}" >"$dir/winners.json"
FLASHJIT_SYSTEM_CACHE= "$flashjit" tune --compile-only --targets sm_80 --head-dims 64 \
  --dtypes bf16 --causal no --family fwd_mma --winners "$dir/winners.json" \
  --cache "$dir/db.sqlite" >"$dir/tune.log" 2>&1 || { cat "$dir/tune.log"; fail "import"; }
grep -q "2 imported" "$dir/tune.log" || { cat "$dir/tune.log"; fail "the winners were not imported"; }

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
echo "cache ls --call: ok"
