// CPU kernels of the normalization tables (ops/norm.h): batch-norm statistics, apply and
// backward, the per-channel gradient sums shared by batch / layer / group norm, and the row
// kernels of layer and group norm. The reference for the CUDA kernels, so they favour accuracy:
// every value is accumulated in double, and variances are two-pass (the mean first, then the sum
// of squared deviations from it), never a sum and a sum of squares. Statistics are stored in the
// statistics dtype (float64 for float64 inputs, else float32). Outputs are overwritten.
// The batch-norm kernels walk one channel at a time over its runs of elements (channel_runs),
// channels split across threads (cpu_kernels/parallel.h) on large tensors; a channel's sums run in
// four interleaved lanes (lane_sum) in a fixed order, so results do not depend on the threads.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_kernels/parallel.h"
#include "ops/norm.h"

namespace ember {
namespace {

// The statistics type for an input element type.
template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline double load(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return double(float(v));
  else
    return double(v);
}

template <typename T>
inline T store(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(float(v));
  else
    return T(v);
}

// NaN stays NaN (as PyTorch's relu), unlike std::max(v, 0.0) on some orderings.
inline double relu(double v) { return v < 0 ? 0.0 : v; }

// Calls f(n, base, stride) for each sample n of channel c: that sample's l.S elements of the
// channel sit at base + j * stride (stride 1 channels-outer, C channels-inner).
template <typename F>
void channel_runs(const ChannelLayout& l, int64_t c, F&& f) {
  for (int64_t n = 0; n < l.N; ++n) {
    if (l.channels_inner) f(n, n * l.S * l.C + c, l.C);
    else f(n, (n * l.C + c) * l.S, int64_t(1));
  }
}

// Calls f(i) for i = base + j * stride, j in [0, count); stride 1 as its own loop (vectorized).
template <typename F>
inline void for_run(int64_t base, int64_t count, int64_t stride, F&& f) {
  if (stride == 1) {
    for (int64_t j = 0; j < count; ++j) f(base + j);
  } else {
    for (int64_t j = 0; j < count; ++j) f(base + j * stride);
  }
}

// The sum of term(i) over a run (see for_run) in four interleaved lanes added as (0 + 1) + (2 + 3):
// a fixed order, at about four times the rate of one chain of dependent double additions.
template <typename F>
inline double lane_sum(int64_t base, int64_t count, int64_t stride, F&& term) {
  double lane[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const int64_t i = base + j * stride;
    lane[0] += term(i);
    lane[1] += term(i + stride);
    lane[2] += term(i + 2 * stride);
    lane[3] += term(i + 3 * stride);
  }
  for (int k = 0; j < count; ++j, ++k) lane[k] += term(base + j * stride);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// Runs body(c) for every channel, channels split across threads when the tensor is large enough
// to pay for starting them.
template <typename F>
void for_each_channel(const ChannelLayout& l, F&& body) {
  constexpr int64_t kElementsPerThread = int64_t(1) << 16;
  const int workers = int(std::clamp<int64_t>(
      std::min<int64_t>(l.numel() / kElementsPerThread, l.C), 1, cpu::hardware_threads()));
  cpu::run_workers(workers, [&](int worker) {
    int64_t lo = 0, hi = 0;
    cpu::share_of(l.C, workers, worker, lo, hi);
    for (int64_t c = lo; c < hi; ++c) body(c);
  });
}

// Values of an optional [C] statistics-dtype tensor as double (`fallback` when undefined).
template <typename S>
std::vector<double> values_or(const Tensor& t, int64_t n, double fallback) {
  std::vector<double> v(size_t(n), fallback);
  if (t.defined()) {
    const S* p = t.data<S>();
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(p[i]);
  }
  return v;
}

// running[c] = (1 - momentum) * running[c] + momentum * stat, in the running tensor's own dtype.
void update_running(const Tensor& running, int64_t c, double stat, double momentum) {
  EMBER_DISPATCH_FLOATING_DTYPES(running.dtype(), "batch_norm", [&] {
    scalar_t* p = static_cast<scalar_t*>(running.data_ptr());
    p[c] = store<scalar_t>((1.0 - momentum) * load(p[c]) + momentum * stat);
  });
}

// ---- batch norm -------------------------------------------------------------------------------

template <typename T>
void batch_norm_stats_impl(const BatchNormStatsArgs& a) {
  using S = stat_t<T>;
  const ChannelLayout& l = a.layout;
  const T* x = a.x.data<T>();
  const double count = double(l.per_channel());
  std::vector<double> mean(size_t(l.C), 0.0), m2(size_t(l.C), 0.0);
  for_each_channel(l, [&](int64_t c) {
    double sum = 0;
    channel_runs(l, c, [&](int64_t, int64_t base, int64_t stride) {
      sum += lane_sum(base, l.S, stride, [&](int64_t i) { return load(x[i]); });
    });
    const double mu = sum / count;
    double squares = 0;
    channel_runs(l, c, [&](int64_t, int64_t base, int64_t stride) {
      squares += lane_sum(base, l.S, stride, [&](int64_t i) {
        const double d = load(x[i]) - mu;
        return d * d;
      });
    });
    mean[size_t(c)] = mu;
    m2[size_t(c)] = squares;
  });
  S* save_mean = a.save_mean.data<S>();
  S* save_invstd = a.save_invstd.data<S>();
  for (int64_t c = 0; c < l.C; ++c) {
    const double var = m2[size_t(c)] / count;
    save_mean[c] = S(mean[size_t(c)]);
    save_invstd[c] = S(1.0 / std::sqrt(var + a.eps));
    if (a.running_mean.defined()) {
      update_running(a.running_mean, c, mean[size_t(c)], a.momentum);
      update_running(a.running_var, c, m2[size_t(c)] / (count - 1), a.momentum);
    }
  }
}

template <typename T>
void batch_norm_apply_impl(const BatchNormApplyArgs& a) {
  using S = stat_t<T>;
  const ChannelLayout& l = a.layout;
  const T* x = a.x.data<T>();
  const T* res = a.residual.defined() ? a.residual.data<T>() : nullptr;
  T* y = a.y.data<T>();
  const std::vector<double> mean = values_or<S>(a.mean, l.C, 0), invstd = values_or<S>(a.invstd, l.C, 1),
                            w = values_or<S>(a.weight, l.C, 1), b = values_or<S>(a.bias, l.C, 0);
  for_each_channel(l, [&](int64_t c) {
    const size_t k = size_t(c);
    const double mu = mean[k], scale = invstd[k] * w[k], shift = b[k];
    channel_runs(l, c, [&](int64_t, int64_t base, int64_t stride) {
      for_run(base, l.S, stride, [&](int64_t i) {
        // (x - mean) * invstd * w + b, as before: scale folds invstd * w in double.
        double v = (load(x[i]) - mu) * scale + shift;
        if (res != nullptr) v += load(res[i]);
        y[i] = store<T>(a.relu ? relu(v) : v);
      });
    });
  });
}

template <typename T>
void channel_grad_sums_impl(const ChannelGradSumsArgs& a) {
  using S = stat_t<T>;
  const ChannelLayout& l = a.layout;
  const T* dy = a.dy.data<T>();
  const T* x = a.x.data<T>();
  const T* gate = a.gate.defined() ? a.gate.data<T>() : nullptr;
  const S* mean = a.mean.data<S>();
  const S* rstd = a.rstd.data<S>();
  std::vector<double> sum_dy(size_t(l.C), 0.0), sum_dy_xhat(size_t(l.C), 0.0);
  for_each_channel(l, [&](int64_t c) {
    double s_dy = 0, s_dy_xhat = 0;
    channel_runs(l, c, [&](int64_t n, int64_t base, int64_t stride) {
      const int64_t si = n * a.stats.n_stride + c / a.stats.group_size;
      const double mu = double(mean[si]), rs = double(rstd[si]);
      auto g = [&](int64_t i) {
        const double v = load(dy[i]);
        return gate != nullptr && !(load(gate[i]) > 0) ? 0.0 : v;
      };
      s_dy += lane_sum(base, l.S, stride, g);
      s_dy_xhat += lane_sum(base, l.S, stride,
                            [&](int64_t i) { return g(i) * ((load(x[i]) - mu) * rs); });
    });
    sum_dy[size_t(c)] = s_dy;
    sum_dy_xhat[size_t(c)] = s_dy_xhat;
  });
  S* out_dy = a.sum_dy.data<S>();
  S* out_dy_xhat = a.sum_dy_xhat.data<S>();
  for (int64_t c = 0; c < l.C; ++c) {
    out_dy[c] = S(sum_dy[size_t(c)]);
    out_dy_xhat[c] = S(sum_dy_xhat[size_t(c)]);
  }
}

template <typename T>
void batch_norm_backward_elemt_impl(const BatchNormBackwardArgs& a) {
  using S = stat_t<T>;
  const ChannelLayout& l = a.layout;
  const T* dy = a.dy.data<T>();
  const T* x = a.x.data<T>();
  const T* gate = a.gate.defined() ? a.gate.data<T>() : nullptr;
  T* dx = a.dx.defined() ? a.dx.data<T>() : nullptr;
  T* dres = a.d_residual.defined() ? a.d_residual.data<T>() : nullptr;
  const double count = double(l.per_channel());
  const std::vector<double> mean = values_or<S>(a.mean, l.C, 0), invstd = values_or<S>(a.invstd, l.C, 1),
                            w = values_or<S>(a.weight, l.C, 1);
  std::vector<double> mean_dy(size_t(l.C), 0.0), mean_dy_xhat(size_t(l.C), 0.0);
  if (a.training && dx != nullptr) {
    mean_dy = values_or<S>(a.sum_dy, l.C, 0);
    mean_dy_xhat = values_or<S>(a.sum_dy_xhat, l.C, 0);
    for (int64_t c = 0; c < l.C; ++c) {
      mean_dy[size_t(c)] /= count;
      mean_dy_xhat[size_t(c)] /= count;
    }
  }
  for_each_channel(l, [&](int64_t c) {
    const size_t k = size_t(c);
    const double mu = mean[k], is = invstd[k], out_scale = invstd[k] * w[k];
    const double m_dy = mean_dy[k], m_dy_xhat = mean_dy_xhat[k];
    channel_runs(l, c, [&](int64_t, int64_t base, int64_t stride) {
      for_run(base, l.S, stride, [&](int64_t i) {
        double g = load(dy[i]);
        if (gate != nullptr && !(load(gate[i]) > 0)) g = 0;
        if (dres != nullptr) dres[i] = store<T>(g);
        if (dx != nullptr) {
          const double xhat = (load(x[i]) - mu) * is;
          const double centered = a.training ? g - m_dy - xhat * m_dy_xhat : g;
          dx[i] = store<T>(centered * out_scale);
        }
      });
    });
  });
}

// ---- row norms (layer norm, group norm) -------------------------------------------------------

// The affine parameter index of element j of row r (see RowNormLayout).
inline int64_t row_channel(const RowNormLayout& l, int64_t r, int64_t j) {
  return (r % l.groups) * (l.D / l.S) + j / l.S;
}

template <typename T>
void row_norm_forward_impl(const RowNormForwardArgs& a) {
  using S = stat_t<T>;
  const RowNormLayout& l = a.layout;
  const T* x = a.x.data<T>();
  T* y = a.y.data<T>();
  const int64_t channels = l.groups * (l.D / l.S);
  const std::vector<double> w = values_or<S>(a.weight, channels, 1), b = values_or<S>(a.bias, channels, 0);
  S* mean_out = a.mean.data<S>();
  S* rstd_out = a.rstd.data<S>();
  for (int64_t r = 0; r < l.rows; ++r) {
    const T* xr = x + r * l.D;
    double mean = 0, m2 = 0;
    for (int64_t j = 0; j < l.D; ++j) mean += load(xr[j]);
    mean /= double(l.D);
    for (int64_t j = 0; j < l.D; ++j) {
      const double d = load(xr[j]) - mean;
      m2 += d * d;
    }
    const double rstd = 1.0 / std::sqrt(m2 / double(l.D) + a.eps);
    mean_out[r] = S(mean);
    rstd_out[r] = S(rstd);
    for (int64_t j = 0; j < l.D; ++j) {
      const size_t ch = size_t(row_channel(l, r, j));
      y[r * l.D + j] = store<T>((load(xr[j]) - mean) * rstd * w[ch] + b[ch]);
    }
  }
}

template <typename T>
void row_norm_backward_data_impl(const RowNormBackwardArgs& a) {
  using S = stat_t<T>;
  const RowNormLayout& l = a.layout;
  const T* dy = a.dy.data<T>();
  const T* x = a.x.data<T>();
  T* dx = a.dx.data<T>();
  const S* mean = a.mean.data<S>();
  const S* rstd = a.rstd.data<S>();
  const std::vector<double> w = values_or<S>(a.weight, l.groups * (l.D / l.S), 1);
  for (int64_t r = 0; r < l.rows; ++r) {
    const double mu = double(mean[r]), rs = double(rstd[r]);
    double sum_gw = 0, sum_gw_xhat = 0;
    for (int64_t j = 0; j < l.D; ++j) {
      const int64_t i = r * l.D + j;
      const double gw = load(dy[i]) * w[size_t(row_channel(l, r, j))];
      sum_gw += gw;
      sum_gw_xhat += gw * (load(x[i]) - mu) * rs;
    }
    const double mean_gw = sum_gw / double(l.D), mean_gw_xhat = sum_gw_xhat / double(l.D);
    for (int64_t j = 0; j < l.D; ++j) {
      const int64_t i = r * l.D + j;
      const double gw = load(dy[i]) * w[size_t(row_channel(l, r, j))];
      const double xhat = (load(x[i]) - mu) * rs;
      dx[i] = store<T>(rs * (gw - mean_gw - xhat * mean_gw_xhat));
    }
  }
}

// ---- registration -----------------------------------------------------------------------------

void batch_norm_stats_cpu(const BatchNormStatsArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "batch_norm", [&] { batch_norm_stats_impl<scalar_t>(a); });
}
void batch_norm_apply_cpu(const BatchNormApplyArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "batch_norm", [&] { batch_norm_apply_impl<scalar_t>(a); });
}
void channel_grad_sums_cpu(const ChannelGradSumsArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "norm backward", [&] { channel_grad_sums_impl<scalar_t>(a); });
}
void batch_norm_backward_elemt_cpu(const BatchNormBackwardArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "batch_norm backward",
                                 [&] { batch_norm_backward_elemt_impl<scalar_t>(a); });
}
void row_norm_forward_cpu(const RowNormForwardArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "layer_norm / group_norm",
                                 [&] { row_norm_forward_impl<scalar_t>(a); });
}
void row_norm_backward_data_cpu(const RowNormBackwardArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "layer_norm / group_norm backward",
                                 [&] { row_norm_backward_data_impl<scalar_t>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(batch_norm_stats_kernel, CPU, dispatch::kFloatingTypes, &batch_norm_stats_cpu);
EMBER_REGISTER_KERNEL(batch_norm_apply_kernel, CPU, dispatch::kFloatingTypes, &batch_norm_apply_cpu);
EMBER_REGISTER_KERNEL(channel_grad_sums_kernel, CPU, dispatch::kFloatingTypes, &channel_grad_sums_cpu);
EMBER_REGISTER_KERNEL(batch_norm_backward_elemt_kernel, CPU, dispatch::kFloatingTypes,
                      &batch_norm_backward_elemt_cpu);
EMBER_REGISTER_KERNEL(row_norm_forward_kernel, CPU, dispatch::kFloatingTypes, &row_norm_forward_cpu);
EMBER_REGISTER_KERNEL(row_norm_backward_data_kernel, CPU, dispatch::kFloatingTypes,
                      &row_norm_backward_data_cpu);

}  // namespace ember
