#!/usr/bin/env bash
# Runs Ember's CPU tests under the sanitizers (clang):
#   scripts/sanitize.sh asan [ctest-regex]  ASan+UBSan build (the one scripts/fuzz.sh makes, in
#                                           build-fuzz/ or $EMBER_FUZZ_BUILD_DIR), running the CPU
#                                           ctest suites (label cpu; or those matching the regex,
#                                           e.g. 'cpu\.(tensor|autograd|ops|checkpoint|data)$')
#                                           with leak detection; a UBSan report fails the test.
#   scripts/sanitize.sh tsan                ThreadSanitizer build in build-tsan/ (or
#                                           $EMBER_TSAN_BUILD_DIR) running the concurrency stress
#                                           test (tests/stress, label stress).
#   scripts/sanitize.sh tsan-cpu [ctest-regex]  the same ThreadSanitizer build running the CPU
#                                           ctest suites (label cpu; or those matching the regex,
#                                           e.g. 'cpu\.test_(parallel|cpu_threads)$') with
#                                           EMBER_NUM_THREADS=4, so the kernels' loops really run
#                                           on several threads even on a small machine.
# Prints ctest's summary; exits non-zero when a test failed or a sanitizer reported. Environment:
# EMBER_JOBS (build jobs and ctest -j), EMBER_STRESS_SECONDS (stress duration, default 2 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
jobs=${EMBER_JOBS:-$(nproc)}
mode=${1:-}
cxx=${EMBER_SANITIZE_CXX:-clang++}
command -v "$cxx" >/dev/null || { echo "sanitize: $cxx not found (apt-get install clang)"; exit 2; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DEMBER_WITH_CUDA=OFF
        -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF "${launcher[@]}")

case $mode in
  asan)
    # The fuzz build's library flags (-fsanitize=address,undefined,fuzzer-no-link) are the ASan+
    # UBSan build: one build serves both.
    build=${EMBER_FUZZ_BUILD_DIR:-$repo/build-fuzz}
    [[ -f $build/build.ninja ]] || cmake -S . -B "$build" "${common[@]}" -DEMBER_BUILD_FUZZERS=ON >/dev/null
    # Every executable of the "cpu" label: the CPU suites and the user guide's snippets.
    ninja -C "$build" -j "$jobs" ember_tests_cpu ember_guide_snippets
    # allocator_may_return_null: some tests allocate impossible sizes on purpose (Ember must turn
    # the failure into an ember::Error).
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_string_checks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
    select=(-L '^cpu$')
    [[ -n ${2:-} ]] && select=(-R "$2")
    ctest --test-dir "$build" "${select[@]}" -j "$jobs" --output-on-failure
    ;;
  tsan | tsan-cpu)
    build=${EMBER_TSAN_BUILD_DIR:-$repo/build-tsan}
    flags="-fsanitize=thread -fno-omit-frame-pointer -gline-tables-only"
    # EMBER_WITH_BLAS=OFF: OpenBLAS's own threads are not instrumented, so TSan would report its
    # hand-offs as races; the CPU GEMMs run on Eigen in this build.
    [[ -f $build/build.ninja ]] ||
      cmake -S . -B "$build" "${common[@]}" -DEMBER_WITH_BLAS=OFF -DCMAKE_CXX_FLAGS="$flags" \
        -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
        -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
    # halt_on_error: the first race fails the test; second_deadlock_stack: both stacks of a
    # lock-order inversion.
    # allocator_may_return_null: some CPU tests allocate impossible sizes on purpose (Ember must
    # turn the failure into an ember::Error), as in the asan mode.
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:history_size=4:allocator_may_return_null=1}
    if [[ $mode == tsan ]]; then
      ninja -C "$build" -j "$jobs" ember_tests_stress
      ctest --test-dir "$build" -L '^stress$' --output-on-failure
    else
      ninja -C "$build" -j "$jobs" ember_tests_cpu ember_guide_snippets
      export EMBER_NUM_THREADS=${EMBER_NUM_THREADS:-4}
      select=(-L '^cpu$')
      [[ -n ${2:-} ]] && select=(-R "$2")
      ctest --test-dir "$build" "${select[@]}" --output-on-failure
    fi
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan [ctest-regex] | tsan | tsan-cpu [ctest-regex]"
    exit 2
    ;;
esac
