// CUDA kernel behind the element-wise optimizers of nn/optim_more.h (RMSprop, Adagrad, Adadelta,
// Adamax, NAdam, RAdam; kernel_interface/optim_more.h), as fused multi-tensor launches
// (cuda_kernels/optim/multi_tensor.cuh). A step is two kinds of launch:
//  1. advance (one thread per tensor, 240 tensors per launch): step += 1, NAdam's mu_product *= mu,
//     and the tensor's float64 factors (bias corrections, step sizes) into a scratch tensor from
//     the caching allocator, read from the device scalars (lr, momentum/beta1): capture-safe;
//  2. update (one launch per pack of tensors): every block applies the algorithm to one chunk,
//     reading its tensor's factors through the pack's per-tensor pointer slot.
// Instantiations: the update kernel per floating dtype and per number of lists (3, 4, 5: the
// parameter, the gradient and one to three states); the algorithm is a uniform runtime branch.
#include <array>
#include <cmath>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/optim/multi_tensor.cuh"
#include "ember/kernel_interface/optim_more.h"

namespace ember::cuda {
namespace {

using Algo = ember::ElementwiseOptimizer;
constexpr int kFactors = 4;  // per tensor, float64: a, b, c, d (see advance_kernel)

struct Scalars {
  Algo algorithm;
  double alpha, eps, weight_decay, lr_decay, momentum_decay;
  bool maximize, decoupled, centered, use_momentum;
};

constexpr int kMaxAdvancePerLaunch = 240;
struct AdvanceList {
  float* steps[kMaxAdvancePerLaunch];
  float* mu_products[kMaxAdvancePerLaunch];  // NAdam only, else null
  int count;
};

// Thread i advances tensor i of the list and writes its factors to factors[kFactors * i ...]:
//   adagrad: a = lr / (1 + (step - 1) lr_decay)          adamax: a = lr / (1 - beta1^step)
//   nadam:   a = lr (1 - mu) / (1 - mu_product), b = lr mu_next / (1 - mu_product mu_next),
//            c = 1 - beta2^step
//   radam:   a = lr / (1 - beta1^step), b = rect * sqrt(1 - beta2^step), d = 1 when rho_t > 5
__global__ void advance_kernel(AdvanceList list, double* factors, const double* lr_ptr,
                               const double* momentum_ptr, const float* found_inf, Scalars s) {
  if (step_skipped(found_inf)) return;
  const int i = threadIdx.x;
  if (i >= list.count) return;
  float* step_ptr = list.steps[i];
  *step_ptr += 1.0f;
  const double step = double(*step_ptr);
  const double lr = *lr_ptr, beta1 = momentum_ptr != nullptr ? *momentum_ptr : 0.0;
  double f[kFactors] = {0, 0, 0, 0};
  switch (s.algorithm) {
    case Algo::adagrad:
      f[0] = lr / (1 + (step - 1) * s.lr_decay);
      break;
    case Algo::adamax:
      f[0] = lr / (1 - pow(beta1, step));
      break;
    case Algo::nadam: {
      const double mu = beta1 * (1 - 0.5 * pow(0.96, step * s.momentum_decay));
      const double mu_next = beta1 * (1 - 0.5 * pow(0.96, (step + 1) * s.momentum_decay));
      float* mu_product = list.mu_products[i];
      *mu_product = *mu_product * float(mu);
      const double product = double(*mu_product);
      f[0] = lr * (1 - mu) / (1 - product);
      f[1] = lr * mu_next / (1 - product * mu_next);
      f[2] = 1 - pow(s.alpha, step);
      break;
    }
    case Algo::radam: {
      const double bc1 = 1 - pow(beta1, step), bc2 = 1 - pow(s.alpha, step);
      const double rho_inf = 2 / (1 - s.alpha) - 1;
      const double rho_t = rho_inf - 2 * step * pow(s.alpha, step) / bc2;
      f[0] = lr / bc1;
      if (rho_t > 5) {
        f[1] = sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) *
               sqrt(bc2);
        f[3] = 1;
      }
      break;
    }
    default:
      break;
  }
  for (int k = 0; k < kFactors; ++k) factors[kFactors * i + k] = f[k];
}

// Slot i of v, clamped into the array (the algorithms only touch slots that exist; the clamp keeps
// every instantiation's indexing in bounds).
template <typename A, int Depth>
__device__ __forceinline__ A& slot(A (&v)[Depth], int i) {
  return v[i < Depth ? i : Depth - 1];
}

// Lists: 0 param, 1 grad, 2.. the algorithm's states (kernel_interface/optim_more.h's order).
template <typename T, int Depth>
__global__ void __launch_bounds__(kMultiTensorThreads)
    elementwise_optimizer_multi_tensor_kernel(MultiTensorMeta<Depth> meta, const double* lr_ptr,
                                              const double* momentum_ptr, const float* found_inf,
                                              Scalars s) {
  using A = OpMath<T>;
  if (step_skipped(found_inf)) return;
  const Chunk<T, Depth> c = this_chunk<T, Depth>(meta);
  // The pack's per-tensor pointer slot points at this tensor's float64 factors.
  const double* f = reinterpret_cast<const double*>(meta.steps[c.tensor]);
  const double lr_d = *lr_ptr;
  const double mom = momentum_ptr != nullptr ? *momentum_ptr : 0.0;
  const A fa = A(f[0]), fb = A(f[1]), fc = A(f[2]);
  const bool rectified = f[3] != 0;
  const A alpha = A(s.alpha), one_minus_alpha = A(1.0 - s.alpha);
  const A beta1 = A(mom), one_minus_beta1 = A(1.0 - mom);
  const A eps = A(s.eps), weight_decay = A(s.weight_decay), lr = A(lr_d);
  const A decay_factor = A(1.0 - lr_d * s.weight_decay);
  const bool decay = s.weight_decay != 0;
  auto op = [&](A(&v)[Depth]) {
    A param = v[0];
    A grad = s.maximize ? -v[1] : v[1];
    if (decay) {
      if (s.decoupled)
        param *= decay_factor;
      else
        grad += weight_decay * param;
    }
    switch (s.algorithm) {
      case Algo::rmsprop: {
        const A sq = alpha * v[2] + one_minus_alpha * grad * grad;
        v[2] = sq;
        A avg;
        if (s.centered) {
          A& grad_avg = slot(v, 3);
          grad_avg = grad_avg + one_minus_alpha * (grad - grad_avg);
          avg = sqrt(sq - grad_avg * grad_avg);
        } else {
          avg = sqrt(sq);
        }
        avg += eps;
        if (s.use_momentum) {
          A& buf = slot(v, s.centered ? 4 : 3);
          buf = beta1 * buf + grad / avg;
          param -= lr * buf;
        } else {
          param -= lr * grad / avg;
        }
        break;
      }
      case Algo::adagrad: {
        const A sum = v[2] + grad * grad;
        v[2] = sum;
        param -= fa * grad / (sqrt(sum) + eps);
        break;
      }
      case Algo::adadelta: {
        const A sq = alpha * v[2] + one_minus_alpha * grad * grad;
        v[2] = sq;
        A& acc = slot(v, 3);
        const A delta = sqrt(acc + eps) / sqrt(sq + eps) * grad;
        acc = alpha * acc + one_minus_alpha * delta * delta;
        param -= lr * delta;
        break;
      }
      case Algo::adamax: {
        const A m = v[2] + one_minus_beta1 * (grad - v[2]);
        v[2] = m;
        A& u = slot(v, 3);
        const A scaled = alpha * u, bound = fabs(grad) + eps;
        u = scaled > bound ? scaled : bound;
        param -= fa * m / u;
        break;
      }
      case Algo::nadam: {
        const A m = v[2] + one_minus_beta1 * (grad - v[2]);
        A& sq = slot(v, 3);
        sq = alpha * sq + one_minus_alpha * grad * grad;
        v[2] = m;
        const A denom = sqrt(sq / fc) + eps;
        param -= fa * grad / denom;
        param -= fb * m / denom;
        break;
      }
      case Algo::radam: {
        const A m = v[2] + one_minus_beta1 * (grad - v[2]);
        A& sq = slot(v, 3);
        sq = alpha * sq + one_minus_alpha * grad * grad;
        v[2] = m;
        if (rectified)
          param -= fa * m * fb / (sqrt(sq) + eps);
        else
          param -= fa * m;
        break;
      }
    }
    v[0] = param;
  };
  constexpr unsigned kWriteMask = ((1u << Depth) - 1u) & ~2u;  // everything but the gradient
  apply_to_chunk<T, Depth, kWriteMask>(c, op);
}

template <typename T, int Depth>
void launch_update(const ElementwiseOptimizerArgs& a, const std::vector<Tensor>& factor_slots,
                   const Scalars& s, const double* lr, const double* momentum,
                   const float* found_inf, cudaStream_t stream) {
  std::array<const std::vector<Tensor>*, Depth> lists;
  lists[0] = &a.params;
  lists[1] = &a.grads;
  for (int d = 2; d < Depth; ++d) lists[d] = &a.states[d - 2];
  for_each_pack<Depth>(lists, &factor_slots, [&](const MultiTensorMeta<Depth>& meta, int blocks) {
    elementwise_optimizer_multi_tensor_kernel<T, Depth>
        <<<blocks, kMultiTensorThreads, 0, stream>>>(meta, lr, momentum, found_inf, s);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

void elementwise_optimizer_cuda(const ElementwiseOptimizerArgs& a) {
  if (a.params.empty()) return;
  const Device device = a.params[0].device();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  const int lists = num_state_lists(a);
  for (int l = 0; l < lists; ++l)
    EMBER_INTERNAL_ASSERT(a.states[l].size() == a.params.size(), "optimizer: state list ", l,
                          " has ", a.states[l].size(), " tensors for ", a.params.size());
  const bool nadam = a.algorithm == Algo::nadam;
  const Scalars s{a.algorithm, a.alpha,          a.eps,      a.weight_decay,
                  a.lr_decay,  a.momentum_decay, a.maximize, a.decoupled_weight_decay,
                  a.centered,  a.use_momentum};
  const double* lr = device_ptr<double>(a.lr);
  const double* momentum = device_ptr<double>(a.momentum);
  const float* found_inf = device_ptr<float>(a.found_inf);
  // The per-tensor factors, from the caching allocator on this stream (capture-safe), and one
  // view per tensor whose pointer the update kernel's pack carries.
  const int64_t n = int64_t(a.params.size());
  Tensor factors = empty({n, kFactors}, DType::f64, device);
  double* factors_ptr = factors.data<double>();
  for (int64_t first = 0; first < n; first += kMaxAdvancePerLaunch) {
    AdvanceList list;
    list.count = int(std::min<int64_t>(kMaxAdvancePerLaunch, n - first));
    for (int i = 0; i < list.count; ++i) {
      list.steps[i] = static_cast<float*>(a.steps[first + i].data_ptr());
      list.mu_products[i] =
          nadam ? static_cast<float*>(a.mu_products[first + i].data_ptr()) : nullptr;
    }
    advance_kernel<<<1, kMaxAdvancePerLaunch, 0, stream>>>(list, factors_ptr + kFactors * first, lr,
                                                           momentum, found_inf, s);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  std::vector<Tensor> factor_slots;
  factor_slots.reserve(a.params.size());
  for (int64_t i = 0; i < n; ++i) factor_slots.push_back(factors.select(0, i));
  dispatch_floating(a.params[0].dtype(), "optimizer step", [&](auto tag) {
    using T = decltype(tag);
    switch (lists) {
      case 1:
        launch_update<T, 3>(a, factor_slots, s, lr, momentum, found_inf, stream);
        break;
      case 2:
        launch_update<T, 4>(a, factor_slots, s, lr, momentum, found_inf, stream);
        break;
      default:
        launch_update<T, 5>(a, factor_slots, s, lr, momentum, found_inf, stream);
        break;
    }
  });
}

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(elementwise_optimizer_kernel, CUDA, dispatch::kFloatingTypes,
                      &cuda::elementwise_optimizer_cuda);
}  // namespace ember
