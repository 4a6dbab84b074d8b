// The fused multi-tensor CUDA kernel of the element-wise optimizers (cuda_kernels/optim/
// optim_more.cu: RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam) and SGD / Adam's maximize,
// against the CPU kernels (the reference): several steps over tensors of awkward sizes (1, 33,
// 4097, around the 65536-element chunk, a misaligned view, and more tensors than one launch of
// the per-tensor advance kernel takes), in float32 and bfloat16; the state (step counts, NAdam's
// mu_product) equal; a found_inf step skipped on the device.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/optim.h"
#include "ember/nn/optim_more.h"
#include "support/optim_twins.h"

using namespace ember;
using namespace ember::testing;

namespace {

// 1, 33, 4097, the chunk boundary, then small odd sizes up to 260 tensors (more than the 240 a
// launch of the advance kernel takes).
std::vector<int64_t> awkward_sizes() {
  std::vector<int64_t> sizes = {1, 33, 4097, 65535, 65537, 131073};
  for (int k = 0; sizes.size() < 260; ++k) sizes.push_back(1 + (k * 53) % 211);
  return sizes;
}

}  // namespace

TEST_CASE("fused CUDA element-wise optimizers match the CPU kernels" *
          doctest::skip(!cuda::is_available())) {
  using namespace optim;
  const std::vector<std::pair<const char*, MakeOptimizer>> optimizers = {
      {"RMSprop", maker<RMSprop>(RMSpropOptions(1e-2))},
      {"RMSprop centered+momentum+wd",
       maker<RMSprop>(RMSpropOptions(1e-2).centered(true).momentum(0.9).weight_decay(0.01))},
      {"RMSprop momentum+maximize",
       maker<RMSprop>(RMSpropOptions(1e-2).momentum(0.5).maximize(true))},
      {"RMSprop centered", maker<RMSprop>(RMSpropOptions(1e-2).centered(true))},
      {"Adagrad lr_decay+init+wd",
       maker<Adagrad>(
           AdagradOptions(0.05).lr_decay(0.1).initial_accumulator_value(0.1).weight_decay(0.01))},
      {"Adadelta wd+maximize",
       maker<Adadelta>(AdadeltaOptions().weight_decay(0.01).maximize(true))},
      {"Adamax wd", maker<Adamax>(AdamaxOptions(0.01).weight_decay(0.01))},
      {"NAdam", maker<NAdam>(NAdamOptions(0.01))},
      {"NAdam decoupled+maximize",
       maker<NAdam>(
           NAdamOptions(0.01).weight_decay(0.1).decoupled_weight_decay(true).maximize(true))},
      // beta2 0.9: rho_t passes 5 at step 6, so the last step takes the rectified branch.
      {"RAdam", maker<RAdam>(RAdamOptions(0.01).betas({0.9, 0.9}))},
      {"RAdam decoupled",
       maker<RAdam>(
           RAdamOptions(0.01).betas({0.9, 0.9}).weight_decay(0.1).decoupled_weight_decay(true))},
      {"SGD maximize", maker<SGD>(SGDOptions(0.05).momentum(0.9).maximize(true))},
      {"Adam amsgrad+maximize", maker<Adam>(AdamOptions(0.01).amsgrad(true).maximize(true))},
  };
  const std::vector<int64_t> sizes = awkward_sizes();
  for (const auto& [name, make] : optimizers) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const std::string optimizer_name = name, dtype_label = dtype_name(dtype);
      CAPTURE(optimizer_name);
      CAPTURE(dtype_label);
      Twin t = make_params(sizes, dtype, 21);
      auto cpu_opt = make(t.cpu);
      auto gpu_opt = make(t.gpu);
      for (int step = 0; step < 6; ++step) {
        give_grads(t, 300 + step, dtype);
        cpu_opt->step();
        gpu_opt->step();
      }
      if (dtype == DType::f32)
        check_twins(t, 1e-5, 1e-5, 0.05, 1e-5);
      else
        check_twins(t, 2e-2, 1e-2, 0.1, 1e-5);  // a rounding step of bfloat16, compounded
      const nn::NamedTensors cpu_state = cpu_opt->state_dict(), gpu_state = gpu_opt->state_dict();
      REQUIRE(cpu_state.size() == gpu_state.size());
      for (size_t k = 0; k < cpu_state.size(); ++k) {
        CHECK(gpu_state[k].first == cpu_state[k].first);
        const std::string& entry = cpu_state[k].first;
        if (entry.find(".step") != std::string::npos)
          CHECK(gpu_state[k].second.item() == cpu_state[k].second.item());
        if (entry.find(".mu_product") != std::string::npos)
          CHECK(gpu_state[k].second.item() ==
                doctest::Approx(cpu_state[k].second.item()).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("fused CUDA element-wise optimizers skip a found_inf step on the device" *
          doctest::skip(!cuda::is_available())) {
  using namespace optim;
  Twin t = make_params({1, 33, 4097}, DType::f32, 5);
  NAdam gpu_opt(t.gpu, NAdamOptions(0.01));
  give_grads(t, 9, DType::f32);
  gpu_opt.step();
  std::vector<Tensor> before;
  for (const Tensor& p : t.gpu) before.push_back(p.detach().cpu());
  const nn::NamedTensors state_before = gpu_opt.state_dict();
  std::vector<Tensor> state_copies;
  for (const auto& [n, v] : state_before) state_copies.push_back(v.cpu());
  gpu_opt.step(ones({1}, TensorOptions(DType::f32).with_device(Device::cuda())));
  for (size_t k = 0; k < t.gpu.size(); ++k) CHECK(allclose(t.gpu[k].cpu(), before[k], 0, 0));
  const nn::NamedTensors state_after = gpu_opt.state_dict();
  for (size_t k = 0; k < state_after.size(); ++k)
    CHECK(allclose(state_after[k].second.cpu(), state_copies[k], 0, 0));
}
