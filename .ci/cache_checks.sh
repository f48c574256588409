#!/usr/bin/env bash
# Cache checks under AddressSanitizer + UBSan: configures the checkout at $1 (default .)
# into a sanitizer build, builds only the cache tests, and runs the unit cache tests and
# the corruption stress test (>= 1,000 seeded mutations of a DB file, each opened as the
# user DB and as a shipped DB). About 5 minutes on 2 cores, most of it the build.
#   .ci/cache_checks.sh [SOURCE_DIR]      BUILD_DIR=... to choose the build directory
set -euo pipefail

source_dir=$(cd "${1:-.}" && pwd)
build_dir=${BUILD_DIR:-$source_dir/build-cache-ci-asan}
jobs=${JOBS:-2}

cmake -S "$source_dir" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DFLASHJIT_SANITIZE=ON >/dev/null
ninja -C "$build_dir" -j"$jobs" unit_cache stress_cache_corruption

# Any report fails the run; leaks count.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export FLASHJIT_CACHE=   # never touch the real user cache

"$build_dir/bin/unit_cache" --gtest_brief=1
"$build_dir/bin/stress_cache_corruption" --mutations "${MUTATIONS:-1000}" --seed "${SEED:-1}"
echo "cache checks passed"
