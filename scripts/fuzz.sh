#!/usr/bin/env bash
# Fuzzes Ember's file readers with libFuzzer (targets in tests/fuzz/, seeds in tests/fuzz/corpus/).
#   scripts/fuzz.sh [seconds] [target...]   build, then run each target for `seconds` (default 60)
#   scripts/fuzz.sh --seeds                 rewrite tests/fuzz/corpus/<target>/ (files Ember makes)
# Targets: safetensors checkpoint idx cifar text algo_cache (default: all); "fuzz_idx" works too.
# The build (clang, ASan+UBSan, -DEMBER_BUILD_FUZZERS=ON, CPU only) goes to build-fuzz/ or
# $EMBER_FUZZ_BUILD_DIR; scripts/sanitize.sh asan reuses it. Each run grows a working corpus in
# <build>/fuzz-corpus/<target>/ (the committed seeds are only read) and writes crashing inputs to
# <build>/fuzz-artifacts/<target>/. Prints one line per target with its executions and exec/s, the
# log tail of any failure, and exits non-zero when a target crashed, leaked, timed out or ran out
# of memory. Environment: EMBER_JOBS (build jobs), EMBER_FUZZ_TIMEOUT_S (one input, default 10),
# EMBER_FUZZ_RSS_MB (default 2048), EMBER_FUZZ_ARGS (more libFuzzer flags; e.g. a long run of 10
# million inputs: EMBER_FUZZ_ARGS=-runs=10000000 scripts/fuzz.sh 86400 checkpoint), and
# ASAN_OPTIONS / UBSAN_OPTIONS, which win over the defaults below (UBSAN_OPTIONS=halt_on_error=0
# fuzzes past a known UBSan finding). Findings so far: tests/fuzz/crashes-found.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
build=${EMBER_FUZZ_BUILD_DIR:-$repo/build-fuzz}
jobs=${EMBER_JOBS:-$(nproc)}
all_targets=()
for f in tests/fuzz/fuzz_*.cpp; do
  n=$(basename "$f" .cpp)
  all_targets+=("${n#fuzz_}")
done

configure() {
  local cxx=${EMBER_FUZZ_CXX:-clang++}
  command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (apt-get install clang libclang-rt-dev)"; exit 2; }
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  if [[ ! -f $build/build.ninja ]]; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
      -DEMBER_BUILD_FUZZERS=ON -DEMBER_WITH_CUDA=OFF -DEMBER_BUILD_BENCH=OFF \
      -DEMBER_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
  fi
}

if [[ ${1:-} == --seeds ]]; then
  configure
  ninja -C "$build" -j "$jobs" "${all_targets[@]/#/fuzz_}"
  for t in "${all_targets[@]}"; do
    rm -rf "tests/fuzz/corpus/$t"
    EMBER_FUZZ_WRITE_SEEDS="$repo/tests/fuzz/corpus/$t" "$build/tests/fuzz/fuzz_$t"
    echo "fuzz: seeds of $t: $(ls "tests/fuzz/corpus/$t" | wc -l) files, $(du -sk "tests/fuzz/corpus/$t" | cut -f1) KB"
  done
  exit 0
fi

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz: seconds must be a whole number, got '$seconds'"; exit 2; }
shift || true
targets=()
for t in "$@"; do targets+=("${t#fuzz_}"); done
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ -f tests/fuzz/fuzz_$t.cpp ]] || { echo "fuzz: no target '$t' (have: ${all_targets[*]})"; exit 2; }
done

configure
ninja -C "$build" -j "$jobs" "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
for t in "${targets[@]}"; do
  corpus=$build/fuzz-corpus/$t artifacts=$build/fuzz-artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  log=$build/fuzz-$t.log
  extra=()
  # The algorithm-cache reader warns on stderr for every rejected file; libFuzzer keeps its own
  # and the sanitizers' reports when stderr is closed this way.
  [[ $t == algo_cache ]] && extra+=(-close_fd_mask=2)
  rc=0
  # shellcheck disable=SC2086
  "$build/tests/fuzz/fuzz_$t" "$corpus" "tests/fuzz/corpus/$t" -max_total_time="$seconds" \
    -timeout="${EMBER_FUZZ_TIMEOUT_S:-10}" -rss_limit_mb="${EMBER_FUZZ_RSS_MB:-2048}" \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "${extra[@]}" ${EMBER_FUZZ_ARGS:-} \
    >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  if ((rc == 0)); then
    echo "fuzz: $t: ${runs:-?} executions, ${speed:-?} exec/s, no finding"
  else
    failed+=("$t")
    echo "fuzz: $t: FAILED (status $rc) after ${runs:-?} executions; input(s): $(ls "$artifacts" | tr '\n' ' ')"
    grep -E 'ERROR|SUMMARY|runtime error|ember fuzz:|#[0-9]+ 0x' "$log" | head -n 40 | sed 's/^/  /'
    echo "  (full log: $log)"
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#targets[@]} target(s) ran ${seconds} s without a finding"
