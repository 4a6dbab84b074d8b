#!/usr/bin/env bash
# Before/after on ONE GPU in one call: builds this tree (after) and an earlier tree (before, a
# tarball made by `git archive`) side by side, then runs every C++ benchmark of both, alternating
# before and after per benchmark, and compares them row by row (scripts/bench_compare.py). Same
# card, same call: what differs is the code. PyTorch is not run (bench/*.py measure nothing that
# changes between the trees).
#   here:        mkdir -p .ab && git archive --format=tar.gz -o .ab/before.tar.gz <commit>
#                (.ab/ is ignored through .git/info/exclude; the device tool carries it: carry [".ab"])
#   on the GPU:  bash scripts/gpu_ab.sh .ab/before.tar.gz
# Environment: EMBER_BENCH_FILTER (regex on benchmark names, default all), EMBER_AB_BUDGET_S
# (stop starting benchmarks after this many seconds, default 540). Writes before.jsonl,
# after.jsonl and compare.txt under $OUT (./out when unset).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
tarball=${1:?usage: scripts/gpu_ab.sh BEFORE.tar.gz}
out=${OUT:-$PWD/out}
filter=${EMBER_BENCH_FILTER:-.}
budget_s=${EMBER_AB_BUDGET_S:-540}
export PATH=$PATH:/usr/local/cuda/bin NCCL_NVLS_ENABLE=0
mkdir -p "$out" /tmp/ember-before
tar -xzf "$tarball" -C /tmp/ember-before
configure() {  # configure <src> <build>
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF >/dev/null
}
{ configure /tmp/ember-before /tmp/ember-before-build && ninja -C /tmp/ember-before-build -j8; } \
  >"$out/before_build.log" 2>&1 &
before_pid=$!
{ configure . build-ab && ninja -C build-ab -j8; } >"$out/after_build.log" 2>&1 || {
  echo "gpu_ab: the after build failed:"; tail -n 30 "$out/after_build.log"; exit 1; }
wait "$before_pid" || { echo "gpu_ab: the before build failed:"; tail -n 30 "$out/before_build.log"; exit 1; }
echo "gpu_ab: both built in ${SECONDS}s"
: >"$out/before.jsonl"; : >"$out/after.jsonl"
for exe in build-ab/bench/bench_*; do
  name=${exe##*/bench_}
  [[ -x $exe && -x /tmp/ember-before-build/bench/bench_$name ]] || continue
  [[ $name =~ $filter ]] || continue
  if ((SECONDS > budget_s)); then echo "gpu_ab: budget spent; skipped $name and after"; break; fi
  timeout 180 "/tmp/ember-before-build/bench/bench_$name" 2>/dev/null | grep '^{' >>"$out/before.jsonl"
  timeout 180 "$exe" 2>/dev/null | grep '^{' >>"$out/after.jsonl"
  echo "gpu_ab: $name done at ${SECONDS}s"
done
python3 scripts/bench_compare.py "$out/before.jsonl" "$out/after.jsonl" | tee "$out/compare.txt" | tail -n 40
