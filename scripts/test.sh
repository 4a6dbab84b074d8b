#!/usr/bin/env bash
# Ember's test command (the README's, and what CI runs): installs the packages (scripts/setup.sh),
# checks the layer rules, formatting and the API reference's documentation coverage
# (scripts/api_docs.sh --check), builds (scripts/build.sh), runs the ctest suites (CPU
# ones; CUDA ones skip without a GPU), checks that Ember can be used from another project,
# installed (find_package and pkg-config; scripts/check_package.sh), from the Debian package that
# CPack builds, and as a subdirectory (add_subdirectory), then runs the sanitizer
# checks on one clang build: each file reader fuzzed for 20 s from its seeds (scripts/fuzz.sh) and
# the CPU suites under ASan+UBSan with leak checks (scripts/sanitize.sh asan). Ends with one line
# `summary: N passed, N failed, N skipped`.
# Environment: EMBER_SKIP_SETUP=1 skips setup; EMBER_SKIP_CONSUMER=1 skips the consumer checks;
# EMBER_SKIP_SANITIZERS=1 skips the sanitizer checks; EMBER_BUILD_DIR, EMBER_JOBS,
# EMBER_CUDA_ARCH as in scripts/build.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
build_dir=${EMBER_BUILD_DIR:-build}
jobs=${EMBER_JOBS:-$(nproc)}
export EMBER_BUILD_DIR=$build_dir EMBER_JOBS=$jobs

step() { printf '\n=== test: %s ===\n' "$*"; }

if [[ ${EMBER_SKIP_SETUP:-0} != 1 ]]; then
  step "setup (scripts/setup.sh)"
  bash scripts/setup.sh
fi

passed=0 failed=0 skipped=0
failures=()

# Static checks of the tree: the layer rules and file sizes (scripts/check_layers.py) and the
# formatting (scripts/check_format.sh). Each counts as one test.
static_check() {
  local name=$1
  shift
  echo "test: $name ..."
  if "$@"; then
    ((passed += 1))
  else
    ((failed += 1))
    failures+=("$name")
  fi
}
step "static checks (layers, file sizes, formatting, API docs)"
static_check layers python3 scripts/check_layers.py
static_check format bash scripts/check_format.sh
static_check api-docs bash scripts/api_docs.sh --check

step "build (scripts/build.sh into $build_dir)"
if ! bash scripts/build.sh; then
  echo "test: the build failed (its errors are above); no test was run"
  exit 1
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ember-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

step "ctest (ctest --test-dir $build_dir --output-on-failure -j $jobs)"
ctest_rc=0
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" 2>&1 | tee "$scratch/ctest.log" ||
  ctest_rc=$?
# ctest's closing line: "NN% tests passed, F tests failed out of T"; skipped tests count as passed
# there and are listed as "(Skipped)" under "The following tests did not run".
ctest_total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$scratch/ctest.log" | tail -n 1)
ctest_failed=$(sed -n 's/.*, \([0-9]*\) tests failed out of .*/\1/p' "$scratch/ctest.log" |
               tail -n 1)
ctest_skipped=$(grep -c '([Ss]kipped)' "$scratch/ctest.log" || true)
ctest_total=${ctest_total:-0} ctest_failed=${ctest_failed:-0}
if ((ctest_rc != 0 && ctest_failed == 0)); then
  ctest_failed=1  # ctest itself failed (no build tree, a crash in ctest), not a test
  failures+=("ctest exited with status $ctest_rc")
elif ((ctest_failed > 0)); then
  failures+=("ctest: $ctest_failed of $ctest_total tests failed")
fi
((passed += ctest_total - ctest_failed - ctest_skipped, failed += ctest_failed,
  skipped += ctest_skipped)) || true


# Runs one check with its output in a log; prints the log's lines that start with `summary_re`
# (a check's own summary) when it passes, and the log's tail when it fails.
logged_check() {
  local name=$1 summary_re=$2
  shift 2
  local log="$scratch/${name// /_}.log"
  echo "test: $name ..."
  if "$@" >"$log" 2>&1; then
    grep -E "$summary_re" "$log" | sed 's/^/  /' || true
    echo "test: $name passed"
    ((passed += 1))
  else
    echo "test: $name FAILED; its log:"
    tail -n 80 "$log"
    ((failed += 1))
    failures+=("$name")
  fi
}

# The installed package, from the build above (no rebuild): cmake --install into a clean prefix,
# then tests/consumer against it (find_package without Eigen/doctest, and pkg-config); then a
# Debian package from CPack, unpacked into a scratch root, and the consumer against that.
consumer_installed() { bash scripts/check_package.sh "$build_dir" install; }
consumer_deb() { bash scripts/check_package.sh "$build_dir" deb; }

# The library is built a second time here, CPU-only: this keeps the check cheap on 2 cores and is
# the one place where the EMBER_WITH_CUDA=OFF configuration is compiled at all.
consumer_subdirectory() {
  cmake -S tests/consumer -B "$scratch/consumer-subdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DEMBER_SOURCE_DIR="$repo" -DEMBER_WITH_CUDA=OFF &&
    cmake --build "$scratch/consumer-subdir" -j "$jobs" &&
    "$scratch/consumer-subdir/ember_consumer"
}

if [[ ${EMBER_SKIP_CONSUMER:-0} != 1 ]]; then
  step "install + find_package(ember) consumer"
  logged_check 'consumer (find_package, pkg-config)' '^package: ' consumer_installed
  step "Debian package (cpack -G DEB) + consumer"
  logged_check 'consumer (Debian package)' '^package: ' consumer_deb
  step "add_subdirectory consumer (Ember built CPU-only inside tests/consumer)"
  logged_check 'consumer (add_subdirectory)' '^ember_consumer:' consumer_subdirectory
fi


if [[ ${EMBER_SKIP_SANITIZERS:-0} != 1 ]]; then
  step "sanitizers: fuzz smoke runs, CPU suites under ASan+UBSan (one clang build)"
  if [[ $build_dir == /* ]]; then fuzz_build=$build_dir-fuzz; else fuzz_build=$repo/$build_dir-fuzz; fi
  export EMBER_FUZZ_BUILD_DIR=$fuzz_build
  logged_check fuzz '^fuzz: ' bash scripts/fuzz.sh 20
  logged_check asan 'tests passed|tests failed' bash scripts/sanitize.sh asan
fi

echo
if ((${#failures[@]} > 0)); then
  printf 'test: failed: %s\n' "${failures[@]}"
fi
echo "test: took $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "summary: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
