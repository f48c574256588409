#!/usr/bin/env bash
# Installs the Debian packages flashjit's build needs, if any is missing. The CUDA 13
# toolkit (headers, nvcc, libnvrtc) is expected in /usr/local/cuda; no driver is needed.
set -euo pipefail
packages=(cmake ninja-build g++ llvm-14-dev libsqlite3-dev sqlite3 libgtest-dev googletest
          zlib1g-dev libncurses-dev clang-14 libclang-rt-14-dev python3)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda_home/include/cuda.h" ] || [ ! -f "$cuda_home/include/nvrtc.h" ]; then
  echo "setup: the CUDA toolkit headers are missing ($cuda_home/include/cuda.h, nvrtc.h);" >&2
  echo "       install CUDA 13 or set CUDA_HOME" >&2
  exit 1
fi
