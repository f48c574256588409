#!/usr/bin/env bash
# CI checks of the C API that need builds of their own (issue 5):
#   1. the libFuzzer target over the argument checking, 60 s from the kept corpus
#      (tests/fuzz/corpus/api), clang-14 + ASan/UBSan, 0 crashes;
#   2. the C API installed to a temporary prefix, and examples/ built against it with
#      find_package(flashjit), linking libflashjit.so and then libflashjit.a;
#   3. libflashjit.so exports only fj_* symbols (nm -D --defined-only), and
#      libflashjit.a defines no global symbol but fj_*.
# Usage: .ci/api_checks.sh [repo-root]. Reuses the build in $FLASHJIT_API_BUILD (default
# build/, what .ci/run just built) when it is configured, else configures build-ci-api/.
# FLASHJIT_FUZZ_SECONDS overrides the fuzzing time.
set -euo pipefail
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cd "$root"
fuzz_seconds=${FLASHJIT_FUZZ_SECONDS:-60}
jobs=${FLASHJIT_JOBS:-2}
scratch=$(mktemp -d /tmp/flashjit-api-checks.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "api_checks: FAIL: $*" >&2; exit 1; }
step() { echo "== api_checks: $*"; }

# clang-14 and libFuzzer (a fresh Debian 12 has neither).
need=()
command -v clang++-14 >/dev/null || need+=(clang-14)
dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
if ((${#need[@]})); then
  step "installing ${need[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# ---- 1. fuzzing ----------------------------------------------------------------------
step "fuzz_api_args: build"
fuzz_build=build-ci-api-fuzz
cmake -S . -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_FLAGS=-Wno-unknown-warning-option -DCMAKE_CXX_FLAGS=-Wno-unknown-warning-option \
  -DFLASHJIT_FUZZ=ON >"$scratch/fuzz-configure.log" 2>&1 ||
  { cat "$scratch/fuzz-configure.log"; fail "configuring the fuzz build"; }
cmake --build "$fuzz_build" --target fuzz_api_args -j "$jobs" ||
  fail "building fuzz_api_args"
step "fuzz_api_args: ${fuzz_seconds} s from tests/fuzz/corpus/api"
corpus=tests/fuzz/corpus/api
[ "$(ls "$corpus" | wc -l)" -gt 0 ] || fail "the kept corpus $corpus is empty"
mkdir -p "$scratch/corpus" "$scratch/artifacts"
# New inputs go to the scratch corpus (first directory); the kept one is read only.
if ! "$fuzz_build/bin/fuzz_api_args" -max_total_time="$fuzz_seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$scratch/artifacts/" \
    "$scratch/corpus" "$corpus" >"$scratch/fuzz.log" 2>&1; then
  tail -40 "$scratch/fuzz.log"
  for crash in "$scratch"/artifacts/*; do
    [ -f "$crash" ] && { echo "reproducer (base64) $crash:"; base64 -w0 "$crash"; echo; }
  done
  fail "fuzz_api_args found a crash (reproduce: $fuzz_build/bin/fuzz_api_args FILE)"
fi
grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$scratch/fuzz.log" || true

# ---- 2. install and build the example ------------------------------------------------
build=${FLASHJIT_API_BUILD:-build}
if [ ! -f "$build/CMakeCache.txt" ]; then
  build=build-ci-api
  step "configuring $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$scratch/configure.log" 2>&1 ||
    { cat "$scratch/configure.log"; fail "configuring $build"; }
fi
step "building libflashjit.so and libflashjit.a in $build"
cmake --build "$build" --target flashjit_shared flashjit_static -j "$jobs" ||
  fail "building the libraries"
prefix="$scratch/prefix"
step "installing the C API to $prefix"
cmake --install "$build" --prefix "$prefix" --component api >/dev/null ||
  fail "installing the api component"
for f in include/flashjit/flashjit.h lib/cmake/flashjit/flashjitConfig.cmake; do
  [ -f "$prefix/$f" ] || fail "the install lacks $f"
done
for linkage in shared static; do
  step "examples/ against the installed package ($linkage)"
  static=OFF; [ "$linkage" = static ] && static=ON
  cmake -S examples -B "$scratch/example-$linkage" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DFLASHJIT_EXAMPLE_STATIC=$static \
    -DCMAKE_C_FLAGS=-Werror >"$scratch/example-$linkage.log" 2>&1 ||
    { cat "$scratch/example-$linkage.log"; fail "configuring examples/ ($linkage)"; }
  cmake --build "$scratch/example-$linkage" ||
    fail "building examples/ against the installed package ($linkage)"
  # No GPU here: the program must start, and fail cleanly with a status, not crash.
  set +e
  "$scratch/example-$linkage/attention" >"$scratch/run-$linkage.log" 2>&1
  rc=$?
  set -e
  if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then
    cat "$scratch/run-$linkage.log"
    fail "the example ($linkage) died with status $rc"
  fi
  head -3 "$scratch/run-$linkage.log"
done

# ---- 3. exported symbols -------------------------------------------------------------
so=$(find "$prefix" -name 'libflashjit.so*' -type f | head -1)
[ -n "$so" ] || fail "no libflashjit.so installed"
step "exports of $(basename "$so")"
nm -D --defined-only "$so" | awk '{print $NF}' | sed 's/@.*//' >"$scratch/exports.txt"
[ -s "$scratch/exports.txt" ] || fail "libflashjit.so exports nothing"
if grep -v '^fj_' "$scratch/exports.txt"; then
  fail "libflashjit.so exports symbols not starting with fj_ (above)"
fi
echo "$(wc -l <"$scratch/exports.txt") symbols, all fj_*"
a="$prefix/lib/libflashjit.a"
[ -f "$a" ] || a=$(find "$prefix" -name libflashjit.a | head -1)
nm --defined-only -g "$a" 2>/dev/null | awk 'NF==3 {print $3}' >"$scratch/static.txt"
if grep -v '^fj_' "$scratch/static.txt"; then
  fail "libflashjit.a defines global symbols not starting with fj_ (above)"
fi
echo "libflashjit.a: $(wc -l <"$scratch/static.txt") global symbols, all fj_*"
step "all passed"
