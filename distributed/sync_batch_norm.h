// Synchronized batch normalization, as torch.nn.SyncBatchNorm: in training the batch statistics
// of every channel span all ranks of a process group, so data parallelism at a small per-rank batch
// normalizes as one process would at the whole batch. The op sync_batch_norm (forward and backward
// beside each other), the module nn::SyncBatchNorm, and nn::convert_sync_batchnorm, which turns
// the BatchNorm layers of an existing model into synchronized ones.
//
// Forward (training): each rank computes its per-channel (mean, biased var, count) with the batch
// norm kernels of ops/norm.h; one all_gather of those [2C + 1] values per rank; every rank then
// merges them (Chan's parallel Welford merge, in the statistics dtype, on the device) into the
// global mean and variance, normalizes with them, and updates the running statistics with the
// global UNBIASED variance, exactly as one process with the whole batch would.
// Backward: each rank reduces sum(dy) and sum(dy * xhat) over its part; one all_reduce of those
// [2C] sums gives the global ones, from which dx follows. The weight and bias gradients stay the
// local sums, as in PyTorch: DDP's gradient averaging then makes every gradient in the model the
// gradient of the mean of the per-rank losses.
// Eval mode, and a group of one rank, use plain batch_norm (the running statistics / the local
// batch). Everything stays on the device: no host sync, capturable in a CUDA graph.
// Every rank must call forward and backward of each synchronized layer in the same order (the
// collectives pair up across ranks), and with inputs of the same number of channels; per-rank
// batch sizes may differ (even be 0).
#pragma once
#include <memory>

#include "ember/distributed/process_group.h"
#include "ember/nn/norm.h"

namespace ember::distributed {

// Batch norm over dim 1 of x [N, C], [N, C, L], [N, C, H, W] or [N, C, D, H, W] (NCHW or
// channels_last; output in x's layout) with training-mode statistics over every rank of `group`:
//   y = act((x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] + residual)
// act = ReLU when `relu`, else identity; residual: x's shape, dtype and device, or undefined.
// weight, bias: [C] or undefined; running_mean, running_var: [C] (updated in place, unbiased
// global variance, factor `momentum`) or both undefined. Differentiable in x, weight, bias and
// residual. The global batch must hold more than one value per channel.
Tensor sync_batch_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                       const Tensor& bias, const Tensor& running_mean, const Tensor& running_var,
                       bool relu, double momentum, double eps,
                       const std::shared_ptr<ProcessGroup>& group);

}  // namespace ember::distributed

namespace ember::nn {

// torch.nn.SyncBatchNorm: BatchNorm over inputs of 2 to 5 dims whose training statistics span the
// ranks of `group`. Parameters, buffers and state_dict names are BatchNorm2d's (weight, bias,
// running_mean, running_var, num_batches_tracked), so checkpoints move freely between the two.
class SyncBatchNormImpl : public BatchNormImplBase {
 public:
  // A SyncBatchNorm of options.num_features() channels whose statistics span `group` (throws
  // bad_param when it is null). Only training-mode statistics are synchronized; eval mode is
  // BatchNorm's.
  SyncBatchNormImpl(const BatchNormOptions& options,
                    std::shared_ptr<distributed::ProcessGroup> group);
  // The group the statistics are reduced over.
  const std::shared_ptr<distributed::ProcessGroup>& group() const { return group_; }

 protected:
  void check_input_dim(const Tensor& x) const override;

 private:
  std::shared_ptr<distributed::ProcessGroup> group_;
};
EMBER_MODULE(SyncBatchNorm);

// Makes every BatchNorm1d / BatchNorm2d layer in `module` (itself included) synchronize its
// training statistics over `group`, as torch.nn.SyncBatchNorm.convert_sync_batchnorm. The layers
// are converted in place (C++ parents hold them by type, so they cannot be swapped for new
// objects): parameters, buffers, state_dict names and printing stay as they were. Returns the
// number of layers converted. Call before wrapping the model in DistributedDataParallel.
int64_t convert_sync_batchnorm(Module& module, std::shared_ptr<distributed::ProcessGroup> group);

}  // namespace ember::nn
