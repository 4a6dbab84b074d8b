#!/usr/bin/env bash
# Configures and builds Ember with CMake and Ninja (Release) into build/ at the repository root.
# Environment: EMBER_CUDA_ARCH (default 90a: the H200, with its wgmma instructions), EMBER_BUILD_DIR
# (default build), EMBER_JOBS (default nproc). Extra arguments go to the CMake configure step, e.g.
#   bash scripts/build.sh -DEMBER_WITH_CUDA=OFF
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${EMBER_BUILD_DIR:-build}
cuda_arch=${EMBER_CUDA_ARCH:-90a}
jobs=${EMBER_JOBS:-$(nproc)}
# nvcc is not on PATH by default on these machines; CMake's check_language(CUDA) looks there.
if [[ -d /usr/local/cuda/bin && ":$PATH:" != *":/usr/local/cuda/bin:"* ]]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

echo "build: configuring $build_dir (Release, CUDA arch $cuda_arch)"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" "$@"
echo "build: building with $jobs jobs"
cmake --build "$build_dir" -j "$jobs"
