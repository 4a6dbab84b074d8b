// CPU kernels of kernel_interface/softmax.h: the softmax / log_softmax algorithm ("rowwise",
// forward and backward, registered in the algorithm cache's CPU slots) and the fused cross-entropy
// / nll_loss forward and backward kernels. They are the reference the CUDA kernels are tested
// against, so they accumulate in double for every dtype. Memory is [outer, dim, inner]; for
// inner > 1 a block of `inner` columns is processed side by side so the inner loops run over
// contiguous memory. Rows (and blocks of columns) run in parallel on the thread pool, each
// computed by one thread. Gradients are written, never accumulated.
#include "ember/kernel_interface/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/tensor/parallel.h"

namespace ember {
namespace {

using dispatch::Direction;

template <typename T>
inline double load(const T* p, int64_t i) {
  return double(p[i]);
}
template <typename T>
inline void store(T* p, int64_t i, double v) {
  if constexpr (std::is_same_v<T, double>)
    p[i] = v;
  else
    p[i] = T(float(v));
}

// ---- softmax ----------------------------------------------------------------------------------

// Columns of the inner dim processed side by side by one thread.
constexpr int64_t kColumnBlock = 256;

// Runs f(o, i0, i1) for the columns [i0, i1) of every outer slice o of an [outer, D, inner] layout
// on the thread pool: one item is a block of columns, each computed by one thread, so results do
// not depend on the thread count. ~32K elements per thread at least (a few exps each).
template <typename F>
void for_each_column_block(int64_t outer, int64_t D, int64_t I, const F& f) {
  const int64_t width = std::min(I, kColumnBlock);
  const int64_t blocks = (I + width - 1) / width;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, D * width));
  parallel_for(0, outer * blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t o = item / blocks, i0 = item % blocks * width;
      f(o, i0, std::min(I, i0 + width));
    }
  });
}

template <typename T>
void softmax_forward_typed(const SoftmaxProblem& p) {
  const T* x = static_cast<const T*>(p.input.data_ptr());
  T* y = static_cast<T*>(p.output.data_ptr());
  const int64_t D = p.dim_size, I = p.inner;
  if (p.outer * I == 0) return;
  if (I == 1) {
    // Contiguous rows: the column-block loops below with one column, without their inner loop.
    for_each_column_block(p.outer, D, I, [&](int64_t o, int64_t, int64_t) {
      const T* xo = x + o * D;
      T* yo = y + o * D;
      double maxv = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t d = 0; d < D; ++d) {
        const double v = load(xo, d);
        if (v > maxv || std::isnan(v)) maxv = v;
      }
      for (int64_t d = 0; d < D; ++d) sum += std::exp(load(xo, d) - maxv);
      if (p.log) {
        const double lse = maxv + std::log(sum);
        for (int64_t d = 0; d < D; ++d) store(yo, d, load(xo, d) - lse);
      } else {
        for (int64_t d = 0; d < D; ++d) store(yo, d, std::exp(load(xo, d) - maxv) / sum);
      }
    });
    return;
  }
  for_each_column_block(p.outer, D, I, [&](int64_t o, int64_t i0, int64_t i1) {
    const T* xo = x + o * D * I + i0;
    T* yo = y + o * D * I + i0;
    const int64_t n = i1 - i0;
    double maxv[kColumnBlock], sum[kColumnBlock];
    std::fill(maxv, maxv + n, -std::numeric_limits<double>::infinity());
    std::fill(sum, sum + n, 0.0);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) {
        const double v = load(xo, d * I + i);
        // NaN wins, so that a NaN anywhere in a row makes the whole row NaN.
        if (v > maxv[i] || std::isnan(v)) maxv[i] = v;
      }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) sum[i] += std::exp(load(xo, d * I + i) - maxv[i]);
    if (p.log) {
      for (int64_t i = 0; i < n; ++i) sum[i] = maxv[i] + std::log(sum[i]);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < n; ++i) store(yo, d * I + i, load(xo, d * I + i) - sum[i]);
    } else {
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < n; ++i)
          store(yo, d * I + i, std::exp(load(xo, d * I + i) - maxv[i]) / sum[i]);
    }
  });
}

// softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g).
template <typename T>
void softmax_backward_typed(const SoftmaxProblem& p) {
  const T* y = static_cast<const T*>(p.input.data_ptr());
  const T* g = static_cast<const T*>(p.grad_output.data_ptr());
  T* dx = static_cast<T*>(p.output.data_ptr());
  const int64_t D = p.dim_size, I = p.inner;
  if (p.outer * I == 0) return;
  for_each_column_block(p.outer, D, I, [&](int64_t o, int64_t i0, int64_t i1) {
    const int64_t base = o * D * I + i0;
    const int64_t n = i1 - i0;
    double acc[kColumnBlock];
    std::fill(acc, acc + n, 0.0);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = base + d * I + i;
        acc[i] += p.log ? load(g, at) : load(g, at) * load(y, at);
      }
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = base + d * I + i;
        const double gv = load(g, at), yv = load(y, at);
        store(dx, at, p.log ? gv - std::exp(yv) * acc[i] : yv * (gv - acc[i]));
      }
  });
}

void check_problem(const SoftmaxProblem& p) {
  EMBER_INTERNAL_ASSERT(p.input.dtype() == p.output.dtype() &&
                            p.outer * p.dim_size * p.inner == p.output.numel() &&
                            (p.direction == Direction::forward ||
                             (p.grad_output.defined() && p.grad_output.dtype() == p.input.dtype())),
                        "softmax: inconsistent problem [", p.outer, ", ", p.dim_size, ", ", p.inner,
                        "] for output ", p.output.shape_str());
}

dispatch::Algorithm<SoftmaxProblem> rowwise(bool forward) {
  dispatch::Algorithm<SoftmaxProblem> a;
  a.name = "rowwise";
  a.deterministic = true;
  a.run = [forward](const SoftmaxProblem& p, void*) {
    check_problem(p);
    EMBER_DISPATCH_FLOATING_DTYPES(p.input.dtype(), "softmax", [&] {
      if (forward)
        softmax_forward_typed<scalar_t>(p);
      else
        softmax_backward_typed<scalar_t>(p);
    });
  };
  return a;
}

EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", forward, CPU, rowwise(true));
EMBER_REGISTER_ALGORITHM(SoftmaxProblem, "softmax", backward, CPU, rowwise(false));

// ---- cross-entropy ----------------------------------------------------------------------------

// The class index of row r, or -1 for an ignored row; throws for an out-of-range index.
int64_t row_class(const CrossEntropyArgs& a, const int64_t* target, int64_t r) {
  const int64_t t = target[r];
  if (t == a.ignore_index) return -1;
  EMBER_CHECK(t >= 0 && t < a.classes, a.input_is_log_probs ? "nll_loss" : "cross_entropy",
              ": target ", t, " at position ", r, " is out of range for ", a.classes,
              " classes; class indices must be in [0, ", a.classes, ") or equal ignore_index (",
              a.ignore_index, ")");
  return t;
}

// The per-row buffers and weights: float64 for float64 input, else float32.
template <typename T>
using row_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void cross_entropy_forward_typed(const CrossEntropyArgs& a) {
  using R = row_t<T>;
  const T* x = static_cast<const T*>(a.input.data_ptr());
  const int64_t* target = a.target.data<int64_t>();
  const R* w = a.weight.defined() ? a.weight.data<R>() : nullptr;
  R* loss = a.loss.data<R>();
  R* lse_out = a.lse.data<R>();
  R* tw_out = a.target_weight.data<R>();
  const int64_t C = a.classes, S = a.inner;
  const double eps = a.label_smoothing;
  // Rows run in parallel, ~32K elements per thread at least.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, C));
  parallel_for(0, a.outer * S, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t n = r / S, s = r % S;
      const T* row = x + n * C * S + s;  // class c at row[c * S]
      const int64_t t = row_class(a, target, r);
      double lse = 0;
      if (!a.input_is_log_probs) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < C; ++c) {
          const double v = load(row, c * S);
          if (v > m || std::isnan(v)) m = v;
        }
        double sum = 0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(load(row, c * S) - m);
        lse = m + std::log(sum);
      }
      lse_out[r] = R(lse);
      if (t < 0) {
        loss[r] = 0;
        tw_out[r] = 0;
        continue;
      }
      const double wt = w ? double(w[t]) : 1.0;
      double value = (1 - eps) * wt * (lse - load(row, t * S));
      if (eps > 0) {
        double smooth = 0;  // sum_c w[c] * (lse - x[c])
        for (int64_t c = 0; c < C; ++c)
          smooth += (w ? double(w[c]) : 1.0) * (lse - load(row, c * S));
        value += eps / double(C) * smooth;
      }
      loss[r] = R(value);
      tw_out[r] = R(wt);
    }
  });
}

// d loss[r] / d x[r, c] = p_c * ((1 - eps) w[t] + eps / C * sum(w)) - (1 - eps) w[t] [c == t]
//                          - eps / C * w[c], with p = softmax(x[r]) = exp(x - lse); for nll_loss
// (log-probability input) just -w[t] [c == t]. Scaled by the upstream gradient of the row.
template <typename T>
void cross_entropy_backward_typed(const CrossEntropyArgs& a) {
  using R = row_t<T>;
  const T* x = static_cast<const T*>(a.input.data_ptr());
  T* gx = static_cast<T*>(a.grad_input.data_ptr());
  const int64_t* target = a.target.data<int64_t>();
  const R* w = a.weight.defined() ? a.weight.data<R>() : nullptr;
  const R* lse = a.lse.data<R>();
  const R* scale = a.row_scale.data<R>();
  const int64_t C = a.classes, S = a.inner;
  const double eps = a.label_smoothing;
  double weight_sum = double(C);
  if (w != nullptr) {
    weight_sum = 0;
    for (int64_t c = 0; c < C; ++c) weight_sum += double(w[c]);
  }
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, C));
  parallel_for(0, a.outer * S, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t n = r / S, s = r % S;
      const int64_t base = n * C * S + s;
      const int64_t t = row_class(a, target, r);
      if (t < 0) {
        for (int64_t c = 0; c < C; ++c) store(gx, base + c * S, 0.0);
        continue;
      }
      const double g = double(scale[r * a.row_scale_stride]);
      const double wt = w ? double(w[t]) : 1.0;
      const double p_coef = (1 - eps) * wt + eps / double(C) * weight_sum;
      for (int64_t c = 0; c < C; ++c) {
        double d;
        if (a.input_is_log_probs) {
          d = c == t ? -wt : 0.0;
        } else {
          const double prob = std::exp(load(x, base + c * S) - double(lse[r]));
          d = prob * p_coef - (c == t ? (1 - eps) * wt : 0.0) -
              eps / double(C) * (w ? double(w[c]) : 1.0);
        }
        store(gx, base + c * S, g * d);
      }
    }
  });
}

void cross_entropy_forward_cpu(const CrossEntropyArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.input.dtype(), "cross_entropy",
                                 [&] { cross_entropy_forward_typed<scalar_t>(a); });
}
void cross_entropy_backward_cpu(const CrossEntropyArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.input.dtype(), "cross_entropy",
                                 [&] { cross_entropy_backward_typed<scalar_t>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(cross_entropy_forward_kernel, CPU, dispatch::kFloatingTypes,
                      &cross_entropy_forward_cpu);
EMBER_REGISTER_KERNEL(cross_entropy_backward_kernel, CPU, dispatch::kFloatingTypes,
                      &cross_entropy_backward_cpu);

}  // namespace ember
