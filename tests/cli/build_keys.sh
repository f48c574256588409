# Sourced by the CLI tests: fail, and build_keys FLASHJIT, which sets `protocol` to that
# build's measurement protocol and `fingerprints` (an associative array, family -> hex) to
# its generator fingerprint per kernel family (what `flashjit info` prints): a tuning row
# is loaded only with the protocol and the fingerprint of its spec's family.
fail() { echo "FAIL: $*"; exit 1; }
declare -A fingerprints
build_keys() {
  local info family hex
  info=$("$1" info)
  protocol=$(sed -n 's/^Keys: *measurement protocol \([0-9]*\).*$/\1/p' <<<"$info")
  [ -n "${protocol:-}" ] || fail "flashjit info does not print the measurement protocol"
  while read -r family hex; do
    fingerprints[$family]=$hex
  done < <(sed -n 's/^ *generator \([a-z_]*\) *\([0-9a-f]\{64\}\)$/\1 \2/p' <<<"$info")
  for family in fwd_mma fwd_wgmma bwd_mma bwd_wgmma dec_mma; do
    [ -n "${fingerprints[$family]:-}" ] || fail "flashjit info does not print $family's generator"
  done
}
