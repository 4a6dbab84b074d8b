// Whole training steps (issue 10), Ember side; bench/models.py is the PyTorch side with the same
// bench/shape keys. The rows are shared/ANCHORS.md's whole-step rows:
//   resnet50_bf16     ResNet-50 (ImageNet stem), 224x224x3, batch 256, bf16 autocast, channels_last
//   resnet50_fp32     the same in float32, NCHW (convolutions may use TF32, PyTorch's default)
//   cifar18_eager     ResNet-18 with the CIFAR stem, 32x32x3, batch 128, bf16, channels_last
//   cifar18_graphed   the same step captured by nn::GraphedStep (a CUDA graph replayed per step)
//   fmnist18_eager    ResNet-18 CIFAR stem on 28x28x1 (Fashion-MNIST shaped), batch 256, bf16,
//                     channels_last
//   fmnist18_graphed  the same, graphed
//   charlm_eager      the char LM of examples/lstm (Embedding(256,256) -> LSTM(256,512, 2 layers,
//                     batch_first) -> Linear(512,256)), batch 64, seq 128, float32, Adam lr 2e-3,
//                     gradient norm clipped at 1 (the example's defaults)
//   charlm_graphed    the same, graphed
//   cifar18_varying_res  (bench/models/varying.cpp) cifar18_eager's model and step, the input
//                     resolution drawn each step from 24..40, once per algorithm mode: total time
// The ResNets are examples/resnet's (resnet.h); the char LM is defined inside
// examples/lstm/main.cpp (not reusable from here), so CharLM below restates it, layer for layer.
// ResNet rows train with SGD (momentum 0.9, weight decay 5e-4, lr 0.02), as the PyTorch side does.
//
// Inputs are synthetic and the same on both sides: image element i (flat, NCHW order) is
// sin(0.001 i + 0.5), label j is (7 j) % classes; token i of the [64, 129] char-LM block is
// (37 i + i / 5) % 256, the input its first 128 columns and the target the last 128. Every step
// trains on that one batch, so the loss must fall: correct-first, each row checks that every loss
// is finite and that the smallest loss of the last third of the steps is below the first step's,
// prints "correct" and exits non-zero if any row fails.
//
// Timing: `--warmup` steps (graphed rows: 3 eager steps, the capture, then replays), then `--steps`
// timed steps with a CUDA event between consecutive steps and no host sync until the end; ms is
// the median step, spread_ms its 10th and 90th percentiles (min_ms, max_ms too), img_per_s or
// tokens_per_s follow from the median. peak_MiB is the device's peak allocated memory during the
// timed steps (everything live: weights, optimizer state, activations), reserved_MiB what the
// allocator held at the end (for graphed rows this includes the graph's private pool). The
// algorithm cache runs in benchmark mode (PyTorch: cudnn.benchmark = True), so that the rows'
// numbers stay comparable; --algo-mode adaptive (or heuristic...) runs them in another mode, each
// row from an empty cache and calling algo_cache().tune_pending() after every step as the
// examples do, and "algo_mode" in the line says which. first_step_ms with --algo-mode adaptive
// beside the default's is the first-step comparison of issue 32; --warmup 20 makes ms the step
// time reached after 20 steps.
//
//   bench_models [--rows cifar18_eager,charlm_eager] [--steps N] [--warmup N] [--device cpu]
//                [--batch N] [--ddp [--sync-bn] [--params-out F] [--params-ref F [--params-tol X]]]
//                [--no-tf32] [--f32] [--algo-mode MODE]
//                [--varying-steps N] [--varying-modes adaptive,benchmark,...] (cifar18_varying_res)
// Data parallel (issue 11): under ember-launch --nproc N (or with --ddp), every rank trains its own
// replica on cuda:LOCAL_RANK (the CPU with --device cpu, over MPI) wrapped in
// DistributedDataParallel, at the row's batch PER RANK; rank r's synthetic batch is the slice
// [r * batch, (r + 1) * batch) of the world's (the same functions of the global index), so world N
// at batch B/N sees exactly world 1's batch B. BN buffers are broadcast from rank 0 every step
// (PyTorch DDP's broadcast_buffers), or the BN layers synchronize their statistics (--sync-bn).
// Rank 0 prints the line with "world" and img_per_s / tokens_per_s over all ranks; the shape key
// ends in " ddpN". --params-out F saves the model's state_dict after the run (rank 0);
// --params-ref F compares it with F's and reports params_max_rel_err (the largest, over tensors, of
// ||a - b|| / ||b||) and the tensor it came from; over --params-tol the row fails. --no-tf32
// keeps float32 convolutions off TF32 and --f32 drops the row's bf16 autocast (for those
// comparisons); a run with --params-out or --params-ref may use any --steps / --warmup >= 1.
// EMBER_BENCH_PROFILE_STEP=1 brackets the last timed step with cudaProfilerStart/Stop, so that
// `ncu --profile-from-start off --graph-profiling node` lists exactly one step's kernels.
// --rows (or EMBER_BENCH_ROWS when --rows is absent) picks rows by id; --device cpu with a small
// --batch is a smoke test of the logic (graphed rows are skipped there: graphs need CUDA).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#ifdef EMBER_WITH_CUDA
#include <cuda_profiler_api.h>
#endif

#include "ember/dispatch/algo_cache.h"
#include "ember/distributed/ddp.h"
#include "ember/distributed/sync_batch_norm.h"
#include "ember/ember.h"
#include "ember/nn/checkpoint.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"
#include "ember/ops/conv.h"
#include "models/varying.h"
#include "resnet/resnet.h"

using namespace ember;
using ember::bench::percentile;
using ember::bench::synthetic_images;
using ember::bench::synthetic_labels;

namespace {

struct RowSpec {
  std::string id;
  std::string model;  // resnet50, resnet18-cifar, resnet18-fmnist, charlm
  int64_t batch;
  bool bf16, channels_last, graphed;
};

const std::vector<RowSpec> kRows = {
    {"resnet50_bf16", "resnet50", 256, true, true, false},
    {"resnet50_fp32", "resnet50", 256, false, false, false},
    {"cifar18_eager", "resnet18-cifar", 128, true, true, false},
    {"cifar18_graphed", "resnet18-cifar", 128, true, true, true},
    {"fmnist18_eager", "resnet18-fmnist", 256, true, true, false},
    {"fmnist18_graphed", "resnet18-fmnist", 256, true, true, true},
    {"charlm_eager", "charlm", 64, false, false, false},
    {"charlm_graphed", "charlm", 64, false, false, true},
};

constexpr int64_t kVocab = 256, kEmbed = 256, kHidden = 512, kLayers = 2, kSeqLen = 128;

// The char LM of examples/lstm/main.cpp (CharLMImpl there), restated: same layers and names.
struct CharLMImpl : nn::Module {
  nn::Embedding embed{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
  CharLMImpl() : nn::Module("CharLM") {
    embed = register_module("embed", nn::Embedding(kVocab, kEmbed));
    lstm = register_module(
        "lstm", nn::LSTM(nn::LSTMOptions(kEmbed, kHidden).num_layers(kLayers).batch_first(true)));
    head = register_module("head", nn::Linear(kHidden, kVocab));
  }
  Tensor forward(const Tensor& tokens) {
    return head->forward(lstm->forward(embed->forward(tokens)).output);
  }
};

// {input [B, T], target [B, T]} from the token block (37 i + i / 5) % 256 of shape [B, T + 1]
// (rows first, first + 1, ... of the world's block).
std::vector<Tensor> synthetic_tokens(int64_t batch, int64_t first, Device device) {
  const int64_t width = kSeqLen + 1;
  std::vector<double> v(static_cast<size_t>(batch * width));
  for (int64_t k = 0; k < batch * width; ++k) {
    const int64_t i = first * width + k;
    v[size_t(k)] = double((37 * i + i / 5) % kVocab);
  }
  Tensor block = from_vector(v, {batch, width}, TensorOptions(DType::i64));
  return {block.narrow(1, 0, kSeqLen).contiguous().to(device),
          block.narrow(1, 1, kSeqLen).contiguous().to(device)};
}

std::string shape_key(const RowSpec& r, int world) {
  std::ostringstream s;
  if (r.model == "resnet50")
    s << "resnet50 224x224x3";
  else if (r.model == "resnet18-cifar")
    s << "resnet18-cifar 32x32x3";
  else if (r.model == "resnet18-fmnist")
    s << "resnet18-cifar 28x28x1";
  else
    s << "charlm T" << kSeqLen;
  s << " b" << r.batch << (r.bf16 ? " bf16" : " f32") << (r.channels_last ? " cl" : "")
    << (r.graphed ? " graphed" : " eager");
  if (world > 0) s << " ddp" << world;
  return s.str();
}

struct Options {
  int64_t steps = 20, warmup = 10, batch_override = 0;
  Device device = Device::cpu();
  std::shared_ptr<distributed::ProcessGroup> group;  // data parallel, else null
  bool sync_bn = false, f32 = false;                 // f32: no bf16 autocast whatever the row says
  dispatch::AlgoMode algo_mode = dispatch::AlgoMode::benchmark;
  bool algo_mode_given = false;  // --algo-mode: each row starts from an empty cache
  std::string params_out, params_ref;
  double params_tol = 0;  // 0: report only
};

// The largest, over the tensors of `mine`, of ||a - b|| / ||b|| (L2; a few elements of a ReLU
// network's activations land on the other side of the kink under another summation order, and
// move their gradients by a whole term: a norm-wise error absorbs them, an elementwise one does
// not) against the same-named tensor of the checkpoint at `path` (a missing or reshaped tensor is
// an error), and that tensor's name.
std::pair<double, std::string> max_rel_err_against(const nn::NamedTensors& mine,
                                                   const std::string& path) {
  autograd::NoGradGuard no_grad;
  const nn::LoadedTensors ref = nn::load_checkpoint(path);
  std::pair<double, std::string> worst{0.0, ""};
  for (const auto& [name, t] : mine) {
    auto it = std::find_if(ref.tensors.begin(), ref.tensors.end(),
                           [&](const auto& e) { return e.first == name; });
    EMBER_CHECK(it != ref.tensors.end(), "--params-ref ", path, " has no tensor '", name, "'");
    EMBER_CHECK(it->second.sizes() == t.sizes(), "--params-ref ", path, ": '", name, "' is ",
                it->second.shape_str(), ", the model's is ", t.shape_str());
    const Tensor a = t.to(Device::cpu(), DType::f64), b = it->second.to(DType::f64);
    const double scale = std::max(std::sqrt(sum(square(b)).item()), 1e-12);
    const double err = std::sqrt(sum(square(a - b)).item()) / scale;
    if (err > worst.first || worst.second.empty()) worst = {err, name};
  }
  return worst;
}

// Runs one row and prints its JSON line; returns whether the loss check passed.
bool run_row(RowSpec row, const Options& o) {
  const Device dev = o.device;
  if (o.batch_override > 0) row.batch = o.batch_override;
  if (o.f32) row.bf16 = false;
  const int rank = o.group ? o.group->rank() : 0, world = o.group ? o.group->world_size() : 1;
  const int64_t first = int64_t(rank) * row.batch;  // this rank's slice of the world's batch
  const std::string shape = shape_key(row, o.group ? world : 0);
  if (row.graphed && !dev.is_cuda()) {
    std::printf(
        "{\"bench\":\"train_step\",\"impl\":\"ember\",\"shape\":\"%s\",\"row\":\"%s\","
        "\"skipped\":\"graphs need a GPU\"}\n",
        shape.c_str(), row.id.c_str());
    std::fflush(stdout);
    return true;
  }
  manual_seed(0);
  const bool charlm = row.model == "charlm";
  const MemoryFormat format =
      row.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;

  // Model, optimizer, one fixed batch, and the step as the examples write it.
  std::shared_ptr<nn::Module> model;
  std::function<Tensor(const Tensor&)> forward;
  std::vector<Tensor> batch;
  if (charlm) {
    auto m = std::make_shared<CharLMImpl>();
    m->to(dev);
    forward = [m](const Tensor& x) { return m->forward(x).reshape({-1, kVocab}); };
    model = m;
    batch = synthetic_tokens(row.batch, first, dev);
  } else {
    resnet::ResNetOptions ro;
    ro.arch = row.model == "resnet50" ? "resnet50" : "resnet18";
    ro.stem = row.model == "resnet50" ? "imagenet" : "cifar";
    ro.in_channels = row.model == "resnet18-fmnist" ? 1 : 3;
    ro.num_classes = row.model == "resnet50" ? 1000 : 10;
    const int64_t size = row.model == "resnet50" ? 224 : row.model == "resnet18-cifar" ? 32 : 28;
    auto m = std::make_shared<resnet::ResNetImpl>(ro);
    m->to(dev);
    if (row.channels_last) m->to(MemoryFormat::channels_last);
    forward = [m](const Tensor& x) { return m->forward(x); };
    model = m;
    batch = {
        synthetic_images({row.batch, ro.in_channels, size, size}, first, dev).contiguous(format),
        synthetic_labels(row.batch, first, ro.num_classes, dev)};
    if (o.group && o.sync_bn) nn::convert_sync_batchnorm(*m, o.group);
  }
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (o.group) ddp = std::make_unique<distributed::DistributedDataParallel>(model, o.group);
  const bool broadcast_buffers = ddp && !charlm && !o.sync_bn;
  std::vector<Tensor> params = model->parameters();
  std::unique_ptr<optim::Optimizer> opt;
  if (charlm)
    opt = std::make_unique<optim::Adam>(params, optim::AdamOptions(2e-3));
  else
    opt = std::make_unique<optim::SGD>(params,
                                       optim::SGDOptions(0.02).momentum(0.9).weight_decay(5e-4));

  auto train_step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      nn::AutocastGuard ac(DType::bf16, row.bf16);
      Tensor x = charlm ? in[0] : in[0].contiguous(format);
      Tensor target = charlm ? in[1].reshape({-1}) : in[1];
      loss = cross_entropy(forward(x).to(DType::f32), target);
    }
    loss.backward();
    if (charlm) nn::clip_grad_norm_(params, 1.0);
    opt->step();
    // Dropped, eager and graphed, as PyTorch's graphed step does (grads allocated inside the
    // graph): no fill and no accumulating add per parameter. With DDP they stay (views of its
    // buckets).
    opt->zero_grad(/*set_to_none=*/!ddp);
    return {loss.detach()};
  };
  nn::GraphedStepOptions go;
  go.enabled = row.graphed;
  nn::GraphedStep step(train_step, go);

  dispatch::AlgoModeGuard algo_mode(o.algo_mode);
  if (o.algo_mode_given) dispatch::algo_cache().clear();
  // As the examples' training loops: in adaptive mode, entries awaiting a timing may be timed
  // after each step (within the step budget).
  const bool step_boundary = o.algo_mode == dispatch::AlgoMode::adaptive;
  const int64_t total = o.warmup + o.steps;
  Tensor losses = zeros({total}, TensorOptions().with_device(dev));
  auto run_step = [&](int64_t i) {
    if (broadcast_buffers) ddp->sync_buffers();  // rank 0's BN statistics, as PyTorch DDP
    Tensor loss = step(batch)[0];
    autograd::NoGradGuard ng;
    losses.select(0, i).copy_(loss);  // a replay overwrites its static output: copy it out
    if (step_boundary) dispatch::algo_cache().tune_pending();
  };
  // The first step pays for choosing algorithms: benchmark mode times every candidate of every new
  // (conv, norm, ...) shape once. Reported as first_step_* (issue 3: "time spent benchmarking on
  // the first step").
  const dispatch::AlgoCacheStats cache_before = dispatch::algo_cache().stats();
  const auto first_t0 = std::chrono::steady_clock::now();
  run_step(0);
  if (dev.is_cuda()) current_stream(dev).synchronize();
  const double first_step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - first_t0)
          .count();
  const dispatch::AlgoCacheStats cache_after = dispatch::algo_cache().stats();
  for (int64_t i = 1; i < o.warmup; ++i) run_step(i);
  const dispatch::AlgoCacheStats cache_warm = dispatch::algo_cache().stats();

  std::vector<double> ms(size_t(o.steps));
  size_t before_bytes = 0;
  auto t0 = std::chrono::steady_clock::now();
  if (dev.is_cuda()) {
    Stream s = current_stream(dev);
    s.synchronize();
    cuda::reset_peak_memory_stats(dev.index);
    before_bytes = cuda::memory_stats(dev.index).allocated_bytes;
    std::vector<Event> marks;
    for (int64_t i = 0; i <= o.steps; ++i) marks.emplace_back(true);
    t0 = std::chrono::steady_clock::now();
    marks[0].record(s);
    const bool profile_last = std::getenv("EMBER_BENCH_PROFILE_STEP") != nullptr;
    for (int64_t i = 0; i < o.steps; ++i) {
      const bool profiled = profile_last && i == o.steps - 1;
#ifdef EMBER_WITH_CUDA
      if (profiled) cudaProfilerStart();
#endif
      run_step(o.warmup + i);
      marks[size_t(i + 1)].record(s);
#ifdef EMBER_WITH_CUDA
      if (profiled) cudaProfilerStop();
#endif
    }
    marks.back().synchronize();
    for (int64_t i = 0; i < o.steps; ++i)
      ms[size_t(i)] = marks[size_t(i)].elapsed_ms(marks[size_t(i + 1)]);
  } else {
    for (int64_t i = 0; i < o.steps; ++i) {
      auto a = std::chrono::steady_clock::now();
      run_step(o.warmup + i);
      ms[size_t(i)] =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    }
  }
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      double(o.steps);

  // Correct first: finite losses that fall on the one repeated batch.
  const std::vector<double> l = losses.cpu().to_vector();
  bool finite = true;
  for (double v : l) finite = finite && std::isfinite(v);
  const int64_t tail = std::max<int64_t>(1, total / 3);
  const double tail_min = *std::min_element(l.end() - tail, l.end());
  const bool ok = finite && tail_min < l.front();

  // Data parallel: the reference comparison of the trained state (rank 0; rank 0 saves it too).
  std::pair<double, std::string> params_err{-1.0, ""};
  bool params_ok = true;
  if (rank == 0 && !o.params_out.empty()) nn::save_state_dict(*model, o.params_out);
  if (rank == 0 && !o.params_ref.empty()) {
    params_err = max_rel_err_against(model->state_dict(), o.params_ref);
    params_ok = o.params_tol <= 0 || params_err.first <= o.params_tol;
  }

  const double median = percentile(ms, 0.5);
  const double items = double(row.batch) * double(world) * (charlm ? double(kSeqLen) : 1.0);
  std::ostringstream j;
  j.precision(6);
  j << "{\"bench\":\"train_step\",\"impl\":\"ember\",\"shape\":\"" << shape << "\",\"row\":\""
    << row.id << "\",\"batch\":" << row.batch << ",\"world\":" << world << ",\""
    << (charlm ? "tokens_per_s" : "img_per_s") << "\":" << std::fixed << items / (median / 1e3)
    << std::defaultfloat << ",\"ms\":" << median << ",\"spread_ms\":[" << percentile(ms, 0.1) << ","
    << percentile(ms, 0.9) << "],\"min_ms\":" << *std::min_element(ms.begin(), ms.end())
    << ",\"max_ms\":" << *std::max_element(ms.begin(), ms.end()) << ",\"wall_ms\":" << wall_ms
    << ",\"steps\":" << o.steps << ",\"warmup\":" << o.warmup
    << ",\"first_step_ms\":" << first_step_ms
    << ",\"first_step_benchmark_ms\":" << cache_after.benchmark_ms - cache_before.benchmark_ms
    << ",\"first_step_shapes_benchmarked\":" << cache_after.benchmarks - cache_before.benchmarks
    << ",\"first_step_candidates_timed\":"
    << cache_after.candidates_timed - cache_before.candidates_timed
    << ",\"first_step_candidates_pruned\":"
    << cache_after.candidates_pruned - cache_before.candidates_pruned << ",\"algo_mode\":\""
    << dispatch::algo_mode_name(o.algo_mode) << "\"";
  if (o.algo_mode == dispatch::AlgoMode::adaptive) {
    // What adaptive mode did over the warm-up steps (the first included).
    j << ",\"warmup_shapes_timed\":" << cache_warm.benchmarks - cache_before.benchmarks
      << ",\"warmup_timing_ms\":" << cache_warm.benchmark_ms - cache_before.benchmark_ms
      << ",\"warmup_borrowed\":" << cache_warm.borrowed - cache_before.borrowed
      << ",\"warmup_retimed\":" << cache_warm.retimed - cache_before.retimed
      << ",\"warmup_budget_fallbacks\":"
      << cache_warm.budget_fallbacks - cache_before.budget_fallbacks
      << ",\"untimed_entries_after_warmup\":" << dispatch::algo_cache().tune_pending();
  }
  if (dev.is_cuda()) {
    const MemoryStats m = cuda::memory_stats(dev.index);
    j << ",\"peak_MiB\":" << double(m.peak_allocated_bytes) / (1 << 20)
      << ",\"reserved_MiB\":" << double(m.reserved_bytes) / (1 << 20)
      << ",\"before_MiB\":" << double(before_bytes) / (1 << 20);
  }
  if (row.graphed) {
    const nn::GraphedStepStats& gs = step.stats();
    j << ",\"graph_captures\":" << gs.captures << ",\"graph_replays\":" << gs.replays
      << ",\"graph_fallbacks\":" << gs.fallbacks;
  }
  if (ddp) {
    j << ",\"ddp_buckets\":" << ddp->stats().num_buckets
      << ",\"sync_bn\":" << (o.sync_bn ? "true" : "false");
  }
  if (params_err.first >= 0) {
    j << ",\"params_max_rel_err\":" << params_err.first << ",\"params_worst\":\""
      << params_err.second << "\",\"params_tol\":" << o.params_tol;
  }
  j << ",\"optimizer\":\"" << (charlm ? "Adam" : "SGD momentum")
    << "\",\"loss_first\":" << l.front() << ",\"loss_last\":" << l.back()
    << ",\"correct\":" << (ok && params_ok ? "true" : "false") << "}";
  if (rank == 0) {
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
  }
  if (!params_ok)
    std::fprintf(
        stderr, "bench_models: row %s: parameters differ from %s by %g (tensor %s; tolerance %g)\n",
        row.id.c_str(), o.params_ref.c_str(), params_err.first, params_err.second.c_str(),
        o.params_tol);
  if (!ok)
    std::fprintf(
        stderr,
        "bench_models: row %s: the loss %s (first %g, smallest of the last %lld steps %g)\n",
        row.id.c_str(), finite ? "did not fall" : "is not finite", l.front(), (long long)tail,
        tail_min);
  if (row.graphed && step.stats().fallbacks > 0)
    std::fprintf(stderr, "bench_models: row %s ran eagerly: %s\n", row.id.c_str(),
                 step.last_fallback_reason().c_str());
  return ok && params_ok;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--rows ID,ID] [--steps N] [--warmup N] [--device cpu|cuda] [--batch N] "
      "[--no-tf32] [--f32]\n"
      "          [--ddp [--sync-bn] [--params-out FILE] [--params-ref FILE [--params-tol X]]]\n"
      "          [--algo-mode MODE] [--varying-steps N] [--varying-modes M,M]\nrows:",
      argv0);
  for (const RowSpec& r : kRows) std::fprintf(stderr, " %s", r.id.c_str());
  std::fprintf(stderr, " %s\n", bench::kVaryingRowId);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string rows_arg, device_arg;
  bool ddp_flag = false, no_tf32 = false;
  bench::VaryingOptions vo;
  std::string varying_modes;
  if (const char* env = std::getenv("EMBER_BENCH_ROWS")) rows_arg = env;
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    if (flag == "--ddp" || flag == "--sync-bn" || flag == "--no-tf32" || flag == "--f32") {
      (flag == "--ddp"       ? ddp_flag
       : flag == "--sync-bn" ? o.sync_bn
       : flag == "--f32"     ? o.f32
                             : no_tf32) = true;
      continue;
    }
    if (a + 1 >= argc) return usage(argv[0]);
    const std::string value = argv[++a];
    try {
      if (flag == "--rows")
        rows_arg = value;
      else if (flag == "--steps")
        o.steps = std::stoll(value);
      else if (flag == "--warmup")
        o.warmup = std::stoll(value);
      else if (flag == "--batch")
        o.batch_override = std::stoll(value);
      else if (flag == "--device")
        device_arg = value;
      else if (flag == "--params-out")
        o.params_out = value;
      else if (flag == "--params-ref")
        o.params_ref = value;
      else if (flag == "--params-tol")
        o.params_tol = std::stod(value);
      else if (flag == "--algo-mode")
        o.algo_mode = dispatch::algo_mode_from_name(value), o.algo_mode_given = true;
      else if (flag == "--varying-steps")
        vo.steps = std::stoll(value);
      else if (flag == "--varying-modes")
        varying_modes = value;
      else
        return usage(argv[0]);
    } catch (const std::exception&) {
      return usage(argv[0]);
    }
  }
  // Graphed rows need 3 eager steps and the capture inside the warm-up; the median needs >= 10.
  // A run that saves or compares parameters is a check, not a timing: any positive counts.
  const bool check_run = !o.params_out.empty() || !o.params_ref.empty();
  if (check_run ? (o.steps < 1 || o.warmup < 1) : (o.steps < 10 || o.warmup < 5)) {
    std::fprintf(stderr,
                 "bench_models: --steps must be >= 10 and --warmup >= 5 (>= 1 with "
                 "--params-out/--params-ref)\n");
    return 2;
  }
  std::vector<RowSpec> selected;
  bool varying_row = false;
  for (const std::string& id : split_list(rows_arg)) {
    if (id == bench::kVaryingRowId) {
      varying_row = true;
      continue;
    }
    auto it =
        std::find_if(kRows.begin(), kRows.end(), [&](const RowSpec& r) { return r.id == id; });
    if (it == kRows.end()) {
      std::fprintf(stderr, "bench_models: unknown row '%s'\n", id.c_str());
      return usage(argv[0]);
    }
    selected.push_back(*it);
  }
  if (selected.empty() && !varying_row) selected = kRows;
  if (!varying_modes.empty()) vo.modes = split_list(varying_modes);
  const bool ddp = ddp_flag || distributed::env_int("WORLD_SIZE", 1) > 1;
  if (o.sync_bn && !ddp) {
    std::fprintf(stderr, "bench_models: --sync-bn needs --ddp (or a launcher's WORLD_SIZE > 1)\n");
    return 2;
  }
  try {
    if (device_arg.empty()) {
      if (!cuda::is_available()) {
        std::printf(
            "{\"bench\":\"train_step\",\"skipped\":\"no GPU (--device cpu runs a smoke test)\"}\n");
        return 0;
      }
      // This rank's GPU under a launcher (cuda:LOCAL_RANK), else the first.
      o.device = Device::cuda(ddp ? distributed::env_int("LOCAL_RANK", 0) : 0);
      cuda::set_device(o.device.index);
    } else {
      o.device = Device(device_arg);
    }
    if (no_tf32) set_conv_allow_tf32(false);
    if (ddp) {
      distributed::InitOptions init;
      init.backend = o.device.is_cuda() ? "nccl" : "mpi";
      o.group = distributed::init_process_group(init);
    }
    bool all_ok = true;
    if (varying_row) {
      EMBER_CHECK(!o.group, "bench_models: ", bench::kVaryingRowId,
                  " runs on one device (no --ddp)");
      vo.device = o.device;
      vo.batch = o.batch_override > 0 ? o.batch_override : vo.batch;
      all_ok = bench::run_varying_resolution_row(vo) && all_ok;
    }
    for (const RowSpec& r : selected) {
      all_ok = run_row(r, o) && all_ok;
      if (o.device.is_cuda()) cuda::empty_cache();  // the next row's peak starts from its own state
    }
    return all_ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_models: %s\n", e.what());
    return 1;
  }
}
