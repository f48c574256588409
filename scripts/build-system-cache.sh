#!/usr/bin/env bash
# Builds the system cache that is installed with flashjit (share/flashjit/system.sqlite):
#   1. the deviceless sweep: the default tile of every default spec, forward, backward and
#      decode, compiled for sm_80, sm_86, sm_89 and sm_90a (`flashjit tune --compile-only`);
#   2. the tuning winners the project measured on GPUs (data/winners/*.json), each tile
#      compiled here, each row kept as measured; rows of an older generator are skipped;
#   3. written by `flashjit cache merge` (journal mode DELETE, readable in a read-only
#      directory) and checked by `flashjit cache verify`.
# Usage: scripts/build-system-cache.sh FLASHJIT OUT [WINNERS.json...]
# FLASHJIT_SYSTEM_CACHE_ARGS: other `flashjit tune` options for step 1 (e.g. --targets
# sm_90a); FLASHJIT_JOBS: compile threads (default: one per core).
# CMake runs it when configured with -DFLASHJIT_SYSTEM_CACHE=ON.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 FLASHJIT OUT [WINNERS.json...]" >&2
  exit 2
fi
flashjit=$1
out=$2
shift 2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-system-cache.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

winners=()
for file in "$@"; do winners+=(--winners "$file"); done
jobs=()
[ -n "${FLASHJIT_JOBS:-}" ] && jobs=(--jobs "$FLASHJIT_JOBS")
# shellcheck disable=SC2086 # FLASHJIT_SYSTEM_CACHE_ARGS is a list of options
FLASHJIT_SYSTEM_CACHE= FLASHJIT_CACHE="$scratch/sweep.sqlite" \
  "$flashjit" tune --compile-only --backward --decode --cache "$scratch/sweep.sqlite" \
  "${jobs[@]}" "${winners[@]}" ${FLASHJIT_SYSTEM_CACHE_ARGS:-} >"$scratch/tune.log" 2>&1 ||
  { cat "$scratch/tune.log" >&2; echo "$0: the sweep failed" >&2; exit 1; }
grep -E "^[0-9]+ items:|^winners " "$scratch/tune.log" || true
grep -E "^flashjit tune: note: .*stale" "$scratch/tune.log" | head -5 || true

mkdir -p "$(dirname "$out")"
FLASHJIT_SYSTEM_CACHE= "$flashjit" cache merge "$scratch/sweep.sqlite" --out "$out"
FLASHJIT_SYSTEM_CACHE= "$flashjit" cache verify "$out"
