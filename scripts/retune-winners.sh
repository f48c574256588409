#!/usr/bin/env bash
# Re-measures, on the GPU this runs on, the tuning winners the project ships in
# data/winners/<device key>.json: the same sweeps and protocol as the rows there, into a
# fresh cache, exported as JSON. A row is keyed by the fingerprint of its family's
# templates, so a template change leaves the rows of the families that embed it stale
# (they load nowhere) and the others current; docs/GPU-TESTING.md.
#
# Usage: scripts/retune-winners.sh FLASHJIT OUT.json [OLD.json]
#   FLASHJIT  the flashjit CLI of the build whose templates are being shipped
#   OUT.json  where the winners go; OUT.json.gz is written beside it (the JSON is ~18 MB,
#             over what a device machine sends back; the gzip is ~1 MB)
#   OLD.json  the winners file to bring up to date: its current rows are kept as they
#             are, rows of another generator whose code this build compiles unchanged are
#             carried over (`cache merge --carry`, tuner/carry_winners.h), and only the
#             families with rows left are re-tuned. Without it, every family is re-tuned.
# Every row written is stamped with the code it covers, so that a later template change
# carries the rows whose code it leaves alone.
# Environment: FLASHJIT_RETUNE_DB (default: a fresh temporary file) keeps the cache.
# FLASHJIT_RETUNE_FAMILIES (with OLD.json): families to re-tune although their rows are
# current, e.g. those a carry left out rows of (every row of such a family is measured
# again; the faster of the old and the new row of a key is kept).
set -euo pipefail

if [ $# -ne 2 ] && [ $# -ne 3 ]; then
  echo "usage: $0 FLASHJIT OUT.json [OLD.json]" >&2
  exit 2
fi
flashjit=$1
out=$2
old=${3:-}
db=${FLASHJIT_RETUNE_DB:-$(mktemp -u "${TMPDIR:-/tmp}/flashjit-retune.XXXXXX.sqlite")}
if [ -e "$db" ]; then
  echo "$0: $db exists; the winners must come from a fresh cache" >&2
  exit 2
fi

# The winners are measured in the default mode: a FLASHJIT_TUNE=heuristic left in the
# environment (as the GPU tests set it) would make every sweep refuse to run.
unset FLASHJIT_TUNE

# What data/winners holds: one bucket per spec (q = k = 1024, 32 heads) at a 3 s budget
# per bucket for the forward (FP8 included) and backward families; decode's default
# buckets (split count tuned with the tile) at head dim 128, over 16-bit and FP8 caches
# (e4m3: bf16 q and o; added in 0.12, so files tuned before have no such rows).
# Since bw13 (docs/PERF.md) also fwd_wgmma's length ladder in 16 bits: N 512..16384 at
# 16k tokens a step with heads x head dim = 2048 (the peers' shapes), what a handle without
# a length hint tunes (72 rows, about 3 minutes on an H200).
bucket=(--causal both --seqlens 1024 --batch-heads 32 --budget-s 3 --cache "$db")
fwd_wgmma_ladder() {
  for dh in 64:32 128:16 256:8; do
    "$flashjit" tune --family fwd_wgmma --head-dims "${dh%:*}" --ladder-heads "${dh#*:}" \
      --dtypes bf16,fp16 --causal both --budget-s 3 --cache "$db"
  done
}
tune_family() {
  case $1 in
    fwd_wgmma) "$flashjit" tune --family fwd_wgmma --head-dims 64,128,256 --dtypes bf16,fp16,e4m3 \
                 "${bucket[@]}"
               fwd_wgmma_ladder ;;
    fwd_mma) "$flashjit" tune --family fwd_mma --head-dims 64,128,256 --dtypes bf16,fp16 \
                 "${bucket[@]}" ;;
    # Since bw16 also the padded head dims 96 and 192 (docs/PERF.md).
    bwd_wgmma) "$flashjit" tune --family bwd_wgmma --head-dims 64,96,128,192,256 --dtypes bf16,fp16 \
                 "${bucket[@]}" ;;
    dec_mma) "$flashjit" tune --family dec_mma --head-dims 128 --dtypes bf16,fp16,e4m3 --causal both \
                 --budget-s 3 --cache "$db" ;;
    *) echo "$0: no sweep for $1's rows" >&2; exit 2 ;;
  esac
}

if [ -z "$old" ]; then
  "$flashjit" tune --head-dims 64,128,256 --dtypes bf16,fp16,e4m3 --backward "${bucket[@]}"
  fwd_wgmma_ladder
  tune_family dec_mma
  "$flashjit" cache export --user "$db" --format json --out "$out"
  "$flashjit" cache merge --format json --carry "$out" --out "$out"
else
  kept=$(mktemp "${TMPDIR:-/tmp}/flashjit-retune-kept.XXXXXX.json")
  fresh=$(mktemp "${TMPDIR:-/tmp}/flashjit-retune-fresh.XXXXXX.json")
  trap 'rm -f "$kept" "$fresh"' EXIT
  report=$("$flashjit" cache merge --format json --carry "$old" --out "$kept")
  echo "$report"
  stale=$(sed -n 's/^stale families: //p' <<<"$report")
  stale=$(tr ' ' '\n' <<<"$stale ${FLASHJIT_RETUNE_FAMILIES:-}" | sed '/^$/d' | sort -u | tr '\n' ' ')
  stale=${stale% }
  if [ -z "$stale" ]; then
    echo "$old: every row is current; nothing to re-tune"
    cp "$kept" "$out"
  else
    for family in $stale; do
      echo "== re-tuning $family"
      tune_family "$family"
    done
    "$flashjit" cache export --user "$db" --format json --out "$fresh"
    "$flashjit" cache merge --format json --carry "$kept" "$fresh" --out "$out"
  fi
fi
gzip -9 -c "$out" > "$out.gz"
echo "$out and $out.gz written from $db"
