// CUDA CTC loss kernels behind ctc_loss_forward_kernel / ctc_loss_backward_kernel
// (kernel_interface/ctc_loss.h), float32 and float64, in the input's precision as the CPU
// reference (cpu_kernels/ctc_loss.cpp):
//   alpha (forward) and beta (backward): one block per sample, the extended label sequence
//   (2S + 1 positions) across the threads, stepping through time with the previous row and the
//   labels in shared memory (global memory when a row does not fit); every alpha row is also
//   written to log_alpha, every beta row to a workspace, for the gradient;
//   gradient: one block per (time step, sample): exp(lp) * g for every class, then one thread per
//   distinct label sums alpha * beta over the positions of that label and writes its class.
// A label outside [0, C) is reported through the device error flag (kDeviceErrorIndexOutOfRange,
// details: the label and C) and read as blank. Every kernel overwrites its output and is
// deterministic.
#include <limits>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/kernel_interface/ctc_loss.h"
#include "ember/tensor/runtime/device_errors.h"

namespace ember::cuda {
namespace {

constexpr int kCtcMaxThreads = 512;
constexpr size_t kCtcMaxSharedBytes = 48 * 1024;

template <typename T>
__device__ __forceinline__ T neg_inf() {
  return -std::numeric_limits<T>::infinity();
}

// log(exp(a) + exp(b) + exp(c)), -inf when all are.
template <typename T>
__device__ __forceinline__ T log_sum_exp3(T a, T b, T c) {
  T m = max(a, max(b, c));
  if (m == neg_inf<T>()) m = T(0);
  return log(exp(a - m) + exp(b - m) + exp(c - m)) + m;
}

template <typename T>
struct CtcView {
  const T* log_probs;  // [T, N, C]
  const int64_t* targets;
  const int64_t* input_lengths;
  const int64_t* target_lengths;
  const int64_t* target_offsets;
  int64_t T_max, N, C, S_stride, blank;
  int* error_flag;

  __device__ T lp(int64_t t, int64_t b, int64_t c) const { return log_probs[(t * N + b) * C + c]; }
  // The extended label at position s of sample b (blank at even positions).
  __device__ int64_t label(int64_t b, int64_t s) const {
    if (s % 2 == 0) return blank;
    const int64_t c = targets[target_offsets[b] + s / 2];
    if (c >= 0 && c < C) return c;
    report_device_error(error_flag, kDeviceErrorIndexOutOfRange, c, C);
    return blank;
  }
};

template <typename T>
CtcView<T> ctc_view(const CtcLossArgs& a) {
  return CtcView<T>{static_cast<const T*>(a.log_probs.data_ptr()),
                    a.targets.data<int64_t>(),
                    a.input_lengths.data<int64_t>(),
                    a.target_lengths.data<int64_t>(),
                    a.target_offsets.data<int64_t>(),
                    a.log_probs.size(0),
                    a.log_probs.size(1),
                    a.log_probs.size(2),
                    2 * a.max_target_length + 1,
                    a.blank,
                    device_error_flag(a.log_probs.device().index)};
}

// The recursion over one sample's time steps, forward (alpha: from t = 0 up, reading s - 1 and
// s - 2) or backward (beta: from t = Tb - 1 down, reading s + 1 and s + 2). rows [Tb, S_stride]
// in global memory receives every row; with use_shared, the previous row and the labels are kept
// in shared memory (2 rows of T, then S_stride labels).
template <typename T, bool kBackward>
__device__ void ctc_recursion(const CtcView<T>& v, int64_t b, int64_t Tb, int64_t L, T* rows,
                              bool use_shared) {
  extern __shared__ __align__(16) unsigned char ctc_shared[];
  const int64_t S = 2 * L + 1;
  T* ping = reinterpret_cast<T*>(ctc_shared);
  T* pong = ping + v.S_stride;
  int64_t* labels = reinterpret_cast<int64_t*>(pong + v.S_stride);
  if (use_shared)
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) labels[s] = v.label(b, s);
  __syncthreads();
  auto label = [&](int64_t s) { return use_shared ? labels[s] : v.label(b, s); };
  // First row: t = 0 (alpha) or t = Tb - 1 (beta).
  const int64_t t0 = kBackward ? Tb - 1 : 0;
  for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
    T value = neg_inf<T>();
    if (kBackward ? s == S - 1 : s == 0) value = v.lp(t0, b, v.blank);
    if (L > 0 && (kBackward ? s == S - 2 : s == 1)) value = v.lp(t0, b, label(s));
    rows[t0 * v.S_stride + s] = value;
    if (use_shared) ping[s] = value;
  }
  __syncthreads();
  for (int64_t step = 1; step < Tb; ++step) {
    const int64_t t = kBackward ? Tb - 1 - step : step;
    const int64_t t_prev = kBackward ? t + 1 : t - 1;
    const T* prev = use_shared ? ping : rows + t_prev * v.S_stride;
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
      const int64_t c = label(s);
      T x2, x3;
      if (kBackward) {
        x2 = s + 1 < S ? prev[s + 1] : neg_inf<T>();
        x3 = s + 2 < S && c != v.blank && label(s + 2) != c ? prev[s + 2] : neg_inf<T>();
      } else {
        x2 = s > 0 ? prev[s - 1] : neg_inf<T>();
        x3 = s > 1 && c != v.blank && label(s - 2) != c ? prev[s - 2] : neg_inf<T>();
      }
      const T value = log_sum_exp3(prev[s], x2, x3) + v.lp(t, b, c);
      rows[t * v.S_stride + s] = value;
      if (use_shared) pong[s] = value;
    }
    __syncthreads();
    T* swap = ping;
    ping = pong;
    pong = swap;
  }
}

template <typename T>
__global__ void ctc_alpha_kernel(CtcView<T> v, T* log_alpha, T* nll, bool use_shared) {
  const int64_t b = blockIdx.x;
  const int64_t Tb = v.input_lengths[b], L = v.target_lengths[b];
  if (Tb == 0) {
    if (threadIdx.x == 0) nll[b] = L == 0 ? T(0) : std::numeric_limits<T>::infinity();
    return;
  }
  T* alpha = log_alpha + b * v.T_max * v.S_stride;
  ctc_recursion<T, false>(v, b, Tb, L, alpha, use_shared);
  if (threadIdx.x == 0) {
    const T* last = alpha + (Tb - 1) * v.S_stride;
    nll[b] = -log_sum_exp3(last[2 * L], L > 0 ? last[2 * L - 1] : neg_inf<T>(), neg_inf<T>());
  }
}

template <typename T>
__global__ void ctc_beta_kernel(CtcView<T> v, T* log_beta, const T* nll, bool zero_infinity,
                                bool use_shared) {
  const int64_t b = blockIdx.x;
  const int64_t Tb = v.input_lengths[b], L = v.target_lengths[b];
  if (Tb == 0 || (zero_infinity && isinf(nll[b]))) return;
  ctc_recursion<T, true>(v, b, Tb, L, log_beta + b * v.T_max * v.S_stride, use_shared);
}

// Block (t, b): grad[t, b, c] = (exp(lp) - exp(log(sum over s with l'_s = c of alpha * beta) +
// nll - lp)) * g. Classes that are no label get the empty sum; the thread of the first occurrence
// of each label (position 0 stands for blank) overwrites its class after a barrier.
template <typename T>
__global__ void ctc_grad_kernel(CtcView<T> v, const T* log_alpha, const T* log_beta,
                                const T* nll_all, const T* grad_out, T* grad, bool zero_infinity) {
  const int64_t t = blockIdx.x, b = blockIdx.y;
  const int64_t Tb = v.input_lengths[b], L = v.target_lengths[b];
  const T nll = nll_all[b], g = grad_out[b];
  T* row = grad + (t * v.N + b) * v.C;
  if (t >= Tb || (zero_infinity && isinf(nll))) {
    for (int64_t c = threadIdx.x; c < v.C; c += blockDim.x) row[c] = T(0);
    return;
  }
  // No path through class c: the formula with an empty sum (NaN when nll is infinite, as the CPU).
  for (int64_t c = threadIdx.x; c < v.C; c += blockDim.x) {
    const T lp = v.lp(t, b, c);
    row[c] = (exp(lp) - exp(neg_inf<T>() + nll - lp)) * g;
  }
  __syncthreads();
  const T* alpha = log_alpha + (b * v.T_max + t) * v.S_stride;
  const T* beta = log_beta + (b * v.T_max + t) * v.S_stride;
  for (int64_t j = threadIdx.x; j <= L; j += blockDim.x) {
    // j = 0: blank; j >= 1: the label at target position j - 1, owned by its first occurrence.
    const int64_t c = j == 0 ? v.blank : v.label(b, 2 * j - 1);
    if (j > 0) {
      bool owner = c != v.blank;
      for (int64_t k = 1; owner && k < j; ++k) owner = v.label(b, 2 * k - 1) != c;
      if (!owner) continue;
    }
    T lcab = neg_inf<T>();
    for (int64_t s = 0; s <= 2 * L; ++s)
      if ((j == 0 && s % 2 == 0) || v.label(b, s) == c)
        lcab = log_sum_exp3(lcab, alpha[s] + beta[s], neg_inf<T>());
    const T lp = v.lp(t, b, c);
    row[c] = (exp(lp) - exp(lcab + nll - lp)) * g;
  }
}

struct CtcLaunch {
  unsigned threads;
  size_t shared_bytes;
  bool use_shared;
};
template <typename T>
CtcLaunch ctc_launch(int64_t S_stride) {
  int64_t threads = 32;
  while (threads < kCtcMaxThreads && threads < S_stride) threads *= 2;
  const size_t bytes = size_t(S_stride) * (2 * sizeof(T) + sizeof(int64_t));
  const bool fits = bytes <= kCtcMaxSharedBytes;
  return {unsigned(threads), fits ? bytes : 0, fits};
}

template <typename F>
void dispatch_ctc(DType dtype, F&& f) {
  if (dtype == DType::f64) return f(double{});
  EMBER_CHECK(dtype == DType::f32, "ctc_loss: dtype ", dtype_name(dtype),
              " is not supported on CUDA; use float32 or float64");
  f(float{});
}

void ctc_loss_forward_cuda(const CtcLossArgs& a) {
  const int64_t N = a.log_probs.size(1);
  if (N == 0) return;
  DeviceGuard device_guard(a.log_probs.device());
  cudaStream_t stream = stream_of(a.log_probs.device());
  dispatch_ctc(a.log_probs.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const CtcView<T> v = ctc_view<T>(a);
    const CtcLaunch launch = ctc_launch<T>(v.S_stride);
    ctc_alpha_kernel<T><<<unsigned(N), launch.threads, launch.shared_bytes, stream>>>(
        v, static_cast<T*>(a.log_alpha.data_ptr()),
        static_cast<T*>(a.neg_log_likelihood.data_ptr()), launch.use_shared);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

void ctc_loss_backward_cuda(const CtcLossArgs& a) {
  const int64_t T_max = a.log_probs.size(0), N = a.log_probs.size(1);
  if (N == 0 || a.grad_log_probs.numel() == 0) return;
  EMBER_CHECK(T_max <= int64_t(std::numeric_limits<int32_t>::max()) && N <= 65535,
              "ctc_loss: CUDA backward supports at most 65535 samples, got ", N,
              "; split the batch");
  DeviceGuard device_guard(a.log_probs.device());
  cudaStream_t stream = stream_of(a.log_probs.device());
  dispatch_ctc(a.log_probs.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const CtcView<T> v = ctc_view<T>(a);
    const CtcLaunch launch = ctc_launch<T>(v.S_stride);
    Tensor log_beta = empty(a.log_alpha.sizes(), a.log_alpha.dtype(), a.log_alpha.device());
    const T* nll = static_cast<const T*>(a.neg_log_likelihood.data_ptr());
    ctc_beta_kernel<T><<<unsigned(N), launch.threads, launch.shared_bytes, stream>>>(
        v, static_cast<T*>(log_beta.data_ptr()), nll, a.zero_infinity, launch.use_shared);
    EMBER_CUDA_LAUNCH_CHECK();
    unsigned threads = 32;
    while (threads < 256 && int64_t(threads) < std::max(v.C, a.max_target_length + 1)) threads *= 2;
    ctc_grad_kernel<T><<<dim3(unsigned(T_max), unsigned(N)), threads, 0, stream>>>(
        v, static_cast<const T*>(a.log_alpha.data_ptr()),
        static_cast<const T*>(log_beta.data_ptr()), nll,
        static_cast<const T*>(a.grad_output.data_ptr()),
        static_cast<T*>(a.grad_log_probs.data_ptr()), a.zero_infinity);
    EMBER_CUDA_LAUNCH_CHECK();
  });
}

constexpr std::initializer_list<DType> kCtcTypes = {DType::f32, DType::f64};

}  // namespace
}  // namespace ember::cuda

namespace ember {
EMBER_REGISTER_KERNEL(ctc_loss_forward_kernel, CUDA, cuda::kCtcTypes, &cuda::ctc_loss_forward_cuda);
EMBER_REGISTER_KERNEL(ctc_loss_backward_kernel, CUDA, cuda::kCtcTypes,
                      &cuda::ctc_loss_backward_cuda);
}  // namespace ember
