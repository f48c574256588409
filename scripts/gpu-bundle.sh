#!/usr/bin/env bash
# Copies the binaries that run on a GPU machine into .gpu/ (git-ignored), stripped, so
# they can travel with a checkout to a machine that has a GPU but no LLVM or SQLite.
# Usage: scripts/gpu-bundle.sh [build-dir]
set -euo pipefail
build=${1:-build}
mkdir -p .gpu
for f in gpu_tests flashjit; do
  cp "$build/bin/$f" .gpu/
done
if [ -f "$build/api/libflashjit.so" ]; then cp "$build/api/libflashjit.so" .gpu/; fi
strip .gpu/* 2>/dev/null || true
du -sh .gpu
