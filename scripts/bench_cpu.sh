#!/usr/bin/env bash
# The CPU bar table of issue 38: builds bench_cpu (Ember) and, when libtorch's CMake package is
# installed (Debian: apt-get install libtorch-dev), its libtorch C++ twin bench_cpu_torch, both in
# Release without CUDA; runs both with the same thread count; writes every JSON line to
# $OUT/cpu_bench.jsonl (./out when OUT is unset) and prints the table: row, Ember, libtorch, ratio,
# bar, PASS/FAIL. The bars:
#   resnet18_step  Ember's step >= 1.5x as fast as libtorch's (libtorch ms / Ember ms >= 1.5)
#   lstm_fwdbwd    the same, >= 1.5x
#   matmul         Ember's GFLOP/s >= 80% of cblas_sgemm's, called directly (OpenBLAS's own rate)
#   add            Ember's add_ GB/s >= 80% of memcpy's (bench/cpu.cpp says how bytes are counted)
#   tiny_op        Ember's 1-element add_ <= 0.66 us
# Environment: EMBER_BENCH_THREADS (default: every core, nproc), EMBER_BUILD_DIR (default
# build/cpu-bench), EMBER_JOBS (default nproc), OUT. Extra arguments go to both benchmarks (e.g.
# --rows tiny_op,add or --steps 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

threads=${EMBER_BENCH_THREADS:-$(nproc)}
build_dir=${EMBER_BUILD_DIR:-build/cpu-bench}
jobs=${EMBER_JOBS:-$(nproc)}
out=${OUT:-out}
mkdir -p "$out"

echo "bench_cpu: configuring $build_dir (Release, CPU only, libtorch twin if found)"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_WITH_CUDA=OFF \
  -DEMBER_BUILD_BENCH=ON -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_TESTS=OFF \
  -DEMBER_BUILD_TORCH_TWIN=ON >"$out/cpu_bench_configure.log"
grep -E "bench_cpu_torch" "$out/cpu_bench_configure.log" || true
targets=(bench_cpu)
if ninja -C "$build_dir" -t targets all 2>/dev/null | grep -q '^bench_cpu_torch:'; then
  targets+=(bench_cpu_torch)
fi
echo "bench_cpu: building ${targets[*]} with $jobs jobs"
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"

jsonl="$out/cpu_bench.jsonl"
: >"$jsonl"
status=0
echo "bench_cpu: running Ember's side ($threads threads)"
"$build_dir/bench/bench_cpu" --json --threads "$threads" "$@" | tee -a "$jsonl" || status=1
if [[ " ${targets[*]} " == *" bench_cpu_torch "* ]]; then
  echo "bench_cpu: running libtorch's side ($threads threads)"
  "$build_dir/bench/bench_cpu_torch" --json --threads "$threads" "$@" | tee -a "$jsonl" || status=1
else
  echo "bench_cpu: libtorch twin skipped (no libtorch: apt-get install libtorch-dev)"
fi

python3 - "$jsonl" <<'EOF'
import json, sys

rows = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        j = json.loads(line)
        rows[(j.get("impl"), j.get("row"))] = j


def get(impl, row, key):
    j = rows.get((impl, row))
    return None if j is None or key not in j else float(j[key])


def fmt(v, unit):
    return "-" if v is None else f"{v:.4g} {unit}"


table = []
# (row, Ember value, libtorch value, unit, ratio (higher is better for Ember), bar text, pass)
for row in ("resnet18_step", "lstm_fwdbwd"):
    e, t = get("ember", row, "ms"), get("libtorch", row, "ms")
    ratio = t / e if e and t else None
    table.append((row, fmt(e, "ms"), fmt(t, "ms"), ratio, ">= 1.5x libtorch",
                  None if ratio is None else ratio >= 1.5))
e, t = get("ember", "matmul", "GFLOPs"), get("libtorch", "matmul", "GFLOPs")
blas = get("ember", "matmul_blas", "GFLOPs")
ratio = e / blas if e and blas else None
table.append(("matmul", fmt(e, "GFLOP/s"), fmt(t, "GFLOP/s"), t and e / t,
              f">= 80% of sgemm: {ratio or 0:.0%} of {fmt(blas, 'GFLOP/s')}",
              None if ratio is None else ratio >= 0.8))
e, t = get("ember", "add", "GBps"), get("libtorch", "add", "GBps")
mem = get("ember", "add", "memcpy_best_GBps")
ratio = e / mem if e and mem else None
table.append(("add", fmt(e, "GB/s"), fmt(t, "GB/s"), t and e / t,
              f">= 80% of memcpy: {ratio or 0:.0%} of {fmt(mem, 'GB/s')}",
              None if ratio is None else ratio >= 0.8))
e, t = get("ember", "tiny_op", "us"), get("libtorch", "tiny_op", "us")
table.append(("tiny_op", fmt(e, "us"), fmt(t, "us"), e and t and t / e, "<= 0.66 us",
              None if e is None else e <= 0.66))

print()
print(f"{'row':<14} {'Ember':>14} {'libtorch':>14} {'ratio':>7}  {'bar':<40} result")
for row, e, t, ratio, bar, ok in table:
    r = "-" if not ratio else f"{ratio:.2f}x"
    res = "n/a" if ok is None else ("PASS" if ok else "FAIL")
    print(f"{row:<14} {e:>14} {t:>14} {r:>7}  {bar:<40} {res}")
print("ratio: how many times better Ember is (libtorch time / Ember time, Ember rate / libtorch "
      "rate); the matmul and add bars compare with OpenBLAS's sgemm and memcpy instead")
EOF
echo "bench_cpu: JSON lines in $jsonl"
exit $status
