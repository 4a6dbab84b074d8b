// bench_models' varying-resolution row (issue 32), cifar18_varying_res: bench/models.cpp's
// cifar18_eager model and step (CIFAR ResNet-18, bf16 autocast, channels_last, batch 128, SGD
// momentum 0.9, weight decay 5e-4, lr 0.02), where every step's input resolution is drawn from
// 24..40 (17 sizes) by a 64-bit LCG, x = x * 6364136223846793005 + 1442695040888963407 from
// x = 2026, resolution = 24 + (x >> 33) % 17, for 60 steps. The images of resolution r are the
// nearest-neighbour resampling of one 40x40 synthetic batch (resample below: pixel i takes pixel
// i * 40 / r), so every step shows the same samples and the loss falls. bench/models.py's row of
// the same id draws the same sequence from the same data.
//
// One loop per algorithm mode, each on a fresh model from an empty algorithm cache, timed as a
// whole (host clock, the device synchronized before and after): total_s is what a user waits.
// Before them, two untimed heuristic-mode steps at 32x32 load the kernels and the allocator's
// first blocks, then the cache is cleared. Each line reports the cache's work during the loop
// (shapes timed, time spent timing, borrowed, re-timed, budget fallbacks) and, for the graphed
// loop (nn::GraphedStep; resolutions zero-padded up to a multiple of 8, so three graphs), its
// captures and replays.
#include "models/varying.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ember/dispatch/algo_cache.h"
#include "ember/ember.h"
#include "ember/nn/graphed_step.h"
#include "ember/nn/nn.h"
#include "resnet/resnet.h"

namespace ember::bench {

namespace {

std::vector<int64_t> resolution_sequence(const VaryingOptions& o) {
  uint64_t x = 2026;
  std::vector<int64_t> seq;
  for (int64_t i = 0; i < o.steps; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    seq.push_back(o.min_res + int64_t((x >> 33) % uint64_t(o.max_res - o.min_res + 1)));
  }
  return seq;
}

// Nearest-neighbour resampling of [N, C, S, S] to [N, C, r, r]: index i takes i * S / r.
Tensor resample(const Tensor& x, int64_t r) {
  const int64_t s = x.size(2);
  if (r == s) return x;
  std::vector<double> idx(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) idx[size_t(i)] = double(i * s / r);
  Tensor index = from_vector(idx, {r}, TensorOptions(DType::i64)).to(x.device());
  return index_select(index_select(x, 2, index), 3, index);
}

// [N, C, r, r] zero-padded at the bottom and right to [N, C, b, b], b = r rounded up to 8.
Tensor pad_to_bucket(const Tensor& x) {
  const int64_t r = x.size(2), b = (r + 7) / 8 * 8;
  if (b == r) return x;
  Tensor out = zeros({x.size(0), x.size(1), b, b}, TensorOptions().with_device(x.device()));
  out.narrow(2, 0, r).narrow(3, 0, r).copy_(x);
  return out;
}

struct Model {
  std::shared_ptr<resnet::ResNetImpl> net;
  std::unique_ptr<optim::SGD> opt;
};

Model make_model(Device dev) {
  manual_seed(0);
  resnet::ResNetOptions ro;
  ro.arch = "resnet18";
  ro.stem = "cifar";
  ro.in_channels = 3;
  ro.num_classes = 10;
  Model m;
  m.net = std::make_shared<resnet::ResNetImpl>(ro);
  m.net->to(dev);
  m.net->to(MemoryFormat::channels_last);
  m.opt = std::make_unique<optim::SGD>(m.net->parameters(),
                                       optim::SGDOptions(0.02).momentum(0.9).weight_decay(5e-4));
  return m;
}

nn::GraphedStep::StepFn train_step_of(Model& m) {
  return [&m](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      nn::AutocastGuard ac(DType::bf16, true);
      loss = cross_entropy(
          m.net->forward(in[0].contiguous(MemoryFormat::channels_last)).to(DType::f32), in[1]);
    }
    loss.backward();
    m.opt->step();
    m.opt->zero_grad(/*set_to_none=*/true);
    return {loss.detach()};
  };
}

void synchronize(Device dev) {
  if (dev.is_cuda()) current_stream(dev).synchronize();
}

}  // namespace

bool run_varying_resolution_row(const VaryingOptions& o) {
  const Device dev = o.device;
  const std::vector<int64_t> seq = resolution_sequence(o);
  const Tensor base = synthetic_images({o.batch, 3, o.max_res, o.max_res}, 0, dev)
                          .contiguous(MemoryFormat::channels_last);
  const Tensor labels = synthetic_labels(o.batch, 0, 10, dev);
  // Every resolution's batch, made before any loop (and its bucket-padded copy for graphs).
  std::vector<Tensor> images(size_t(o.max_res + 1)), padded(size_t(o.max_res + 1));
  int distinct = 0;
  for (int64_t r = o.min_res; r <= o.max_res; ++r) {
    images[size_t(r)] = resample(base, r).contiguous(MemoryFormat::channels_last);
    padded[size_t(r)] = pad_to_bucket(images[size_t(r)]).contiguous(MemoryFormat::channels_last);
  }
  {
    std::vector<bool> seen(size_t(o.max_res + 1), false);
    for (int64_t r : seq) {
      distinct += seen[size_t(r)] ? 0 : 1;
      seen[size_t(r)] = true;
    }
  }
  {
    // Kernels loaded and the allocator's first blocks made, outside every timed loop.
    dispatch::AlgoModeGuard heuristic(dispatch::AlgoMode::heuristic);
    Model warm = make_model(dev);
    auto step = train_step_of(warm);
    for (int i = 0; i < 2; ++i) step({images[size_t(std::min<int64_t>(32, o.max_res))], labels});
    synchronize(dev);
  }

  bool all_ok = true;
  for (const std::string& mode_name : o.modes) {
    const bool graphed = mode_name == "graphed", tune = mode_name == "adaptive_tune";
    const dispatch::AlgoMode mode =
        graphed || tune ? dispatch::AlgoMode::adaptive : dispatch::algo_mode_from_name(mode_name);
    std::ostringstream j;
    j << "{\"bench\":\"train_step\",\"impl\":\"ember\",\"shape\":\"resnet18-cifar " << o.min_res
      << ".." << o.max_res << "x3 b" << o.batch << " bf16 cl varying\",\"row\":\"" << kVaryingRowId
      << "\",\"mode\":\"" << mode_name << "\"";
    if (graphed && !dev.is_cuda()) {
      std::printf("%s,\"skipped\":\"graphs need a GPU\"}\n", j.str().c_str());
      continue;
    }
    dispatch::algo_cache().clear();
    dispatch::AlgoModeGuard guard(mode);
    Model m = make_model(dev);
    nn::GraphedStepOptions go;
    go.enabled = graphed;
    nn::GraphedStep step(train_step_of(m), go);
    Tensor losses = zeros({o.steps}, TensorOptions().with_device(dev));

    const dispatch::AlgoCacheStats before = dispatch::algo_cache().stats();
    synchronize(dev);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.steps; ++i) {
      const int64_t r = seq[size_t(i)];
      Tensor loss = step({graphed ? padded[size_t(r)] : images[size_t(r)], labels})[0];
      {
        autograd::NoGradGuard ng;
        losses.select(0, i).copy_(loss);
      }
      if (tune) dispatch::algo_cache().tune_pending();
    }
    synchronize(dev);
    const double total_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const dispatch::AlgoCacheStats after = dispatch::algo_cache().stats();

    const std::vector<double> l = losses.cpu().to_vector();
    bool finite = true;
    for (double v : l) finite = finite && std::isfinite(v);
    const size_t tail = std::max<size_t>(1, l.size() / 3);
    double tail_min = l.back();
    for (size_t i = l.size() - tail; i < l.size(); ++i) tail_min = std::min(tail_min, l[i]);
    const bool ok = finite && tail_min < l.front();
    all_ok = all_ok && ok;

    j << ",\"algo_mode\":\"" << dispatch::algo_mode_name(mode) << "\",\"total_s\":" << total_s
      << ",\"steps\":" << o.steps << ",\"distinct_resolutions\":" << distinct
      << ",\"shapes_timed\":" << after.benchmarks - before.benchmarks
      << ",\"timing_ms\":" << after.benchmark_ms - before.benchmark_ms
      << ",\"candidates_timed\":" << after.candidates_timed - before.candidates_timed
      << ",\"misses\":" << after.misses - before.misses
      << ",\"borrowed\":" << after.borrowed - before.borrowed
      << ",\"retimed\":" << after.retimed - before.retimed
      << ",\"budget_fallbacks\":" << after.budget_fallbacks - before.budget_fallbacks
      << ",\"heuristic_choices\":" << after.heuristic_choices - before.heuristic_choices
      << ",\"capture_fallbacks\":" << after.capture_fallbacks - before.capture_fallbacks;
    if (graphed) {
      const nn::GraphedStepStats& gs = step.stats();
      j << ",\"graph_captures\":" << gs.captures << ",\"graph_replays\":" << gs.replays
        << ",\"graph_eager_steps\":" << gs.eager_steps << ",\"graph_fallbacks\":" << gs.fallbacks;
    }
    j << ",\"optimizer\":\"SGD momentum\",\"loss_first\":" << l.front()
      << ",\"loss_last\":" << l.back() << ",\"correct\":" << (ok ? "true" : "false") << "}";
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
    if (!ok)
      std::fprintf(
          stderr,
          "bench_models: %s (%s): the loss %s (first %g, smallest of the last %zu steps %g)\n",
          kVaryingRowId, mode_name.c_str(), finite ? "did not fall" : "is not finite", l.front(),
          tail, tail_min);
    if (graphed && step.stats().fallbacks > 0)
      std::fprintf(stderr, "bench_models: %s (graphed) ran eagerly: %s\n", kVaryingRowId,
                   step.last_fallback_reason().c_str());
    synchronize(dev);
  }
  return all_ok;
}

}  // namespace ember::bench
