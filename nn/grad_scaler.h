// GradScaler: dynamic loss scaling for float16 training, as torch.amp.GradScaler, without any
// host sync. The scale (float32), its growth tracker (int32) and each optimizer's inf/NaN flag
// (float32) live on the device:
//   scale(loss)      loss * scale (a device multiply)
//   unscale_(opt)    one fused pass over the optimizer's gradients: multiplies them by 1/scale and
//                    sets the flag when any element is inf or NaN (call it before clipping)
//   step(opt)        unscale_ if not done yet, then opt.step(flag): the optimizer kernels read the
//                    flag and skip the whole update on the device when it is set
//   update()         backoff (scale *= backoff_factor) when any flag is set, else growth
//                    (scale *= growth_factor) after growth_interval clean steps, on the device
// so a whole fp16 training step, skipped steps included, can be captured in a CUDA graph. The
// only host syncs are the explicit queries (get_scale(), found_inf(...).item()).
//
//   nn::GradScaler scaler;
//   { nn::AutocastGuard ac(DType::f16); loss = criterion(model(x), y); }
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt); nn::clip_grad_norm_(model->parameters(), 1.0);  // optional
//   scaler.step(opt); scaler.update(); opt.zero_grad();
#pragma once
#include <map>
#include <string>

#include "ember/nn/module.h"
#include "ember/nn/optim.h"
#include "ember/nn/options.h"

namespace ember::nn {

// The options of GradScaler, as torch.cuda.amp.GradScaler's arguments (with their defaults).
struct GradScalerOptions {
  EMBER_ARG(double, init_scale) = 65536.0;  // the first loss scale (2^16), > 0
  // The scale is multiplied by growth_factor (> 1) after growth_interval consecutive steps
  // without inf/NaN gradients, and by backoff_factor (in (0, 1)) after a step that had some.
  EMBER_ARG(double, growth_factor) = 2.0;
  EMBER_ARG(double, backoff_factor) = 0.5;
  EMBER_ARG(int64_t, growth_interval) = 2000;
  // Disabled, every call is a pass-through (scale returns the loss, step just steps), so one
  // training loop serves fp32, bf16 and fp16.
  EMBER_ARG(bool, enabled) = true;
};

// Dynamic loss scaling for float16 training, as torch.cuda.amp.GradScaler: scale(loss).backward(),
// step(optimizer), update(); every step, skip and scale change stays on the device (no host sync).
// Not copyable.
class GradScaler {
 public:
  // Checks the options (ranges above); the scale tensor is made at the first scale() call.
  explicit GradScaler(const GradScalerOptions& options = {});
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // outputs * scale, in outputs' dtype. The scale tensor is made on outputs' device at the first
  // call (so make that call eagerly, before any graph capture).
  Tensor scale(const Tensor& outputs);
  // Unscales the gradients of `optimizer`'s parameters in place and records their inf/NaN flag.
  // At most once per optimizer between update() calls.
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ (unless done) and the optimizer step, skipped on the device when the flag is set.
  void step(optim::Optimizer& optimizer);
  // Adjusts the scale from the flags of every optimizer stepped since the last update.
  void update();
  // Sets the scale to `new_scale` (a device fill; the growth tracker is left alone, as in PyTorch).
  void update(double new_scale);

  // Whether it scales (options().enabled()).
  bool is_enabled() const { return options_.enabled(); }
  // The options it was built with.
  const GradScalerOptions& options() const { return options_; }
  // The scale on the host (a host sync; the init scale before the first scale() call).
  double get_scale() const;
  // The device tensors (undefined before the first scale() call).
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker() const { return growth_tracker_; }
  // The flag unscale_ recorded for `optimizer` (float32 one element; 1 when its last step was
  // skipped). Throws when unscale_ has never run for it.
  const Tensor& found_inf(const optim::Optimizer& optimizer) const;

  // "scale" (float32 0-dim) and "growth_tracker" (int32 0-dim), for checkpoints; load converts to
  // the scale's device (or makes the scale on `device` if scale() was never called).
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state, Device device = Device::cpu());

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    Tensor found_inf;  // kept across steps so its address is stable for captured graphs
  };
  void lazy_init(Device device);

  GradScalerOptions options_;
  Tensor scale_;           // float32 0-dim
  Tensor growth_tracker_;  // int32 0-dim
  Tensor combined_found_inf_;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace ember::nn
