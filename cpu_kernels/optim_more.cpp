// CPU kernel behind the element-wise optimizers of nn/optim_more.h (RMSprop, Adagrad, Adadelta,
// Adamax, NAdam, RAdam; kernel_interface/optim_more.h): one fused loop per tensor over its dense
// memory, the CPU reference the CUDA multi-tensor kernel is tested against. float16/bfloat16/float
// compute in float, float64 in double; per-tensor factors in double.
#include "ember/kernel_interface/optim_more.h"

#include <cmath>
#include <type_traits>

#include "ember/tensor/parallel.h"

namespace ember {
namespace {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int64_t kGrain = 32768;

template <typename T>
T* elements(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// The per-tensor factors of one step (float64), from the step count and the device scalars.
struct TensorFactors {
  double a = 0, b = 0, c = 0, d = 0;
  bool flag = false;
};

TensorFactors tensor_factors(const ElementwiseOptimizerArgs& a, double lr, double beta1,
                             double step, float* mu_product) {
  TensorFactors f;
  switch (a.algorithm) {
    case ElementwiseOptimizer::adagrad:
      f.a = lr / (1 + (step - 1) * a.lr_decay);  // clr
      break;
    case ElementwiseOptimizer::adamax:
      f.a = lr / (1 - std::pow(beta1, step));  // clr
      break;
    case ElementwiseOptimizer::nadam: {
      const double mu = beta1 * (1 - 0.5 * std::pow(0.96, step * a.momentum_decay));
      const double mu_next = beta1 * (1 - 0.5 * std::pow(0.96, (step + 1) * a.momentum_decay));
      *mu_product = float(*mu_product * float(mu));
      const double product = double(*mu_product);
      f.a = lr * (1 - mu) / (1 - product);           // on the gradient
      f.b = lr * mu_next / (1 - product * mu_next);  // on exp_avg
      f.c = 1 - std::pow(a.alpha, step);             // bias_correction2
      break;
    }
    case ElementwiseOptimizer::radam: {
      const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(a.alpha, step);
      const double rho_inf = 2 / (1 - a.alpha) - 1;
      const double rho_t = rho_inf - 2 * step * std::pow(a.alpha, step) / bc2;
      f.flag = rho_t > 5;
      f.a = lr / bc1;
      if (f.flag)
        f.b = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                        ((rho_inf - 4) * (rho_inf - 2) * rho_t)) *
              std::sqrt(bc2);
      break;
    }
    default:
      break;
  }
  return f;
}

template <typename T>
void elementwise_optimizer_typed(const ElementwiseOptimizerArgs& a) {
  using A = compute_t<T>;
  if (a.found_inf.defined() && *elements<float>(a.found_inf) != 0.0f) return;
  const int lists = num_state_lists(a);
  for (int s = 0; s < lists; ++s)
    EMBER_INTERNAL_ASSERT(a.states[s].size() == a.params.size(), "optimizer: state list ", s,
                          " has ", a.states[s].size(), " tensors for ", a.params.size());
  const double lr = *elements<double>(a.lr);
  const double mom = a.momentum.defined() ? *elements<double>(a.momentum) : 0.0;
  const A alpha = A(a.alpha), one_minus_alpha = A(1.0 - a.alpha);
  const A beta1 = A(mom), one_minus_beta1 = A(1.0 - mom);
  const A eps = A(a.eps), weight_decay = A(a.weight_decay), lr_a = A(lr);
  const A decay_factor = A(1.0 - lr * a.weight_decay);
  const bool decay = a.weight_decay != 0, decoupled = a.decoupled_weight_decay;
  for (size_t i = 0; i < a.params.size(); ++i) {
    float& step = *elements<float>(a.steps[i]);
    step += 1.0f;
    float* mu_product =
        a.algorithm == ElementwiseOptimizer::nadam ? elements<float>(a.mu_products[i]) : nullptr;
    const TensorFactors f = tensor_factors(a, lr, mom, double(step), mu_product);
    const A fa = A(f.a), fb = A(f.b), fc = A(f.c);
    T* p = elements<T>(a.params[i]);
    const T* g = elements<T>(a.grads[i]);
    T* s0 = elements<T>(a.states[0][i]);
    T* s1 = lists > 1 ? elements<T>(a.states[1][i]) : nullptr;
    T* s2 = lists > 2 ? elements<T>(a.states[2][i]) : nullptr;
    parallel_for(0, a.params[i].numel(), kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        A param = A(p[k]);
        A grad = a.maximize ? -A(g[k]) : A(g[k]);
        if (decay) {
          if (decoupled)
            param *= decay_factor;
          else
            grad += weight_decay * param;
        }
        switch (a.algorithm) {
          case ElementwiseOptimizer::rmsprop: {
            const A v = alpha * A(s0[k]) + one_minus_alpha * grad * grad;
            s0[k] = T(v);
            A avg;
            if (a.centered) {
              const A ga = A(s1[k]) + one_minus_alpha * (grad - A(s1[k]));
              s1[k] = T(ga);
              avg = std::sqrt(v - ga * ga);
            } else {
              avg = std::sqrt(v);
            }
            avg += eps;
            if (a.use_momentum) {
              T* buf = a.centered ? s2 : s1;
              const A b = beta1 * A(buf[k]) + grad / avg;
              buf[k] = T(b);
              param -= lr_a * b;
            } else {
              param -= lr_a * grad / avg;
            }
            break;
          }
          case ElementwiseOptimizer::adagrad: {
            const A sum = A(s0[k]) + grad * grad;
            s0[k] = T(sum);
            param -= fa * grad / (std::sqrt(sum) + eps);
            break;
          }
          case ElementwiseOptimizer::adadelta: {
            const A v = alpha * A(s0[k]) + one_minus_alpha * grad * grad;
            s0[k] = T(v);
            const A delta = std::sqrt(A(s1[k]) + eps) / std::sqrt(v + eps) * grad;
            s1[k] = T(alpha * A(s1[k]) + one_minus_alpha * delta * delta);
            param -= lr_a * delta;
            break;
          }
          case ElementwiseOptimizer::adamax: {
            const A m = A(s0[k]) + one_minus_beta1 * (grad - A(s0[k]));
            s0[k] = T(m);
            const A scaled = alpha * A(s1[k]), bound = std::abs(grad) + eps;
            const A u = scaled > bound ? scaled : bound;
            s1[k] = T(u);
            param -= fa * m / u;
            break;
          }
          case ElementwiseOptimizer::nadam: {
            const A m = A(s0[k]) + one_minus_beta1 * (grad - A(s0[k]));
            const A v = alpha * A(s1[k]) + one_minus_alpha * grad * grad;
            s0[k] = T(m);
            s1[k] = T(v);
            const A denom = std::sqrt(v / fc) + eps;
            param -= fa * grad / denom;
            param -= fb * m / denom;
            break;
          }
          case ElementwiseOptimizer::radam: {
            const A m = A(s0[k]) + one_minus_beta1 * (grad - A(s0[k]));
            const A v = alpha * A(s1[k]) + one_minus_alpha * grad * grad;
            s0[k] = T(m);
            s1[k] = T(v);
            if (f.flag)
              param -= fa * m * fb / (std::sqrt(v) + eps);
            else
              param -= fa * m;
            break;
          }
        }
        p[k] = T(param);
      }
    });
  }
}

void elementwise_optimizer_cpu(const ElementwiseOptimizerArgs& a) {
  if (a.params.empty()) return;
  EMBER_DISPATCH_FLOATING_DTYPES(a.params[0].dtype(), "optimizer step",
                                 [&] { elementwise_optimizer_typed<scalar_t>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(elementwise_optimizer_kernel, CPU, dispatch::kFloatingTypes,
                      &elementwise_optimizer_cpu);

}  // namespace ember
