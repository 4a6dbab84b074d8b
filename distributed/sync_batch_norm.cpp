// Synchronized batch norm (see sync_batch_norm.h): the op with its backward, on the batch norm
// kernel tables of kernel_interface/norm.h plus two collectives, and the module and converter on
// top. Parameters reach the kernels as the plain op passes them (norm_param_for_kernel: a float16
// / bfloat16 model's own parameters, without a conversion per call).
//
// Why the kernels fit unchanged: batch_norm_stats gives the local (mean, invstd), from which the
// biased variance is recovered as 1 / invstd^2 - eps (as PyTorch's SyncBatchNorm does); apply and
// channel_grad_sums take the global mean / invstd as they take local ones; and
// batch_norm_backward_elemt divides the channel sums by the LOCAL count, so the all-reduced sums
// are pre-scaled by local_count / global_count to make that quotient the global mean.
#include "ember/distributed/sync_batch_norm.h"

#include <vector>

#include "ember/autograd/autograd.h"
#include "ember/ops/norm.h"
#include "ember/ops/ops.h"

namespace ember::distributed {

namespace {

const char* const kOp = "sync_batch_norm";

// x, dense, with the channel layout the kernels see it in (a copy only for other layouts).
struct ChannelDense {
  Tensor t;
  ChannelLayout layout;
  MemoryFormat format = MemoryFormat::contiguous;
};

ChannelDense to_channel_dense(const Tensor& x) {
  ChannelDense r;
  r.layout.N = x.size(0);
  r.layout.C = x.size(1);
  for (int64_t d = 2; d < x.dim(); ++d) r.layout.S *= x.size(d);
  const bool nhwc = (x.dim() == 4 || x.dim() == 5) && r.layout.S > 1 && !x.is_contiguous() &&
                    x.is_contiguous(MemoryFormat::channels_last);
  r.format = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  r.t = x.is_contiguous(r.format) ? x : x.contiguous(r.format);
  // With one spatial position both orders are the same memory; the channels-inner kernels suit it.
  r.layout.channels_inner = nhwc || r.layout.S == 1;
  return r;
}

// t (of x's shape) in the memory format the kernels were given x in.
Tensor in_format(const Tensor& t, MemoryFormat format) {
  return t.is_contiguous(format) ? t : t.contiguous(format);
}

void check_arguments(const Tensor& x, const Tensor& residual, const Tensor& weight,
                     const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                     const ProcessGroup* group) {
  EMBER_CHECK(group != nullptr, kOp, ": the process group is null");
  EMBER_CHECK(x.defined(), kOp, ": the input is an undefined tensor");
  EMBER_CHECK_STATUS(is_floating(x.dtype()), not_supported, kOp, ": dtype ", dtype_name(x.dtype()),
                     " is not supported; use float32, float64, float16 or bfloat16");
  EMBER_CHECK(x.dim() >= 2 && x.dim() <= 5, kOp,
              ": expected input of shape [N, C], [N, C, L], "
              "[N, C, H, W] or [N, C, D, H, W], got ",
              x.shape_str());
  const bool reduced = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  const std::pair<const char*, const Tensor*> params[] = {{"weight", &weight},
                                                          {"bias", &bias},
                                                          {"running_mean", &running_mean},
                                                          {"running_var", &running_var}};
  for (const auto& [name, p] : params) {
    if (!p->defined()) continue;
    EMBER_CHECK(p->sizes() == Shape{x.size(1)}, kOp, ": ", name, " must have shape [", x.size(1),
                "] (one value per channel of input ", x.shape_str(), "), got ", p->shape_str());
    EMBER_CHECK(p->device() == x.device(), kOp, ": ", name, " is on ", p->device().str(),
                " but the input ", x.shape_str(), " is on ", x.device().str(),
                "; move them to one device");
    EMBER_CHECK(
        p->dtype() == x.dtype() || (reduced && p->dtype() == DType::f32), kOp, ": ", name,
        " has dtype ", dtype_name(p->dtype()), " but the input has ", dtype_name(x.dtype()),
        "; parameters must have the input's dtype (or float32 for a float16 / bfloat16 input)");
  }
  EMBER_CHECK(running_mean.defined() == running_var.defined(), kOp,
              ": running_mean and running_var must be given together");
  EMBER_CHECK(
      !running_mean.defined() || (!running_mean.requires_grad() && !running_var.requires_grad()),
      kOp, ": running statistics are updated in place and must not require grad; pass buffers");
  if (residual.defined())
    EMBER_CHECK(residual.sizes() == x.sizes() && residual.dtype() == x.dtype() &&
                    residual.device() == x.device(),
                kOp, ": the residual (", residual.shape_str(), ", ", dtype_name(residual.dtype()),
                ", ", residual.device().str(), ") must have the input's shape, dtype and device (",
                x.shape_str(), ", ", dtype_name(x.dtype()), ", ", x.device().str(), ")");
}

// One process, or eval: the plain op (and its fused tails) is the same math.
Tensor local_batch_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                        const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                        bool relu, double momentum, double eps) {
  if (relu && residual.defined())
    return batch_norm_add_relu(x, residual, weight, bias, running_mean, running_var, true, momentum,
                               eps);
  if (relu) return batch_norm_relu(x, weight, bias, running_mean, running_var, true, momentum, eps);
  Tensor y = batch_norm(x, weight, bias, running_mean, running_var, true, momentum, eps);
  return residual.defined() ? y + residual : y;
}

// running = (1 - momentum) * running + momentum * stat, in place (in the statistics dtype).
void update_running(const Tensor& running, const Tensor& stat, double momentum) {
  Tensor r = running;
  r.copy_(r.to(stat.dtype()) * (1.0 - momentum) + stat * momentum);
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                       const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                       bool relu, double momentum, double eps,
                       const std::shared_ptr<ProcessGroup>& group) {
  check_arguments(x, residual, weight, bias, running_mean, running_var, group.get());
  if (group->world_size() == 1)
    return local_batch_norm(x, residual, weight, bias, running_mean, running_var, relu, momentum,
                            eps);

  const int64_t C = x.size(1);
  const int64_t world = group->world_size();
  const DType stats_dtype = norm_stats_dtype(x.dtype());
  const Device device = x.device();
  Tensor y, xd, mean, invstd, total;
  ChannelDense dense;
  {
    autograd::NoGradGuard no_grad;
    dense = to_channel_dense(x.detach());
    xd = dense.t;
    const ChannelLayout& layout = dense.layout;
    const int64_t count = layout.per_channel();

    // This rank's [mean (C), biased var (C), count (1)].
    Tensor local = empty({2 * C + 1}, stats_dtype, device);
    Tensor local_mean = local.narrow(0, 0, C), local_var = local.narrow(0, C, C);
    if (count >= 2) {
      Tensor local_invstd = empty({C}, stats_dtype, device);
      batch_norm_stats_kernel().get(device.type, x.dtype())(BatchNormStatsArgs{
          xd, layout, eps, momentum, local_mean, local_invstd, Tensor(), Tensor()});
      local_var.copy_(reciprocal(square(local_invstd)) - eps);
    } else if (count == 1) {  // one value per channel: it is the mean, the variance is 0
      local_mean.copy_(xd.reshape({C}));
      local_var.zero_();
    } else {
      local_mean.zero_();
      local_var.zero_();
    }
    local.narrow(0, 2 * C, 1).fill_(double(count));

    // Every rank's statistics, merged: mean = sum(n_r mean_r) / n and
    // M2 = sum(n_r var_r) + sum(n_r (mean_r - mean)^2) (Chan et al.; no sum-of-squares
    // cancellation).
    Tensor gathered = empty({world * (2 * C + 1)}, stats_dtype, device);
    group->all_gather(gathered, local);
    Tensor table = gathered.view({world, 2 * C + 1});
    Tensor means = table.narrow(1, 0, C), vars = table.narrow(1, C, C),
           counts = table.narrow(1, 2 * C, 1);
    total = sum(counts, {0});  // [1]
    mean = sum(means * counts, {0}) / total;
    Tensor m2 = sum(vars * counts, {0}) + sum(square(means - mean) * counts, {0});
    invstd = rsqrt(m2 / total + eps);
    if (running_mean.defined()) {
      update_running(running_mean, mean, momentum);
      update_running(running_var, m2 / (total - 1.0), momentum);
    }

    y = empty(x.sizes(), x.dtype(), device, dense.format);
    if (count > 0) {
      Tensor residual_d =
          residual.defined() ? in_format(residual.detach(), dense.format) : Tensor();
      batch_norm_apply_kernel().get(device.type, x.dtype())(
          BatchNormApplyArgs{y, xd, residual_d, mean, invstd, norm_param_for_kernel(weight),
                             norm_param_for_kernel(bias), layout, relu});
    }
  }

  std::vector<Tensor> inputs = {x, weight, bias, residual};
  if (!autograd::needs_grad(inputs)) return y;

  autograd::SavedTensor saved_x(xd, kOp), saved_y(relu ? y : Tensor(), kOp), saved_w(weight, kOp);
  const ChannelLayout layout = dense.layout;
  const MemoryFormat format = dense.format;
  const Shape x_shape = x.sizes();
  const DType x_dtype = x.dtype();
  const DType w_dtype = weight.defined() ? weight.dtype() : stats_dtype;
  const DType b_dtype = bias.defined() ? bias.dtype() : stats_dtype;
  autograd::record_backward(
      kOp, inputs, {&y}, [=](const std::vector<Tensor>& grads, const autograd::Node& node) {
        std::vector<Tensor> result(4);
        const bool need_x = node.needs_input_grad(0), need_w = node.needs_input_grad(1),
                   need_b = node.needs_input_grad(2), need_r = node.needs_input_grad(3);
        autograd::NoGradGuard no_grad;
        const int64_t count = layout.per_channel();
        const Tensor& xs = saved_x.unpack();
        const Tensor& gate = saved_y.unpack();
        Tensor dy =
            in_format(grads[0].dtype() == x_dtype ? grads[0] : grads[0].to(x_dtype), format);
        // [sum(dy) (C), sum(dy * xhat) (C)] over this rank's values, xhat with the global
        // statistics.
        Tensor sums = empty({2 * C}, stats_dtype, device);
        if (count > 0)
          channel_grad_sums_kernel().get(device.type, x_dtype)(
              ChannelGradSumsArgs{dy, xs, gate, mean, invstd, layout, StatIndex{0, 1},
                                  sums.narrow(0, 0, C), sums.narrow(0, C, C)});
        else
          sums.zero_();
        // Local sums, as PyTorch: DDP averages them with every other gradient.
        if (need_w) result[1] = sums.narrow(0, C, C).to(w_dtype).clone();
        if (need_b) result[2] = sums.narrow(0, 0, C).to(b_dtype).clone();
        if (need_x) {
          // Every rank reaches this point (all need x's gradient), so the collective pairs up.
          group->all_reduce(sums, ReduceOp::sum);
          if (count > 0) sums = sums * double(count) / total;
        }
        if ((need_x || need_r) && count > 0) {
          Tensor dx = need_x ? empty(x_shape, x_dtype, device, format) : Tensor();
          Tensor dres = need_r ? empty(x_shape, x_dtype, device, format) : Tensor();
          batch_norm_backward_elemt_kernel().get(device.type, x_dtype)(BatchNormBackwardArgs{
              dx, dres, dy, xs, gate, mean, invstd, norm_param_for_kernel(saved_w.unpack()),
              sums.narrow(0, 0, C), sums.narrow(0, C, C), layout, true});
          result[0] = dx;
          result[3] = dres;
        } else {
          if (need_x) result[0] = empty(x_shape, x_dtype, device, format);
          if (need_r) result[3] = empty(x_shape, x_dtype, device, format);
        }
        return result;
      });
  return y;
}

}  // namespace ember::distributed

namespace ember::nn {

namespace {
BatchNormImplBase::TrainingForward synchronized_forward(
    std::shared_ptr<distributed::ProcessGroup> group) {
  return [group = std::move(group)](const Tensor& x, const Tensor& residual, const Tensor& weight,
                                    const Tensor& bias, const Tensor& running_mean,
                                    const Tensor& running_var, bool relu, double momentum,
                                    double eps) {
    return distributed::sync_batch_norm(x, residual, weight, bias, running_mean, running_var, relu,
                                        momentum, eps, group);
  };
}
}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(const BatchNormOptions& options,
                                     std::shared_ptr<distributed::ProcessGroup> group)
    : BatchNormImplBase("SyncBatchNorm", options), group_(std::move(group)) {
  EMBER_CHECK(group_ != nullptr,
              "SyncBatchNorm: the process group is null; create one with "
              "distributed::init_process_group()");
  training_forward = synchronized_forward(group_);
}

void SyncBatchNormImpl::check_input_dim(const Tensor& x) const {
  EMBER_CHECK(x.dim() >= 2 && x.dim() <= 5,
              "SyncBatchNorm: expected an input of 2 to 5 dims [N, C, *], got ", x.shape_str());
}

int64_t convert_sync_batchnorm(Module& module, std::shared_ptr<distributed::ProcessGroup> group) {
  EMBER_CHECK(group != nullptr,
              "convert_sync_batchnorm: the process group is null; create one with "
              "distributed::init_process_group()");
  int64_t converted = 0;
  for (const auto& [name, child] : module.named_modules()) {  // the root included
    auto* bn = dynamic_cast<BatchNormImplBase*>(child.get());
    if (bn == nullptr) continue;
    bn->training_forward = synchronized_forward(group);
    ++converted;
  }
  return converted;
}

}  // namespace ember::nn
