#!/usr/bin/env bash
# Issue 28 through the CLI, with NVRTC and no GPU: the feature options of gen, tune and
# bench (--window, --softcap, --alibi, --score-mod, --mask-mod) reach the kernel and its
# key; user code that does not compile gets NVRTC's log naming the user's line; every
# mistake (a bad value, a missing file, a score_mod for the backward pass, softcap for
# bwd_wgmma) is a clear error with exit
# status 1, never a crash. Prints "features cli: ok" at the end.
# Usage: features_test.sh FLASHJIT MODS_DIR   (MODS_DIR: examples/mods)
set -uo pipefail
flashjit=$1
mods=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-features-test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
export FLASHJIT_SYSTEM_CACHE=  # a system DB must not stand in for the sweep's rows
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect STATUS PATTERN ARGS...: runs flashjit ARGS, wants that exit status and a line of
# its output (stdout and stderr) matching the extended regex PATTERN.
expect() {
  local status=$1 pattern=$2
  shift 2
  local out rc
  out=$("$flashjit" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$status" ]; then
    fail "flashjit $* exited $rc, expected $status"
    printf '%s\n' "$out" | tail -20
    return
  fi
  # A here-string, not a pipe: grep -q stops at the first match, and under pipefail the
  # writer's SIGPIPE (long outputs, as --config-only's) would fail the test.
  if ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "flashjit $*: no line matches /$pattern/"
    printf '%s\n' "$out" | tail -20
  fi
}

# gen: the features are in the key and in the generated source.
expect 0 'configuration: fwd_mma\.bf16\.d64\.dv64\.causal\.sm80\.win1024_0\.cap30\.alibi /' \
  gen --config-only --target sm_80 --head-dim 64 --causal --window 1024,0 --softcap 30 --alibi
expect 0 'kWindowLeft = -1, kWindowRight = 256' \
  gen --config-only --window -1,256
expect 0 '^#line 1 "score_mod"$' gen --config-only --score-mod "$mods/relative_bias.cu"
expect 0 'return score \+ args\.scalar\[0\]' gen --config-only --score-mod "$mods/relative_bias.cu"
expect 0 '^#line 1 "mask_mod"$' gen --config-only --mask-mod "$mods/document_mask.cu"
expect 0 '\.mask-[0-9a-f]{12} /' gen --config-only --mask-mod "$mods/prefix_lm.cu"
expect 0 'fwd_wgmma\.bf16\.d128\.dv128\.causal\.sm90a\.win256_0\.score-[0-9a-f]{12}' \
  gen --config-only --family fwd_wgmma --causal --window 256,0 --score-mod "$mods/relative_bias.cu"
# The whole source, written to a file, carries the user's text.
"$flashjit" gen --target sm_80 --mask-mod "$mods/prefix_lm.cu" -o "$dir/kernel.cu" >/dev/null 2>&1 ||
  fail "gen -o with --mask-mod"
grep -q 'args.integer\[0\]' "$dir/kernel.cu" 2>/dev/null || fail "gen -o: the mask_mod is not in the source"

# gen --compile: NVRTC compiles the example mods without spills.
expect 0 'tuner +accepts it' gen --compile --target sm_80 --head-dim 64 --mask-mod "$mods/prefix_lm.cu"
expect 0 'spills +0 B stored, 0 B loaded' \
  gen --compile --target sm_80 --head-dim 64 --causal --mask-mod "$mods/document_mask.cu"
expect 0 'tuner +accepts it' \
  gen --compile --family fwd_wgmma --head-dim 64 --causal --softcap 30 --score-mod "$mods/relative_bias.cu"

# User code that does not compile: NVRTC's log, naming the user's line.
printf 'float x = score * 2.0f;\nreturn x + ;\n' >"$dir/broken_score.cu"
expect 1 '^score_mod\(2\): error' gen --compile --target sm_80 --head-dim 64 --score-mod "$dir/broken_score.cu"
printf '// keeps all\nreturn ok;\n' >"$dir/broken_mask.cu"
expect 1 '^mask_mod\(2\): error: identifier "ok" is undefined' \
  gen --compile --target sm_80 --head-dim 64 --mask-mod "$dir/broken_mask.cu"

# Bad values and files: clear errors.
expect 1 "--window '1024': expected L,R" gen --config-only --window 1024
expect 1 "--window 'a,b': expected L,R" gen --config-only --window a,b
expect 1 'both sides unbounded' gen --config-only --window -1,-1
expect 1 'window sizes are -2 \(left\)' gen --config-only --window -2,0
expect 1 '--softcap nan: must be finite and > 0' gen --config-only --softcap nan
expect 1 '--softcap -3: must be finite and > 0' gen --config-only --softcap -3
expect 1 "--softcap 'abc': expected a number" gen --config-only --softcap abc
expect 1 "--score-mod $dir/missing\.cu: cannot read it" gen --config-only --score-mod "$dir/missing.cu"
expect 1 "--mask-mod $dir: cannot read it: it is a directory" gen --config-only --mask-mod "$dir"
: >"$dir/empty.cu"
expect 1 "--score-mod $dir/empty\.cu: the file is empty" gen --config-only --score-mod "$dir/empty.cu"

# The backward pass takes the features (0.9), not a score_mod; bwd_wgmma not softcap with
# ALiBi.
expect 0 'bwd_mma\.bf16\.d128\.dv128\.nocausal\.sm90a\.alibi' \
  gen --config-only --family bwd_mma --target sm_90a --alibi
expect 1 '--family bwd_mma: the backward pass does not take a score_mod' \
  gen --family bwd_mma --score-mod "$mods/relative_bias.cu"
expect 0 'bwd_wgmma\.bf16\.d128\.dv128\.nocausal\.sm90a\.alibi' \
  gen --config-only --family bwd_wgmma --target sm_90a --alibi
expect 0 'bwd_wgmma\.bf16\.d128\.dv128\.nocausal\.sm90a\.cap30' \
  gen --config-only --family bwd_wgmma --target sm_90a --softcap 30
expect 1 '--family bwd_wgmma: bwd_wgmma does not take softcap with alibi \(cap30\.alibi\)' \
  gen --family bwd_wgmma --target sm_90a --softcap 30 --alibi
expect 0 'bwd_mma\.bf16\.d64\.dv64\.causal\.sm80\.win128_0 +bm[0-9]+\.bn[0-9]+\.w[0-9]+\.s[0-9]+ +compiled' \
  tune --compile-only --targets sm_80 --head-dims 64 --dtypes bf16 --causal yes --backward \
  --window 128,0 --cache "$dir/t.sqlite"
expect 1 '--family bwd_mma: the backward pass does not take a score_mod' \
  bench --family bwd_mma --score-mod "$mods/relative_bias.cu"

# tune --compile-only: every spec of the sweep gets the features; a second run finds them.
sweep=(tune --compile-only --targets sm_80 --head-dims 64 --dtypes bf16 --causal yes
       --window 256,0 --mask-mod "$mods/prefix_lm.cu" --cache "$dir/c.sqlite")
expect 0 'fwd_mma\.bf16\.d64\.dv64\.causal\.sm80\.win256_0\.mask-[0-9a-f]{12} +bm[0-9]+\.bn[0-9]+\.w[0-9]+\.s[0-9]+ +compiled' \
  "${sweep[@]}"
expect 0 '1 items: 0 done now, 1 from the cache, 0 failed' "${sweep[@]}"
expect 1 "--window '7': expected L,R" tune --compile-only --head-dims 64 --window 7

# bench checks its options before it looks for a GPU; user code reading args.tensor
# cannot run there (bench has no tensors to give it).
expect 1 "--window 'x,1': expected L,R" bench --window x,1
expect 1 'not supported yet: the user code reads args\.tensor' \
  bench --mask-mod "$mods/document_mask.cu"
expect 1 'not supported yet: the user code reads args\.tensor, and bench-decode has' \
  bench-decode --mask-mod "$mods/document_mask.cu"

if [ "$failures" -ne 0 ]; then
  echo "features cli: $failures failure(s)"
  exit 1
fi
echo "features cli: ok"
