// GradScaler (nn/grad_scaler.h): loss scaling with the scale, growth tracker and inf/NaN flags in
// device memory; unscaling and the scale update are fused kernels (kernel_interface/optim.h).
#include "ember/nn/grad_scaler.h"

#include "ember/kernel_interface/optim.h"
#include "ember/tensor/runtime/cuda_graph.h"

namespace ember::nn {

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options) {
  EMBER_CHECK(options.init_scale() > 0, "GradScaler: init_scale ", options.init_scale(),
              " must be positive");
  EMBER_CHECK(options.growth_factor() > 1, "GradScaler: growth_factor ", options.growth_factor(),
              " must be above 1");
  EMBER_CHECK(options.backoff_factor() > 0 && options.backoff_factor() < 1,
              "GradScaler: "
              "backoff_factor ",
              options.backoff_factor(), " must be in (0, 1)");
  EMBER_CHECK(options.growth_interval() > 0 && options.growth_interval() <= INT32_MAX,
              "GradScaler: growth_interval ", options.growth_interval(),
              " must be a positive int32");
}

void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) return;
  EMBER_CHECK(!cuda::current_stream_capturing(device),
              "GradScaler: the first scale() call makes "
              "the scale tensor; make it eagerly (a warm-up step) before capturing a CUDA graph");
  scale_ = full({}, options_.init_scale(), TensorOptions(DType::f32).with_device(device));
  growth_tracker_ = zeros({}, TensorOptions(DType::i32).with_device(device));
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!options_.enabled()) return outputs;
  EMBER_CHECK(outputs.defined(), "GradScaler.scale: outputs is undefined");
  lazy_init(outputs.device());
  EMBER_CHECK(outputs.device() == scale_.device(), "GradScaler.scale: outputs are on ",
              outputs.device().str(), " but the scale lives on ", scale_.device().str(),
              "; use one GradScaler per device");
  return mul(outputs, scale_);
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  EMBER_CHECK(scale_.defined(),
              "GradScaler.unscale_: the scale does not exist yet; call "
              "scaler.scale(loss) and backward on it before unscaling");
  PerOptimizer& state = per_optimizer_[&optimizer];
  EMBER_CHECK(state.stage == Stage::ready, "GradScaler.unscale_: ",
              state.stage == Stage::unscaled
                  ? "unscale_() was already called on this optimizer since the last update()"
                  : "unscale_() is being called after step(); call it before step()");
  const Device device = scale_.device();
  autograd::NoGradGuard no_grad;
  if (!state.found_inf.defined()) {
    EMBER_CHECK(!cuda::current_stream_capturing(device),
                "GradScaler.unscale_: the first unscale_ "
                "of an optimizer makes its inf/NaN flag; run it eagerly before capturing a graph");
    state.found_inf = zeros({}, TensorOptions(DType::f32).with_device(device));
  } else {
    state.found_inf.zero_();
  }
  const GradsByDtype grads = group_grads_by_dtype(optimizer.parameters(), "GradScaler.unscale_",
                                                  "use one GradScaler per device");
  EMBER_CHECK(grads.lists.empty() || grads.device == device,
              "GradScaler.unscale_: the gradients "
              "are on ",
              grads.device.str(), " but the scale is on ", device.str(),
              "; use one GradScaler per device");
  for (const auto& [dtype, list] : grads.lists) {
    unscale_kernel().get(device.type, dtype)(list, scale_, state.found_inf);
    for (const Tensor& g : list) g.bump_version();
  }
  state.stage = Stage::unscaled;
}

void GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    optimizer.step();
    return;
  }
  auto it = per_optimizer_.find(&optimizer);
  if (it == per_optimizer_.end() || it->second.stage == Stage::ready) unscale_(optimizer);
  PerOptimizer& state = per_optimizer_[&optimizer];
  EMBER_CHECK(state.stage == Stage::unscaled,
              "GradScaler.step: step() was already called on this "
              "optimizer since the last update()");
  optimizer.step(state.found_inf);
  state.stage = Stage::stepped;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  std::vector<Tensor> flags;
  for (auto& [opt, state] : per_optimizer_)
    if (state.stage != Stage::ready) flags.push_back(state.found_inf);
  EMBER_CHECK(!flags.empty(),
              "GradScaler.update: no inf checks were recorded since the last "
              "update(); call scaler.step(optimizer) (or unscale_) first");
  autograd::NoGradGuard no_grad;
  Tensor found = flags[0];
  if (flags.size() > 1) {
    if (!combined_found_inf_.defined() || combined_found_inf_.device() != scale_.device())
      combined_found_inf_ = zeros({}, TensorOptions(DType::f32).with_device(scale_.device()));
    combined_found_inf_.copy_(flags[0]);
    for (size_t i = 1; i < flags.size(); ++i) add_(combined_found_inf_, flags[i]);
    found = combined_found_inf_;
  }
  update_scale_kernel().get(scale_.device().type, DType::f32)(
      scale_, growth_tracker_, found, options_.growth_factor(), options_.backoff_factor(),
      options_.growth_interval());
  for (auto& [opt, state] : per_optimizer_) state.stage = Stage::ready;
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled()) return;
  EMBER_CHECK(scale_.defined(), "GradScaler.update(new_scale): call scale() first");
  EMBER_CHECK(new_scale > 0, "GradScaler.update: new_scale ", new_scale, " must be positive");
  scale_.fill_(new_scale);
  for (auto& [opt, state] : per_optimizer_) state.stage = Stage::ready;
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) return 1.0;
  return scale_.defined() ? scale_.item() : options_.init_scale();
}

const Tensor& GradScaler::found_inf(const optim::Optimizer& optimizer) const {
  auto it = per_optimizer_.find(&optimizer);
  EMBER_CHECK(it != per_optimizer_.end() && it->second.found_inf.defined(),
              "GradScaler.found_inf: "
              "unscale_ (or step) never ran for this optimizer");
  return it->second.found_inf;
}

NamedTensors GradScaler::state_dict() const {
  if (scale_.defined()) return {{"scale", scale_}, {"growth_tracker", growth_tracker_}};
  return {{"scale", full({}, options_.init_scale(), TensorOptions(DType::f32))},
          {"growth_tracker", zeros({}, TensorOptions(DType::i32))}};
}

void GradScaler::load_state_dict(const NamedTensors& state, Device device) {
  Tensor scale, tracker;
  for (const auto& [name, t] : state) {
    EMBER_CHECK(name == "scale" || name == "growth_tracker",
                "GradScaler.load_state_dict: "
                "unexpected entry '",
                name, "' (expected \"scale\" and \"growth_tracker\")");
    EMBER_CHECK(t.defined() && t.numel() == 1, "GradScaler.load_state_dict: '", name,
                "' must hold one value");
    (name == "scale" ? scale : tracker) = t;
  }
  EMBER_CHECK(scale.defined() && tracker.defined(), "GradScaler.load_state_dict: missing ",
              scale.defined() ? "\"growth_tracker\"" : "\"scale\"");
  autograd::NoGradGuard no_grad;
  lazy_init(scale_.defined() ? scale_.device() : device);
  scale_.copy_(scale.reshape({}));
  growth_tracker_.copy_(tracker.reshape({}));
  for (auto& [opt, s] : per_optimizer_) s.stage = Stage::ready;
}

}  // namespace ember::nn
