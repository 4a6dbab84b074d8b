// CPU CTC loss kernels (the reference for cuda_kernels/softmax/ctc_loss.cu): the forward
// (alpha) and backward (beta) recursions of Graves et al. in log space, one sample per task, in
// the input's precision (float32 or float64), as PyTorch's ctc_loss_cpu. The backward overwrites
// grad_log_probs.
#include "ember/kernel_interface/ctc_loss.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <vector>

#include "ember/tensor/parallel.h"

namespace ember {
namespace {

template <typename T>
constexpr T neg_inf = -std::numeric_limits<T>::infinity();

// log(exp(a) + exp(b) + exp(c)), exact when all are -inf (then -inf).
template <typename T>
T log_sum_exp3(T a, T b, T c) {
  T m = std::max(a, std::max(b, c));
  if (m == neg_inf<T>) m = 0;
  return std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m)) + m;
}

// One sample's view: its labels, lengths and the strided log-probabilities.
template <typename T>
struct Sample {
  const T* lp;  // log_probs + b * C, row t at t * N * C
  int64_t row_stride, C;
  const int64_t* labels;
  int64_t input_length, target_length, blank;
  T at(int64_t t, int64_t c) const { return lp[t * row_stride + c]; }
  int64_t label(int64_t s) const { return s % 2 == 0 ? blank : labels[s / 2]; }
};

template <typename T>
Sample<T> sample_of(const CtcLossArgs& a, int64_t b) {
  const int64_t N = a.log_probs.size(1), C = a.log_probs.size(2);
  const int64_t* offsets = a.target_offsets.data<int64_t>();
  Sample<T> s{static_cast<const T*>(a.log_probs.data_ptr()) + b * C,
              N * C,
              C,
              a.targets.data<int64_t>() + offsets[b],
              a.input_lengths.data<int64_t>()[b],
              a.target_lengths.data<int64_t>()[b],
              a.blank};
  for (int64_t i = 0; i < s.target_length; ++i)
    EMBER_CHECK(s.labels[i] >= 0 && s.labels[i] < C, "ctc_loss: target ", s.labels[i],
                " of sample ", b, " is not a class index in [0, ", C, ")");
  return s;
}

template <typename T>
void forward_typed(const CtcLossArgs& a) {
  const int64_t N = a.log_probs.size(1), T_max = a.log_probs.size(0);
  const int64_t S_stride = 2 * a.max_target_length + 1;
  T* alpha_all = static_cast<T*>(a.log_alpha.data_ptr());
  T* nll = static_cast<T*>(a.neg_log_likelihood.data_ptr());
  parallel_for(0, N, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      const Sample<T> x = sample_of<T>(a, b);
      const int64_t L = x.target_length, S = 2 * L + 1, Tb = x.input_length;
      if (Tb == 0) {
        nll[b] = L == 0 ? T(0) : std::numeric_limits<T>::infinity();
        continue;
      }
      T* alpha = alpha_all + b * T_max * S_stride;
      std::fill(alpha, alpha + S, neg_inf<T>);
      alpha[0] = x.at(0, x.blank);
      if (L > 0) alpha[1] = x.at(0, x.label(1));
      for (int64_t t = 1; t < Tb; ++t) {
        const T* prev = alpha + (t - 1) * S_stride;
        T* cur = alpha + t * S_stride;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t c = x.label(s);
          const T a2 = s > 0 ? prev[s - 1] : neg_inf<T>;
          const T a3 = s > 1 && c != x.blank && x.label(s - 2) != c ? prev[s - 2] : neg_inf<T>;
          cur[s] = log_sum_exp3(prev[s], a2, a3) + x.at(t, c);
        }
      }
      const T* last = alpha + (Tb - 1) * S_stride;
      nll[b] = -log_sum_exp3(last[S - 1], L > 0 ? last[S - 2] : neg_inf<T>, neg_inf<T>);
    }
  });
}

template <typename T>
void backward_typed(const CtcLossArgs& a) {
  const int64_t N = a.log_probs.size(1), T_max = a.log_probs.size(0), C = a.log_probs.size(2);
  const int64_t S_stride = 2 * a.max_target_length + 1;
  const T* alpha_all = static_cast<const T*>(a.log_alpha.data_ptr());
  const T* nll_all = static_cast<const T*>(a.neg_log_likelihood.data_ptr());
  const T* grad_out = static_cast<const T*>(a.grad_output.data_ptr());
  T* grad = static_cast<T*>(a.grad_log_probs.data_ptr());
  parallel_for(0, N, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> beta, lcab(static_cast<size_t>(C));
    for (int64_t b = lo; b < hi; ++b) {
      const Sample<T> x = sample_of<T>(a, b);
      const int64_t L = x.target_length, S = 2 * L + 1, Tb = x.input_length;
      const T nll = nll_all[b], g = grad_out[b];
      const bool zeroed = a.zero_infinity && std::isinf(nll);
      for (int64_t t = (zeroed ? 0 : Tb); t < T_max; ++t)
        std::fill(grad + (t * N + b) * C, grad + (t * N + b + 1) * C, T(0));
      if (zeroed || Tb == 0) continue;
      beta.assign(size_t(Tb * S), neg_inf<T>);
      T* last = beta.data() + (Tb - 1) * S;
      last[S - 1] = x.at(Tb - 1, x.blank);
      if (L > 0) last[S - 2] = x.at(Tb - 1, x.label(S - 2));
      for (int64_t t = Tb - 2; t >= 0; --t) {
        const T* next = beta.data() + (t + 1) * S;
        T* cur = beta.data() + t * S;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t c = x.label(s);
          const T b2 = s + 1 < S ? next[s + 1] : neg_inf<T>;
          const T b3 = s + 2 < S && c != x.blank && x.label(s + 2) != c ? next[s + 2] : neg_inf<T>;
          cur[s] = log_sum_exp3(next[s], b2, b3) + x.at(t, c);
        }
      }
      const T* alpha = alpha_all + b * T_max * S_stride;
      for (int64_t t = 0; t < Tb; ++t) {
        std::fill(lcab.begin(), lcab.end(), neg_inf<T>);
        for (int64_t s = 0; s < S; ++s) {
          const T ab = alpha[t * S_stride + s] + beta[size_t(t * S + s)];
          T& acc = lcab[size_t(x.label(s))];
          acc = log_sum_exp3(acc, ab, neg_inf<T>);
        }
        T* row = grad + (t * N + b) * C;
        for (int64_t c = 0; c < C; ++c) {
          const T lp = x.at(t, c);
          row[c] = (std::exp(lp) - std::exp(lcab[size_t(c)] + nll - lp)) * g;
        }
      }
    }
  });
}

void ctc_loss_forward_cpu(const CtcLossArgs& a) {
  if (a.log_probs.dtype() == DType::f64) return forward_typed<double>(a);
  EMBER_CHECK(a.log_probs.dtype() == DType::f32, "ctc_loss: log_probs must be float32 or float64");
  forward_typed<float>(a);
}
void ctc_loss_backward_cpu(const CtcLossArgs& a) {
  if (a.log_probs.dtype() == DType::f64) return backward_typed<double>(a);
  EMBER_CHECK(a.log_probs.dtype() == DType::f32, "ctc_loss: log_probs must be float32 or float64");
  backward_typed<float>(a);
}

constexpr std::initializer_list<DType> kCtcTypes = {DType::f32, DType::f64};

}  // namespace

EMBER_REGISTER_KERNEL(ctc_loss_forward_kernel, CPU, kCtcTypes, &ctc_loss_forward_cpu);
EMBER_REGISTER_KERNEL(ctc_loss_backward_kernel, CPU, kCtcTypes, &ctc_loss_backward_cpu);

}  // namespace ember
