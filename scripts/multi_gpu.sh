#!/usr/bin/env bash
# Issue 11's runs on one host with several GPUs (the device tool's nvidia-h200-x2 / -x4 / -x8):
#   1. scaling    bench_models under ember-launch --nproc W beside bench/models.py under torchrun
#                 --nproc_per_node W, for W = 1, 2, 4, 8 up to the GPUs present: ResNet-50 bf16
#                 channels_last at batch 256 per GPU (resnet50_bf16) and the char LM
#                 (charlm_eager, batch 64 per GPU); images/s or tokens/s of all ranks.
#   2. equivalence  K steps at world W with batch B/W per GPU against one process at batch B
#                 (float32, TF32 off): CIFAR ResNet-18 with --sync-bn at B = 256, and the char LM
#                 at B = 64; params_max_rel_err is the largest per-tensor ||a - b|| / ||b||. The
#                 floor beside it: the same single process with every convolution forced to
#                 another algorithm (EMBER_ALGO_FORCE=conv2d=direct), which moves a ReLU network's
#                 trained state as much as any change of summation order does.
#   3. failures   a rank killed (SIGKILL) mid-run: the launcher must end the job, naming the rank;
#                 a rank stopped (SIGSTOP) mid-run with EMBER_DIST_TIMEOUT_S=30: rank 0's watchdog
#                 must report the collective, its rank and the timeout, and the job must end.
# Every step runs even after a failure; the exit status says whether any failed. Logs in $OUT
# (./out when unset): build.log, multi_gpu.jsonl (the JSON lines of 1 and 2), failures.txt,
# multi_gpu.txt (the table of steps, printed last).
#   bash scripts/multi_gpu.sh    (EMBER_MULTI_GPU_STEPS="build scaling equivalence failures")
# All four take ~10 minutes on 2 GPUs, the device tool's limit per command: run them in two calls
# (EMBER_MULTI_GPU_STEPS="build scaling", then "equivalence failures"; the build stays). The
# algorithm choices persist in $EMBER_ALGO_CACHE (default: build-gpu/algo_cache.json), so only the
# first run of a shape pays for benchmarking them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
repo=$PWD
out=${OUT:-$repo/out}
build=${EMBER_GPU_BUILD_DIR:-build-gpu}
steps=${EMBER_MULTI_GPU_STEPS:-build scaling equivalence failures}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export EMBER_ALGO_CACHE=${EMBER_ALGO_CACHE:-$repo/$build/algo_cache.json}
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p "$out"
jsonl=$out/multi_gpu.jsonl failures=$out/failures.txt table=$out/multi_gpu.txt
: >"$jsonl"; : >"$failures"; : >"$table"
any_failed=0
has_step() { [[ " $steps " == *" $1 "* ]]; }
record() {  # record <name> <ok|FAILED...> <note>
  printf '%-44s %-16s %s\n' "$1" "$2" "$3" | tee -a "$table"
  [[ $2 == ok ]] || any_failed=1
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
worlds=()
for w in 1 2 4 8; do ((w <= gpus)) && worlds+=("$w"); done
echo "multi_gpu: $(date -u '+%F %T UTC'), commit $(git rev-parse --short HEAD 2>/dev/null), $gpus GPU(s): worlds ${worlds[*]}" | tee -a "$table"

if has_step build; then
  if OUT=$out EMBER_GPU_STEPS=build bash scripts/gpu_run.sh >"$out/build_step.txt" 2>&1; then record build ok ""
  else record build FAILED "see $out/build.log"; fi
fi
models=$build/bench/bench_models
launch=$build/ember-launch
[[ -x $launch ]] || launch=$(find "$build/" -maxdepth 3 -name ember-launch -type f -perm -u+x 2>/dev/null | head -n 1)
if [[ ! -x $models || -z $launch ]]; then
  record setup FAILED "needs $models and ember-launch under $build (the build step)"
  exit 1
fi
port=29600
next_port() { port=$((port + 1)); }

# run <name> <timeout_s> <command...>: appends the command's JSON lines to multi_gpu.jsonl.
run() {
  local name=$1 limit=$2; shift 2
  local log; log=$(mktemp)
  if timeout "$limit" "$@" >"$log" 2>&1; then record "$name" ok ""
  else record "$name" "FAILED ($?)" "$(grep -v '^{' "$log" | tail -n 3 | tr '\n' ' ' | cut -c1-160)"; fi
  grep -E '^\{' "$log" | sed "s/^{/{\"step\":\"$name\",/" >>"$jsonl"
  rm -f "$log"
}

if has_step scaling; then
  ((${#worlds[@]} > 1)) || record scaling "FAILED" "one GPU: no data-parallel scaling to measure"
  for row in resnet50_bf16 charlm_eager; do
    for w in "${worlds[@]}"; do
      next_port
      run "scaling $row ember w$w" 240 "$launch" --nproc "$w" --master-port "$port" "$models" --ddp --rows "$row"
      next_port
      run "scaling $row torch w$w" 240 torchrun --standalone --nproc_per_node "$w" bench/models.py --ddp --rows "$row"
    done
  done
fi

if has_step equivalence; then
  w=${worlds[-1]}
  work=$(mktemp -d)
  # (row, global batch, extra flags); K = 1 warm-up + 2 timed steps = 3 optimizer steps.
  for spec in "cifar18_eager 256 --sync-bn" "charlm_eager 64"; do
    read -r row batch extra <<<"$spec"
    common=(--rows "$row" --f32 --no-tf32 --warmup 1 --steps 2)
    run "equivalence $row reference w1 b$batch" 180 "$models" "${common[@]}" --batch "$batch" \
      --params-out "$work/$row.safetensors"
    if [[ $row != charlm_eager ]]; then
      run "equivalence $row floor (conv2d=direct)" 300 env EMBER_ALGO_FORCE=conv2d=direct "$models" \
        "${common[@]}" --batch "$batch" --params-ref "$work/$row.safetensors"
    fi
    next_port
    run "equivalence $row w$w b$((batch / w))" 180 "$launch" --nproc "$w" --master-port "$port" "$models" --ddp \
      ${extra:-} "${common[@]}" --batch "$((batch / w))" --params-ref "$work/$row.safetensors"
  done
  rm -rf "$work"
fi

# The pid of rank `1` among the children of launcher pid $1 (RANK in their environment).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$p"; return; }
  done
}

# fail_case <name> <signal> <expect regex> [env...]: 2 ranks of a long ResNet-50 run; after the
# first steps rank 1 gets <signal>; the launcher must exit non-zero within 150 s with <expect>.
fail_case() {
  local name=$1 sig=$2 expect=$3; shift 3
  next_port
  local log=$out/failure_$sig.log start
  env "$@" "$launch" --nproc 2 --master-port "$port" "$models" --ddp --rows resnet50_bf16 --warmup 5 --steps 100000 \
    >"$log" 2>&1 &
  local launcher=$!
  sleep 45
  local victim; victim=$(rank_pid "$launcher" 1)
  if [[ -z $victim ]]; then
    record "$name" FAILED "rank 1 not found (did the job start? $(tail -n 2 "$log" | tr '\n' ' '))"
    kill -9 "$launcher" 2>/dev/null
    return
  fi
  start=$(date +%s)
  kill "-$sig" "$victim"
  local rc=0 waited=0
  while kill -0 "$launcher" 2>/dev/null && ((waited < 150)); do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$launcher" 2>/dev/null; then
    record "$name" FAILED "the job still runs 150 s after SIG$sig to rank 1 (a hang)"
    pkill -9 -P "$launcher"; kill -9 "$launcher"
    return
  fi
  wait "$launcher"; rc=$?
  kill -9 "$victim" 2>/dev/null  # a stopped rank the launcher's SIGTERM could not end
  local ended=$(( $(date +%s) - start ))
  { echo "== $name: SIG$sig to rank 1 (pid $victim); launcher exit $rc after ${ended} s"; grep -v '^{' "$log" | tail -n 8; } >>"$failures"
  if ((rc != 0)) && grep -Eq "$expect" "$log"; then record "$name" ok "exit $rc after ${ended} s"
  else record "$name" FAILED "exit $rc after ${ended} s; expected /$expect/ in $log"; fi
}

if has_step failures; then
  if ((gpus < 2)); then record failures FAILED "needs 2 GPUs"
  else
    fail_case "failure: rank 1 killed" KILL "ember-launch: rank 1 .*killed by signal 9"
    fail_case "failure: rank 1 stalled (30 s timeout)" STOP "NCCL watchdog: rank 0 of 2: .* did not finish within 30000 ms" \
      EMBER_DIST_TIMEOUT_S=30
  fi
fi

echo "multi_gpu: $([[ $any_failed == 0 ]] && echo 'all ok' || echo 'some steps FAILED'); logs in $out" | tee -a "$table"
exit $any_failed
