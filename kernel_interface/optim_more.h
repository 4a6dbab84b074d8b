// The kernel interface behind the element-wise optimizers of nn/optim_more.h (RMSprop, Adagrad,
// Adadelta, Adamax, NAdam, RAdam): one table whose kernels update LISTS of tensors in one pass per
// element, the CPU kernel (cpu_kernels/optim_more.cpp) tensor by tensor, the CUDA kernel
// (cuda_kernels/optim/optim_more.cu) as one multi-tensor launch over many tensors, as the SGD and
// Adam kernels of kernel_interface/optim.h (whose list, layout and capture-safety rules hold here
// too: the learning rate, the momentum/beta1, the step counts and NAdam's mu_product are read from
// device memory; `found_inf` set means nothing is written).
#pragma once
#include <vector>

#include "ember/dispatch/registry.h"
#include "ember/tensor/tensor.h"

namespace ember {

enum class ElementwiseOptimizer { rmsprop, adagrad, adadelta, adamax, nadam, radam };

// Per element (torch.optim's single-tensor algorithms; g = maximize ? -grad : grad, then
// g += weight_decay * param unless decoupled, where param *= 1 - lr * weight_decay first):
//   rmsprop  states {square_avg[, grad_avg if centered][, momentum_buffer if momentum != 0]}
//            v = alpha v + (1 - alpha) g^2; centered: a = lerp(a, g, 1 - alpha), avg = sqrt(v -
//            a^2) else avg = sqrt(v); avg += eps; momentum: b = momentum b + g / avg, param -= lr b
//            else param -= lr g / avg                                           (`momentum` scalar)
//   adagrad  states {sum}: clr = lr / (1 + (step - 1) lr_decay); sum += g^2;
//            param -= clr g / (sqrt(sum) + eps)
//   adadelta states {square_avg, acc_delta}: v = rho v + (1 - rho) g^2;
//            d = sqrt(acc + eps) / sqrt(v + eps) g; acc = rho acc + (1 - rho) d^2; param -= lr d
//   adamax   states {exp_avg, exp_inf}: m = lerp(m, g, 1 - beta1); u = max(beta2 u, |g| + eps);
//            param -= lr / (1 - beta1^step) m / u                                (beta1 =
//            `momentum`)
//   nadam    states {exp_avg, exp_avg_sq} + mu_products: mu = beta1 (1 - 0.5 * 0.96^(step psi)),
//            mu_next likewise at step + 1, mu_product *= mu; m, v as Adam;
//            denom = sqrt(v / (1 - beta2^step)) + eps;
//            param -= lr (1 - mu) / (1 - mu_product) g / denom
//                   + lr mu_next / (1 - mu_product mu_next) m / denom            (psi =
//                   momentum_decay)
//   radam    states {exp_avg, exp_avg_sq}: m, v as Adam; rho_inf = 2 / (1 - beta2) - 1,
//            rho_t = rho_inf - 2 step beta2^step / (1 - beta2^step); rho_t > 5:
//            param -= lr m / bc1 * rect * sqrt(bc2) / (sqrt(v) + eps) else param -= lr m / bc1
// `steps` (float32, one per parameter) are incremented first; NAdam's `mu_products` (float32,
// one per parameter) are multiplied by mu in float32 as PyTorch does. Per-tensor factors are
// computed in float64, the per-element math in float (float64 for f64 tensors).
struct ElementwiseOptimizerArgs {
  ElementwiseOptimizer algorithm = ElementwiseOptimizer::rmsprop;
  std::vector<Tensor> params, grads;
  std::vector<Tensor> states[3];  // per algorithm, in the order above; unused lists are empty
  std::vector<Tensor> steps, mu_products;
  Tensor lr, momentum, found_inf;  // momentum: RMSprop's momentum, else beta1 (f64 device scalars)
  double alpha = 0.99;             // RMSprop alpha, Adadelta rho, Adam-family beta2
  double eps = 1e-8, weight_decay = 0, lr_decay = 0, momentum_decay = 4e-3;
  bool maximize = false, decoupled_weight_decay = false, centered = false;
  bool use_momentum = false;  // RMSprop: a momentum buffer list is present (states[1] or [2])
};
using ElementwiseOptimizerKernel = void (*)(const ElementwiseOptimizerArgs& args);
EMBER_DECLARE_KERNEL(elementwise_optimizer_kernel, ElementwiseOptimizerKernel)

// How many state lists `a` carries for its algorithm (1 to 3).
inline int num_state_lists(const ElementwiseOptimizerArgs& a) {
  switch (a.algorithm) {
    case ElementwiseOptimizer::rmsprop:
      return 1 + int(a.centered) + int(a.use_momentum);
    case ElementwiseOptimizer::adagrad:
      return 1;
    default:
      return 2;
  }
}

}  // namespace ember
