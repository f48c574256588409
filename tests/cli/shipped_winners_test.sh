#!/usr/bin/env bash
# The winners the project ships (data/winners/*.json, the system cache's measured rows)
# are of this build's generator and measurement protocol. A row of another generator is
# a key no call of this build makes: the system cache would ship it unused, and the
# installed package would tune at first use again. The fingerprint covers every
# template's text, so a template change lands with data/winners re-tuned on the GPU
# (scripts/retune-winners.sh, docs/GPU-TESTING.md). That script, with no GPU visible
# (hidden here even on a GPU machine, so that the test never tunes), stops at its first
# sweep and writes no winners.
# Usage: shipped_winners_test.sh FLASHJIT WINNERS_DIR RETUNE_SCRIPT
set -euo pipefail
flashjit=$1
dir=$2
retune=$3
# shellcheck source=build_keys.sh
source "$(dirname "$0")/build_keys.sh"

build_keys "$flashjit"

files=("$dir"/*.json)
[ -e "${files[0]}" ] || fail "no winners in $dir"
for f in "${files[@]}"; do
  rows=$(grep -c '"generator_fingerprint"' "$f" || true)
  [ "$rows" -gt 0 ] || fail "$f holds no winners"
  current=$(grep -c "\"generator_fingerprint\": \"$fingerprint\"" "$f" || true)
  measured=$(grep -c "\"protocol_version\": $protocol\b" "$f" || true)
  [ "$current" -eq "$rows" ] ||
    fail "$f: $((rows - current)) of $rows rows are of another generator than this build's" \
         "(${fingerprint:0:12}); re-tune them on the GPU: scripts/retune-winners.sh"
  [ "$measured" -eq "$rows" ] ||
    fail "$f: $((rows - measured)) of $rows rows are of another measurement protocol than" \
         "this build's ($protocol); re-tune them on the GPU: scripts/retune-winners.sh"
  echo "$f: $rows rows of generator ${fingerprint:0:12}, protocol $protocol"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-retune-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
CUDA_VISIBLE_DEVICES= FLASHJIT_RETUNE_DB="$tmp/t.sqlite" "$retune" "$flashjit" "$tmp/w.json" \
  >"$tmp/log" 2>&1 && fail "retune-winners.sh succeeded without a GPU"
[ ! -e "$tmp/w.json" ] || fail "retune-winners.sh failed but left $tmp/w.json"
grep -q "no GPU to tune on" "$tmp/log" || fail "retune-winners.sh without a GPU: $(cat "$tmp/log")"
"$retune" 2>/dev/null && fail "retune-winners.sh without arguments succeeded"
echo "shipped winners: ok"
