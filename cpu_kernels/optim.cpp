// CPU kernels behind the optimizer, GradScaler and gradient-clipping tables
// (kernel_interface/optim.h). Each is one fused loop per tensor over its dense memory (parameter,
// gradient and state share one layout, so flat index i is the same element in all of them): the CPU
// reference that the CUDA multi-tensor kernels are tested against, and the real update on CPU runs.
// float16/bfloat16/float compute in float, float64 in double; the per-tensor factors (bias
// corrections, step size) in double, as the CUDA kernels do. A tensor's elements are split across
// the thread pool; the gradient norm sums fixed chunks in order, so no result depends on the
// thread count.
#include "ember/kernel_interface/optim.h"

#include <cmath>
#include <type_traits>

#include "ember/tensor/parallel.h"

namespace ember {
namespace {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Elements per thread below which a loop stays on one thread (as the elementwise kernels).
constexpr int64_t kGrain = 32768;

// Runs f(k) for k in [0, n) on the thread pool; each element by one thread.
template <typename F>
void for_elements(int64_t n, const F& f) {
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) f(k);
  });
}

template <typename T>
T* elements(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// True when the GradScaler flag says this step must not touch anything.
bool step_skipped(const Tensor& found_inf) {
  return found_inf.defined() && *elements<float>(found_inf) != 0.0f;
}

void check_lists(const char* op, const std::vector<Tensor>& params,
                 std::initializer_list<const std::vector<Tensor>*> others) {
  for (const std::vector<Tensor>* list : others)
    EMBER_INTERNAL_ASSERT(list->empty() || list->size() == params.size(), op,
                          ": tensor lists of different lengths");
}

// ---- SGD ----------------------------------------------------------------------------------------

template <typename T>
void sgd_typed(const SgdKernelArgs& a) {
  using A = compute_t<T>;
  check_lists("sgd", a.params, {&a.grads, &a.momentum_buffers, &a.steps});
  if (step_skipped(a.found_inf)) return;
  const bool use_momentum = !a.momentum_buffers.empty();
  const A neg_lr = A(-*elements<double>(a.lr));
  const A momentum = use_momentum ? A(*elements<double>(a.momentum)) : A(0);
  const A weight_decay = A(a.weight_decay);
  const A one_minus_dampening = A(1.0 - a.dampening);
  for (size_t i = 0; i < a.params.size(); ++i) {
    T* p = elements<T>(a.params[i]);
    const T* g = elements<T>(a.grads[i]);
    T* buf = use_momentum ? elements<T>(a.momentum_buffers[i]) : nullptr;
    bool first_step = false;
    if (use_momentum) {
      float& step = *elements<float>(a.steps[i]);
      step += 1.0f;
      first_step = step == 1.0f;
    }
    const int64_t n = a.params[i].numel();
    for_elements(n, [&](int64_t k) {
      A d = a.maximize ? -A(g[k]) : A(g[k]);
      if (a.weight_decay != 0) d += weight_decay * A(p[k]);
      if (use_momentum) {
        const A b = first_step ? d : momentum * A(buf[k]) + one_minus_dampening * d;
        buf[k] = T(b);
        d = a.nesterov ? d + momentum * b : b;
      }
      p[k] = T(A(p[k]) + neg_lr * d);
    });
  }
}

void sgd_cpu(const SgdKernelArgs& a) {
  if (a.params.empty()) return;
  EMBER_DISPATCH_FLOATING_DTYPES(a.params[0].dtype(), "SGD", [&] { sgd_typed<scalar_t>(a); });
}

// ---- Adam / AdamW
// ---------------------------------------------------------------------------------

template <typename T>
void adam_typed(const AdamKernelArgs& a) {
  using A = compute_t<T>;
  check_lists("adam", a.params,
              {&a.grads, &a.exp_avgs, &a.exp_avg_sqs, &a.max_exp_avg_sqs, &a.steps});
  if (step_skipped(a.found_inf)) return;
  const double lr = *elements<double>(a.lr);
  const double beta1 = *elements<double>(a.beta1);
  const A beta1_a = A(beta1), one_minus_beta1 = A(1.0 - beta1);
  const A beta2_a = A(a.beta2), one_minus_beta2 = A(1.0 - a.beta2);
  const A eps = A(a.eps);
  const A weight_decay = A(a.weight_decay);
  const A decay_factor = A(1.0 - lr * a.weight_decay);
  for (size_t i = 0; i < a.params.size(); ++i) {
    float& step = *elements<float>(a.steps[i]);
    step += 1.0f;
    const double bias_correction1 = 1.0 - std::pow(beta1, double(step));
    const double bias_correction2 = 1.0 - std::pow(a.beta2, double(step));
    const A step_size = A(lr / bias_correction1);
    const A bias_correction2_sqrt = A(std::sqrt(bias_correction2));
    T* p = elements<T>(a.params[i]);
    const T* g = elements<T>(a.grads[i]);
    T* m = elements<T>(a.exp_avgs[i]);
    T* v = elements<T>(a.exp_avg_sqs[i]);
    T* vmax = a.amsgrad ? elements<T>(a.max_exp_avg_sqs[i]) : nullptr;
    const int64_t n = a.params[i].numel();
    for_elements(n, [&](int64_t k) {
      A param = A(p[k]);
      A grad = a.maximize ? -A(g[k]) : A(g[k]);
      if (a.weight_decay != 0) {
        if (a.decoupled_weight_decay)
          param *= decay_factor;
        else
          grad += weight_decay * param;
      }
      const A exp_avg = beta1_a * A(m[k]) + one_minus_beta1 * grad;
      const A exp_avg_sq = beta2_a * A(v[k]) + one_minus_beta2 * grad * grad;
      m[k] = T(exp_avg);
      v[k] = T(exp_avg_sq);
      A second_moment = exp_avg_sq;
      if (vmax != nullptr) {
        const A previous_max = A(vmax[k]);
        second_moment = previous_max > exp_avg_sq ? previous_max : exp_avg_sq;
        vmax[k] = T(second_moment);
      }
      const A denom = std::sqrt(second_moment) / bias_correction2_sqrt + eps;
      p[k] = T(param - step_size * exp_avg / denom);
    });
  }
}

void adam_cpu(const AdamKernelArgs& a) {
  if (a.params.empty()) return;
  EMBER_DISPATCH_FLOATING_DTYPES(a.params[0].dtype(), "Adam", [&] { adam_typed<scalar_t>(a); });
}

// ---- GradScaler
// -------------------------------------------------------------------------------------

template <typename T>
void unscale_typed(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf) {
  using A = compute_t<T>;
  const float inv_scale = float(1.0 / double(*elements<float>(scale)));
  const A inv = A(inv_scale);
  bool any_non_finite = false;
  for (const Tensor& t : grads) {
    T* g = elements<T>(t);
    auto chunk = [&](int64_t lo, int64_t hi) {
      bool non_finite = false;
      for (int64_t k = lo; k < hi; ++k) {
        const A v = A(g[k]);
        if (!std::isfinite(v)) non_finite = true;
        if (inv_scale != 1.0f) g[k] = T(v * inv);
      }
      return non_finite;
    };
    if (parallel_reduce(int64_t(0), t.numel(), kGrain, false, chunk,
                        [](bool x, bool y) { return x || y; }))
      any_non_finite = true;
  }
  if (any_non_finite) *elements<float>(found_inf) = 1.0f;
}

void unscale_cpu(const std::vector<Tensor>& grads, const Tensor& scale, const Tensor& found_inf) {
  if (grads.empty()) return;
  EMBER_DISPATCH_FLOATING_DTYPES(grads[0].dtype(), "GradScaler.unscale_",
                                 [&] { unscale_typed<scalar_t>(grads, scale, found_inf); });
}

void update_scale_cpu(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                      double growth_factor, double backoff_factor, int64_t growth_interval) {
  float& s = *elements<float>(scale);
  int32_t& tracker = *elements<int32_t>(growth_tracker);
  if (*elements<float>(found_inf) != 0.0f) {
    s = float(double(s) * backoff_factor);
    tracker = 0;
    return;
  }
  const int64_t successful = int64_t(tracker) + 1;
  if (successful == growth_interval) {
    const float grown = float(double(s) * growth_factor);
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  } else {
    tracker = int32_t(successful);
  }
}

// ---- gradient clipping
// ------------------------------------------------------------------------------

// max that keeps a NaN once seen (std::max would drop it depending on the argument order).
double nan_max(double a, double b) { return std::isnan(a) || a > b ? a : b; }

template <typename T>
void grad_norm_typed(const std::vector<Tensor>& tensors, double p, const Tensor& accumulator) {
  using A = compute_t<T>;
  const bool inf_norm = std::isinf(p);
  auto combine = [inf_norm](double x, double y) { return inf_norm ? nan_max(x, y) : x + y; };
  double total = 0;
  for (const Tensor& t : tensors) {
    const T* x = elements<T>(t);
    // Fixed chunks combined in order: the same total for any thread count.
    auto chunk = [&](int64_t lo, int64_t hi) {
      double part = 0;
      for (int64_t k = lo; k < hi; ++k) {
        const double a = std::abs(double(A(x[k])));
        if (inf_norm)
          part = nan_max(part, a);
        else if (p == 2)
          part += a * a;
        else if (p == 1)
          part += a;
        else
          part += std::pow(a, p);
      }
      return part;
    };
    total = combine(total, parallel_reduce(int64_t(0), t.numel(), kGrain, 0.0, chunk, combine));
  }
  double& acc = *elements<double>(accumulator);
  acc = inf_norm ? nan_max(acc, total) : acc + total;
}

void grad_norm_cpu(const std::vector<Tensor>& tensors, double p, const Tensor& accumulator) {
  if (tensors.empty()) return;
  EMBER_DISPATCH_FLOATING_DTYPES(tensors[0].dtype(), "clip_grad_norm_",
                                 [&] { grad_norm_typed<scalar_t>(tensors, p, accumulator); });
}

template <typename T>
void clip_by_norm_typed(const std::vector<Tensor>& tensors, const Tensor& total_norm,
                        double max_norm) {
  using A = compute_t<T>;
  float coef = float(max_norm) / (*elements<float>(total_norm) + 1e-6f);
  if (coef > 1.0f) coef = 1.0f;  // written so that a NaN norm gives a NaN coefficient, as PyTorch
  const A c = A(coef);
  for (const Tensor& t : tensors) {
    T* x = elements<T>(t);
    const int64_t n = t.numel();
    for_elements(n, [&](int64_t k) { x[k] = T(A(x[k]) * c); });
  }
}

void clip_by_norm_cpu(const std::vector<Tensor>& tensors, const Tensor& total_norm,
                      double max_norm) {
  if (tensors.empty()) return;
  EMBER_DISPATCH_FLOATING_DTYPES(tensors[0].dtype(), "clip_grad_norm_", [&] {
    clip_by_norm_typed<scalar_t>(tensors, total_norm, max_norm);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(sgd_kernel, CPU, dispatch::kFloatingTypes, &sgd_cpu);
EMBER_REGISTER_KERNEL(adam_kernel, CPU, dispatch::kFloatingTypes, &adam_cpu);
EMBER_REGISTER_KERNEL(unscale_kernel, CPU, dispatch::kFloatingTypes, &unscale_cpu);
EMBER_REGISTER_KERNEL(update_scale_kernel, CPU, {DType::f32}, &update_scale_cpu);
EMBER_REGISTER_KERNEL(grad_norm_kernel, CPU, dispatch::kFloatingTypes, &grad_norm_cpu);
EMBER_REGISTER_KERNEL(clip_by_norm_kernel, CPU, dispatch::kFloatingTypes, &clip_by_norm_cpu);

}  // namespace ember
