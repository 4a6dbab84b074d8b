// Convolution benchmarks (GPU): the nine ResNet-50 layer shapes of shared/ANCHORS.md at batch 64 in
// bf16 channels_last and in fp32 NCHW (TF32 allowed, PyTorch's default), then the eleven
// convolution shapes of the CIFAR-stem ResNet-18 at batch 128 (issue 8's graphed training step) in
// bf16 channels_last; forward / backward-data / backward-filter. EMBER_BENCH_CONV_LAYERS=resnet50
// or cifar18 runs one set only; EMBER_BENCH_CONV_SHAPE=<text> only the layers whose shape key
// (the "shape" field, e.g. "128x128x16x16 k128 3x3 s1 bf16-nhwc") contains it (for a profiler). For
// each direction: every applicable CUDA algorithm, forced
// ("ember:<name>"), the algorithm cache's benchmark-mode choice ("ember", with "algo") and its
// heuristic-mode choice ("ember_heuristic": what a program gets by default, without timing), each
// timed as a replayed CUDA graph so no host overhead is counted (as the PyTorch side,
// bench/conv.py, times cuDNN). Forced rows carry the heuristic's cost estimate ("heuristic_us") to
// compare its ranking with the measured one. Prints one JSON line per measurement: ms, TFLOPs
// (2*N*K*P*Q*C*R*S / time), the algorithm's workspace_bytes, and a checksum (mean of the result) of
// inputs made from the same formula in both programs, sin(0.37 * i + phase) over the logical NCHW
// index, so results can be compared.
#include "ember/ops/conv.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "timing.h"

using namespace ember;
using dispatch::Direction;

namespace {

struct Layer {
  int64_t N, C, H, W, K, R, stride;  // padding R / 2
};
// shared/ANCHORS.md, "Convolution layers of ResNet-50 at batch 64".
const Layer kResnet50Layers[] = {
    {64, 64, 56, 56, 64, 1, 1},    {64, 64, 56, 56, 64, 3, 1},   {64, 64, 56, 56, 256, 1, 1},
    {64, 128, 28, 28, 128, 3, 1},  {64, 256, 14, 14, 256, 3, 1}, {64, 512, 7, 7, 512, 3, 1},
    {64, 1024, 14, 14, 256, 1, 1}, {64, 3, 224, 224, 64, 7, 2},  {64, 256, 56, 56, 512, 1, 2},
};
// examples/resnet's CIFAR-stem ResNet-18 at batch 128 on 32x32x3: the 3x3 stem, each stage's 3x3
// convolutions (stride 1, and stride 2 entering stages 2-4) and 1x1 stride-2 shortcuts.
const Layer kCifar18Layers[] = {
    {128, 3, 32, 32, 64, 3, 1},    {128, 64, 32, 32, 64, 3, 1},   {128, 64, 32, 32, 128, 3, 2},
    {128, 128, 16, 16, 128, 3, 1}, {128, 64, 32, 32, 128, 1, 2},  {128, 128, 16, 16, 256, 3, 2},
    {128, 256, 8, 8, 256, 3, 1},   {128, 128, 16, 16, 256, 1, 2}, {128, 256, 8, 8, 512, 3, 2},
    {128, 512, 4, 4, 512, 3, 1},   {128, 256, 8, 8, 512, 1, 2},
};

struct Config {
  const char* name;
  DType dtype;
  MemoryFormat format;
};
const Config kConfigs[] = {{"bf16-nhwc", DType::bf16, MemoryFormat::channels_last},
                           {"fp32-nchw", DType::f32, MemoryFormat::contiguous}};

// sin(0.37 * i + phase) over the logical (NCHW) index i, scaled, in the config's dtype and layout.
Tensor pattern(const Shape& shape, double phase, double scale, const Config& cfg) {
  const auto opts = TensorOptions(DType::f32).with_device(Device::cuda());
  Tensor i = arange(0, double(shape_numel(shape)), 1, opts).view(shape);
  return (sin(i * 0.37 + phase) * scale).to(cfg.dtype).contiguous(cfg.format);
}

// Median ms of one replay of a CUDA graph capturing `run` (bench/timing.h's time_ms over the
// replays, after eager warm-up runs, which also initialise cuBLAS workspaces and kernel
// attributes). Falls back to eager timing, saying so, when the work cannot be captured.
double time_graphed_ms(const std::function<void()>& run, bool& graphed) {
  const Stream s = current_stream(Device::cuda());
  const auto stream = static_cast<cudaStream_t>(s.handle);
  for (int i = 0; i < 2; ++i) run();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  graphed = false;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    bool captured = true;
    try {
      run();
    } catch (const Error&) {
      captured = false;
    }
    const cudaError_t end = cudaStreamEndCapture(stream, &graph);
    graphed =
        captured && end == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    cudaGetLastError();  // clear the error a failed capture or instantiation left behind
  }
  auto launch = [&] {
    if (graphed) {
      EMBER_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      run();
    }
  };
  const double ms = bench::time_ms(launch, /*iters=*/20, /*reps=*/5, /*warmup=*/1);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return ms;
}

const char* bench_name(Direction d) {
  switch (d) {
    case Direction::forward:
      return "conv2d_fwd";
    case Direction::backward_data:
      return "conv2d_bwd_data";
    default:
      return "conv2d_bwd_filter";
  }
}

std::string shape_key(const Layer& l, const Config& cfg) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%ldx%ldx%ldx%ld k%ld %ldx%ld s%ld %s", long(l.N), long(l.C),
                long(l.H), long(l.W), long(l.K), long(l.R), long(l.R), long(l.stride), cfg.name);
  return buf;
}

// heuristic_us < 0: no estimate to report.
void emit(const char* bench, const std::string& impl, const std::string& shape, double ms,
          double flops, size_t workspace, double checksum, const std::string& algo, bool graphed,
          double heuristic_us = -1) {
  char extra[64] = "";
  if (heuristic_us >= 0)
    std::snprintf(extra, sizeof(extra), ",\"heuristic_us\":%.2f", heuristic_us);
  std::printf(
      "{\"bench\":\"%s\",\"impl\":\"%s\",\"shape\":\"%s\",\"ms\":%.5f,\"TFLOPs\":%.2f,"
      "\"workspace_bytes\":%zu,\"checksum\":%.6e,\"algo\":\"%s\",\"graph\":%s%s}\n",
      bench, impl.c_str(), shape.c_str(), ms, flops / (ms * 1e9), workspace, checksum, algo.c_str(),
      graphed ? "true" : "false", extra);
  std::fflush(stdout);
}

// Runs `algo` on `pr` with workspace from `arena` (grown as needed).
void run_algorithm(const dispatch::Algorithm<ConvProblem>& algo, const ConvProblem& pr,
                   Tensor& arena) {
  const size_t bytes = algo.workspace_bytes ? algo.workspace_bytes(pr) : 0;
  if (bytes > 0 && (!arena.defined() || size_t(arena.numel()) < bytes))
    arena = empty({int64_t(bytes)}, DType::u8, Device::cuda());
  algo.run(pr, bytes > 0 ? arena.data_ptr() : nullptr);
}

double checksum_of(const Tensor& t) { return t.to(DType::f64).mean().item(); }

// Every row of one layer in one config (see the file comment).
void bench_layer(const Layer& l, const Config& cfg, Tensor& arena) {
  const std::string shape = shape_key(l, cfg);
  const char* only_shape = std::getenv("EMBER_BENCH_CONV_SHAPE");
  if (only_shape != nullptr && shape.find(only_shape) == std::string::npos) return;
  Conv2dParams p;
  p.stride = {l.stride, l.stride};
  p.padding = {l.R / 2, l.R / 2};
  const int64_t P = (l.H + 2 * (l.R / 2) - l.R) / l.stride + 1;
  const int64_t Q = (l.W + 2 * (l.R / 2) - l.R) / l.stride + 1;
  const double flops = 2.0 * double(l.N * l.K * P * Q) * double(l.C * l.R * l.R);
  const Tensor x = pattern({l.N, l.C, l.H, l.W}, 0.0, 1.0, cfg);
  const Tensor w = pattern({l.K, l.C, l.R, l.R}, 1.0, 0.1, cfg);
  const Tensor dy = pattern({l.N, l.K, P, Q}, 2.0, 1.0, cfg);
  for (Direction d : {Direction::forward, Direction::backward_data, Direction::backward_filter}) {
    ConvProblem pr{d, x, w, dy, p, true};
    if (d == Direction::forward) pr.output = empty_like(dy);
    if (d == Direction::backward_data) pr.input = empty_like(x);
    if (d == Direction::backward_filter) pr.weight = empty_like(w);
    dispatch::AlgoSlot& slot = conv2d_slot(d, DeviceType::CUDA);

    // Every applicable algorithm, forced; the fallback "direct" and any algorithm the heuristic
    // expects to be 50x slower than the best are skipped (they would take seconds).
    double best_cost = 1e300;
    for (int i = 0; i < slot.size(); ++i) {
      const auto& a = slot.get<ConvProblem>(i);
      if (slot.enabled(i) && (!a.applies || a.applies(pr)) && a.heuristic_cost)
        best_cost = std::min(best_cost, a.heuristic_cost(pr));
    }
    for (int i = 0; i < slot.size(); ++i) {
      const auto& a = slot.get<ConvProblem>(i);
      if (!slot.enabled(i) || (a.applies && !a.applies(pr)) || a.name == "direct") continue;
      if (a.heuristic_cost && a.heuristic_cost(pr) > 50 * best_cost) continue;
      bool graphed = false;
      const double ms = time_graphed_ms([&] { run_algorithm(a, pr, arena); }, graphed);
      emit(bench_name(d), "ember:" + a.name, shape, ms, flops,
           a.workspace_bytes ? a.workspace_bytes(pr) : 0, checksum_of(pr.written()), a.name,
           graphed, a.heuristic_cost ? a.heuristic_cost(pr) : -1);
    }

    // The cache's choice in heuristic mode (the default) and in benchmark mode (it times the
    // candidates once, outside capture).
    for (const auto& [mode_value, impl] :
         {std::pair{dispatch::AlgoMode::heuristic, "ember_heuristic"},
          std::pair{dispatch::AlgoMode::benchmark, "ember"}}) {
      dispatch::AlgoModeGuard mode(mode_value);
      const auto& chosen = conv2d_choose(pr);
      bool graphed = false;
      const double ms = time_graphed_ms([&] { run_algorithm(chosen, pr, arena); }, graphed);
      emit(bench_name(d), impl, shape, ms, flops,
           chosen.workspace_bytes ? chosen.workspace_bytes(pr) : 0, checksum_of(pr.written()),
           chosen.name, graphed);
    }
  }
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::printf("{\"bench\":\"conv2d\",\"skipped\":\"no GPU\"}\n");
    return 0;
  }
  const char* only = std::getenv("EMBER_BENCH_CONV_LAYERS");
  const std::string set = only ? only : "";
  if (!set.empty() && set != "resnet50" && set != "cifar18") {
    std::fprintf(stderr,
                 "EMBER_BENCH_CONV_LAYERS must be resnet50 or cifar18 (or unset: both), got '%s'\n",
                 set.c_str());
    return 2;
  }
  set_conv_allow_tf32(true);
  Tensor arena;  // workspace shared by every run (grown to the largest)
  if (set != "cifar18")
    for (const Config& cfg : kConfigs)
      for (const Layer& l : kResnet50Layers) bench_layer(l, cfg, arena);
  if (set != "resnet50")
    for (const Layer& l : kCifar18Layers) bench_layer(l, kConfigs[0], arena);
  const MemoryStats stats = cuda::memory_stats(0);
  std::printf("{\"bench\":\"conv2d_memory\",\"peak_allocated_bytes\":%zu}\n",
              stats.peak_allocated_bytes);
  return 0;
}
