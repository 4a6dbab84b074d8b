#!/usr/bin/env bash
# compute-sanitizer over the CUDA test suites (issue 31), run by scripts/gpu_run.sh's "sanitize"
# step or by hand on the GPU machine:  bash scripts/gpu_sanitize.sh BUILD_DIR OUT_DIR
# Each (tool, suite) pair is one process: compute-sanitizer --tool T --error-exitcode 1 over
# ember_tests_cuda --source-file=*/cuda/<suite>.cpp; pairs run EMBER_SANITIZE_JOBS at a time
# (default 8: the GPU has room for several small test processes, and the tools are host-bound).
# The cases that run out of memory on purpose are excluded (a failed cudaMalloc is an error to
# memcheck). Prints one line per tool: suites clean, errors counted, failures and timeouts; the
# outputs of all pairs go to OUT_DIR/sanitize.log. Exits 1 unless every pair ran clean.
# Environment: EMBER_SANITIZE_TOOLS (default "memcheck racecheck synccheck initcheck"),
# EMBER_SANITIZE_FILTER (regex on suite names), EMBER_SANITIZE_TIMEOUT_S (per pair, default 300),
# EMBER_SANITIZE_BUDGET_S (whole run, default 3600: pairs not started by then are "not run", and
# a pair never runs past it).
set -uo pipefail
build=${1:?usage: gpu_sanitize.sh BUILD_DIR OUT_DIR}
out=${2:?usage: gpu_sanitize.sh BUILD_DIR OUT_DIR}
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
exe=$build/tests/ember_tests_cuda
[[ -x $exe ]] || { echo "sanitize: no $exe (build the CUDA tests first)"; exit 1; }
command -v compute-sanitizer >/dev/null || { echo "sanitize: compute-sanitizer not found"; exit 1; }
tools=${EMBER_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}
timeout_s=${EMBER_SANITIZE_TIMEOUT_S:-300}
jobs=${EMBER_SANITIZE_JOBS:-8}
exclude='*out of memory throws alloc_failed*,*a failed cudaMalloc releases the cache*'
work=$(mktemp -d /tmp/ember_sanitize.XXXXXX)
suites=$(find tests/cuda -maxdepth 1 -name '*.cpp' -printf '%f\n' | sed 's/\.cpp$//' | sort |
         grep -E -- "${EMBER_SANITIZE_FILTER:-.}")

deadline=$(($(date +%s) + ${EMBER_SANITIZE_BUDGET_S:-3600}))
run_pair() {  # run_pair <tool> <suite>: writes $work/<tool>.<suite>.{log,rc}
  local tool=$1 suite=$2 rc=0 limit=$timeout_s left=$((deadline - $(date +%s)))
  if ((left < 10)); then
    echo "not run: the sanitize budget was spent" >"$work/$tool.$suite.log"
    echo "not run" >"$work/$tool.$suite.rc"
    return
  fi
  ((limit > left)) && limit=$left
  timeout --kill-after=10 "$limit" compute-sanitizer --tool "$tool" --error-exitcode 1 \
    "$exe" --source-file="*/cuda/$suite.cpp" --no-intro=true --test-case-exclude="$exclude" \
    >"$work/$tool.$suite.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$tool.$suite.rc"
}
export -f run_pair
export exe exclude timeout_s work deadline
for tool in $tools; do for suite in $suites; do echo "$tool $suite"; done; done |
  xargs -P "$jobs" -n 2 bash -c 'run_pair "$0" "$1"'

status=0
: >"$out/sanitize.log"
for tool in $tools; do
  clean=0 errors=0 bad=""
  for suite in $suites; do
    log=$work/$tool.$suite.log rc=$(cat "$work/$tool.$suite.rc" 2>/dev/null || echo missing)
    { printf '\n===== %s %s (exit %s)\n' "$tool" "$suite" "$rc"; cat "$log"; } >>"$out/sanitize.log"
    n=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    errors=$((errors + ${n:-0}))
    if [[ $rc == 0 ]]; then
      clean=$((clean + 1))
    else
      [[ $rc == 124 || $rc == 137 ]] && rc="timeout ${timeout_s}s"
      bad+=" $suite(${n:-?} errors, exit $rc)"
      status=1
    fi
  done
  echo "sanitize $tool: $clean/$(wc -w <<<"$suites") suites clean, $errors errors${bad:+; not clean:$bad}"
done
rm -rf "$work"
exit $status
