# Sourced by the CLI tests: fail, and build_keys FLASHJIT, which sets `fingerprint` and
# `protocol` to the generator fingerprint and measurement protocol of that build's keys
# (what `flashjit info` prints), the two fields a tuning row must match to be loaded.
fail() { echo "FAIL: $*"; exit 1; }
build_keys() {
  local keys
  keys=$("$1" info | sed -n 's/^Keys: *generator \([0-9a-f]*\), measurement protocol \([0-9]*\)$/\1 \2/p')
  read -r fingerprint protocol <<<"$keys"
  [ -n "${protocol:-}" ] || fail "flashjit info does not print the generator and protocol"
}
