// The per-step CUDA kernels of the rnn op's "cublas_steps" algorithm (cuda_kernels/rnn/rnn.cuh)
// and their launchers: the fused pointwise kernel of one forward step (gates, cell update in fp32,
// saved values, lengths mask) and of one backward step (gate gradients, cell carry), the
// projection fixup and backward prep of LSTM with proj_size, dropout between layers, and dtype
// conversions and fills of state buffers. One instantiation per kernel and dtype (float and
// __nv_bfloat16), listed at the end.
#include <cuda_bf16.h>

#include "ember/cuda_kernels/common/common.cuh"
#include "ember/cuda_kernels/rnn/cell.cuh"
#include "ember/cuda_kernels/rnn/rnn.cuh"
#include "ember/tensor/philox.h"

namespace ember::cuda::rnn {
namespace {

// ---- forward step -------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_step_forward_kernel(const StepForwardArgs<T> a) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(a.B) * a.H) return;
  const int H = a.H, b = int(idx / H), j = int(idx - int64_t(b) * H);
  const int64_t GH = int64_t(a.G) * H;
  T* saved = a.gates != nullptr ? a.gates + int64_t(b) * a.S * H : nullptr;
  if (!step_valid(a.lengths, a.t, b)) {
    // Past the end of sequence b: the state goes through unchanged, the output is zero.
    if (a.c_next != nullptr) a.c_next[idx] = a.c_prev[idx];
    if (saved != nullptr)
      for (int s = 0; s < a.S; ++s) saved[s * H + j] = convert<T>(0.0f);
    if (a.proj_in != nullptr) a.proj_in[idx] = convert<T>(0.0f);
    if (a.h_next != nullptr) {
      a.h_next[idx] = a.h_prev[idx];
      a.y[int64_t(b) * a.ldy + j] = convert<T>(0.0f);
    }
    return;
  }
  const float* gx = a.gx + b * GH;
  const float* gh = a.gh + b * GH;
  auto pre = [&](int gate) {
    const int k = gate * H + j;
    return gx[k] + bias_at(a.b_ih, k) + gh[k] + bias_at(a.b_hh, k);
  };
  float h = 0.0f;
  switch (a.mode) {
    case RnnMode::lstm: {
      const LstmCell cell = lstm_cell(pre(0), pre(1), pre(2), pre(3), a.c_prev[idx]);
      a.c_next[idx] = cell.c;
      save_gates(saved, H, j, cell.i, cell.f, cell.g, cell.o);
      h = cell.h;
      break;
    }
    case RnnMode::gru: {
      const GruCell cell =
          gru_cell(pre(0), pre(1), gx[2 * H + j] + bias_at(a.b_ih, 2 * H + j),
                   gh[2 * H + j] + bias_at(a.b_hh, 2 * H + j), convert<float>(a.h_prev[idx]));
      save_gates(saved, H, j, cell.r, cell.z, cell.n, cell.hn);
      h = cell.h;
      break;
    }
    case RnnMode::rnn_tanh:
      h = tanhf(pre(0));
      break;
    case RnnMode::rnn_relu:
      h = fmaxf(pre(0), 0.0f);
      break;
  }
  if (a.proj_in != nullptr) {
    a.proj_in[idx] = convert<T>(h);
  } else {
    const T hv = convert<T>(h);
    a.h_next[idx] = hv;
    a.y[int64_t(b) * a.ldy + j] = hv;
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_proj_fixup_kernel(T* h_next, const T* h_prev, T* y, int64_t ldy, int B, int P,
                          const int32_t* lengths, int t) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(B) * P) return;
  const int b = int(idx / P), k = int(idx - int64_t(b) * P);
  if (step_valid(lengths, t, b)) {
    y[int64_t(b) * ldy + k] = h_next[idx];
  } else {
    h_next[idx] = h_prev[idx];
    y[int64_t(b) * ldy + k] = convert<T>(0.0f);
  }
}

// ---- backward step ------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_step_backward_kernel(const StepBackwardArgs<T> a) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(a.B) * a.H) return;
  const int H = a.H, b = int(idx / H), j = int(idx - int64_t(b) * H);
  const int64_t GH = int64_t(a.G) * H;
  T* dgx = a.dgx + b * GH;
  T* dgh = a.dgh + b * GH;
  if (!step_valid(a.lengths, a.t, b)) {
    // Both carries pass unchanged.
    zero_gate_grads(a.G, H, j, dgx, dgh);
    return;
  }
  float dh;
  if (a.dr != nullptr) {
    dh = a.dr[idx];
  } else {
    dh = a.dh_carry[idx] + (a.dy != nullptr ? convert<float>(a.dy[int64_t(b) * a.ldy + j]) : 0.0f);
  }
  const T* saved = a.gates != nullptr ? a.gates + int64_t(b) * a.S * H : nullptr;
  float* dc = a.dc_carry != nullptr ? a.dc_carry + idx : nullptr;
  const float direct = cell_backward(a.mode, H, j, dh, saved, a.c_prev, a.c_next, a.h_prev,
                                     a.h_next, idx, dc, dgx, dgh);
  if (a.dr == nullptr) a.dh_carry[idx] = direct;
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_proj_backward_prep_kernel(float* dh_carry, const T* dy, int64_t ldy, T* dh_total, int B,
                                  int P, const int32_t* lengths, int t) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(B) * P) return;
  const int b = int(idx / P), k = int(idx - int64_t(b) * P);
  const float carry = dh_carry[idx];
  if (step_valid(lengths, t, b)) {
    dh_total[idx] =
        convert<T>(carry + (dy != nullptr ? convert<float>(dy[int64_t(b) * ldy + k]) : 0.0f));
    dh_carry[idx] = 0.0f;
  } else {
    dh_total[idx] = convert<T>(0.0f);  // carry passes through unchanged
  }
}

// ---- dropout, conversions -----------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_dropout_kernel(const T* y, T* dropped, bool* mask, int64_t begin, int64_t end, double keep,
                       float scale, uint64_t seed, uint64_t offset, const uint64_t* device_offset) {
  const uint64_t base = offset + (device_offset != nullptr ? *device_offset : 0);
  const int64_t first_group = begin / 4, end_group = (end + 3) / 4;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = first_group + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < end_group;
       g += step) {
    const philox::F32x4 u = philox::uniform4_from_bits(philox::draw4(seed, uint64_t(g), base));
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int64_t i = 4 * g + l;
      if (i < begin || i >= end) continue;
      const bool kept = philox::bernoulli_from_uniform(philox::lane(u, l), keep);
      mask[i] = kept;
      dropped[i] = convert<T>(kept ? convert<float>(y[i]) * scale : 0.0f);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_dropout_backward_kernel(T* g, const bool* mask, int64_t begin, int64_t end, float scale) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = begin + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < end; i += step)
    g[i] = convert<T>(mask[i] ? convert<float>(g[i]) * scale : 0.0f);
}

template <typename To, typename From>
__global__ void __launch_bounds__(kBlockThreads)
    rnn_convert_kernel(To* dst, const From* src, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dst[i] = src != nullptr ? convert<To>(src[i]) : convert<To>(0.0f);
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) rnn_fill_kernel(T* dst, float value, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dst[i] = convert<T>(value);
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

template <typename T>
void step_forward(const StepForwardArgs<T>& a, cudaStream_t stream) {
  rnn_step_forward_kernel<T><<<blocks_for(int64_t(a.B) * a.H), kBlockThreads, 0, stream>>>(a);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void proj_fixup(T* h_next, const T* h_prev, T* y, int64_t ldy, int B, int P, const int32_t* lengths,
                int t, cudaStream_t stream) {
  rnn_proj_fixup_kernel<T><<<blocks_for(int64_t(B) * P), kBlockThreads, 0, stream>>>(
      h_next, h_prev, y, ldy, B, P, lengths, t);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void step_backward(const StepBackwardArgs<T>& a, cudaStream_t stream) {
  rnn_step_backward_kernel<T><<<blocks_for(int64_t(a.B) * a.H), kBlockThreads, 0, stream>>>(a);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void proj_backward_prep(float* dh_carry, const T* dy, int64_t ldy, T* dh_total, int B, int P,
                        const int32_t* lengths, int t, cudaStream_t stream) {
  rnn_proj_backward_prep_kernel<T><<<blocks_for(int64_t(B) * P), kBlockThreads, 0, stream>>>(
      dh_carry, dy, ldy, dh_total, B, P, lengths, t);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void dropout_forward(const T* y, T* dropped, bool* mask, int64_t begin, int64_t end, double p,
                     const RandomParams& random, cudaStream_t stream) {
  if (end <= begin) return;
  const float scale = float(p >= 1 ? 0.0 : 1.0 / (1.0 - p));
  // One thread per group of four elements (one Philox block), covering the partial groups at the
  // ends.
  rnn_dropout_kernel<T>
      <<<grid_for((end - begin) / 4 + 2, current_device()), kBlockThreads, 0, stream>>>(
          y, dropped, mask, begin, end, 1.0 - p, scale, random.seed, random.offset,
          random.device_offset);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void dropout_backward(T* g, const bool* mask, int64_t begin, int64_t end, double p,
                      cudaStream_t stream) {
  if (end <= begin) return;
  const float scale = float(p >= 1 ? 0.0 : 1.0 / (1.0 - p));
  rnn_dropout_backward_kernel<T>
      <<<grid_for(end - begin, current_device()), kBlockThreads, 0, stream>>>(g, mask, begin, end,
                                                                              scale);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename To, typename From>
void convert_elements(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  rnn_convert_kernel<To, From>
      <<<grid_for(n, current_device()), kBlockThreads, 0, stream>>>(dst, src, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void fill_elements(T* dst, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  rnn_fill_kernel<T><<<grid_for(n, current_device()), kBlockThreads, 0, stream>>>(dst, value, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

// One instantiation per dtype of every launcher.
#define EMBER_RNN_INSTANTIATE(T)                                                               \
  template void step_forward<T>(const StepForwardArgs<T>&, cudaStream_t);                      \
  template void proj_fixup<T>(T*, const T*, T*, int64_t, int, int, const int32_t*, int,        \
                              cudaStream_t);                                                   \
  template void step_backward<T>(const StepBackwardArgs<T>&, cudaStream_t);                    \
  template void proj_backward_prep<T>(float*, const T*, int64_t, T*, int, int, const int32_t*, \
                                      int, cudaStream_t);                                      \
  template void dropout_forward<T>(const T*, T*, bool*, int64_t, int64_t, double,              \
                                   const RandomParams&, cudaStream_t);                         \
  template void dropout_backward<T>(T*, const bool*, int64_t, int64_t, double, cudaStream_t);  \
  template void fill_elements<T>(T*, float, int64_t, cudaStream_t);
EMBER_RNN_INSTANTIATE(float)
EMBER_RNN_INSTANTIATE(__nv_bfloat16)
#undef EMBER_RNN_INSTANTIATE
template void convert_elements<float, float>(float*, const float*, int64_t, cudaStream_t);
template void convert_elements<float, __nv_bfloat16>(float*, const __nv_bfloat16*, int64_t,
                                                     cudaStream_t);
template void convert_elements<__nv_bfloat16, float>(__nv_bfloat16*, const float*, int64_t,
                                                     cudaStream_t);

}  // namespace ember::cuda::rnn
