#!/usr/bin/env bash
# The winners the project ships (data/winners/*.json, the system cache's measured rows)
# are of this build's generator and measurement protocol. A row of another generator is
# a key no call of this build makes: the system cache would ship it unused, and the
# installed package would tune at first use again. A row carries the fingerprint of its
# family's templates, so a template change lands with that family's rows re-tuned on the
# GPU (scripts/retune-winners.sh with the old file re-tunes only the stale families,
# docs/GPU-TESTING.md). That script, with no GPU visible (hidden here even on a GPU
# machine, so that the test never tunes), stops at its first sweep and writes no winners.
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
expected=$(for family in "${!fingerprints[@]}"; do echo "$family ${fingerprints[$family]}"; done)
for f in "${files[@]}"; do
  # A row's own fields are indented by six spaces (the candidates' deeper); the
  # exporter sorts them, so each row's generator_fingerprint comes before its spec.
  rows=$(grep -cE '^      "spec": ' "$f" || true)
  [ "$rows" -gt 0 ] || fail "$f holds no winners"
  stale=$(grep -E '^      "(generator_fingerprint|spec)": ' "$f" | awk -v expected="$expected" '
    BEGIN { n = split(expected, lines, "\n")
            for (i = 1; i <= n; ++i) { split(lines[i], kv, " "); want[kv[1]] = kv[2] } }
    { gsub(/[",]/, "", $2) }
    $1 ~ /generator_fingerprint/ { have = $2; next }
    { family = $2; sub(/\..*/, "", family)
      if (have != want[family]) { stale[family]++; total++ } }
    END { for (family in stale) printf "%s%s (%d rows)", (sep++ ? ", " : ""), family, stale[family]
          if (!total) printf "none" }')
  measured=$(grep -c "\"protocol_version\": $protocol\b" "$f" || true)
  [ "$stale" = none ] ||
    fail "$f: rows of another generator than this build's for $stale; re-tune them on the" \
         "GPU: scripts/retune-winners.sh FLASHJIT OUT.json $f"
  [ "$measured" -eq "$rows" ] ||
    fail "$f: $((rows - measured)) of $rows rows are of another measurement protocol than" \
         "this build's ($protocol); re-tune them on the GPU: scripts/retune-winners.sh"
  # A tune that timed one tile and skipped the others for its budget shipped heuristic
  # mode's pick as a winner (PERF.md t1: every fwd_wgmma row up to 0.11.0). Skipped split
  # counts (decode) are cut by design, and a row whose own timing ran out screened more.
  starved=$(python3 - "$f" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["winners"]
for r in rows:
    tiles = [c for c in r["candidates"]["candidates"] if not c.get("splits")]
    timed = sum(c["fate"] in ("screened", "timed") for c in tiles)
    skipped = sum(c["fate"] == "skipped-budget" for c in tiles)
    if timed == 1 and skipped:
        print(r["spec"], r["bucket"])
PY
)
  [ -z "$starved" ] ||
    fail "$f: rows that timed one tile and skipped the rest for the budget (re-tune them):" \
         "$starved"
  # A row without a code stamp cannot be carried past a template change that leaves its
  # code alone (tuner/carry_winners.h): it would be re-tuned on its GPU for nothing.
  stamped=$(grep -cE '^      "code_sha256": "[0-9a-f]{64}"' "$f" || true)
  [ "$stamped" -eq "$rows" ] ||
    fail "$f: $((rows - stamped)) of $rows rows have no code stamp; stamp them (no GPU needed):" \
         "flashjit cache merge --format json --carry $f --out $f"
  echo "$f: $rows rows, each of its family's generator, protocol $protocol, none starved," \
       "all stamped"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flashjit-retune-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
CUDA_VISIBLE_DEVICES= FLASHJIT_RETUNE_DB="$tmp/t.sqlite" "$retune" "$flashjit" "$tmp/w.json" \
  >"$tmp/log" 2>&1 && fail "retune-winners.sh succeeded without a GPU"
[ ! -e "$tmp/w.json" ] || fail "retune-winners.sh failed but left $tmp/w.json"
grep -q "no GPU to tune on" "$tmp/log" || fail "retune-winners.sh without a GPU: $(cat "$tmp/log")"
"$retune" 2>/dev/null && fail "retune-winners.sh without arguments succeeded"

# Bringing a file up to date: its current rows are kept byte for byte, and only the
# families with stale rows are re-tuned (here: one family's rows made stale, and the
# script stops at that family's sweep for want of a GPU).
f=${files[0]}
"$flashjit" cache merge --format json --current-only "$f" --out "$tmp/same.json" >"$tmp/log" ||
  fail "merge --current-only: $(cat "$tmp/log")"
cmp -s "$f" "$tmp/same.json" || fail "merge --current-only of a current file changed it"
CUDA_VISIBLE_DEVICES= "$retune" "$flashjit" "$tmp/same2.json" "$f" >"$tmp/log" 2>&1 ||
  fail "retune-winners.sh of a current file: $(cat "$tmp/log")"
grep -q "nothing to re-tune" "$tmp/log" || fail "a current file was re-tuned: $(cat "$tmp/log")"
cmp -s "$f" "$tmp/same2.json" || fail "retune-winners.sh of a current file changed it"
family=$(grep -m1 -E '^      "spec": ' "$f" | sed 's/.*"spec": "\([a-z_]*\)\..*/\1/')
# That family's rows of another generator and without code stamps: not carried, re-tuned.
python3 - "$f" "$family" "$tmp/old.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
for row in data["winners"]:
    if row["spec"].split(".")[0] == sys.argv[2]:
        row["generator_fingerprint"] = "0" * 64
        row.pop("code_sha256", None)
json.dump(data, open(sys.argv[3], "w"), indent=2)
PY
CUDA_VISIBLE_DEVICES= "$retune" "$flashjit" "$tmp/w3.json" "$tmp/old.json" >"$tmp/log" 2>&1 &&
  fail "retune-winners.sh of a stale file succeeded without a GPU"
grep -q "^stale families: $family\$" "$tmp/log" || fail "stale families not named: $(cat "$tmp/log")"
grep -q "== re-tuning $family" "$tmp/log" || fail "$family was not re-tuned: $(cat "$tmp/log")"
[ "$(grep -c '== re-tuning' "$tmp/log")" -eq 1 ] || fail "more than $family re-tuned"
[ ! -e "$tmp/w3.json" ] || fail "retune-winners.sh failed but left $tmp/w3.json"
# Carrying across a template change (tuner/carry_winners.h), without a GPU: a row of
# another generator whose code is this build's is carried; with another code stamp it
# is left out, named, and its family listed as stale.
python3 - "$f" "$tmp/carry.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
row = next(r for r in data["winners"] if r["spec"] == "fwd_mma.bf16.d64.dv64.nocausal.sm90a")
same, changed = dict(row), dict(row)
same["generator_fingerprint"] = changed["generator_fingerprint"] = "0" * 64
# As measured by generator 0...0: a shipped row carried before names its own origin.
same.pop("carried_from", None)
changed.pop("carried_from", None)
changed["bucket"] = "q2048.k2048.bh32"
changed["code_sha256"] = "f" * 64
data["winners"] = [same, changed]
json.dump(data, open(sys.argv[2], "w"), indent=2)
PY
"$flashjit" cache merge --format json --carry "$tmp/carry.json" --out "$tmp/carried.json" \
  >"$tmp/log" 2>"$tmp/progress" || fail "merge --carry: $(cat "$tmp/log" "$tmp/progress")"
grep -q "carried to this generator, their code unchanged: fwd_mma (1 rows)" "$tmp/log" ||
  fail "merge --carry did not carry the unchanged row: $(cat "$tmp/log")"
grep -q "q2048.k2048.bh32: left out: its code changed" "$tmp/log" ||
  fail "merge --carry did not name the changed row: $(cat "$tmp/log")"
grep -q "^stale families: fwd_mma$" "$tmp/log" || fail "no stale family: $(cat "$tmp/log")"
grep -q "\"generator_fingerprint\": \"${fingerprints[fwd_mma]}\"" "$tmp/carried.json" ||
  fail "the carried row does not have this build's fingerprint"
grep -q "\"carried_from\": \"$(printf '0%.0s' {1..64})\"" "$tmp/carried.json" ||
  fail "the carried row does not name the generator it was measured with"
[ "$(grep -cE '^      "spec": ' "$tmp/carried.json")" -eq 1 ] || fail "merge --carry kept the changed row"
echo "shipped winners: ok"
