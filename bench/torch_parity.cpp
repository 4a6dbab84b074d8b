// Parity with PyTorch of the layers of issues #4 and #5, Ember side; bench/torch_parity.py is the
// PyTorch side (scripts/gpu_run.sh runs it right after this executable). Each case runs one op on
// the CUDA device when there is one (else the CPU) with seeded random inputs, backpropagates a
// random upstream gradient through autograd, and writes DIR/<case>.safetensors holding
//   input.<name>        the inputs, named as the torch.nn.functional argument they are (input.x is
//                       the first, positional one; targets, class weights and running statistics
//                       BEFORE the op are inputs too), and input.grad_output, the upstream gradient
//   ember.output        Ember's output
//   ember.grad.<name>   Ember's gradient of every differentiable input
//   ember.<name>        state the op updates in place (batch/instance norm running statistics)
// with metadata "op" (the torch.nn.functional / torch function), "params" (its other keyword
// arguments as a JSON object, the same values Ember's parameters are built from), "dtype",
// "device" and "channels_last" (a JSON list of the inputs given in channels_last layout).
// float32 runs with TF32 off (convolutions and matmuls); a subset runs in bfloat16.
//
//   bench_torch_parity [--export DIR]   DIR defaults to $EMBER_TORCH_PARITY_DIR, else
//                                       /tmp/ember_torch_parity (not under $OUT: only 8 files come
//                                       back from the GPU machine, and these would crowd out the
//                                       logs)
// The .safetensors files already in DIR are removed first, so the script never checks a stale one.
// One JSON line per case: {"bench":"torch_parity","impl":"ember","shape":"<case>","written":true}.
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/checkpoint.h"

using namespace ember;
using json = nlohmann::json;

namespace {

// One case in the making: its random inputs, the op's result and gradients, then the file.
class CaseRecorder {
 public:
  CaseRecorder(Device device, DType dtype) : device_(device), dtype_(dtype) {}

  DType dtype() const { return dtype_; }

  // How random() draws an input: shift + scale * N(0, 1), in `dtype` (the case's when unset).
  struct Draw {
    bool channels_last = false;
    double scale = 1.0, shift = 0.0;
    std::optional<DType> dtype = std::nullopt;
  };

  // A random differentiable input leaf on the device; its gradient is recorded by finish().
  Tensor random(const std::string& name, const Shape& shape, const Draw& draw) {
    Tensor t =
        (randn(shape, TensorOptions(DType::f32).with_device(device_)) * draw.scale + draw.shift)
            .to(draw.dtype.value_or(dtype_));
    if (draw.channels_last) {
      t = t.contiguous(MemoryFormat::channels_last);
      channels_last_.push_back(name);
    }
    t = t.detach().set_requires_grad(true);
    tensors_.emplace_back("input." + name, t.detach());
    leaves_.emplace_back(name, t);
    return t;
  }
  Tensor random(const std::string& name, const Shape& shape) { return random(name, shape, Draw{}); }

  // A given (non-differentiable) input, moved to the device. The file keeps a copy, so an op
  // updating it in place (running statistics) does not change what was recorded as its input.
  Tensor given(const std::string& name, const Tensor& value) {
    Tensor t = value.to(device_);
    tensors_.emplace_back("input." + name, t.clone());
    return t;
  }

  void set_op(std::string op, json params) {
    op_ = std::move(op);
    params_ = std::move(params);
  }

  // The op's output: draws the upstream gradient, backpropagates it and records the output and
  // the gradient of every differentiable input.
  void finish(const Tensor& output) {
    Tensor grad_output =
        randn(output.sizes(), TensorOptions(DType::f32).with_device(device_)).to(output.dtype());
    output.backward(grad_output);
    tensors_.emplace_back("input.grad_output", grad_output);
    tensors_.emplace_back("ember.output", output.detach());
    for (const auto& [name, leaf] : leaves_) {
      EMBER_CHECK_STATUS(leaf.grad().defined(), internal, "torch_parity: op ", op_,
                         " produced no gradient for its input '", name, "'");
      tensors_.emplace_back("ember.grad." + name, leaf.grad());
    }
  }

  // State the op updated in place, recorded after it ran.
  void state(const std::string& name, const Tensor& t) {
    tensors_.emplace_back("ember." + name, t.detach());
  }

  void save(const std::string& path) const {
    nn::CheckpointMetadata meta = {
        {"op", op_},
        {"params", params_.dump()},
        {"dtype", dtype_name(dtype_)},
        {"device", device_.str()},
        {"channels_last", json(channels_last_).dump()},
    };
    nn::save_checkpoint(path, tensors_, meta);
  }

 private:
  Device device_;
  DType dtype_;
  std::string op_;
  json params_;
  nn::NamedTensors tensors_;
  std::vector<std::pair<std::string, Tensor>> leaves_;
  std::vector<std::string> channels_last_;
};

std::array<int64_t, 2> pair_of(const json& v) {
  return {v.at(0).get<int64_t>(), v.at(1).get<int64_t>()};
}
std::array<int64_t, 3> triple_of(const json& v) {
  return {v.at(0).get<int64_t>(), v.at(1).get<int64_t>(), v.at(2).get<int64_t>()};
}
IntList list_of(const json& v) { return v.get<IntList>(); }

// ---- the op families
// ------------------------------------------------------------------------------

// conv2d of x [N, C, H, W] with weight [K, C / groups, R, S] and a bias; p: stride, padding (a
// pair, or "same" / "valid"), dilation, groups.
void conv2d_case(CaseRecorder& r, const Shape& x_shape, const Shape& w_shape, const json& p,
                 bool channels_last = false) {
  r.set_op("conv2d", p);
  Conv2dParams cp;
  cp.stride = pair_of(p.at("stride"));
  cp.dilation = pair_of(p.at("dilation"));
  cp.groups = p.at("groups").get<int64_t>();
  if (p.at("padding").is_string()) {
    cp.padding_mode = p.at("padding") == "same" ? ConvPaddingMode::same : ConvPaddingMode::valid;
  } else {
    cp.padding = pair_of(p.at("padding"));
  }
  // Weights scaled as a default-initialised layer's (1 / sqrt(fan_in)), so outputs stay O(1).
  const double fan_in = double(w_shape[1] * w_shape[2] * w_shape[3]);
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last});
  Tensor w = r.random("weight", w_shape,
                      {.channels_last = channels_last, .scale = 1.0 / std::sqrt(fan_in)});
  Tensor b = r.random("bias", {w_shape[0]});
  r.finish(conv2d(x, w, b, cp));
}

void conv3d_case(CaseRecorder& r, const Shape& x_shape, const Shape& w_shape, const json& p) {
  r.set_op("conv3d", p);
  Conv3dParams cp;
  cp.stride = triple_of(p.at("stride"));
  cp.padding = triple_of(p.at("padding"));
  cp.dilation = triple_of(p.at("dilation"));
  cp.groups = p.at("groups").get<int64_t>();
  const double fan_in = double(w_shape[1] * w_shape[2] * w_shape[3] * w_shape[4]);
  Tensor x = r.random("x", x_shape);
  Tensor w = r.random("weight", w_shape, {.scale = 1.0 / std::sqrt(fan_in)});
  Tensor b = r.random("bias", {w_shape[0]});
  r.finish(conv3d(x, w, b, cp));
}

// conv_transpose2d of x [N, Cin, H, W] with weight [Cin, Cout / groups, R, S] and a bias.
void conv_transpose2d_case(CaseRecorder& r, const Shape& x_shape, const Shape& w_shape,
                           const json& p, bool channels_last = false) {
  r.set_op("conv_transpose2d", p);
  ConvTranspose2dParams cp;
  cp.stride = pair_of(p.at("stride"));
  cp.padding = pair_of(p.at("padding"));
  cp.output_padding = pair_of(p.at("output_padding"));
  cp.dilation = pair_of(p.at("dilation"));
  cp.groups = p.at("groups").get<int64_t>();
  const double fan_in = double(w_shape[1] * w_shape[2] * w_shape[3]);
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last});
  Tensor w = r.random("weight", w_shape,
                      {.channels_last = channels_last, .scale = 1.0 / std::sqrt(fan_in)});
  Tensor b = r.random("bias", {w_shape[1] * cp.groups});
  r.finish(conv_transpose2d(x, w, b, cp));
}

// Affine parameters of a norm layer: float32 for a bfloat16 input (mixed precision), else the
// input's dtype. weight ~ 1 + N(0, 0.25^2) so that it is not symmetric around 0.
DType norm_param_dtype(const CaseRecorder& r) {
  return r.dtype() == DType::bf16 ? DType::f32 : r.dtype();
}

std::pair<Tensor, Tensor> norm_affine(CaseRecorder& r, const Shape& shape) {
  const DType pd = norm_param_dtype(r);
  Tensor w = r.random("weight", shape, {.scale = 0.25, .shift = 1.0, .dtype = pd});
  Tensor b = r.random("bias", shape, {.scale = 0.5, .dtype = pd});
  return {w, b};
}

// Running statistics as after some training: mean ~ N(0, 0.3^2), var in [0.5, 1.5).
std::pair<Tensor, Tensor> running_stats(CaseRecorder& r, int64_t C) {
  const TensorOptions o(norm_param_dtype(r));
  Tensor mean = r.given("running_mean", randn({C}, o) * 0.3);
  Tensor var = r.given("running_var", rand({C}, o) + 0.5);
  return {mean, var};
}

// batch_norm of x [N, C, ...]; training with running statistics updated, or eval.
void batch_norm_case(CaseRecorder& r, const Shape& x_shape, bool training,
                     bool channels_last = false) {
  const double momentum = 0.1, eps = 1e-5;
  r.set_op("batch_norm", {{"training", training}, {"momentum", momentum}, {"eps", eps}});
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last, .scale = 2.0});
  auto [mean, var] = running_stats(r, x_shape[1]);
  auto [w, b] = norm_affine(r, {x_shape[1]});
  r.finish(batch_norm(x, w, b, mean, var, training, momentum, eps));
  if (training) {
    r.state("running_mean", mean);
    r.state("running_var", var);
  }
}

void layer_norm_case(CaseRecorder& r, const Shape& x_shape, const Shape& normalized_shape) {
  const double eps = 1e-5;
  r.set_op("layer_norm", {{"normalized_shape", normalized_shape}, {"eps", eps}});
  Tensor x = r.random("x", x_shape, {.scale = 2.0});
  auto [w, b] = norm_affine(r, normalized_shape);
  r.finish(layer_norm(x, normalized_shape, w, b, eps));
}

void group_norm_case(CaseRecorder& r, const Shape& x_shape, int64_t groups,
                     bool channels_last = false) {
  const double eps = 1e-5;
  r.set_op("group_norm", {{"num_groups", groups}, {"eps", eps}});
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last, .scale = 2.0});
  auto [w, b] = norm_affine(r, {x_shape[1]});
  r.finish(group_norm(x, groups, w, b, eps));
}

// instance_norm with batch statistics (use_input_stats) updating running statistics, or with the
// running statistics (eval).
void instance_norm_case(CaseRecorder& r, const Shape& x_shape, bool use_input_stats) {
  const double momentum = 0.1, eps = 1e-5;
  r.set_op("instance_norm",
           {{"use_input_stats", use_input_stats}, {"momentum", momentum}, {"eps", eps}});
  Tensor x = r.random("x", x_shape, {.scale = 2.0});
  auto [mean, var] = running_stats(r, x_shape[1]);
  auto [w, b] = norm_affine(r, {x_shape[1]});
  r.finish(instance_norm(x, w, b, mean, var, use_input_stats, momentum, eps));
  if (use_input_stats) {
    r.state("running_mean", mean);
    r.state("running_var", var);
  }
}

// max_pool{1,2,3}d: p has kernel_size, stride, padding, dilation, ceil_mode (lists per dim).
void max_pool_case(CaseRecorder& r, int dims, const Shape& x_shape, const json& p,
                   bool channels_last = false) {
  const std::string op = "max_pool" + std::to_string(dims) + "d";
  r.set_op(op, p);
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last});
  const IntList k = list_of(p.at("kernel_size")), s = list_of(p.at("stride")),
                pad = list_of(p.at("padding")), d = list_of(p.at("dilation"));
  const bool ceil = p.at("ceil_mode").get<bool>();
  Tensor y = dims == 1   ? max_pool1d(x, k, s, pad, d, ceil)
             : dims == 2 ? max_pool2d(x, k, s, pad, d, ceil)
                         : max_pool3d(x, k, s, pad, d, ceil);
  r.finish(y);
}

// avg_pool{1,2,3}d: p has kernel_size, stride, padding, ceil_mode, count_include_pad.
void avg_pool_case(CaseRecorder& r, int dims, const Shape& x_shape, const json& p,
                   bool channels_last = false) {
  const std::string op = "avg_pool" + std::to_string(dims) + "d";
  r.set_op(op, p);
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last});
  const IntList k = list_of(p.at("kernel_size")), s = list_of(p.at("stride")),
                pad = list_of(p.at("padding"));
  const bool ceil = p.at("ceil_mode").get<bool>(), include = p.at("count_include_pad").get<bool>();
  Tensor y = dims == 1   ? avg_pool1d(x, k, s, pad, ceil, include)
             : dims == 2 ? avg_pool2d(x, k, s, pad, ceil, include)
                         : avg_pool3d(x, k, s, pad, ceil, include);
  r.finish(y);
}

void adaptive_avg_pool_case(CaseRecorder& r, int dims, const Shape& x_shape,
                            const IntList& output_size, bool channels_last = false) {
  r.set_op("adaptive_avg_pool" + std::to_string(dims) + "d", {{"output_size", output_size}});
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last});
  Tensor y = dims == 1   ? adaptive_avg_pool1d(x, output_size)
             : dims == 2 ? adaptive_avg_pool2d(x, output_size)
                         : adaptive_avg_pool3d(x, output_size);
  r.finish(y);
}

// One activation; p holds its parameter under torch's keyword (negative_slope, alpha, approximate).
void activation_case(CaseRecorder& r, const std::string& op, const Shape& x_shape,
                     const json& p = json::object(), bool channels_last = false) {
  r.set_op(op, p);
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last, .scale = 2.0});
  Tensor y;
  if (op == "relu")
    y = relu(x);
  else if (op == "leaky_relu")
    y = leaky_relu(x, p.at("negative_slope").get<double>());
  else if (op == "elu")
    y = elu(x, p.at("alpha").get<double>());
  else if (op == "sigmoid")
    y = sigmoid(x);
  else if (op == "tanh")
    y = tanh(x);
  else if (op == "gelu")
    y = gelu(x, p.at("approximate") == "tanh" ? GeluApproximation::tanh : GeluApproximation::none);
  else if (op == "silu")
    y = silu(x);
  else
    EMBER_THROW(internal, "torch_parity: unknown activation ", op);
  r.finish(y);
}

void softmax_case(CaseRecorder& r, bool log, const Shape& x_shape, int64_t dim,
                  bool channels_last = false) {
  r.set_op(log ? "log_softmax" : "softmax", {{"dim", dim}});
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last, .scale = 3.0});
  r.finish(log ? log_softmax(x, dim) : softmax(x, dim));
}

// Class-index targets of shape target_shape: a fixed pseudo-random pattern in [0, classes), with
// every `ignore_every`-th one (when > 0) set to ignore_index.
Tensor make_targets(const Shape& target_shape, int64_t classes, int64_t ignore_every,
                    int64_t ignore_index) {
  std::vector<double> v(size_t(shape_numel(target_shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = double((i * 7 + 3 + i / 5) % size_t(classes));
    if (ignore_every > 0 && i % size_t(ignore_every) == 1) v[i] = double(ignore_index);
  }
  return from_vector(v, target_shape, TensorOptions(DType::i64));
}

struct LossSpec {
  bool nll = false;  // nll_loss on log-probabilities, else cross_entropy on logits
  bool class_weights = false;
  int64_t ignore_index = -100;
  int64_t ignore_every = 0;    // how often a target is ignore_index (0: never)
  double label_smoothing = 0;  // cross_entropy only
  LossReduction reduction = LossReduction::mean;
};

// x [N, C] or [N, C, d...]; target [N] or [N, d...].
void loss_case(CaseRecorder& r, const Shape& x_shape, const LossSpec& s,
               bool channels_last = false) {
  json p = {{"ignore_index", s.ignore_index}, {"reduction", nn::reduction_name(s.reduction)}};
  if (!s.nll) p["label_smoothing"] = s.label_smoothing;
  r.set_op(s.nll ? "nll_loss" : "cross_entropy", p);
  const int64_t C = x_shape[1];
  Shape target_shape = x_shape;
  target_shape.erase(target_shape.begin() + 1);
  Tensor x = r.random("x", x_shape, {.channels_last = channels_last, .scale = 2.0});
  Tensor target = r.given("target", make_targets(target_shape, C, s.ignore_every, s.ignore_index));
  Tensor weight;
  if (s.class_weights)
    weight = r.given("weight", (rand({C}, TensorOptions(DType::f32)) + 0.25).to(x.dtype()));
  Tensor loss;
  if (s.nll) {
    loss = nll_loss(x, target,
                    NllLossOptions()
                        .with_weight(weight)
                        .with_ignore_index(s.ignore_index)
                        .with_reduction(s.reduction));
  } else {
    loss = cross_entropy(x, target,
                         CrossEntropyOptions()
                             .with_weight(weight)
                             .with_ignore_index(s.ignore_index)
                             .with_label_smoothing(s.label_smoothing)
                             .with_reduction(s.reduction));
  }
  r.finish(loss);
}

// ---- the cases
// ---------------------------------------------------------------------------------------

struct ParityCase {
  std::string name;
  DType dtype;
  std::function<void(CaseRecorder&)> run;
};

json conv_p(std::array<int64_t, 2> stride, json padding, std::array<int64_t, 2> dilation,
            int64_t groups) {
  return {{"stride", stride},
          {"padding", std::move(padding)},
          {"dilation", dilation},
          {"groups", groups}};
}

std::vector<ParityCase> parity_cases() {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  std::vector<ParityCase> c;
  auto add = [&](std::string name, DType dtype, std::function<void(CaseRecorder&)> run) {
    c.push_back({name + (dtype == bf16 ? "_bf16" : ""), dtype, std::move(run)});
  };
  // Convolutions: odd sizes, channel counts off multiples of 8, stride, dilation, groups,
  // depthwise, channels_last, batch 1, 'same' with an odd total padding.
  add("conv2d_3x3_p1", f32, [](CaseRecorder& r) {
    conv2d_case(r, {2, 5, 17, 15}, {7, 5, 3, 3}, conv_p({1, 1}, {1, 1}, {1, 1}, 1));
  });
  add("conv2d_3x3_s2_p1", f32, [](CaseRecorder& r) {
    conv2d_case(r, {3, 12, 15, 13}, {10, 12, 3, 3}, conv_p({2, 2}, {1, 1}, {1, 1}, 1));
  });
  add("conv2d_3x3_dil2_p2", f32, [](CaseRecorder& r) {
    conv2d_case(r, {2, 6, 19, 18}, {9, 6, 3, 3}, conv_p({1, 1}, {2, 2}, {2, 2}, 1));
  });
  add("conv2d_5x3_s2x1_groups3", f32, [](CaseRecorder& r) {
    conv2d_case(r, {2, 9, 13, 11}, {12, 3, 5, 3}, conv_p({2, 1}, {2, 1}, {1, 1}, 3));
  });
  add("conv2d_depthwise_5x5_s2", f32, [](CaseRecorder& r) {
    conv2d_case(r, {2, 13, 21, 19}, {13, 1, 5, 5}, conv_p({2, 2}, {2, 2}, {1, 1}, 13));
  });
  add("conv2d_1x1_batch1", f32, [](CaseRecorder& r) {
    conv2d_case(r, {1, 20, 9, 7}, {11, 20, 1, 1}, conv_p({1, 1}, {0, 0}, {1, 1}, 1));
  });
  add("conv2d_7x7_s2_p3_batch1_channels_last", f32, [](CaseRecorder& r) {
    conv2d_case(r, {1, 3, 33, 31}, {16, 3, 7, 7}, conv_p({2, 2}, {3, 3}, {1, 1}, 1), true);
  });
  add("conv2d_3x3_p1_channels_last", f32, [](CaseRecorder& r) {
    conv2d_case(r, {2, 10, 14, 11}, {14, 10, 3, 3}, conv_p({1, 1}, {1, 1}, {1, 1}, 1), true);
  });
  add("conv2d_depthwise_3x3_channels_last", f32, [](CaseRecorder& r) {
    conv2d_case(r, {3, 12, 10, 9}, {12, 1, 3, 3}, conv_p({1, 1}, {1, 1}, {1, 1}, 12), true);
  });
  add("conv2d_4x4_same", f32, [](CaseRecorder& r) {
    conv2d_case(r, {2, 4, 11, 10}, {6, 4, 4, 4}, conv_p({1, 1}, "same", {1, 1}, 1));
  });
  add("conv2d_3x3_p1", bf16, [](CaseRecorder& r) {
    conv2d_case(r, {2, 24, 17, 15}, {40, 24, 3, 3}, conv_p({1, 1}, {1, 1}, {1, 1}, 1));
  });
  add("conv2d_3x3_s2_p1_channels_last", bf16, [](CaseRecorder& r) {
    conv2d_case(r, {2, 16, 15, 13}, {24, 16, 3, 3}, conv_p({2, 2}, {1, 1}, {1, 1}, 1), true);
  });
  add("conv2d_depthwise_3x3", bf16, [](CaseRecorder& r) {
    conv2d_case(r, {2, 13, 12, 11}, {13, 1, 3, 3}, conv_p({1, 1}, {1, 1}, {1, 1}, 13));
  });
  add("conv3d_3x3x3_p1", f32, [](CaseRecorder& r) {
    conv3d_case(
        r, {2, 3, 5, 7, 6}, {4, 3, 3, 3, 3},
        {{"stride", {1, 1, 1}}, {"padding", {1, 1, 1}}, {"dilation", {1, 1, 1}}, {"groups", 1}});
  });
  add("conv3d_2x3x3_s212_dil122_groups2", f32, [](CaseRecorder& r) {
    conv3d_case(
        r, {1, 4, 6, 9, 8}, {6, 2, 2, 3, 3},
        {{"stride", {2, 1, 2}}, {"padding", {0, 2, 1}}, {"dilation", {1, 2, 2}}, {"groups", 2}});
  });
  add("conv3d_3x3x3_p1", bf16, [](CaseRecorder& r) {
    conv3d_case(
        r, {2, 8, 5, 6, 7}, {12, 8, 3, 3, 3},
        {{"stride", {1, 1, 1}}, {"padding", {1, 1, 1}}, {"dilation", {1, 1, 1}}, {"groups", 1}});
  });
  auto tconv_p = [](std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                    std::array<int64_t, 2> output_padding, std::array<int64_t, 2> dilation,
                    int64_t groups) {
    return json{{"stride", stride},
                {"padding", padding},
                {"output_padding", output_padding},
                {"dilation", dilation},
                {"groups", groups}};
  };
  add("conv_transpose2d_3x3_s2_p1_op1", f32, [=](CaseRecorder& r) {
    conv_transpose2d_case(r, {2, 6, 9, 7}, {6, 5, 3, 3},
                          tconv_p({2, 2}, {1, 1}, {1, 1}, {1, 1}, 1));
  });
  add("conv_transpose2d_3x3_s3_dil2_groups2", f32, [=](CaseRecorder& r) {
    conv_transpose2d_case(r, {2, 4, 5, 6}, {4, 3, 3, 3},
                          tconv_p({3, 3}, {1, 2}, {1, 2}, {2, 2}, 2));
  });
  add("conv_transpose2d_4x4_s2_p1_batch1_channels_last", f32, [=](CaseRecorder& r) {
    conv_transpose2d_case(r, {1, 10, 7, 8}, {10, 7, 4, 4},
                          tconv_p({2, 2}, {1, 1}, {0, 0}, {1, 1}, 1), true);
  });
  add("conv_transpose2d_3x3_s2_p1_op1", bf16, [=](CaseRecorder& r) {
    conv_transpose2d_case(r, {2, 16, 9, 7}, {16, 12, 3, 3},
                          tconv_p({2, 2}, {1, 1}, {1, 1}, {1, 1}, 1));
  });

  // Normalization.
  add("batch_norm_train_4d", f32, [](CaseRecorder& r) { batch_norm_case(r, {3, 7, 5, 6}, true); });
  add("batch_norm_train_4d_channels_last", f32, [](CaseRecorder& r) {
    batch_norm_case(r, {2, 12, 7, 5}, true, true);
  });
  add("batch_norm_train_2d", f32, [](CaseRecorder& r) { batch_norm_case(r, {9, 13}, true); });
  add("batch_norm_train_3d", f32, [](CaseRecorder& r) { batch_norm_case(r, {4, 6, 11}, true); });
  add("batch_norm_eval_4d", f32, [](CaseRecorder& r) { batch_norm_case(r, {3, 5, 6, 7}, false); });
  add("batch_norm_eval_4d_channels_last", f32, [](CaseRecorder& r) {
    batch_norm_case(r, {2, 9, 4, 5}, false, true);
  });
  add("batch_norm_train_4d", bf16, [](CaseRecorder& r) {
    batch_norm_case(r, {4, 12, 9, 7}, true);
  });
  add("batch_norm_train_4d_channels_last", bf16, [](CaseRecorder& r) {
    batch_norm_case(r, {3, 20, 5, 6}, true, true);
  });
  add("layer_norm_last_dim", f32, [](CaseRecorder& r) { layer_norm_case(r, {3, 5, 37}, {37}); });
  add("layer_norm_last_two_dims", f32, [](CaseRecorder& r) {
    layer_norm_case(r, {4, 6, 7}, {6, 7});
  });
  add("layer_norm_last_dim", bf16, [](CaseRecorder& r) { layer_norm_case(r, {6, 129}, {129}); });
  add("group_norm_3_groups", f32, [](CaseRecorder& r) { group_norm_case(r, {2, 12, 5, 7}, 3); });
  add("group_norm_5_groups_channels_last", f32, [](CaseRecorder& r) {
    group_norm_case(r, {3, 10, 4, 5}, 5, true);
  });
  add("group_norm_3d_input_2_groups", f32, [](CaseRecorder& r) {
    group_norm_case(r, {2, 6, 13}, 2);
  });
  add("group_norm_3_groups", bf16, [](CaseRecorder& r) { group_norm_case(r, {2, 12, 9, 7}, 3); });
  add("instance_norm_input_stats", f32, [](CaseRecorder& r) {
    instance_norm_case(r, {2, 6, 7, 9}, true);
  });
  add("instance_norm_running_stats", f32, [](CaseRecorder& r) {
    instance_norm_case(r, {3, 5, 6, 4}, false);
  });

  // Pooling.
  auto mp = [](IntList k, IntList s, IntList p, IntList d, bool ceil) {
    return json{
        {"kernel_size", k}, {"stride", s}, {"padding", p}, {"dilation", d}, {"ceil_mode", ceil}};
  };
  auto ap = [](IntList k, IntList s, IntList p, bool ceil, bool include) {
    return json{{"kernel_size", k},
                {"stride", s},
                {"padding", p},
                {"ceil_mode", ceil},
                {"count_include_pad", include}};
  };
  add("max_pool2d_3x3_s2_p1", f32, [=](CaseRecorder& r) {
    max_pool_case(r, 2, {2, 5, 13, 11}, mp({3, 3}, {2, 2}, {1, 1}, {1, 1}, false));
  });
  add("max_pool2d_3x2_dil2_ceil_channels_last", f32, [=](CaseRecorder& r) {
    max_pool_case(r, 2, {2, 12, 14, 11}, mp({3, 2}, {2, 2}, {1, 0}, {2, 2}, true), true);
  });
  add("max_pool2d_2x2_batch1", f32, [=](CaseRecorder& r) {
    max_pool_case(r, 2, {1, 3, 9, 8}, mp({2, 2}, {2, 2}, {0, 0}, {1, 1}, false));
  });
  add("max_pool1d_3_s2_p1", f32, [=](CaseRecorder& r) {
    max_pool_case(r, 1, {3, 4, 17}, mp({3}, {2}, {1}, {1}, false));
  });
  add("max_pool3d_2x3x3_s2_ceil", f32, [=](CaseRecorder& r) {
    max_pool_case(r, 3, {1, 3, 6, 7, 5}, mp({2, 3, 3}, {2, 2, 2}, {0, 1, 1}, {1, 1, 1}, true));
  });
  add("avg_pool2d_3x3_s2_p1_exclude_pad_ceil", f32, [=](CaseRecorder& r) {
    avg_pool_case(r, 2, {2, 5, 13, 10}, ap({3, 3}, {2, 2}, {1, 1}, true, false));
  });
  add("avg_pool2d_3x3_s2_p1_include_pad", f32, [=](CaseRecorder& r) {
    avg_pool_case(r, 2, {2, 5, 13, 10}, ap({3, 3}, {2, 2}, {1, 1}, false, true));
  });
  add("avg_pool2d_2x2_channels_last", f32, [=](CaseRecorder& r) {
    avg_pool_case(r, 2, {3, 10, 9, 7}, ap({2, 2}, {2, 2}, {0, 0}, false, true), true);
  });
  add("avg_pool1d_4_s3_p2", f32, [=](CaseRecorder& r) {
    avg_pool_case(r, 1, {2, 3, 19}, ap({4}, {3}, {2}, true, false));
  });
  add("avg_pool3d_2x3x3_s122_p011", f32, [=](CaseRecorder& r) {
    avg_pool_case(r, 3, {2, 3, 5, 9, 8}, ap({2, 3, 3}, {1, 2, 2}, {0, 1, 1}, false, true));
  });
  add("avg_pool2d_3x3_s2_p1", bf16, [=](CaseRecorder& r) {
    avg_pool_case(r, 2, {2, 12, 13, 10}, ap({3, 3}, {2, 2}, {1, 1}, false, true));
  });
  add("adaptive_avg_pool2d_to_4x3", f32, [](CaseRecorder& r) {
    adaptive_avg_pool_case(r, 2, {2, 6, 13, 10}, {4, 3});
  });
  add("adaptive_avg_pool2d_global_channels_last", f32, [](CaseRecorder& r) {
    adaptive_avg_pool_case(r, 2, {3, 20, 7, 5}, {1, 1}, true);
  });
  add("adaptive_avg_pool2d_upsample_5x7", f32, [](CaseRecorder& r) {
    adaptive_avg_pool_case(r, 2, {1, 3, 4, 6}, {5, 7});
  });
  add("adaptive_avg_pool1d_to_5", f32, [](CaseRecorder& r) {
    adaptive_avg_pool_case(r, 1, {2, 4, 17}, {5});
  });
  add("adaptive_avg_pool3d_to_2x3x2", f32, [](CaseRecorder& r) {
    adaptive_avg_pool_case(r, 3, {1, 3, 5, 7, 6}, {2, 3, 2});
  });
  add("adaptive_avg_pool2d_global", bf16, [](CaseRecorder& r) {
    adaptive_avg_pool_case(r, 2, {2, 24, 7, 9}, {1, 1});
  });

  // Activations (odd element counts: 3 * 7 * 11 = 231).
  const Shape act = {3, 7, 11};
  add("relu", f32, [=](CaseRecorder& r) { activation_case(r, "relu", act); });
  add("relu_channels_last", f32, [=](CaseRecorder& r) {
    activation_case(r, "relu", {2, 5, 3, 7}, json::object(), true);
  });
  add("leaky_relu_0.2", f32, [=](CaseRecorder& r) {
    activation_case(r, "leaky_relu", act, {{"negative_slope", 0.2}});
  });
  add("elu_1.3", f32, [=](CaseRecorder& r) { activation_case(r, "elu", act, {{"alpha", 1.3}}); });
  add("sigmoid", f32, [=](CaseRecorder& r) { activation_case(r, "sigmoid", act); });
  add("tanh", f32, [=](CaseRecorder& r) { activation_case(r, "tanh", act); });
  add("gelu_exact", f32, [=](CaseRecorder& r) {
    activation_case(r, "gelu", act, {{"approximate", "none"}});
  });
  add("gelu_tanh", f32, [=](CaseRecorder& r) {
    activation_case(r, "gelu", act, {{"approximate", "tanh"}});
  });
  add("silu", f32, [=](CaseRecorder& r) { activation_case(r, "silu", act); });
  add("gelu_exact", bf16, [=](CaseRecorder& r) {
    activation_case(r, "gelu", act, {{"approximate", "none"}});
  });
  add("gelu_tanh", bf16, [=](CaseRecorder& r) {
    activation_case(r, "gelu", act, {{"approximate", "tanh"}});
  });
  add("silu", bf16, [=](CaseRecorder& r) { activation_case(r, "silu", act); });
  add("elu_1.0", bf16, [=](CaseRecorder& r) { activation_case(r, "elu", act, {{"alpha", 1.0}}); });

  // softmax / log_softmax over the last dim and over other dims (strided rows).
  add("softmax_last_dim", f32, [](CaseRecorder& r) { softmax_case(r, false, {4, 6, 37}, -1); });
  add("softmax_dim1", f32, [](CaseRecorder& r) { softmax_case(r, false, {4, 6, 37}, 1); });
  add("softmax_dim0", f32, [](CaseRecorder& r) { softmax_case(r, false, {5, 3, 9}, 0); });
  add("softmax_long_row", f32, [](CaseRecorder& r) { softmax_case(r, false, {3, 5001}, 1); });
  add("log_softmax_last_dim", f32, [](CaseRecorder& r) { softmax_case(r, true, {7, 129}, -1); });
  add("log_softmax_dim1", f32, [](CaseRecorder& r) { softmax_case(r, true, {3, 11, 5, 4}, 1); });
  add("log_softmax_dim1_channels_last", f32, [](CaseRecorder& r) {
    softmax_case(r, true, {2, 10, 3, 5}, 1, true);
  });
  add("softmax_last_dim", bf16, [](CaseRecorder& r) { softmax_case(r, false, {4, 1000}, -1); });
  add("log_softmax_dim1", bf16, [](CaseRecorder& r) { softmax_case(r, true, {3, 11, 5, 4}, 1); });

  // cross_entropy and nll_loss.
  add("cross_entropy_mean", f32, [](CaseRecorder& r) { loss_case(r, {16, 10}, {}); });
  add("cross_entropy_ignore_index_weights_smoothing_mean", f32, [](CaseRecorder& r) {
    loss_case(
        r, {13, 7},
        {.class_weights = true, .ignore_index = -100, .ignore_every = 4, .label_smoothing = 0.1});
  });
  add("cross_entropy_ignore_index3_sum", f32, [](CaseRecorder& r) {
    loss_case(r, {11, 9}, {.ignore_index = 3, .ignore_every = 3, .reduction = LossReduction::sum});
  });
  add("cross_entropy_weights_none", f32, [](CaseRecorder& r) {
    loss_case(r, {12, 5}, {.class_weights = true, .reduction = LossReduction::none});
  });
  add("cross_entropy_smoothing_sum", f32, [](CaseRecorder& r) {
    loss_case(r, {9, 1001}, {.label_smoothing = 0.2, .reduction = LossReduction::sum});
  });
  add("cross_entropy_4d_weights_smoothing_ignore_none", f32, [](CaseRecorder& r) {
    loss_case(r, {2, 5, 3, 4},
              {.class_weights = true,
               .ignore_index = -1,
               .ignore_every = 5,
               .label_smoothing = 0.15,
               .reduction = LossReduction::none});
  });
  add("cross_entropy_4d_mean_channels_last", f32, [](CaseRecorder& r) {
    loss_case(r, {2, 6, 3, 5}, {.ignore_every = 4}, true);
  });
  add("cross_entropy_weights_smoothing_mean", bf16, [](CaseRecorder& r) {
    loss_case(r, {16, 100}, {.class_weights = true, .ignore_every = 6, .label_smoothing = 0.1});
  });
  add("nll_loss_mean", f32, [](CaseRecorder& r) { loss_case(r, {10, 8}, {.nll = true}); });
  add("nll_loss_weights_ignore_index_mean", f32, [](CaseRecorder& r) {
    loss_case(r, {13, 6},
              {.nll = true, .class_weights = true, .ignore_index = 2, .ignore_every = 4});
  });
  add("nll_loss_3d_weights_none", f32, [](CaseRecorder& r) {
    loss_case(
        r, {3, 4, 7},
        {.nll = true, .class_weights = true, .ignore_every = 5, .reduction = LossReduction::none});
  });
  add("nll_loss_sum", f32, [](CaseRecorder& r) {
    loss_case(r, {7, 9}, {.nll = true, .reduction = LossReduction::sum});
  });
  return c;
}

int export_cases(const std::string& dir) {
  const Device device = cuda::is_available() ? Device::cuda() : Device::cpu();
  // Compared with PyTorch at allow_tf32 = False (cudnn and matmul).
  set_conv_allow_tf32(false);
  set_matmul_allow_tf32(false);
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
      std::filesystem::remove(entry.path());
  manual_seed(1234);
  int failed = 0;
  for (const ParityCase& c : parity_cases()) {
    try {
      CaseRecorder r(device, c.dtype);
      c.run(r);
      r.save(dir + "/" + c.name + ".safetensors");
      std::printf(
          "{\"bench\":\"torch_parity\",\"impl\":\"ember\",\"shape\":\"%s\",\"written\":true}\n",
          c.name.c_str());
    } catch (const Error& e) {
      // The case is reported and the others still run; the exit status says something failed.
      ++failed;
      std::printf(
          "{\"bench\":\"torch_parity\",\"impl\":\"ember\",\"shape\":\"%s\",\"written\":false,"
          "\"error\":%s}\n",
          c.name.c_str(), json(std::string(e.what())).dump().c_str());
    }
    std::fflush(stdout);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (argc == 3 && std::strcmp(argv[1], "--export") == 0) {
    dir = argv[2];
  } else if (argc == 1) {
    const char* env = std::getenv("EMBER_TORCH_PARITY_DIR");
    dir = env && *env ? env : "/tmp/ember_torch_parity";
  } else {
    std::fprintf(stderr, "usage: %s [--export DIR]\n", argv[0]);
    return 2;
  }
  try {
    return export_cases(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch_parity: %s\n", e.what());
    return 1;
  }
}
