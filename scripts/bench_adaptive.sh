#!/usr/bin/env bash
# The bars of issue 32 (algorithm choice when shapes vary), measured beside PyTorch in one call on
# the GPU machine, after a build (scripts/gpu_run.sh's build step):
#   bash scripts/bench_adaptive.sh [BUILD_DIR]        (default build-gpu; output under $OUT or ./out)
# Runs, each side in the same call:
#  1. cifar18_varying_res: Ember's adaptive (the examples' GPU default), benchmark and heuristic
#     modes and the graphed loop (nn::GraphedStep, size buckets), and PyTorch with
#     cudnn.benchmark on and off;
#  2. resnet50_bf16 from an empty cache with 20 warm-up steps, benchmark mode then adaptive mode:
#     first_step_ms (all choices made) and the step time reached after the first 20 steps;
#  3. the static rows cifar18_eager, cifar18_graphed, charlm_eager, charlm_graphed in benchmark
#     mode (full benchmarking) and in adaptive mode, alternated twice, and PyTorch's rows.
# Writes adaptive.jsonl (every JSON line) and adaptive.txt (the table scripts/adaptive_report.py
# makes of it, with each bar's verdict).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
build=${1:-build-gpu}
out=${OUT:-$PWD/out}
mkdir -p "$out"
jsonl=$out/adaptive.jsonl log=$out/adaptive.log
: >"$jsonl"; : >"$log"
bm=$build/bench/bench_models
[[ -x $bm ]] || { echo "bench_adaptive: no $bm"; exit 1; }
run() {  # run <command...>: its JSON lines to adaptive.jsonl, everything to adaptive.log
  echo "== $*" >>"$log"
  timeout 240 "$@" 2>>"$log" | tee -a "$log" | grep '^{' >>"$jsonl"
}
run "$bm" --rows cifar18_varying_res
run python3 bench/models.py --rows cifar18_varying_res
run "$bm" --rows resnet50_bf16 --warmup 20 --steps 20
run "$bm" --rows resnet50_bf16 --warmup 20 --steps 20 --algo-mode adaptive
run python3 bench/models.py --rows resnet50_bf16 --warmup 20 --steps 20
static=cifar18_eager,cifar18_graphed,charlm_eager,charlm_graphed
for round in 1 2; do
  run "$bm" --rows "$static"
  run "$bm" --rows "$static" --algo-mode adaptive
done
run python3 bench/models.py --rows "$static"
python3 scripts/adaptive_report.py "$jsonl" | tee "$out/adaptive.txt"
