// CPU kernels of the normalization tables (kernel_interface/norm.h): batch-norm statistics, apply
// and backward, the per-channel gradient sums shared by batch / layer / group norm, and the row
// kernels of layer and group norm; and the registration of the CPU's "two_pass" training forward.
// The reference for the CUDA kernels, so they favour accuracy: every value is accumulated in
// double, and variances are two-pass (the mean first, then the sum of squared deviations from
// it), never a sum and a sum of squares. Statistics are stored in the
// statistics dtype (float64 for float64 inputs, else float32). Outputs are overwritten.
// The batch-norm kernels split the channels into blocks across threads (cpu_kernels/parallel.h)
// on large tensors and walk a block's elements in memory order (for_each_element_of); a channel's
// sums run in a fixed order (channel_sums), so results do not depend on the threads. The row
// norms run rows in parallel (each row on one thread), and layer norm's parameter sums columns.
#include "ember/kernel_interface/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "ember/cpu_kernels/parallel.h"

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

// The sum of term(i) for i = base + j, j in [0, count), in four interleaved lanes added as
// (0 + 1) + (2 + 3): a fixed order, at about four times the rate of one chain of dependent double
// additions.
template <typename F>
inline double lane_sum(int64_t base, int64_t count, F&& term) {
  double lane[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    lane[0] += term(base + j);
    lane[1] += term(base + j + 1);
    lane[2] += term(base + j + 2);
    lane[3] += term(base + j + 3);
  }
  for (int k = 0; j < count; ++j, ++k) lane[k] += term(base + j);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// Calls f(n, c, i) for every element i of channels [lo, hi), in memory order: channels-outer, each
// (n, c) plane's S elements in a row; channels-inner, each position's run of channels lo..hi-1.
template <typename F>
void for_each_element_of(const ChannelLayout& l, int64_t lo, int64_t hi, F&& f) {
  for (int64_t n = 0; n < l.N; ++n) {
    if (l.channels_inner) {
      for (int64_t s = 0; s < l.S; ++s) {
        const int64_t row = (n * l.S + s) * l.C;
        for (int64_t c = lo; c < hi; ++c) f(n, c, row + c);
      }
    } else {
      for (int64_t c = lo; c < hi; ++c) {
        const int64_t plane = (n * l.C + c) * l.S;
        for (int64_t s = 0; s < l.S; ++s) f(n, c, plane + s);
      }
    }
  }
}

// out[c - lo] = the sum of term(n, c, i) over the elements of channel c, for c in [lo, hi), in a
// fixed order: channels-outer, plane by plane, each plane in four lanes (lane_sum); channels-inner,
// position by position in memory order (the channels' sums are independent chains).
template <typename F>
void channel_sums(const ChannelLayout& l, int64_t lo, int64_t hi, F&& term, double* out) {
  std::fill(out, out + (hi - lo), 0.0);
  if (l.channels_inner) {
    for_each_element_of(l, lo, hi,
                        [&](int64_t n, int64_t c, int64_t i) { out[c - lo] += term(n, c, i); });
    return;
  }
  for (int64_t c = lo; c < hi; ++c)
    for (int64_t n = 0; n < l.N; ++n)
      out[c - lo] += lane_sum((n * l.C + c) * l.S, l.S, [&](int64_t i) { return term(n, c, i); });
}

// Runs body(lo, hi) over blocks of channels, split across threads when the tensor is large enough
// to pay for starting them (each channel in one block: results do not depend on the threads).
template <typename F>
void for_channel_blocks(const ChannelLayout& l, F&& body) {
  constexpr int64_t kElementsPerThread = int64_t(1) << 16;
  const int workers = int(std::clamp<int64_t>(
      std::min<int64_t>(l.numel() / kElementsPerThread, l.C), 1, cpu::worker_limit()));
  cpu::run_workers(workers, [&](int worker) {
    int64_t lo = 0, hi = 0;
    cpu::share_of(l.C, workers, worker, lo, hi);
    if (lo < hi) body(lo, hi);
  });
}

// Values of an optional [C] tensor (statistics dtype, or for the row norms' parameters the input's)
// as double (`fallback` when undefined).
std::vector<double> values_or(const Tensor& t, int64_t n, double fallback) {
  std::vector<double> v(size_t(n), fallback);
  if (t.defined()) {
    EMBER_DISPATCH_FLOATING_DTYPES(t.dtype(), "norm parameters", [&] {
      const scalar_t* p = t.data<scalar_t>();
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double(load(p[i]));
    });
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
  for_channel_blocks(l, [&](int64_t lo, int64_t hi) {
    channel_sums(
        l, lo, hi, [&](int64_t, int64_t, int64_t i) { return load(x[i]); }, &mean[size_t(lo)]);
    for (int64_t c = lo; c < hi; ++c) mean[size_t(c)] /= count;
    channel_sums(
        l, lo, hi,
        [&](int64_t, int64_t c, int64_t i) {
          const double d = load(x[i]) - mean[size_t(c)];
          return d * d;
        },
        &m2[size_t(lo)]);
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
  const ChannelLayout& l = a.layout;
  const T* x = a.x.data<T>();
  const T* res = a.residual.defined() ? a.residual.data<T>() : nullptr;
  T* y = a.y.data<T>();
  const std::vector<double> mean = values_or(a.mean, l.C, 0), invstd = values_or(a.invstd, l.C, 1),
                            w = values_or(a.weight, l.C, 1), b = values_or(a.bias, l.C, 0);
  std::vector<double> scale(size_t(l.C));
  for (size_t k = 0; k < scale.size(); ++k) scale[k] = invstd[k] * w[k];
  for_channel_blocks(l, [&](int64_t lo, int64_t hi) {
    for_each_element_of(l, lo, hi, [&](int64_t, int64_t c, int64_t i) {
      const size_t k = size_t(c);
      double v = (load(x[i]) - mean[k]) * scale[k] + b[k];
      if (res != nullptr) v += load(res[i]);
      y[i] = store<T>(a.relu ? relu(v) : v);
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
  auto g = [&](int64_t i) {
    const double v = load(dy[i]);
    return gate != nullptr && !(load(gate[i]) > 0) ? 0.0 : v;
  };
  for_channel_blocks(l, [&](int64_t lo, int64_t hi) {
    channel_sums(
        l, lo, hi, [&](int64_t, int64_t, int64_t i) { return g(i); }, &sum_dy[size_t(lo)]);
    channel_sums(
        l, lo, hi,
        [&](int64_t n, int64_t c, int64_t i) {
          const int64_t si = n * a.stats.n_stride + c / a.stats.group_size;
          return g(i) * ((load(x[i]) - double(mean[si])) * double(rstd[si]));
        },
        &sum_dy_xhat[size_t(lo)]);
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
  const ChannelLayout& l = a.layout;
  const T* dy = a.dy.data<T>();
  const T* x = a.x.data<T>();
  const T* gate = a.gate.defined() ? a.gate.data<T>() : nullptr;
  T* dx = a.dx.defined() ? a.dx.data<T>() : nullptr;
  T* dres = a.d_residual.defined() ? a.d_residual.data<T>() : nullptr;
  const double count = double(l.per_channel());
  const std::vector<double> mean = values_or(a.mean, l.C, 0), invstd = values_or(a.invstd, l.C, 1),
                            w = values_or(a.weight, l.C, 1);
  std::vector<double> mean_dy(size_t(l.C), 0.0), mean_dy_xhat(size_t(l.C), 0.0);
  if (a.training && dx != nullptr) {
    mean_dy = values_or(a.sum_dy, l.C, 0);
    mean_dy_xhat = values_or(a.sum_dy_xhat, l.C, 0);
    for (int64_t c = 0; c < l.C; ++c) {
      mean_dy[size_t(c)] /= count;
      mean_dy_xhat[size_t(c)] /= count;
    }
  }
  for_channel_blocks(l, [&](int64_t lo, int64_t hi) {
    for_each_element_of(l, lo, hi, [&](int64_t, int64_t c, int64_t i) {
      const size_t k = size_t(c);
      double g = load(dy[i]);
      if (gate != nullptr && !(load(gate[i]) > 0)) g = 0;
      if (dres != nullptr) dres[i] = store<T>(g);
      if (dx != nullptr) {
        const double xhat = (load(x[i]) - mean[k]) * invstd[k];
        const double centered = a.training ? g - mean_dy[k] - xhat * mean_dy_xhat[k] : g;
        dx[i] = store<T>(centered * invstd[k] * w[k]);
      }
    });
  });
}

// ---- row norms (layer norm, group norm) -------------------------------------------------------

// The affine parameter index of element j of row r (see RowNormLayout).
inline int64_t row_channel(const RowNormLayout& l, int64_t r, int64_t j) {
  return (r % l.groups) * (l.D / l.S) + j / l.S;
}

// Runs f(r) for every row on the thread pool, each row on one thread; ~32K elements per thread
// at least (a row is a few passes over D elements).
template <typename F>
void parallel_rows(const RowNormLayout& l, const F& f) {
  parallel_for(0, l.rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, l.D)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) f(r);
               });
}

template <typename T>
void row_norm_forward_impl(const RowNormForwardArgs& a) {
  using S = stat_t<T>;
  const RowNormLayout& l = a.layout;
  const T* x = a.x.data<T>();
  T* y = a.y.data<T>();
  const int64_t channels = l.groups * (l.D / l.S);
  const std::vector<double> w = values_or(a.weight, channels, 1);
  const std::vector<double> b = values_or(a.bias, channels, 0);
  S* mean_out = a.mean.data<S>();
  S* rstd_out = a.rstd.data<S>();
  parallel_rows(l, [&](int64_t r) {
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
  });
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
  const std::vector<double> w = values_or(a.weight, l.groups * (l.D / l.S), 1);
  // The parameter-gradient sums (layer norm), accumulated over the rows in double.
  const bool param_sums = a.sum_dy.defined();
  EMBER_INTERNAL_ASSERT(!param_sums || (l.groups == 1 && l.S == 1 && a.sum_dy_xhat.defined()),
                        "row_norm_backward_data: parameter sums are for layer norm");
  parallel_rows(l, [&](int64_t r) {
    const double mu = double(mean[r]), rs = double(rstd[r]);
    double sum_gw = 0, sum_gw_xhat = 0;
    for (int64_t j = 0; j < l.D; ++j) {
      const int64_t i = r * l.D + j;
      const double g = load(dy[i]), xhat = (load(x[i]) - mu) * rs;
      const double gw = g * w[size_t(row_channel(l, r, j))];
      sum_gw += gw;
      sum_gw_xhat += gw * xhat;
    }
    const double mean_gw = sum_gw / double(l.D), mean_gw_xhat = sum_gw_xhat / double(l.D);
    for (int64_t j = 0; j < l.D; ++j) {
      const int64_t i = r * l.D + j;
      const double gw = load(dy[i]) * w[size_t(row_channel(l, r, j))];
      const double xhat = (load(x[i]) - mu) * rs;
      dx[i] = store<T>(rs * (gw - mean_gw - xhat * mean_gw_xhat));
    }
  });
  if (!param_sums) return;
  // Column sums over the rows, in row order, in parallel over blocks of columns.
  S* sum_dy = a.sum_dy.data<S>();
  S* sum_dy_xhat = a.sum_dy_xhat.data<S>();
  constexpr int64_t kColumns = 256;
  const int64_t blocks = (l.D + kColumns - 1) / kColumns;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, l.rows * kColumns));
  parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
    double acc_dy[kColumns], acc_dy_xhat[kColumns];
    for (int64_t block = lo; block < hi; ++block) {
      const int64_t j0 = block * kColumns, n = std::min(kColumns, l.D - j0);
      std::fill(acc_dy, acc_dy + n, 0.0);
      std::fill(acc_dy_xhat, acc_dy_xhat + n, 0.0);
      for (int64_t r = 0; r < l.rows; ++r) {
        const double mu = double(mean[r]), rs = double(rstd[r]);
        const T* dyr = dy + r * l.D + j0;
        const T* xr = x + r * l.D + j0;
        for (int64_t j = 0; j < n; ++j) {
          const double g = load(dyr[j]);
          acc_dy[j] += g;
          acc_dy_xhat[j] += g * ((load(xr[j]) - mu) * rs);
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        sum_dy[j0 + j] = S(acc_dy[j]);
        sum_dy_xhat[j0 + j] = S(acc_dy_xhat[j]);
      }
    }
  });
}

// ---- registration -----------------------------------------------------------------------------

void batch_norm_stats_cpu(const BatchNormStatsArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "batch_norm",
                                 [&] { batch_norm_stats_impl<scalar_t>(a); });
}
void batch_norm_apply_cpu(const BatchNormApplyArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "batch_norm",
                                 [&] { batch_norm_apply_impl<scalar_t>(a); });
}
void channel_grad_sums_cpu(const ChannelGradSumsArgs& a) {
  EMBER_DISPATCH_FLOATING_DTYPES(a.x.dtype(), "norm backward",
                                 [&] { channel_grad_sums_impl<scalar_t>(a); });
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

EMBER_REGISTER_KERNEL(batch_norm_stats_kernel, CPU, dispatch::kFloatingTypes,
                      &batch_norm_stats_cpu);
EMBER_REGISTER_KERNEL(batch_norm_apply_kernel, CPU, dispatch::kFloatingTypes,
                      &batch_norm_apply_cpu);
EMBER_REGISTER_KERNEL(channel_grad_sums_kernel, CPU, dispatch::kFloatingTypes,
                      &channel_grad_sums_cpu);
EMBER_REGISTER_KERNEL(batch_norm_backward_elemt_kernel, CPU, dispatch::kFloatingTypes,
                      &batch_norm_backward_elemt_cpu);
EMBER_REGISTER_KERNEL(row_norm_forward_kernel, CPU, dispatch::kFloatingTypes,
                      &row_norm_forward_cpu);
EMBER_REGISTER_KERNEL(row_norm_backward_data_kernel, CPU, dispatch::kFloatingTypes,
                      &row_norm_backward_data_cpu);
// The training forward's only CPU algorithm: the statistics kernel, then the apply kernel.
EMBER_REGISTER_ALGORITHM(BatchNormForwardProblem, "batch_norm", forward, CPU,
                         batch_norm_two_pass_algorithm());

}  // namespace ember
