#!/usr/bin/env bash
# Installs the Debian packages Ember needs to build, test and run its examples. Idempotent: when
# every package is already installed it checks with dpkg-query and never touches apt. Works as
# root, or through sudo otherwise. CUDA is not installed here: it comes with the machine
# (nvcc in /usr/local/cuda/bin); this script only reports whether it was found.
set -euo pipefail

# Build tools, header-only and MPI dependencies, then the data the examples train on
# (Fashion-MNIST for the ResNet example, fortune cookies as text for the LSTM example); pkgconf
# for the pkg-config check of the installed package (scripts/check_package.sh).
packages=(
  cmake ninja-build g++ clang-format python3 clang libclang-rt-dev doxygen
  libeigen3-dev doctest-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libopenblas-dev
  libpng-dev libjpeg62-turbo-dev
  libopenmpi-dev openmpi-bin pkgconf
  gnuplot-nox dataset-fashion-mnist
)

say() { echo "setup: $*"; }

is_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" == installed ]]
}

missing=()
for pkg in "${packages[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done
# The full fortune collection when the archive has it, the minimal one otherwise; either will do.
fortunes_present=false
if is_installed fortunes || is_installed fortunes-min; then fortunes_present=true; fi

if ((${#missing[@]} == 0)) && $fortunes_present; then
  say "all ${#packages[@]} packages and fortunes already installed; apt not needed"
else
  if [[ $(id -u) -eq 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    $fortunes_present || missing+=("fortunes (or fortunes-min)")
    say "not root and no sudo; install by hand: ${missing[*]}" >&2
    exit 1
  fi
  apt_get=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q
           -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  say "apt-get update"
  # A mirror can fail transiently; one retry costs little compared with a failed CI run.
  "${apt_get[@]}" update || { sleep 5; "${apt_get[@]}" update; }
  if ! $fortunes_present; then
    candidate=$(apt-cache policy fortunes 2>/dev/null | awk '/Candidate:/ {print $2}' || true)
    if [[ -n "$candidate" && "$candidate" != "(none)" ]]; then
      missing+=(fortunes)
    else
      say "package fortunes not in the archive; using fortunes-min"
      missing+=(fortunes-min)
    fi
  fi
  say "installing: ${missing[*]}"
  "${apt_get[@]}" install --no-install-recommends "${missing[@]}"
fi

# CUDA: found when nvcc is on PATH or in the toolkit's usual place.
nvcc_path=$(command -v nvcc || true)
if [[ -z "$nvcc_path" && -x /usr/local/cuda/bin/nvcc ]]; then nvcc_path=/usr/local/cuda/bin/nvcc; fi
if [[ -n "$nvcc_path" ]]; then
  say "CUDA found: $nvcc_path ($("$nvcc_path" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
else
  say "CUDA not found (no nvcc on PATH or in /usr/local/cuda/bin): Ember builds CPU-only"
fi
