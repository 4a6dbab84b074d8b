// The fused multi-tensor CUDA kernels of cuda_kernels/optim/optim.cu against the CPU kernels (the
// reference): SGD / Adam / AdamW over many odd-sized tensors (more tensors than one launch packs,
// a tensor larger than one launch's chunks, a misaligned view), in float32, bfloat16 and float16;
// GradScaler unscaling and its inf/NaN flag; clip_grad_norm_. Then the no-host-sync contract: an
// optimizer step (with a GradScaler) captured in a CUDA graph on the current stream under a
// private memory pool, replayed while a scheduler changes the learning rate between replays and
// while a replay meets an inf gradient, matching eager CPU steps throughout.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/clip_grad.h"
#include "ember/nn/grad_scaler.h"
#include "ember/nn/lr_scheduler.h"
#include "ember/nn/optim.h"
#include "support/optim_twins.h"

using namespace ember;
using namespace ember::testing;

namespace {

// Sizes that exercise the packing: tiny, odd, around the 65536-element chunk, and (`huge`) one
// tensor larger than a launch's 320 chunks, which continues in the next launch; 150 tensors in
// all, more than one launch holds. Index 7 is the largest.
std::vector<int64_t> odd_sizes(bool huge = true) {
  std::vector<int64_t> sizes = {1,     3,     7,      65535,
                                65536, 65537, 131075, huge ? 320 * 65536 + 777 : 3 * 65536 + 9};
  for (int k = 0; sizes.size() < 150; ++k) sizes.push_back(1 + (k * 37) % 301);
  return sizes;
}

}  // namespace

TEST_CASE("fused CUDA optimizers match the CPU kernels over many odd-sized tensors" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<std::pair<const char*, MakeOptimizer>> optimizers = {
      {"SGD momentum+nesterov+wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(
             std::move(p), optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-2));
       }},
      {"SGD plain",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions(0.1));
       }},
      {"SGD dampening",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(std::move(p),
                                             optim::SGDOptions(0.1).momentum(0.5).dampening(0.2));
       }},
      {"Adam+L2",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(std::move(p),
                                              optim::AdamOptions(1e-2).weight_decay(0.1));
       }},
      {"AdamW+amsgrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(std::move(p),
                                               optim::AdamWOptions(1e-2).amsgrad(true));
       }},
  };
  for (const auto& [name, make] : optimizers) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      const std::string optimizer_name = name, dtype_label = dtype_name(dtype);
      CAPTURE(optimizer_name);
      CAPTURE(dtype_label);
      // The huge tensor once per optimizer (float32): packing does not depend on the dtype.
      const std::vector<int64_t> sizes = odd_sizes(dtype == DType::f32);
      Twin t = make_params(sizes, dtype, 11);
      auto cpu_opt = make(t.cpu);
      auto gpu_opt = make(t.gpu);
      for (int step = 0; step < 3; ++step) {
        give_grads(t, 100 + step, dtype);
        cpu_opt->step();
        gpu_opt->step();
      }
      if (dtype == DType::f32)
        check_twins(t, 1e-5, 1e-5, /*outlier_atol=*/0.05);
      else
        check_twins(t, 2e-2, 1e-2);  // one rounding step of the 16-bit types
      const nn::NamedTensors cpu_state = cpu_opt->state_dict(), gpu_state = gpu_opt->state_dict();
      REQUIRE(cpu_state.size() == gpu_state.size());
      for (size_t k = 0; k < cpu_state.size(); ++k)
        if (cpu_state[k].first.find(".step") != std::string::npos)
          CHECK(gpu_state[k].second.item() == cpu_state[k].second.item());
    }
  }
}

TEST_CASE("GradScaler and clip_grad_norm_ on CUDA match the CPU" *
          doctest::skip(!cuda::is_available())) {
  const std::vector<int64_t> sizes = odd_sizes();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string dtype_label = dtype_name(dtype);
    CAPTURE(dtype_label);
    Twin t = make_params(sizes, dtype, 5);
    optim::SGD cpu_opt(t.cpu, optim::SGDOptions(0.1)), gpu_opt(t.gpu, optim::SGDOptions(0.1));
    nn::GradScaler cpu_scaler(nn::GradScalerOptions().init_scale(256));
    nn::GradScaler gpu_scaler(nn::GradScalerOptions().init_scale(256));
    cpu_scaler.scale(scalar_tensor(1.0));
    gpu_scaler.scale(scalar_tensor(1.0, TensorOptions().with_device(Device::cuda())));

    give_grads(t, 7, dtype);
    cpu_scaler.unscale_(cpu_opt);
    gpu_scaler.unscale_(gpu_opt);
    CHECK(gpu_scaler.found_inf(gpu_opt).item() == 0);
    for (size_t k = 0; k < sizes.size(); ++k)
      CHECK(allclose(t.gpu[k].grad().cpu(), t.cpu[k].grad(), 0, 0));
    for (double norm_type : {2.0, 1.0, double(INFINITY)}) {
      CAPTURE(norm_type);
      Tensor cpu_norm = nn::grad_norm(t.cpu, norm_type), gpu_norm = nn::grad_norm(t.gpu, norm_type);
      CHECK(gpu_norm.is_cuda());
      CHECK(gpu_norm.item() == doctest::Approx(cpu_norm.item()).epsilon(1e-5));
    }
    Tensor cpu_norm = nn::clip_grad_norm_(t.cpu, 1.0), gpu_norm = nn::clip_grad_norm_(t.gpu, 1.0);
    CHECK(gpu_norm.item() == doctest::Approx(cpu_norm.item()).epsilon(1e-5));
    for (size_t k = 0; k < sizes.size(); ++k)
      CHECK(allclose(t.gpu[k].grad().cpu(), t.cpu[k].grad(), dtype == DType::f32 ? 1e-5 : 1e-2,
                     1e-6));
    gpu_scaler.step(gpu_opt);
    gpu_scaler.update();
    CHECK(gpu_scaler.get_scale() == 256);

    // One NaN deep inside the big tensor: the flag is set and the step skipped on the device.
    give_grads(t, 8, dtype);
    Tensor big_grad = t.gpu[7].grad();
    big_grad.narrow(0, 320 * 65536 + 5, 1).fill_(std::numeric_limits<double>::quiet_NaN());
    const Tensor before = t.gpu[3].detach().cpu();
    gpu_scaler.step(gpu_opt);
    CHECK(gpu_scaler.found_inf(gpu_opt).item() == 1);
    gpu_scaler.update();
    CHECK(gpu_scaler.get_scale() == 128);
    CHECK(max_abs_diff(t.gpu[3].detach().cpu(), before) == 0);
  }
}

TEST_CASE("an optimizer step with GradScaler and a scheduler is captured once and replayed" *
          doctest::skip(!cuda::is_available())) {
  const Device dev = Device::cuda();
  Stream stream = new_stream(dev);
  StreamGuard stream_guard(stream);
  const std::vector<int64_t> sizes = {5, 70000, 33, 1, 4099};
  Twin sgd_params = make_params(sizes, DType::f32, 21),
       adam_params = make_params(sizes, DType::f32, 22);
  optim::SGD sgd_cpu(sgd_params.cpu, optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
  optim::SGD sgd_gpu(sgd_params.gpu, optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
  optim::AdamW adam_cpu(adam_params.cpu, optim::AdamWOptions(1e-2));
  optim::AdamW adam_gpu(adam_params.gpu, optim::AdamWOptions(1e-2));
  optim::StepLR sched_cpu(sgd_cpu, 1, 0.5), sched_gpu(sgd_gpu, 1, 0.5);
  optim::CosineAnnealingLR cos_cpu(adam_cpu, 4), cos_gpu(adam_gpu, 4);
  nn::GradScaler scaler(nn::GradScalerOptions().init_scale(1.0).growth_interval(1000));
  scaler.scale(scalar_tensor(1.0, TensorOptions().with_device(dev)));

  // The GPU step that gets captured: gradients are filled in place before each replay.
  auto gpu_step = [&] {
    scaler.step(sgd_gpu);
    scaler.step(adam_gpu);
    scaler.update();
  };
  auto fill_grads = [&](uint64_t seed) {
    give_grads(sgd_params, seed, DType::f32);
    give_grads(adam_params, seed + 1000, DType::f32);
  };
  // Warm-up (eager): creates the optimizer state and the GradScaler's flags.
  fill_grads(1);
  gpu_step();
  sgd_cpu.step();
  adam_cpu.step();
  std::vector<Tensor> sgd_grads, adam_grads;  // the GPU gradients' fixed memory
  for (const Tensor& p : sgd_params.gpu) sgd_grads.push_back(p.grad());
  for (const Tensor& p : adam_params.gpu) adam_grads.push_back(p.grad());
  auto refill = [&](uint64_t seed) {
    // New gradients; the GPU ones go into the captured buffers multiplied by the current scale,
    // as a backward of the scaled loss would leave them (the scales are powers of two: exact).
    fill_grads(seed);
    const double scale = scaler.get_scale();
    for (size_t k = 0; k < sizes.size(); ++k) {
      sgd_grads[k].copy_(sgd_params.gpu[k].grad() * scale);
      adam_grads[k].copy_(adam_params.gpu[k].grad() * scale);
      sgd_params.gpu[k].set_grad(sgd_grads[k]);
      adam_params.gpu[k].set_grad(adam_grads[k]);
    }
  };
  stream.synchronize();

  cuda::MemPoolId pool = cuda::new_mem_pool_id();
  cudaGraph_t graph = nullptr;
  {
    cuda::MemPoolScope scope(dev.index, pool);
    REQUIRE(cudaStreamBeginCapture(cudaStream_t(stream.handle), cudaStreamCaptureModeThreadLocal) ==
            cudaSuccess);
    // Rates are written between replays, never into a graph (the check runs before any CUDA call).
    CHECK_THROWS_AS(sgd_gpu.set_lr(0, 1.0), Error);
    gpu_step();  // throws (and the capture fails) if anything synchronizes the host
    REQUIRE(cudaStreamEndCapture(cudaStream_t(stream.handle), &graph) == cudaSuccess);
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);

  for (int replay = 0; replay < 4; ++replay) {
    CAPTURE(replay);
    sched_cpu.step();  // new learning rates, written to the device scalars: no re-capture
    sched_gpu.step();
    cos_cpu.step();
    cos_gpu.step();
    refill(10 + replay);
    const bool poisoned = replay == 2;
    if (poisoned) adam_grads[1].narrow(0, 123, 1).fill_(std::numeric_limits<double>::infinity());
    REQUIRE(cudaGraphLaunch(exec, cudaStream_t(stream.handle)) == cudaSuccess);
    stream.synchronize();
    // The poisoned replay skips AdamW on the device (its gradients hold the inf); SGD, whose
    // flag is clean, steps, and the shared scale backs off.
    sgd_cpu.step();
    if (!poisoned) adam_cpu.step();
    check_twins(sgd_params, 1e-5, 1e-6);
    check_twins(adam_params, 1e-5, 1e-6);
    CHECK(scaler.get_scale() == (replay < 2 ? 1.0 : 0.5));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
