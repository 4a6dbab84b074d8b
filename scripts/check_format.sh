#!/usr/bin/env bash
# Checks that every C++/CUDA source in the repository is formatted as .clang-format says (Debian's
# clang-format, installed by scripts/setup.sh). Prints the files that differ and exits 1 if any
# does. Fix with: bash scripts/check_format.sh --fix
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "check_format: $clang_format not found; install it with bash scripts/setup.sh" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.h' '*.hpp' '*.cpp' '*.cu' '*.cuh')
if [[ ${1:-} == --fix ]]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$clang_format" -i
  echo "check_format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]} > 0)); then
  printf 'check_format: not formatted: %s\n' "${bad[@]}"
  echo "check_format: ${#bad[@]} of ${#files[@]} files differ from .clang-format;" \
       "run bash scripts/check_format.sh --fix"
  exit 1
fi
echo "check_format: ${#files[@]} files formatted ($("$clang_format" --version | head -n 1))"
