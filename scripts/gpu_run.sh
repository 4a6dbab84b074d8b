#!/usr/bin/env bash
# The one script run on the GPU machine (README, "GPU machine"): builds Ember for sm_90a into
# build-gpu/, runs every ctest suite (CPU, CUDA, distributed), then every benchmark: each
# build-gpu/bench/bench_<name> executable and each bench/<name>.py, paired by name so that Ember
# and PyTorch are measured in the same run. Every step runs even when an earlier one failed
# (except what needs a build that failed: the tests and the C++ benchmarks); the exit status is
# non-zero if any step failed or was skipped. Full logs go to $OUT (./out when unset), in few
# files because few come back:
#   build.log  environment, configure and build      test.log  ctest --output-on-failure
#   bench.log  everything the benchmarks printed     bench.jsonl  their JSON lines only
#   summary.txt  the environment, scripts/bench_report.py's Ember-vs-PyTorch table, then the
#                table of steps (printed last)
# Header-only dependencies missing there can be carried in .deps/ (bash scripts/pack_deps.sh).
# Environment: EMBER_GPU_STEPS (default "build test bench"; add "acceptance" for
# scripts/acceptance.sh, the GPU acceptance runs of issues 7 and 8, after the benchmarks, within
# what is left of the budget; its logs are acceptance.{log,jsonl,txt}; add "sanitize" for
# compute-sanitizer over the CUDA suites, scripts/gpu_sanitize.sh), EMBER_CTEST_ARGS (extra ctest
# arguments, e.g. "-L cuda -R conv"), EMBER_BENCH_FILTER (regex on benchmark names),
# EMBER_GPU_BUDGET_S (whole-script budget, default 570: the tool stops a command at 600 s),
# EMBER_BENCH_TIMEOUT_S (per benchmark, default 180), EMBER_JOBS (default 16).
set -uo pipefail  # not -e: a failing step is recorded and the next one still runs
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
repo=$PWD

out=${OUT:-$repo/out}
build_dir=${EMBER_GPU_BUILD_DIR:-build-gpu}
steps=${EMBER_GPU_STEPS:-build test bench}
ctest_args=${EMBER_CTEST_ARGS:-}
bench_filter=${EMBER_BENCH_FILTER:-.}
budget_s=${EMBER_GPU_BUDGET_S:-570}
bench_timeout_s=${EMBER_BENCH_TIMEOUT_S:-180}
jobs=${EMBER_JOBS:-16}

# NVLink multicast stays off on the shared GPU hosts (a program using it can take them down).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OUT=$out EMBER_BUILD_DIR=$repo/$build_dir
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"

mkdir -p "$out"
build_log=$out/build.log test_log=$out/test.log bench_log=$out/bench.log
bench_jsonl=$out/bench.jsonl summary=$out/summary.txt
: >"$build_log"; : >"$test_log"; : >"$bench_log"; : >"$bench_jsonl"; : >"$summary"
step_output=$(mktemp /tmp/gpu_run_step.XXXXXX)
environment=$(mktemp /tmp/gpu_run_env.XXXXXX)
trap 'rm -f "$step_output" "$environment"' EXIT

rows=()  # "name|status|seconds|note", one per step, for the table
any_failed=0

record() {  # record <name> <status> <seconds> <note>
  rows+=("$1|$2|$3|$4")
  [[ $2 == ok ]] || any_failed=1
  echo "[gpu_run] $1: $2 (${3}s)${4:+ - $4}"
}

# run_step <log> <limit_s> <excerpt: tail|errors> <command...>
# Runs the command under a time limit (never past the script's budget) with its output appended
# to <log> and kept in $step_output; sets step_status (ok, FAILED (exit N), TIMEOUT (Ns) or
# skipped) and step_seconds; on failure prints a short excerpt of the output.
run_step() {
  local log=$1 limit=$2 excerpt=$3
  shift 3
  local left=$((budget_s - SECONDS))
  step_seconds=0
  : >"$step_output"
  if ((left < 15)); then
    step_status="skipped (budget)"
    return 1
  fi
  ((limit > left)) && limit=$left
  local start=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >"$step_output" 2>&1 || rc=$?
  step_seconds=$((SECONDS - start))
  { printf '\n===== %s (exit %d, %ds)\n' "$*" "$rc" "$step_seconds"; cat "$step_output"; } >>"$log"
  if ((rc == 0)); then
    step_status=ok
    return 0
  fi
  step_status="FAILED (exit $rc)"
  ((rc == 124 || rc == 137)) && step_status="TIMEOUT (${limit}s)"
  echo "[gpu_run] --- '$*' failed; excerpt (full log: $(basename "$log")):"
  if [[ $excerpt == errors ]] && grep -q -E 'error|FAILED' "$step_output"; then
    grep -E -m 25 'error|FAILED' "$step_output" | cut -c1-300
  else
    tail -n 25 "$step_output" | cut -c1-300
  fi
  return 1
}

has_step() { [[ " $steps " == *" $1 "* ]]; }

# --- environment: what the results were measured on -------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
      sed 's/^/gpu: /'
  else
    echo "gpu: none (no nvidia-smi)"
  fi
  echo "nvcc: $(nvcc --version 2>&1 | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "g++: $(g++ -dumpfullversion 2>&1)"
  echo "cmake: $(cmake --version 2>&1 | head -n 1)"
  python_versions='import sys, torch
print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "python: $(python3 -c "$python_versions" 2>&1 | tail -n 1)"
  if [[ -d .deps/include ]]; then
    echo "deps: carried .deps/include: $(find .deps/include -mindepth 1 -maxdepth 1 -printf '%f ')"
  else
    echo "deps: system packages"
  fi
} >"$environment"
cat "$environment" >>"$build_log"
sed 's/^/[gpu_run] /' "$environment"

# --- build ---------------------------------------------------------------------------------------
cmake_args=(-S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a)
if [[ -d .deps/include ]]; then
  # Searched before the system's folders, so the carried headers win where both exist.
  cmake_args+=(-DCMAKE_PREFIX_PATH="$repo/.deps")
  [[ -d .deps/include/doctest ]] && cmake_args+=(-DDOCTEST_INCLUDE_DIR="$repo/.deps/include")
  export CPATH="$repo/.deps/include${CPATH:+:$CPATH}"
  # zlib: the runtime library is everywhere; its header may only be carried.
  if [[ ! -f /usr/include/zlib.h && -f .deps/include/zlib/zlib.h ]]; then
    libz=$(ls /usr/lib/x86_64-linux-gnu/libz.so /usr/lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -n 1)
    cmake_args+=(-DZLIB_INCLUDE_DIR="$repo/.deps/include/zlib" -DZLIB_LIBRARY="$libz")
  fi
fi
built=0
if has_step build; then
  run_step "$build_log" 300 errors cmake "${cmake_args[@]}"
  record configure "$step_status" "$step_seconds" ""
  if [[ $step_status == ok ]]; then
    run_step "$build_log" 540 errors cmake --build "$build_dir" -j "$jobs"
    record build "$step_status" "$step_seconds" "log: build.log"
    [[ $step_status == ok ]] && built=1
  fi
elif [[ -d $build_dir ]]; then
  built=1  # no build step asked for: use the tree an earlier call left on this machine
fi

# --- tests ---------------------------------------------------------------------------------------
if has_step test; then
  if ((built)); then
    # GPU suites hold the ctest resource lock "gpu", so -j parallelises the CPU suites only.
    # shellcheck disable=SC2086  # EMBER_CTEST_ARGS is a list of words on purpose
    run_step "$test_log" 420 tail ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" \
      $ctest_args
    note=$(grep -E 'tests passed|No tests were found' "$step_output" | tail -n 1)
    failed_tests=$(awk '/The following tests FAILED:/ {listing = 1; next}
                        listing && / - / {print $3}' "$step_output" | head -n 8 | tr '\n' ' ')
    skipped_tests=$(grep -c '(Skipped)$' "$step_output")
    ((skipped_tests > 0)) && note+="; $skipped_tests skipped"
    [[ -n $failed_tests ]] && note+="; failed: $failed_tests"
    record ctest "$step_status" "$step_seconds" "$note"
  else
    record ctest skipped 0 "no build"
  fi
fi

# --- compute-sanitizer over the CUDA suites, only when asked for ("sanitize" in EMBER_GPU_STEPS) --
# scripts/gpu_sanitize.sh runs each tool over each CUDA test file in parallel processes and prints
# a line per tool; its outputs go to sanitize.log.
if has_step sanitize; then
  if ((built)); then
    run_step "$out/sanitize_steps.log" $((budget_s - SECONDS)) tail \
      bash scripts/gpu_sanitize.sh "$build_dir" "$out"
    record sanitize "$step_status" "$step_seconds" "$(grep '^sanitize ' "$step_output" | tr '\n' ' ')"
  else
    record sanitize skipped 0 "no build"
  fi
fi

# --- benchmarks: Ember's executable, then the PyTorch script of the same name --------------------
if has_step bench; then
  names=$( { if ((built)); then find "$build_dir/bench" -maxdepth 1 -type f -perm -u+x \
               -name 'bench_*' 2>/dev/null | sed 's|.*/bench_||'; fi
             find bench -maxdepth 1 -name '*.py' 2>/dev/null | sed 's|.*/||; s|\.py$||'; } |
           sort -u | grep -E -- "$bench_filter")
  for name in $names; do
    for kind in cpp py; do
      if [[ $kind == cpp ]]; then
        if ! ((built)) || [[ ! -x $build_dir/bench/bench_$name ]]; then continue; fi
        label=bench_$name
        command=("$build_dir/bench/bench_$name")
      else
        [[ -f bench/$name.py ]] || continue
        label=$name.py
        command=(python3 "bench/$name.py")
      fi
      run_step "$bench_log" "$bench_timeout_s" tail "${command[@]}"
      json_lines=$(grep -c -E '^[[:space:]]*\{' "$step_output")
      grep -E '^[[:space:]]*\{' "$step_output" >>"$bench_jsonl"
      # A benchmark that reports nothing has measured nothing.
      [[ $step_status == ok ]] && ((json_lines == 0)) && step_status="FAILED (no JSON)"
      record "$label" "$step_status" "$step_seconds" "$json_lines JSON lines"
    done
  done
  [[ -n $names ]] || echo "[gpu_run] no benchmarks found (bench/*.cpp, bench/*.py)"
fi

# --- acceptance runs (issues 7 and 8), only when asked for -----------------------------------------
if has_step acceptance; then
  if ((built)); then
    # The script keeps to its own budget (each part under timeout); this limit is the backstop.
    EMBER_ACCEPT_BUDGET_S=$((budget_s - SECONDS - 20)) run_step "$bench_log" $((budget_s - SECONDS)) tail \
      bash scripts/acceptance.sh
    record acceptance "$step_status" "$step_seconds" "$(tail -n 1 "$step_output"); table: acceptance.txt"
  else
    record acceptance skipped 0 "no build"
  fi
fi

# --- summary -------------------------------------------------------------------------------------
{
  cat "$environment"
  echo
  # Ember vs PyTorch side by side, from this run's JSON lines.
  if [[ -s $bench_jsonl && -f scripts/bench_report.py ]]; then
    python3 scripts/bench_report.py "$bench_jsonl" 2>&1 | head -n 60
    echo
  fi
  if has_step acceptance && [[ -s $out/acceptance.txt ]]; then
    cat "$out/acceptance.txt"
    echo
  fi
  printf '%-32s %-18s %6s  %s\n' step status seconds note
  for row in "${rows[@]}"; do
    IFS='|' read -r name status seconds note <<<"$row"
    printf '%-32s %-18s %6s  %s\n' "$name" "$status" "$seconds" "$note"
  done
  echo
  if ((any_failed)); then verdict=FAILED; else verdict="all ok"; fi
  echo "gpu_run: $verdict (total ${SECONDS}s)"
  echo "logs in $out: $(find "$out" -mindepth 1 -maxdepth 1 -printf '%f ')"
} >"$summary"
echo
cat "$summary"
exit "$any_failed"
