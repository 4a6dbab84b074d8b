#!/usr/bin/env bash
# Fills .deps/ (git-ignored) with Ember's header-only dependencies, copied from this machine's
# Debian packages, so they can be carried to the GPU machine, which has no network and may lack
# them. .deps/ is laid out as an install prefix that CMake can search (scripts/gpu_run.sh passes
# -DCMAKE_PREFIX_PATH=.deps):
#   .deps/include/{eigen3,nlohmann,doctest,CLI}      headers
#   .deps/share/eigen3/cmake, .deps/share/cmake/...  the packages' CMake configs, which locate the
#                                                    headers relative to themselves
# doctest's Debian config names /usr literally, so it is left out: gpu_run.sh passes
# -DDOCTEST_INCLUDE_DIR=.deps/include instead. Run `bash scripts/setup.sh` first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dest=.deps
rm -rf "$dest"
missing=()
copy_tree() {  # copy_tree <source folder> <destination folder>
  if [[ -d "$1" ]]; then
    mkdir -p "$(dirname "$2")"
    cp -RL "$1" "$2"  # -L: carry files, not links into this machine's /usr
  else
    missing+=("$1")
  fi
}

copy_tree /usr/include/eigen3 "$dest/include/eigen3"
copy_tree /usr/include/nlohmann "$dest/include/nlohmann"
copy_tree /usr/include/doctest "$dest/include/doctest"
copy_tree /usr/include/CLI "$dest/include/CLI"
# zlib's headers, for a machine that has the library (libz.so.1) but not its -dev package.
mkdir -p "$dest/include/zlib"
cp -L /usr/include/zlib.h /usr/include/zconf.h "$dest/include/zlib/"
copy_tree /usr/share/eigen3/cmake "$dest/share/eigen3/cmake"
copy_tree /usr/share/cmake/nlohmann_json "$dest/share/cmake/nlohmann_json"
copy_tree /usr/share/cmake/CLI11 "$dest/share/cmake/CLI11"

if ((${#missing[@]} > 0)); then
  echo "pack_deps: not found: ${missing[*]} (run bash scripts/setup.sh first)" >&2
  exit 1
fi
echo "pack_deps: filled $dest ($(du -sh "$dest" | cut -f1)); carry it: run(..., carry=[\".deps\"])"
