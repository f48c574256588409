#!/usr/bin/env bash
# Re-measures, on the GPU this runs on, the tuning winners the project ships in
# data/winners/<device key>.json: the same sweeps and protocol as the rows there, into a
# fresh cache, exported as JSON. Every template change alters the generator fingerprint,
# and with it the key of every row (each row then loads nowhere), so data/winners is
# re-tuned after each one; docs/GPU-TESTING.md.
#
# Usage: scripts/retune-winners.sh FLASHJIT OUT.json
#   FLASHJIT  the flashjit CLI of the build whose templates are being shipped
#   OUT.json  where the winners go; OUT.json.gz is written beside it (the JSON is ~18 MB,
#             over what a device machine sends back; the gzip is ~1 MB)
# Environment: FLASHJIT_RETUNE_DB (default: a fresh temporary file) keeps the cache.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 FLASHJIT OUT.json" >&2
  exit 2
fi
flashjit=$1
out=$2
db=${FLASHJIT_RETUNE_DB:-$(mktemp -u "${TMPDIR:-/tmp}/flashjit-retune.XXXXXX.sqlite")}
if [ -e "$db" ]; then
  echo "$0: $db exists; the winners must come from a fresh cache" >&2
  exit 2
fi

# The forward and backward families at one bucket per spec (q = k = 1024, 32 heads),
# FP8 forward included, at a 3 s budget per bucket: what data/winners holds.
"$flashjit" tune --head-dims 64,128,256 --dtypes bf16,fp16,e4m3 --causal both \
  --seqlens 1024 --batch-heads 32 --budget-s 3 --backward --cache "$db"
# Decode's default buckets (split count tuned with the tile), head dim 128.
"$flashjit" tune --family dec_mma --head-dims 128 --dtypes bf16,fp16 --causal both \
  --budget-s 3 --cache "$db"

"$flashjit" cache export --user "$db" --format json --out "$out"
gzip -9 -c "$out" > "$out.gz"
echo "$out and $out.gz written from $db"
