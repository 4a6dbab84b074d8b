// CUDA algorithms of the rnn op (ops/rnn.h), registered in the slots rnn.forward / rnn.backward:
//
//  "cublas_steps" (forward and backward)
//    forward, per (layer, direction): the input projection gx = X W_ih^T as cuBLAS GEMMs over
//      many steps at once (fp32 output, so bf16 keeps fp32 pre-activations), on an input stream;
//      per step one recurrent GEMM gh = h W_hh^T and one fused pointwise kernel (gates, cell
//      update in fp32, saved values, lengths mask), plus the projection GEMM and a fixup for
//      LSTM with proj_size; each (layer, direction) on its own recurrent stream. Layers overlap
//      as a wavefront: for a unidirectional stack the steps are cut into chunks, and layer l + 1's
//      input GEMM (and dropout) for chunk k runs on the input stream as soon as layer l has
//      finished chunk k (events), while layer l goes on with chunk k + 1. Layer 0's input
//      projection is one GEMM over all steps. Bidirectional stacks run their two directions
//      concurrently, layer after layer.
//    backward, the same structure in reverse time: per step one fused pointwise kernel (gate
//      gradients, cell carry; with a projection a prep kernel and the dr = dh W_hr GEMM first)
//      and one GEMM dh_prev += dG W_hh (fp32 carry); the input gradient dX = dG W_ih per chunk
//      on the input stream (it is the lower layer's output gradient, through dropout's mask, so
//      layers overlap as a wavefront again); after a layer's loop, its weight gradients as large
//      GEMMs over all steps (dW_ih = dG^T X, dW_hh = dG^T H_prev, biases as dG^T 1, dW_hr) on a
//      separate stream, overlapping the layers below.
//  "persistent" (forward and backward): for small batch x hidden, one cooperative kernel per
//    (layer, direction) runs all steps with a grid-wide barrier per step (cuda_kernels/rnn/rnn.cuh).
//    The forward keeps its W_hh rows in shared memory and its cell states on chip; it writes the
//    same reserve, so either backward reads it. The backward keeps W_hh columns in shared memory
//    and the gradient carries on chip, writes the gate gradients of every step, and leaves the
//    input gradient and the weight gradients to the large GEMMs of "cublas_steps" (run layer
//    after layer: one chunk, no wavefront). Its recurrent sums are in a fixed order, so the
//    result is bitwise reproducible.
//
// Every side stream forks from the current stream with an event and joins back into it before
// returning, so all work is ordered with the caller's stream (and captures into a CUDA graph);
// temporaries are allocated on the current stream before the launches and freed after the join.
// Called eagerly again on the same problem (the same buffers, as in steady-state training), a
// forward's or backward's hundreds of launches replay from one CUDA graph (tensor/runtime/eager_replay.h:
// the eager step is otherwise bound by the host's launch rate). fp32 and bf16 only;
// one instantiation per kernel and dtype. Gradients are written, never accumulated.
#include "ember/cuda_kernels/rnn/rnn.cuh"

#include <cooperative_groups.h>
#include <cublas_v2.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <shared_mutex>
#include <tuple>
#include <vector>

#include "ember/cuda_kernels/blas/blas.h"
#include "ember/cuda_kernels/common/common.cuh"
#include "ember/tensor/runtime/eager_replay.h"
#include "ember/tensor/philox.h"

namespace ember::cuda::rnn {
namespace {

namespace cg = cooperative_groups;
using dispatch::Direction;

__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + __expf(-x)); }

template <typename T>
__device__ __forceinline__ float bias_at(const T* b, int k) {
  return b != nullptr ? convert<float>(b[k]) : 0.0f;
}

__device__ __forceinline__ bool step_valid(const int32_t* lengths, int t, int b) {
  return lengths == nullptr || t < lengths[b];
}

// ---- cell math (shared by the per-step and the persistent forward kernels) ----------------------

// One LSTM cell: gates i, f, g, o from their pre-activations, the new cell state c = f c_prev + i g
// and the hidden state h = o tanh(c).
struct LstmCell {
  float i, f, g, o, c, h;
};
__device__ __forceinline__ LstmCell lstm_cell(float pre_i, float pre_f, float pre_g, float pre_o,
                                              float c_prev) {
  LstmCell cell;
  cell.i = sigmoid_f(pre_i);
  cell.f = sigmoid_f(pre_f);
  cell.g = tanhf(pre_g);
  cell.o = sigmoid_f(pre_o);
  cell.c = cell.f * c_prev + cell.i * cell.g;
  cell.h = cell.o * tanhf(cell.c);
  return cell;
}

// One GRU cell (PyTorch's): r and z from their full pre-activations, n = tanh(x_n + r hn) with
// x_n = the input part of n's pre-activation (with b_ih) and hn = its recurrent part (with b_hh),
// and h = (1 - z) n + z h_prev. hn is saved for the backward.
struct GruCell {
  float r, z, n, hn, h;
};
__device__ __forceinline__ GruCell gru_cell(float pre_r, float pre_z, float x_n, float hn,
                                            float h_prev) {
  GruCell cell;
  cell.r = sigmoid_f(pre_r);
  cell.z = sigmoid_f(pre_z);
  cell.hn = hn;
  cell.n = tanhf(x_n + cell.r * hn);
  cell.h = (1.0f - cell.z) * cell.n + cell.z * h_prev;
  return cell;
}

// The four saved values of unit j (LSTM: i, f, g, o; GRU: r, z, n, hn) in a row of S * H.
template <typename T>
__device__ __forceinline__ void save_gates(T* saved, int H, int j, float v0, float v1, float v2,
                                           float v3) {
  saved[j] = convert<T>(v0);
  saved[H + j] = convert<T>(v1);
  saved[2 * H + j] = convert<T>(v2);
  saved[3 * H + j] = convert<T>(v3);
}

// ---- forward step ---------------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) rnn_step_forward_kernel(const StepForwardArgs<T> a) {
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
      const GruCell cell = gru_cell(pre(0), pre(1), gx[2 * H + j] + bias_at(a.b_ih, 2 * H + j),
                                    gh[2 * H + j] + bias_at(a.b_hh, 2 * H + j),
                                    convert<float>(a.h_prev[idx]));
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

// ---- backward step --------------------------------------------------------------------------------

// The gate gradients of unit j at one step (shared by the per-step and the persistent backward
// kernels): from the hidden gradient dh of the state after the step and the saved gate values
// (row of S * H), writes the gradients w.r.t. the input-side pre-activations (dgx, row of G * H)
// and the hidden-side ones (dgh; the same row except for GRU), updates the cell carry *dc (LSTM)
// and returns the part of d/dh_prev that does not go through W_hh. `at` indexes the [B, H] state
// slots c_prev, c_next (LSTM), h_prev (GRU) and h_next (RNN).
template <typename T>
__device__ __forceinline__ float cell_backward(RnnMode mode, int H, int j, float dh, const T* saved,
                                               const float* c_prev, const float* c_next,
                                               const T* h_prev, const T* h_next, int64_t at,
                                               float* dc, T* dgx, T* dgh) {
  switch (mode) {
    case RnnMode::lstm: {
      const float i = convert<float>(saved[j]), f = convert<float>(saved[H + j]);
      const float g = convert<float>(saved[2 * H + j]), o = convert<float>(saved[3 * H + j]);
      const float tc = tanhf(c_next[at]);
      const float dcell = *dc + dh * o * (1.0f - tc * tc);
      const float gi = dcell * g * i * (1.0f - i);
      const float gf = dcell * c_prev[at] * f * (1.0f - f);
      const float gg = dcell * i * (1.0f - g * g);
      const float go = dh * tc * o * (1.0f - o);
      *dc = dcell * f;
      dgx[j] = convert<T>(gi);
      dgx[H + j] = convert<T>(gf);
      dgx[2 * H + j] = convert<T>(gg);
      dgx[3 * H + j] = convert<T>(go);
      return 0.0f;
    }
    case RnnMode::gru: {
      const float r = convert<float>(saved[j]), z = convert<float>(saved[H + j]);
      const float n = convert<float>(saved[2 * H + j]), hn = convert<float>(saved[3 * H + j]);
      const float hp = convert<float>(h_prev[at]);
      const float dn = dh * (1.0f - z) * (1.0f - n * n);
      const float dz = dh * (hp - n) * z * (1.0f - z);
      const float dr = dn * hn * r * (1.0f - r);
      dgx[j] = dgh[j] = convert<T>(dr);
      dgx[H + j] = dgh[H + j] = convert<T>(dz);
      dgx[2 * H + j] = convert<T>(dn);
      dgh[2 * H + j] = convert<T>(dn * r);
      return dh * z;
    }
    case RnnMode::rnn_tanh: {
      const float h = convert<float>(h_next[at]);
      dgx[j] = convert<T>(dh * (1.0f - h * h));
      return 0.0f;
    }
    case RnnMode::rnn_relu: {
      const float h = convert<float>(h_next[at]);
      dgx[j] = convert<T>(h > 0.0f ? dh : 0.0f);
      return 0.0f;
    }
  }
  return 0.0f;
}

// Rows past their length: the state was copied through, so there is no gate gradient.
template <typename T>
__device__ __forceinline__ void zero_gate_grads(int G, int H, int j, T* dgx, T* dgh) {
  for (int g = 0; g < G; ++g) {
    dgx[g * H + j] = convert<T>(0.0f);
    dgh[g * H + j] = convert<T>(0.0f);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) rnn_step_backward_kernel(const StepBackwardArgs<T> a) {
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
  const float direct =
      cell_backward(a.mode, H, j, dh, saved, a.c_prev, a.c_next, a.h_prev, a.h_next, idx, dc, dgx, dgh);
  if (a.dr == nullptr) a.dh_carry[idx] = direct;
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
rnn_proj_backward_prep_kernel(float* dh_carry, const T* dy, int64_t ldy, T* dh_total, int B, int P,
                              const int32_t* lengths, int t) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(B) * P) return;
  const int b = int(idx / P), k = int(idx - int64_t(b) * P);
  const float carry = dh_carry[idx];
  if (step_valid(lengths, t, b)) {
    dh_total[idx] = convert<T>(carry + (dy != nullptr ? convert<float>(dy[int64_t(b) * ldy + k]) : 0.0f));
    dh_carry[idx] = 0.0f;
  } else {
    dh_total[idx] = convert<T>(0.0f);  // carry passes through unchanged
  }
}

// ---- dropout, conversions -------------------------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
rnn_dropout_kernel(const T* y, T* dropped, bool* mask, int64_t begin, int64_t end, double keep,
                   float scale, uint64_t seed, uint64_t offset, const uint64_t* device_offset) {
  const uint64_t base = offset + (device_offset != nullptr ? *device_offset : 0);
  const int64_t first_group = begin / 4, end_group = (end + 3) / 4;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = first_group + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < end_group; g += step) {
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
__global__ void __launch_bounds__(kBlockThreads) rnn_convert_kernel(To* dst, const From* src, int64_t n) {
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

// ---- persistent forward ---------------------------------------------------------------------------

constexpr int kPersistentThreads = 256;

__host__ __device__ inline size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Row stride of the shared-memory tiles in elements: one 4-byte word more than a row, so that the
// rows threads of one warp read at the same k start on different banks.
__host__ __device__ inline int padded_row(int H, int element_bytes) { return H + 4 / element_bytes; }

// Shared memory of one block: W_hh rows [R][ldw] (T), staged hidden rows [bt][ldw] (T), recurrent
// pre-activations [B][R] (float), cell states [B][U] (float).
size_t persistent_smem_bytes(int H, int G, int U, int B, int bt, size_t es) {
  const size_t ldw = size_t(padded_row(H, int(es)));
  return align16(size_t(G) * U * ldw * es) + align16(size_t(bt) * ldw * es) +
         align16(size_t(B) * G * U * 4) + align16(size_t(B) * U * 4);
}

template <typename T>
__global__ void __launch_bounds__(kPersistentThreads)
rnn_persistent_forward_kernel(const PersistentForwardArgs<T> a, int U, int bt) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.H, G = a.G, B = a.B, R = G * U;
  const int ldw = padded_row(H, int(sizeof(T)));
  const int j0 = int(blockIdx.x) * U;
  const int units = min(U, H - j0);
  T* w_s = reinterpret_cast<T*>(smem);
  T* h_s = reinterpret_cast<T*>(smem + align16(size_t(R) * ldw * sizeof(T)));
  float* acc_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(h_s) +
                                          align16(size_t(bt) * ldw * sizeof(T)));
  float* c_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(acc_s) +
                                        align16(size_t(B) * R * 4));
  const int tid = int(threadIdx.x), nthreads = int(blockDim.x);
  const int64_t GH = int64_t(G) * H;
  const bool lstm = a.mode == RnnMode::lstm;

  // Row r = g * U + u of this block is W_hh row g * H + j0 + u (zero rows past the last unit).
  for (int idx = tid; idx < R * H; idx += nthreads) {
    const int r = idx / H, k = idx - r * H;
    const int g = r / U, u = r - g * U;
    w_s[r * ldw + k] = u < units ? a.w_hh[(int64_t(g) * H + j0 + u) * H + k] : convert<T>(0.0f);
  }
  const int first = a.direction == 0 ? 0 : a.T_;
  if (lstm)
    for (int idx = tid; idx < B * U; idx += nthreads) {
      const int b = idx / U, u = idx - b * U;
      c_s[idx] = u < units ? a.cells[(int64_t(first) * B + b) * H + j0 + u] : 0.0f;
    }
  __syncthreads();

  for (int s = 0; s < a.T_; ++s) {
    const int t = a.direction == 0 ? s : a.T_ - 1 - s;
    const int prev = a.direction == 0 ? t : t + 1, next = a.direction == 0 ? t + 1 : t;
    const T* h_prev = a.states + int64_t(prev) * B * H;
    T* h_next = a.states + int64_t(next) * B * H;
    // Recurrent pre-activations of this block's rows for every batch row, bt rows of h at a time.
    for (int b0 = 0; b0 < B; b0 += bt) {
      const int nb = min(bt, B - b0);
      for (int idx = tid; idx < nb * H; idx += nthreads) {
        const int b = idx / H, k = idx - b * H;
        // From L2: other blocks wrote these in the previous step (ordered by the grid barrier).
        h_s[b * ldw + k] = __ldcg(h_prev + int64_t(b0 + b) * H + k);
      }
      __syncthreads();
      for (int item = tid; item < nb * R; item += nthreads) {
        const int b = item / R, r = item - b * R;
        const T* w = w_s + r * ldw;
        const T* h = h_s + b * ldw;
        float sum = 0.0f;
        for (int k = 0; k < H; ++k) sum += convert<float>(w[k]) * convert<float>(h[k]);
        acc_s[(b0 + b) * R + r] = sum;
      }
      __syncthreads();
    }
    // Pointwise for this block's units.
    for (int idx = tid; idx < B * units; idx += nthreads) {
      const int b = idx / units, u = idx - b * units, j = j0 + u;
      const int64_t at = int64_t(b) * H + j;
      T* y = a.y + (int64_t(t) * B + b) * a.ldy + j;
      T* saved = a.gates != nullptr ? a.gates + (int64_t(t) * B + b) * a.S * H : nullptr;
      if (!step_valid(a.lengths, t, b)) {
        h_next[at] = __ldcg(h_prev + at);
        if (lstm) a.cells[int64_t(next) * B * H + at] = c_s[b * U + u];
        *y = convert<T>(0.0f);
        if (saved != nullptr)
          for (int q = 0; q < a.S; ++q) saved[q * H + j] = convert<T>(0.0f);
        continue;
      }
      const float* gx = a.gx + (int64_t(t) * B + b) * GH;
      const float* acc = acc_s + b * R;
      auto pre = [&](int gate) {
        const int k = gate * H + j;
        return gx[k] + bias_at(a.b_ih, k) + acc[gate * U + u] + bias_at(a.b_hh, k);
      };
      float h = 0.0f;
      switch (a.mode) {
        case RnnMode::lstm: {
          const LstmCell cell = lstm_cell(pre(0), pre(1), pre(2), pre(3), c_s[b * U + u]);
          c_s[b * U + u] = cell.c;
          a.cells[int64_t(next) * B * H + at] = cell.c;
          save_gates(saved, H, j, cell.i, cell.f, cell.g, cell.o);
          h = cell.h;
          break;
        }
        case RnnMode::gru: {
          const GruCell cell = gru_cell(pre(0), pre(1), gx[2 * H + j] + bias_at(a.b_ih, 2 * H + j),
                                        acc[2 * U + u] + bias_at(a.b_hh, 2 * H + j),
                                        convert<float>(__ldcg(h_prev + at)));
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
      const T hv = convert<T>(h);
      h_next[at] = hv;
      *y = hv;
    }
    // Every block's h_next must be complete (and visible) before any block stages it.
    grid.sync();
  }
}

// ---- persistent backward --------------------------------------------------------------------------

// Row stride (elements) of the backward kernel's shared tiles: G * H rounded up to 16 bytes, so
// that rows can be staged with 16-byte copies and read as pairs; the padding holds zeros. A warp
// reads consecutive elements of one row at a time, so no bank padding is needed.
__host__ __device__ inline int backward_row(int GH, int element_bytes) {
  const int per16 = 16 / element_bytes;
  return (GH + per16 - 1) / per16 * per16;
}

// Shared memory of one backward block: W_hh columns [U][ldg] (T), staged dG rows [bt][ldg] (T),
// hidden and cell carries [rows][U] (float) each.
size_t persistent_backward_smem_bytes(int H, int G, int U, int rows, int bt, size_t es) {
  const size_t ldg = size_t(backward_row(G * H, int(es)));
  return align16(size_t(U) * ldg * es) + align16(size_t(bt) * ldg * es) + 2 * align16(size_t(rows) * U * 4);
}

// Two consecutive elements of a shared row as floats.
__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// Register tile of the recurrent product: each warp computes kTileRows batch rows x kTileUnits
// units, its lanes splitting the reduction over G * H (lane l takes the element pairs l, l + 32,
// ...), then a butterfly over the lanes: a fixed summation order.
constexpr int kTileRows = 4, kTileUnits = 4;

// One block per SM (the plan's grid): the register tiles may use what they need.
template <typename T>
__global__ void __launch_bounds__(kPersistentThreads, 1)
rnn_persistent_backward_kernel(const PersistentBackwardArgs<T> a, int U, int rows_per_group, int bt) {
  cg::grid_group grid = cg::this_grid();
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.H, G = a.G, B = a.B, GH = G * H;
  const int ldg = backward_row(GH, int(sizeof(T)));
  const int unit_blocks = (H + U - 1) / U;
  const int j0 = int(blockIdx.x) % unit_blocks * U, units = min(U, H - j0);
  const int row0 = int(blockIdx.x) / unit_blocks * rows_per_group;  // first batch row of the group
  const int rows = min(rows_per_group, B - row0);                   // >= 1 (the plan's grid)
  T* w_s = reinterpret_cast<T*>(smem);
  T* g_s = reinterpret_cast<T*>(smem + align16(size_t(U) * ldg * sizeof(T)));
  float* dh_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(g_s) +
                                         align16(size_t(bt) * ldg * sizeof(T)));
  float* dc_s = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(dh_s) +
                                         align16(size_t(rows_per_group) * U * 4));
  const int tid = int(threadIdx.x), nthreads = int(blockDim.x);
  const int lane = tid % 32, warp = tid / 32, nwarps = nthreads / 32;
  const bool lstm = a.mode == RnnMode::lstm;

  // w_s[u][r] = W_hh[r][j0 + u]: the column of unit u, zero past the last unit and past G * H.
  for (int idx = tid; idx < U * ldg; idx += nthreads) {
    const int r = idx / U, u = idx - r * U;
    w_s[u * ldg + r] = u < units && r < GH ? a.w_hh[int64_t(r) * H + j0 + u] : convert<T>(0.0f);
  }
  // The carries of this block's (row, unit) pairs start from the gradients of h_n and c_n.
  for (int idx = tid; idx < rows * U; idx += nthreads) {
    const int b = idx / U, u = idx - b * U;
    const int64_t at = int64_t(row0 + b) * H + j0 + u;
    const bool own = u < units;
    dh_s[idx] = own && a.grad_h_n != nullptr ? convert<float>(a.grad_h_n[at]) : 0.0f;
    dc_s[idx] = own && a.grad_c_n != nullptr ? convert<float>(a.grad_c_n[at]) : 0.0f;
  }
  __syncthreads();

  for (int s = 0; s < a.T_; ++s) {
    // Reverse of the forward's order: direction 0 ran t = 0..T-1, direction 1 t = T-1..0.
    const int t = a.direction == 0 ? a.T_ - 1 - s : s;
    const int prev = a.direction == 0 ? t : t + 1, next = a.direction == 0 ? t + 1 : t;
    const int64_t step_row = int64_t(t) * B;  // row (t, 0) of the [T, B, ...] tensors
    // 1) Gate gradients of this block's (row, unit) pairs; the hidden carry becomes the direct part.
    for (int idx = tid; idx < rows * units; idx += nthreads) {
      const int b = idx / units, u = idx - b * units, bb = row0 + b, j = j0 + u;
      T* dgx = a.dgx + (step_row + bb) * GH;
      T* dgh = a.dgh + (step_row + bb) * GH;
      if (!step_valid(a.lengths, t, bb)) {
        zero_gate_grads(G, H, j, dgx, dgh);  // both carries pass unchanged
        continue;
      }
      float* dh = dh_s + b * U + u;
      const float dh_total =
          *dh + (a.dy != nullptr ? convert<float>(a.dy[(step_row + bb) * a.ldy + j]) : 0.0f);
      const T* saved = a.gates != nullptr ? a.gates + (step_row + bb) * a.S * H : nullptr;
      const float* c_prev = lstm ? a.cells + int64_t(prev) * B * H : nullptr;
      const float* c_next = lstm ? a.cells + int64_t(next) * B * H : nullptr;
      *dh = cell_backward(a.mode, H, j, dh_total, saved, c_prev, c_next,
                          a.states + int64_t(prev) * B * H, a.states + int64_t(next) * B * H,
                          int64_t(bb) * H + j, dc_s + b * U + u, dgx, dgh);
    }
    // Every block's dG of step t must be complete (and visible) before any block stages it.
    grid.sync();
    // 2) dh_prev += dG W_hh[:, j0 : j0 + U) for the group's rows, bt rows of dG at a time.
    for (int b0 = 0; b0 < rows; b0 += bt) {
      const int nb = min(bt, rows - b0);
      const T* src = a.dgh + (step_row + row0 + b0) * GH;
      if (ldg == GH) {
        // Rows are 16-byte multiples: 16-byte copies from L2 (written by other blocks).
        const int per_row = GH * int(sizeof(T)) / 16;
        const uint4* src4 = reinterpret_cast<const uint4*>(src);
        uint4* dst4 = reinterpret_cast<uint4*>(g_s);
        for (int idx = tid; idx < nb * per_row; idx += nthreads) dst4[idx] = __ldcg(src4 + idx);
      } else {
        for (int idx = tid; idx < nb * ldg; idx += nthreads) {
          const int b = idx / ldg, r = idx - b * ldg;
          g_s[idx] = r < GH ? __ldcg(src + int64_t(b) * GH + r) : convert<T>(0.0f);
        }
      }
      __syncthreads();
      const int row_tiles = (nb + kTileRows - 1) / kTileRows;
      const int unit_tiles = (units + kTileUnits - 1) / kTileUnits;
      for (int tile = warp; tile < row_tiles * unit_tiles; tile += nwarps) {
        const int rb = tile / unit_tiles * kTileRows, ub = tile % unit_tiles * kTileUnits;
        // Rows and units past the end repeat the last one (valid memory); their sums are dropped.
        const T* g_row[kTileRows];
        const T* w_row[kTileUnits];
#pragma unroll
        for (int i = 0; i < kTileRows; ++i) g_row[i] = g_s + min(rb + i, nb - 1) * ldg;
#pragma unroll
        for (int q = 0; q < kTileUnits; ++q) w_row[q] = w_s + min(ub + q, units - 1) * ldg;
        float acc[kTileRows][kTileUnits] = {};
        for (int k = 2 * lane; k < ldg; k += 64) {
          float2 g[kTileRows], w[kTileUnits];
#pragma unroll
          for (int i = 0; i < kTileRows; ++i) g[i] = load_pair(g_row[i] + k);
#pragma unroll
          for (int q = 0; q < kTileUnits; ++q) w[q] = load_pair(w_row[q] + k);
#pragma unroll
          for (int i = 0; i < kTileRows; ++i)
#pragma unroll
            for (int q = 0; q < kTileUnits; ++q) {
              acc[i][q] = fmaf(g[i].x, w[q].x, acc[i][q]);
              acc[i][q] = fmaf(g[i].y, w[q].y, acc[i][q]);
            }
        }
#pragma unroll
        for (int i = 0; i < kTileRows; ++i)
#pragma unroll
          for (int q = 0; q < kTileUnits; ++q)
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2)
              acc[i][q] += __shfl_xor_sync(0xffffffffu, acc[i][q], offset);
        if (lane == 0)
#pragma unroll
          for (int i = 0; i < kTileRows; ++i)
#pragma unroll
            for (int q = 0; q < kTileUnits; ++q)
              if (rb + i < nb && ub + q < units) dh_s[(b0 + rb + i) * U + ub + q] += acc[i][q];
      }
      __syncthreads();
    }
  }
  // The carries are now the gradients of h0 and c0.
  for (int idx = tid; idx < rows * units; idx += nthreads) {
    const int b = idx / units, u = idx - b * units;
    const int64_t at = int64_t(row0 + b) * H + j0 + u;
    if (a.grad_h0 != nullptr) a.grad_h0[at] = convert<T>(dh_s[b * U + u]);
    if (a.grad_c0 != nullptr) a.grad_c0[at] = convert<T>(dc_s[b * U + u]);
  }
}

}  // namespace

// ---- launchers --------------------------------------------------------------------------------------

template <typename T>
void step_forward(const StepForwardArgs<T>& a, cudaStream_t stream) {
  rnn_step_forward_kernel<T><<<blocks_for(int64_t(a.B) * a.H), kBlockThreads, 0, stream>>>(a);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void proj_fixup(T* h_next, const T* h_prev, T* y, int64_t ldy, int B, int P,
                const int32_t* lengths, int t, cudaStream_t stream) {
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
  // One thread per group of four elements (one Philox block), covering the partial groups at the ends.
  rnn_dropout_kernel<T><<<grid_for((end - begin) / 4 + 2, current_device()), kBlockThreads, 0, stream>>>(
      y, dropped, mask, begin, end, 1.0 - p, scale, random.seed, random.offset, random.device_offset);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void dropout_backward(T* g, const bool* mask, int64_t begin, int64_t end, double p,
                      cudaStream_t stream) {
  if (end <= begin) return;
  const float scale = float(p >= 1 ? 0.0 : 1.0 / (1.0 - p));
  rnn_dropout_backward_kernel<T><<<grid_for(end - begin, current_device()), kBlockThreads, 0,
                                   stream>>>(g, mask, begin, end, scale);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename To, typename From>
void convert_elements(To* dst, const From* src, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  rnn_convert_kernel<To, From><<<grid_for(n, current_device()), kBlockThreads, 0, stream>>>(dst, src, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void fill_elements(T* dst, float value, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  rnn_fill_kernel<T><<<grid_for(n, current_device()), kBlockThreads, 0, stream>>>(dst, value, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

namespace {

// The plan for one problem shape on `device` (the current device), T the element type. Both
// kernels split the hidden units over the blocks, each owning U of them, one block per SM where
// possible; the backward also splits the batch into up to 8 groups of at least 4 rows (each group
// with its own blocks: a block then stages only its group's dG rows, G times the size of the
// forward's h rows), taking the most groups whose W_hh columns and a 4-row tile still fit.
template <typename T>
PersistentPlan compute_persistent_plan(Direction direction, int64_t G, int64_t H, int64_t B, int device) {
  PersistentPlan plan;
  const DeviceProperties& props = device_properties(device);
  if (!props.cooperative_launch || props.sm_count <= 0) return plan;
  const bool forward = direction == Direction::forward;
  const size_t es = sizeof(T);
  const void* kernel = forward ? reinterpret_cast<const void*>(rnn_persistent_forward_kernel<T>)
                               : reinterpret_cast<const void*>(rnn_persistent_backward_kernel<T>);
  // What the kernel may ask for: the device's opt-in limit less the kernel's static shared memory.
  const size_t limit =
      forward ? size_t(opt_in_max_dynamic_shared_memory<rnn_persistent_forward_kernel<T>>(device))
              : size_t(opt_in_max_dynamic_shared_memory<rnn_persistent_backward_kernel<T>>(device));
  auto smem_bytes = [&](int U, int rows, int bt) {
    return forward ? persistent_smem_bytes(int(H), int(G), U, int(B), bt, es)
                   : persistent_backward_smem_bytes(int(H), int(G), U, rows, bt, es);
  };
  const size_t row = forward ? align16(size_t(padded_row(int(H), int(es))) * es)
                             : size_t(backward_row(int(G * H), int(es))) * es;
  for (int64_t groups = forward ? 1 : std::min<int64_t>(8, std::max<int64_t>(1, B / 4)); groups >= 1;
       groups /= 2) {
    const int rows = int((B + groups - 1) / groups);
    const int64_t used_groups = (B + rows - 1) / rows;  // every group non-empty
    // The fewest units per block that let all blocks fit on the chip at one block per SM.
    const int64_t unit_blocks = std::max<int64_t>(1, props.sm_count / used_groups);
    const int U = int((H + unit_blocks - 1) / unit_blocks);
    const int64_t blocks = (H + U - 1) / U * used_groups;
    const int min_tile = forward ? 1 : std::min(rows, kTileRows);
    const size_t fixed = smem_bytes(U, rows, 0);
    if (fixed + size_t(min_tile) * row > limit) continue;
    const int bt = int(std::min<size_t>(size_t(rows), (limit - fixed) / row));
    const size_t smem = smem_bytes(U, rows, bt);
    if (smem > limit) continue;
    // The grid must be co-resident: check the occupancy the kernel really gets with this smem.
    int per_sm = 0;
    EMBER_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPersistentThreads, smem));
    if (per_sm < 1 || int64_t(per_sm) * props.sm_count < blocks) continue;
    plan.ok = true;
    plan.units_per_block = U;
    plan.batch_groups = int(used_groups);
    plan.rows_per_group = rows;
    plan.blocks = int(blocks);
    plan.batch_tile = bt;
    plan.smem_bytes = smem;
    return plan;
  }
  return plan;
}

// What a plan depends on besides the device: direction, gates, hidden size, batch, dtype.
using PlanKey = std::tuple<Direction, int64_t, int64_t, int64_t, DType>;

}  // namespace

// Asked three times per call (applies, cost, run), so each (direction, shape, device) is planned
// once; the cache holds one entry per distinct key seen on the device.
PersistentPlan persistent_plan(const RnnConfig& c, DType dtype, int device, Direction direction) {
  if (c.proj_size > 0 || (dtype != DType::f32 && dtype != DType::bf16)) return {};
  const int64_t H = c.hidden_size, B = c.batch, G = c.gates();
  if (H > 4096 || B > 4096) return {};
  struct Cache {
    std::shared_mutex mutex;
    std::map<PlanKey, PersistentPlan> plans;
  };
  static PerDevice<Cache*> caches;
  Cache& cache = *caches.get(device, [](int) { return new Cache; });  // never freed, as PerDevice
  const PlanKey key{direction, G, H, B, dtype};
  {
    std::shared_lock<std::shared_mutex> lock(cache.mutex);
    const auto it = cache.plans.find(key);
    if (it != cache.plans.end()) return it->second;
  }
  PersistentPlan plan;
  {
    DeviceGuard guard(Device::cuda(device));  // the occupancy query reads the current device
    dispatch_floating<FloatingTypes::f32_bf16>(dtype, "rnn", [&](auto tag) {
      plan = compute_persistent_plan<decltype(tag)>(direction, G, H, B, device);
    });
  }
  std::unique_lock<std::shared_mutex> lock(cache.mutex);
  cache.plans.emplace(key, plan);
  return plan;
}

template <typename T>
void persistent_forward(const PersistentForwardArgs<T>& a, const PersistentPlan& plan,
                        cudaStream_t stream) {
  // A valid plan comes only from persistent_plan, which opted the kernel in to the dynamic shared
  // memory of this device.
  EMBER_INTERNAL_ASSERT(plan.ok, "rnn: persistent kernel launched without a valid plan");
  PersistentForwardArgs<T> args = a;
  int units = plan.units_per_block, tile = plan.batch_tile;
  void* params[] = {&args, &units, &tile};
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(rnn_persistent_forward_kernel<T>),
                                               dim3(unsigned(plan.blocks)), dim3(kPersistentThreads),
                                               params, plan.smem_bytes, stream));
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename T>
void persistent_backward(const PersistentBackwardArgs<T>& a, const PersistentPlan& plan,
                         cudaStream_t stream) {
  EMBER_INTERNAL_ASSERT(plan.ok && plan.batch_groups >= 1,
                        "rnn: persistent backward kernel launched without a valid plan");
  PersistentBackwardArgs<T> args = a;
  int units = plan.units_per_block, rows = plan.rows_per_group, tile = plan.batch_tile;
  void* params[] = {&args, &units, &rows, &tile};
  EMBER_CUDA_CHECK(cudaLaunchCooperativeKernel(
      reinterpret_cast<const void*>(rnn_persistent_backward_kernel<T>), dim3(unsigned(plan.blocks)),
      dim3(kPersistentThreads), params, plan.smem_bytes, stream));
  EMBER_CUDA_LAUNCH_CHECK();
}

// ---- the algorithms -----------------------------------------------------------------------------------

namespace {

template <typename T>
cudaDataType_t cuda_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// Row-major C[m, n] = op(A) op(B) + beta * C (op = transpose when t*), A and B of `ab`, C of
// `c_type`, fp32 accumulation (TF32 when `compute` says so). cuBLAS is column-major: computing
// C^T = op(B)^T op(A)^T needs no data movement.
void gemm(cublasHandle_t handle, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A,
          int64_t lda, const void* B, int64_t ldb, void* C, int64_t ldc, float beta,
          cudaDataType_t ab, cudaDataType_t c_type, cublasComputeType_t compute) {
  const float alpha = 1.0f;
  EMBER_CUBLAS_CHECK(cublasGemmEx(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  int(n), int(m), int(k), &alpha, B, ab, int(ldb), A, ab, int(lda),
                                  &beta, C, c_type, int(ldc), compute, CUBLAS_GEMM_DEFAULT));
}

// Side streams, made once per (thread, device) so that each keeps its one cuBLAS workspace.
Stream side_stream(Device device, int i) {
  thread_local std::vector<std::vector<Stream>> cache;
  if (cache.size() <= size_t(device.index)) cache.resize(size_t(device.index) + 1);
  std::vector<Stream>& streams = cache[size_t(device.index)];
  while (streams.size() <= size_t(i)) streams.push_back(new_stream(device));
  return streams[size_t(i)];
}

// Events for ordering streams, reused call after call (a wait binds to the record made before
// it, so re-recording later never disturbs waits already enqueued).
class EventPool {
 public:
  void reset() { used_ = 0; }
  cudaEvent_t record(cudaStream_t stream) {
    if (used_ == events_.size()) {
      // Creating an event is not stream work: allowed while another stream is being captured.
      RelaxedCaptureModeGuard relaxed;
      cudaEvent_t e = nullptr;
      EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
    cudaEvent_t e = events_[used_++];
    EMBER_CUDA_CHECK(cudaEventRecord(e, stream));
    return e;
  }

 private:
  std::vector<cudaEvent_t> events_;  // never destroyed: they live as long as the thread's streams
  size_t used_ = 0;
};

EventPool& event_pool(int device) {
  thread_local std::vector<EventPool> pools;
  if (pools.size() <= size_t(device)) pools.resize(size_t(device) + 1);
  return pools[size_t(device)];
}

void wait_event(cudaStream_t stream, cudaEvent_t event) {
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
}

cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle); }

constexpr int kMaxRecurrentStreams = 4;

// Steps per wavefront chunk: a unidirectional stack of several layers is cut into about 8 chunks
// of at least 256 GEMM rows each; otherwise one chunk (no wavefront to make).
int64_t chunk_steps(const RnnConfig& c, bool wavefront) {
  if (!wavefront || c.num_directions == 2 || c.num_layers == 1) return c.seq_len;
  const int64_t by_count = (c.seq_len + 7) / 8, by_rows = (256 + c.batch - 1) / c.batch;
  return std::min(c.seq_len, std::max(by_count, by_rows));
}

struct StepSlots {
  int64_t t, prev, next;
};
StepSlots step_slots(int64_t s, int64_t d, int64_t T) {
  if (d == 0) return {s, s, s + 1};
  return {T - 1 - s, T - s, T - 1 - s};
}

// Raw pointers into the problem's tensors for one dtype.
template <typename T>
struct Pointers {
  const RnnProblem& p;
  RnnReserveLayout layout;
  uint8_t* reserve;
  explicit Pointers(const RnnProblem& problem)
      : p(problem), layout(problem.layout()), reserve(static_cast<uint8_t*>(problem.reserve.data_ptr())) {}
  template <typename U = T>
  U* region(int64_t offset) const {
    return offset < 0 ? nullptr : reinterpret_cast<U*>(reserve + offset);
  }
  const T* weight(int64_t l, int64_t d, RnnWeightKind kind) const {
    const int64_t i = p.config.weight_index(l, d, kind);
    return i < 0 ? nullptr : static_cast<const T*>(p.weights[size_t(i)].data_ptr());
  }
  T* grad_weight(int64_t l, int64_t d, RnnWeightKind kind) const {
    const int64_t i = p.config.weight_index(l, d, kind);
    return i < 0 ? nullptr : static_cast<T*>(p.grad_weights[size_t(i)].data_ptr());
  }
  // The output of layer l ([T, B, D * Ho]): the op's output for the last layer.
  T* layer_output(int64_t l) const {
    return l + 1 < p.config.num_layers ? region(layout.layers[size_t(l)].output)
                                       : static_cast<T*>(p.output.data_ptr());
  }
  // The input of layer l ([T, B, in_l]).
  const T* layer_input(int64_t l) const {
    if (l == 0) return static_cast<const T*>(p.input.data_ptr());
    return p.dropout_active() ? region(layout.layers[size_t(l - 1)].dropped) : layer_output(l - 1);
  }
  const RnnReserveLayout::LayerDirection& saved(int64_t l, int64_t d) const {
    return layout.layers[size_t(l)].dir[d];
  }
  const int32_t* lengths() const {
    return p.lengths.defined() ? static_cast<const int32_t*>(p.lengths.data_ptr()) : nullptr;
  }
};

cublasComputeType_t compute_type(const RnnProblem& p) {
  return p.dtype == DType::f32 && p.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// ---- forward ----

// Temporaries of one forward, allocated on the current stream before its launches (eager replay
// keys their addresses) and freed after them.
struct ForwardTemps {
  std::vector<Tensor> gx, gh;  // per (layer, direction): input projections; one step's recurrent GEMM
};
ForwardTemps forward_temps(const RnnProblem& p, bool persistent) {
  const RnnConfig& c = p.config;
  const int64_t n = c.num_layers * c.num_directions, rows = c.seq_len * c.batch, GH = c.gates() * c.hidden_size;
  ForwardTemps tmp;
  tmp.gx.resize(size_t(n));
  tmp.gh.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    tmp.gx[size_t(i)] = empty({rows, GH}, DType::f32, p.device());
    if (!persistent) tmp.gh[size_t(i)] = empty({c.batch, GH}, DType::f32, p.device());
  }
  return tmp;
}

template <typename T>
void forward_launch(const RnnProblem& p, bool persistent, const ForwardTemps& tmp) {
  const RnnConfig& c = p.config;
  const int64_t T_ = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size(), P = c.proj_size;
  const int64_t G = c.gates(), GH = G * H, D = c.num_directions, L = c.num_layers, W = D * Ho;
  const Pointers<T> ptrs(p);
  const int64_t S = ptrs.layout.saved_gates;
  const Device device = p.device();
  DeviceGuard device_guard(device);
  const cudaDataType_t ab = cuda_type<T>();
  const cublasComputeType_t compute = compute_type(p);
  const int32_t* lengths = ptrs.lengths();
  PersistentPlan plan;
  if (persistent) {
    plan = persistent_plan(c, p.dtype, device.index, Direction::forward);
    EMBER_INTERNAL_ASSERT(plan.ok, "rnn: the persistent algorithm was chosen for a problem it does not fit");
  }

  const Stream main = current_stream(device);
  EventPool& events = event_pool(device.index);
  events.reset();
  // Persistent launches all go to one stream: concurrent cooperative grids could not all be
  // resident at once.
  const int n_rec = persistent ? 1 : int(std::min<int64_t>(L * D, kMaxRecurrentStreams));
  const Stream in = side_stream(device, 0);
  std::vector<Stream> rec;
  for (int i = 0; i < n_rec; ++i) rec.push_back(side_stream(device, 1 + i));
  auto rec_of = [&](int64_t l, int64_t d) { return rec[size_t((l * D + d) % n_rec)]; };

  const std::vector<Tensor>&gx = tmp.gx, &gh = tmp.gh;
  auto f32 = [](const Tensor& t) { return static_cast<float*>(t.data_ptr()); };

  const cudaEvent_t start = events.record(raw(main));
  wait_event(raw(in), start);
  for (const Stream& s : rec) wait_event(raw(s), start);

  const int64_t cs = chunk_steps(c, !persistent), K = (T_ + cs - 1) / cs;
  std::vector<cudaEvent_t> input_done(size_t(L), nullptr), rec_done(size_t(L * D), nullptr);
  for (int64_t k = 0; k < K; ++k) {
    const int64_t s0 = k * cs, s1 = std::min(T_, s0 + cs);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t in_l = c.layer_input_size(l);
      // 1) The input projection of chunk k (layer 0: all steps at once, with the first chunk).
      if (l > 0 || k == 0) {
        const int64_t t0 = l == 0 ? 0 : s0, t1 = l == 0 ? T_ : s1;
        if (l > 0)
          for (int64_t d = 0; d < D; ++d) wait_event(raw(in), rec_done[size_t((l - 1) * D + d)]);
        StreamGuard on_input(in);
        if (l > 0 && p.dropout_active()) {
          const RnnReserveLayout::Layer& below = ptrs.layout.layers[size_t(l - 1)];
          dropout_forward<T>(ptrs.layer_output(l - 1), ptrs.template region<T>(below.dropped),
                             ptrs.template region<bool>(below.mask), t0 * B * W, t1 * B * W,
                             p.dropout, p.dropout_random[size_t(l - 1)], raw(in));
        }
        cublasHandle_t handle = cublas_handle();
        const T* x = ptrs.layer_input(l);
        for (int64_t d = 0; d < D; ++d)
          gemm(handle, false, true, (t1 - t0) * B, GH, in_l, x + t0 * B * in_l, in_l,
               ptrs.weight(l, d, RnnWeightKind::w_ih), in_l, f32(gx[size_t(l * D + d)]) + t0 * B * GH,
               GH, 0.0f, ab, CUDA_R_32F, compute);
        input_done[size_t(l)] = events.record(raw(in));
      }
      // 2) The recurrent steps of chunk k, each direction on its own stream.
      for (int64_t d = 0; d < D; ++d) {
        const Stream& rs = rec_of(l, d);
        const cudaStream_t stream = raw(rs);
        if (l > 0 || k == 0) wait_event(stream, input_done[size_t(l)]);
        StreamGuard on_rec(rs);
        const int64_t ld = l * D + d;
        const RnnReserveLayout::LayerDirection& sv = ptrs.saved(l, d);
        T* states = ptrs.template region<T>(sv.states);
        float* cells = ptrs.template region<float>(sv.cells);
        T* gates = ptrs.template region<T>(sv.gates);
        T* proj_in = ptrs.template region<T>(sv.proj_in);
        T* y = ptrs.layer_output(l) + d * Ho;
        const T* b_ih = ptrs.weight(l, d, RnnWeightKind::b_ih);
        const T* b_hh = ptrs.weight(l, d, RnnWeightKind::b_hh);
        const T* w_hh = ptrs.weight(l, d, RnnWeightKind::w_hh);
        const int64_t first = d == 0 ? 0 : T_, last = d == 0 ? T_ : 0;
        if (k == 0) {
          EMBER_CUDA_CHECK(cudaMemcpyAsync(states + first * B * Ho,
                                           static_cast<const T*>(p.h0.data_ptr()) + ld * B * Ho,
                                           size_t(B * Ho) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
          if (cells != nullptr)
            convert_elements<float, T>(cells + first * B * H, static_cast<const T*>(p.c0.data_ptr()) + ld * B * H,
                              B * H, stream);
        }
        if (persistent) {
          PersistentForwardArgs<T> a;
          static_cast<PersistentShape&>(a) = {c.mode, int(T_), int(B), int(H), int(G), int(S), int(d)};
          a.gx = f32(gx[size_t(ld)]);
          a.w_hh = w_hh;
          a.b_ih = b_ih;
          a.b_hh = b_hh;
          a.states = states;
          a.cells = cells;
          a.gates = gates;
          a.y = y;
          a.ldy = W;
          a.lengths = lengths;
          persistent_forward<T>(a, plan, stream);
        } else {
          cublasHandle_t handle = cublas_handle();
          float* gh_buf = f32(gh[size_t(ld)]);
          for (int64_t s = s0; s < s1; ++s) {
            const StepSlots st = step_slots(s, d, T_);
            const T* h_prev = states + st.prev * B * Ho;
            T* h_next = states + st.next * B * Ho;
            gemm(handle, false, true, B, GH, Ho, h_prev, Ho, w_hh, Ho, gh_buf, GH, 0.0f, ab,
                 CUDA_R_32F, compute);
            StepForwardArgs<T> a;
            a.mode = c.mode;
            a.B = int(B);
            a.H = int(H);
            a.G = int(G);
            a.S = int(S);
            a.gx = f32(gx[size_t(ld)]) + st.t * B * GH;
            a.gh = gh_buf;
            a.b_ih = b_ih;
            a.b_hh = b_hh;
            if (cells != nullptr) {
              a.c_prev = cells + st.prev * B * H;
              a.c_next = cells + st.next * B * H;
            }
            a.h_prev = h_prev;
            a.gates = gates != nullptr ? gates + st.t * B * S * H : nullptr;
            a.lengths = lengths;
            a.t = int(st.t);
            if (P > 0) {
              a.proj_in = proj_in + st.t * B * H;
            } else {
              a.h_next = h_next;
              a.y = y + st.t * B * W;
              a.ldy = W;
            }
            step_forward<T>(a, stream);
            if (P > 0) {
              gemm(handle, false, true, B, P, H, proj_in + st.t * B * H, H,
                   ptrs.weight(l, d, RnnWeightKind::w_hr), H, h_next, P, 0.0f, ab, ab, compute);
              proj_fixup<T>(h_next, h_prev, y + st.t * B * W, W, int(B), int(P), lengths, int(st.t), stream);
            }
          }
        }
        if (k == K - 1) {
          EMBER_CUDA_CHECK(cudaMemcpyAsync(static_cast<T*>(p.h_n.data_ptr()) + ld * B * Ho,
                                           states + last * B * Ho, size_t(B * Ho) * sizeof(T),
                                           cudaMemcpyDeviceToDevice, stream));
          if (cells != nullptr)
            convert_elements<T, float>(static_cast<T*>(p.c_n.data_ptr()) + ld * B * H, cells + last * B * H,
                              B * H, stream);
        }
        rec_done[size_t(ld)] = events.record(stream);
      }
    }
  }
  // Join: the caller's stream waits for every side stream.
  wait_event(raw(main), events.record(raw(in)));
  for (const Stream& s : rec) wait_event(raw(main), events.record(raw(s)));
}

// ---- backward ----

// Temporaries of one backward, allocated as the forward's are.
struct BackwardTemps {
  // Per (layer, direction): the gate gradients of every step (GRU: of W_ih and W_hh apart), the
  // projection's output gradients and one step's dr, the fp32 gradient carries.
  std::vector<Tensor> dgx, dgh, dh_total, dr, dh_carry, dc_carry;
  std::vector<Tensor> dx;  // per layer > 0: its input gradient (the lower layer's output gradient)
  Tensor ones;             // [T * B] for the bias gradients
};
BackwardTemps backward_temps(const RnnProblem& p, bool persistent) {
  const RnnConfig& c = p.config;
  const int64_t n = c.num_layers * c.num_directions, rows = c.seq_len * c.batch, B = c.batch;
  const int64_t H = c.hidden_size, GH = c.gates() * H, P = c.proj_size;
  const Device device = p.device();
  BackwardTemps tmp;
  for (std::vector<Tensor>* v : {&tmp.dgx, &tmp.dgh, &tmp.dh_total, &tmp.dr, &tmp.dh_carry, &tmp.dc_carry})
    v->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    tmp.dgx[size_t(i)] = empty({rows, GH}, p.dtype, device);
    if (c.mode == RnnMode::gru) tmp.dgh[size_t(i)] = empty({rows, GH}, p.dtype, device);
    if (P > 0) {
      tmp.dh_total[size_t(i)] = empty({rows, P}, p.dtype, device);
      tmp.dr[size_t(i)] = empty({B, H}, DType::f32, device);
    }
    if (persistent) continue;  // the persistent kernel keeps its carries on chip
    tmp.dh_carry[size_t(i)] = empty({B, c.out_size()}, DType::f32, device);
    if (c.mode == RnnMode::lstm) tmp.dc_carry[size_t(i)] = empty({B, H}, DType::f32, device);
  }
  tmp.dx.resize(size_t(c.num_layers));
  for (int64_t l = 1; l < c.num_layers; ++l) tmp.dx[size_t(l)] = empty({rows, c.layer_input_size(l)}, p.dtype, device);
  if (p.need_weight_grads && c.bias) tmp.ones = empty({rows}, p.dtype, device);
  return tmp;
}

template <typename T>
void backward_launch(const RnnProblem& p, bool persistent, const BackwardTemps& tmp) {
  const RnnConfig& c = p.config;
  const int64_t T_ = c.seq_len, B = c.batch, H = c.hidden_size, Ho = c.out_size(), P = c.proj_size;
  const int64_t G = c.gates(), GH = G * H, D = c.num_directions, L = c.num_layers, W = D * Ho;
  const Pointers<T> ptrs(p);
  const int64_t S = ptrs.layout.saved_gates;
  const bool gru = c.mode == RnnMode::gru;
  const Device device = p.device();
  DeviceGuard device_guard(device);
  const cudaDataType_t ab = cuda_type<T>();
  const cublasComputeType_t compute = compute_type(p);
  const int32_t* lengths = ptrs.lengths();
  PersistentPlan plan;
  if (persistent) {
    plan = persistent_plan(c, p.dtype, device.index, Direction::backward);
    EMBER_INTERNAL_ASSERT(plan.ok, "rnn: the persistent algorithm was chosen for a problem it does not fit");
  }

  const Stream main = current_stream(device);
  EventPool& events = event_pool(device.index);
  events.reset();
  // Persistent launches all go to one stream (co-residency, as in the forward).
  const int n_rec = persistent ? 1 : int(std::min<int64_t>(L * D, kMaxRecurrentStreams));
  const Stream in = side_stream(device, 0), wgrad = side_stream(device, 1 + kMaxRecurrentStreams);
  std::vector<Stream> rec;
  for (int i = 0; i < n_rec; ++i) rec.push_back(side_stream(device, 1 + i));
  auto rec_of = [&](int64_t l, int64_t d) { return rec[size_t((l * D + d) % n_rec)]; };

  auto f32 = [](const Tensor& t) { return static_cast<float*>(t.data_ptr()); };
  auto typed = [](const Tensor& t) { return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr; };
  const std::vector<Tensor>&dgx = tmp.dgx, &dgh = tmp.dgh, &dh_total = tmp.dh_total, &dr = tmp.dr;
  const std::vector<Tensor>&dh_carry = tmp.dh_carry, &dc_carry = tmp.dc_carry, &dx = tmp.dx;
  auto dgh_of = [&](int64_t i) { return gru ? typed(dgh[size_t(i)]) : typed(dgx[size_t(i)]); };
  // dX of layer l: the lower layer's output gradient (l > 0), or the op's input gradient.
  T* grad_input = typed(p.grad_input);
  const Tensor& ones = tmp.ones;
  if (ones.defined()) fill_elements<T>(typed(ones), 1.0f, T_ * B, raw(main));

  const cudaEvent_t start = events.record(raw(main));
  wait_event(raw(in), start);
  wait_event(raw(wgrad), start);
  for (const Stream& s : rec) wait_event(raw(s), start);

  // The persistent kernel runs a layer's whole loop: one chunk, no wavefront.
  const int64_t cs = chunk_steps(c, !persistent), K = (T_ + cs - 1) / cs;
  std::vector<cudaEvent_t> dx_done(size_t(L), nullptr), bwd_done(size_t(L * D), nullptr);
  for (int64_t kk = K - 1; kk >= 0; --kk) {
    const int64_t s0 = kk * cs, s1 = std::min(T_, s0 + cs);
    for (int64_t l = L - 1; l >= 0; --l) {
      const int64_t in_l = c.layer_input_size(l);
      // The gradient of this layer's output: the op's for the top layer, else the layer above's dX.
      const T* dy = l == L - 1 ? static_cast<const T*>(p.grad_output.defined() ? p.grad_output.data_ptr() : nullptr)
                               : typed(dx[size_t(l + 1)]);
      // 1) The steps of chunk kk in reverse, each direction on its own stream.
      for (int64_t d = 0; d < D; ++d) {
        const Stream& rs = rec_of(l, d);
        const cudaStream_t stream = raw(rs);
        if (l < L - 1) wait_event(stream, dx_done[size_t(l + 1)]);
        StreamGuard on_rec(rs);
        const int64_t ld = l * D + d;
        const RnnReserveLayout::LayerDirection& sv = ptrs.saved(l, d);
        const T* states = ptrs.template region<T>(sv.states);
        const float* cells = ptrs.template region<float>(sv.cells);
        const T* gates = ptrs.template region<T>(sv.gates);
        const T* w_hh = ptrs.weight(l, d, RnnWeightKind::w_hh);
        if (persistent) {
          PersistentBackwardArgs<T> a;
          static_cast<PersistentShape&>(a) = {c.mode, int(T_), int(B), int(H), int(G), int(S), int(d)};
          a.w_hh = w_hh;
          a.states = states;
          a.cells = cells;
          a.gates = gates;
          a.dy = dy != nullptr ? dy + d * Ho : nullptr;
          a.ldy = W;
          a.grad_h_n = p.grad_h_n.defined()
                           ? static_cast<const T*>(p.grad_h_n.data_ptr()) + ld * B * H
                           : nullptr;
          a.grad_c_n = p.grad_c_n.defined() && cells != nullptr
                           ? static_cast<const T*>(p.grad_c_n.data_ptr()) + ld * B * H
                           : nullptr;
          a.dgx = typed(dgx[size_t(ld)]);
          a.dgh = dgh_of(ld);
          a.grad_h0 = p.grad_h0.defined() ? static_cast<T*>(p.grad_h0.data_ptr()) + ld * B * H : nullptr;
          a.grad_c0 = p.grad_c0.defined() && cells != nullptr
                          ? static_cast<T*>(p.grad_c0.data_ptr()) + ld * B * H
                          : nullptr;
          a.lengths = lengths;
          persistent_backward<T>(a, plan, stream);
          bwd_done[size_t(ld)] = events.record(stream);
          continue;
        }
        float* dh = f32(dh_carry[size_t(ld)]);
        float* dc = dc_carry[size_t(ld)].defined() ? f32(dc_carry[size_t(ld)]) : nullptr;
        if (kk == K - 1) {
          convert_elements<float, T>(dh, p.grad_h_n.defined() ? static_cast<const T*>(p.grad_h_n.data_ptr()) + ld * B * Ho : nullptr,
                            B * Ho, stream);
          if (dc != nullptr)
            convert_elements<float, T>(dc, p.grad_c_n.defined() ? static_cast<const T*>(p.grad_c_n.data_ptr()) + ld * B * H : nullptr,
                              B * H, stream);
        }
        cublasHandle_t handle = cublas_handle();
        for (int64_t s = s1 - 1; s >= s0; --s) {
          const StepSlots st = step_slots(s, d, T_);
          const T* dy_t = dy != nullptr ? dy + st.t * B * W + d * Ho : nullptr;
          StepBackwardArgs<T> a;
          a.mode = c.mode;
          a.B = int(B);
          a.H = int(H);
          a.G = int(G);
          a.S = int(S);
          a.gates = gates != nullptr ? gates + st.t * B * S * H : nullptr;
          if (cells != nullptr) {
            a.c_prev = cells + st.prev * B * H;
            a.c_next = cells + st.next * B * H;
          }
          a.h_prev = states + st.prev * B * Ho;
          a.h_next = states + st.next * B * Ho;
          a.dh_carry = dh;
          a.dc_carry = dc;
          a.dgx = typed(dgx[size_t(ld)]) + st.t * B * GH;
          a.dgh = dgh_of(ld) + st.t * B * GH;
          a.lengths = lengths;
          a.t = int(st.t);
          if (P > 0) {
            T* dht = typed(dh_total[size_t(ld)]) + st.t * B * P;
            proj_backward_prep<T>(dh, dy_t, W, dht, int(B), int(P), lengths, int(st.t), stream);
            gemm(handle, false, false, B, H, P, dht, P, ptrs.weight(l, d, RnnWeightKind::w_hr), H,
                 f32(dr[size_t(ld)]), H, 0.0f, ab, CUDA_R_32F, compute);
            a.dr = f32(dr[size_t(ld)]);
          } else {
            a.dy = dy_t;
            a.ldy = W;
          }
          step_backward<T>(a, stream);
          // d/dh_prev += dG W_hh (the step kernel left the direct part in the carry).
          gemm(handle, false, false, B, Ho, GH, a.dgh, GH, w_hh, Ho, dh, Ho, 1.0f, ab, CUDA_R_32F, compute);
        }
        if (kk == 0) {
          if (p.grad_h0.defined())
            convert_elements<T, float>(static_cast<T*>(p.grad_h0.data_ptr()) + ld * B * Ho, dh, B * Ho, stream);
          if (p.grad_c0.defined() && dc != nullptr)
            convert_elements<T, float>(static_cast<T*>(p.grad_c0.data_ptr()) + ld * B * H, dc, B * H, stream);
        }
        bwd_done[size_t(ld)] = events.record(stream);
      }
      // 2) dX of chunk kk = sum over directions of dG W_ih, then through dropout's mask.
      T* dx_l = l > 0 ? typed(dx[size_t(l)]) : grad_input;
      if (dx_l != nullptr) {
        const int64_t t0 = D == 1 ? s0 : 0, t1 = D == 1 ? s1 : T_;
        for (int64_t d = 0; d < D; ++d) wait_event(raw(in), bwd_done[size_t(l * D + d)]);
        StreamGuard on_input(in);
        cublasHandle_t handle = cublas_handle();
        for (int64_t d = 0; d < D; ++d)
          gemm(handle, false, false, (t1 - t0) * B, in_l, GH, typed(dgx[size_t(l * D + d)]) + t0 * B * GH, GH,
               ptrs.weight(l, d, RnnWeightKind::w_ih), in_l, dx_l + t0 * B * in_l, in_l,
               d == 0 ? 0.0f : 1.0f, ab, ab, compute);
        if (l > 0 && p.dropout_active())
          dropout_backward<T>(dx_l, ptrs.template region<bool>(ptrs.layout.layers[size_t(l - 1)].mask),
                              t0 * B * in_l, t1 * B * in_l, p.dropout, raw(in));
        dx_done[size_t(l)] = events.record(raw(in));
      }
      // 3) Once the layer's loop is over: its weight gradients, overlapping the layers below.
      if (kk == 0 && p.need_weight_grads) {
        for (int64_t d = 0; d < D; ++d) wait_event(raw(wgrad), bwd_done[size_t(l * D + d)]);
        StreamGuard on_wgrad(wgrad);
        cublasHandle_t handle = cublas_handle();
        const T* x = ptrs.layer_input(l);
        for (int64_t d = 0; d < D; ++d) {
          const int64_t ld = l * D + d;
          const RnnReserveLayout::LayerDirection& sv = ptrs.saved(l, d);
          const T* states = ptrs.template region<T>(sv.states);
          const T* g_x = typed(dgx[size_t(ld)]);
          const T* g_h = dgh_of(ld);
          // The state each step read: slots 0..T-1 going forward, 1..T in reverse.
          const T* h_prev_all = states + (d == 0 ? 0 : B * Ho);
          gemm(handle, true, false, GH, in_l, T_ * B, g_x, GH, x, in_l,
               ptrs.grad_weight(l, d, RnnWeightKind::w_ih), in_l, 0.0f, ab, ab, compute);
          gemm(handle, true, false, GH, Ho, T_ * B, g_h, GH, h_prev_all, Ho,
               ptrs.grad_weight(l, d, RnnWeightKind::w_hh), Ho, 0.0f, ab, ab, compute);
          if (c.bias) {
            gemm(handle, true, false, GH, 1, T_ * B, g_x, GH, typed(ones), 1,
                 ptrs.grad_weight(l, d, RnnWeightKind::b_ih), 1, 0.0f, ab, ab, compute);
            gemm(handle, true, false, GH, 1, T_ * B, g_h, GH, typed(ones), 1,
                 ptrs.grad_weight(l, d, RnnWeightKind::b_hh), 1, 0.0f, ab, ab, compute);
          }
          if (P > 0)
            gemm(handle, true, false, P, H, T_ * B, typed(dh_total[size_t(ld)]), P,
                 ptrs.template region<T>(sv.proj_in), H, ptrs.grad_weight(l, d, RnnWeightKind::w_hr), H,
                 0.0f, ab, ab, compute);
        }
      }
    }
  }
  wait_event(raw(main), events.record(raw(in)));
  wait_event(raw(main), events.record(raw(wgrad)));
  for (const Stream& s : rec) wait_event(raw(main), events.record(raw(s)));
}

// ---- eager replay (tensor/runtime/eager_replay.h) ----

// What the launches of a forward or backward depend on: the sizes, dtype, TF32 flag, algorithm and
// wanted gradients (by value) and the address of every tensor they read or write, temporaries
// included.
std::vector<uint64_t> replay_key(const RnnProblem& p, bool persistent,
                                 std::initializer_list<const std::vector<Tensor>*> temps, const Tensor& extra) {
  const RnnConfig& c = p.config;
  std::vector<uint64_t> key = {uint64_t(p.direction), uint64_t(persistent), uint64_t(c.mode),
                               uint64_t(c.num_layers), uint64_t(c.num_directions), uint64_t(c.input_size),
                               uint64_t(c.hidden_size), uint64_t(c.proj_size), uint64_t(c.bias),
                               uint64_t(c.seq_len), uint64_t(c.batch), uint64_t(p.dtype),
                               uint64_t(p.allow_tf32), uint64_t(p.need_weight_grads),
                               uint64_t(p.device().index)};
  auto add = [&](const Tensor& t) { key.push_back(t.defined() ? uint64_t(uintptr_t(t.data_ptr())) : 0); };
  for (const Tensor* t : {&p.input, &p.h0, &p.c0, &p.lengths, &p.reserve, &p.output, &p.h_n, &p.c_n,
                          &p.grad_output, &p.grad_h_n, &p.grad_c_n, &p.grad_input, &p.grad_h0, &p.grad_c0})
    add(*t);
  for (const Tensor& t : p.weights) add(t);
  for (const Tensor& t : p.grad_weights) add(t);
  for (const std::vector<Tensor>* v : temps)
    for (const Tensor& t : *v) add(t);
  add(extra);
  return key;
}

// The entry points of both algorithms: the temporaries, then the launches, directly or replayed.
// With dropout the launches take Philox offsets that change every call: always direct.
template <typename T>
void forward(const RnnProblem& p, bool persistent) {
  DeviceGuard device_guard(p.device());
  const ForwardTemps tmp = forward_temps(p, persistent);
  const auto launch = [&] { forward_launch<T>(p, persistent, tmp); };
  if (p.dropout_active()) return launch();
  eager_replay(p.device(), replay_key(p, persistent, {&tmp.gx, &tmp.gh}, Tensor()), launch);
}

template <typename T>
void backward(const RnnProblem& p, bool persistent) {
  DeviceGuard device_guard(p.device());
  const BackwardTemps tmp = backward_temps(p, persistent);
  const auto launch = [&] { backward_launch<T>(p, persistent, tmp); };
  if (p.dropout_active()) return launch();
  eager_replay(p.device(),
               replay_key(p, persistent, {&tmp.dgx, &tmp.dgh, &tmp.dh_total, &tmp.dr, &tmp.dh_carry, &tmp.dc_carry, &tmp.dx},
                          tmp.ones),
               launch);
}

// ---- registration ----

bool supported(const RnnProblem& p) {
  return p.device().is_cuda() && (p.dtype == DType::f32 || p.dtype == DType::bf16);
}

// Time model in microseconds (the heuristic's ranking; benchmark mode measures instead), fitted
// to bench_rnn's forced timings on the H200 (2026-11-29, f32 and bf16, LSTM 128->256 B32 T50,
// 256->512 B64 T128 and 512->1024 B64 T100, two layers for the last two):
//   cuBLAS per step: about 5 us per launch (two, four with a projection) plus the recurrent GEMM
//     at ~120 TFLOP/s: 10.9 / 10.3 / 14.5 us measured forward; the backward ~1.5x (14-16 us).
//   persistent forward per step: a grid barrier (~3.5 us), the block's multiply-adds at ~29k per
//     us (they stream W_hh and h from shared memory in fp32 whatever the dtype: f32 and bf16 time
//     alike), and staging the whole h (B x H) each step at ~1 element per ns: 13.7 / 53.4 /
//     139 us measured, so it never beats cuBLAS on these shapes.
//   persistent backward per step: the barrier, multiply-adds at ~71k per us (4 x 4 register
//     tiles), and staging the group's dG rows from L2 at ~14.6 bytes per ns: 6.1 / 18.6 / 105 us
//     (f32) and 7.3 / 9.4 / 51 us (bf16), so it wins on the small shapes only (0.31 vs 0.75 ms
//     for 128->256).
double recurrent_flops(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  return 2.0 * double(c.batch) * double(c.gates() * c.hidden_size) * double(c.out_size());
}
double cublas_cost_us(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  const double launches = c.proj_size > 0 ? 4 : 2;
  const double per_step = launches * 5.0 + recurrent_flops(p) / 120e6;
  const double steps = double(c.seq_len) * c.num_layers * c.num_directions;
  return steps * per_step * (p.direction == Direction::forward ? 1.0 : 1.5);
}
double persistent_cost_us(const RnnProblem& p) {
  const RnnConfig& c = p.config;
  const PersistentPlan plan = persistent_plan(c, p.dtype, p.device().index, p.direction);
  const double es = double(element_size(p.dtype));
  constexpr double kBarrierUs = 3.5;
  double per_step;
  if (p.direction == Direction::forward) {
    const double macs = double(c.batch) * c.gates() * plan.units_per_block * c.hidden_size;
    per_step = kBarrierUs + macs / 29.3e3 + double(c.batch) * c.hidden_size / 1.02e3;
  } else {
    const double row_bytes = double(c.gates() * c.hidden_size) * es;
    const double macs = double(plan.rows_per_group) * plan.units_per_block * c.gates() * c.hidden_size;
    per_step = kBarrierUs + macs / 71.2e3 + plan.rows_per_group * row_bytes / 14.6e3;
  }
  return double(c.seq_len) * c.num_layers * c.num_directions * per_step;
}

dispatch::Algorithm<RnnProblem> cublas_steps_algorithm() {
  dispatch::Algorithm<RnnProblem> a;
  a.name = "cublas_steps";
  a.deterministic = true;
  a.applies = &supported;
  a.heuristic_cost = &cublas_cost_us;
  a.run = [](const RnnProblem& p, void*) {
    dispatch_floating<FloatingTypes::f32_bf16>(p.dtype, "rnn", [&](auto tag) {
      using T = decltype(tag);
      if (p.direction == Direction::forward) forward<T>(p, false);
      else backward<T>(p, false);
    });
  };
  return a;
}

dispatch::Algorithm<RnnProblem> persistent_algorithm() {
  dispatch::Algorithm<RnnProblem> a;
  a.name = "persistent";
  a.deterministic = true;
  a.applies = [](const RnnProblem& p) {
    return supported(p) && persistent_plan(p.config, p.dtype, p.device().index, p.direction).ok;
  };
  a.heuristic_cost = &persistent_cost_us;
  a.run = [](const RnnProblem& p, void*) {
    dispatch_floating<FloatingTypes::f32_bf16>(p.dtype, "rnn", [&](auto tag) {
      using T = decltype(tag);
      if (p.direction == Direction::forward) forward<T>(p, true);
      else backward<T>(p, true);
    });
  };
  return a;
}

}  // namespace

// One instantiation per dtype of every launcher.
#define EMBER_RNN_INSTANTIATE(T)                                                                  \
  template void step_forward<T>(const StepForwardArgs<T>&, cudaStream_t);                        \
  template void proj_fixup<T>(T*, const T*, T*, int64_t, int, int, const int32_t*, int, cudaStream_t); \
  template void step_backward<T>(const StepBackwardArgs<T>&, cudaStream_t);                      \
  template void proj_backward_prep<T>(float*, const T*, int64_t, T*, int, int, const int32_t*, int, \
                                      cudaStream_t);                                             \
  template void dropout_forward<T>(const T*, T*, bool*, int64_t, int64_t, double,                \
                                   const RandomParams&, cudaStream_t);                           \
  template void dropout_backward<T>(T*, const bool*, int64_t, int64_t, double, cudaStream_t);    \
  template void fill_elements<T>(T*, float, int64_t, cudaStream_t);                                       \
  template void persistent_forward<T>(const PersistentForwardArgs<T>&, const PersistentPlan&,    \
                                      cudaStream_t);                                             \
  template void persistent_backward<T>(const PersistentBackwardArgs<T>&, const PersistentPlan&,  \
                                       cudaStream_t);
EMBER_RNN_INSTANTIATE(float)
EMBER_RNN_INSTANTIATE(__nv_bfloat16)
#undef EMBER_RNN_INSTANTIATE
template void convert_elements<float, float>(float*, const float*, int64_t, cudaStream_t);
template void convert_elements<float, __nv_bfloat16>(float*, const __nv_bfloat16*, int64_t, cudaStream_t);
template void convert_elements<__nv_bfloat16, float>(__nv_bfloat16*, const float*, int64_t, cudaStream_t);

}  // namespace ember::cuda::rnn

namespace ember {
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", forward, CUDA, cuda::rnn::cublas_steps_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", backward, CUDA, cuda::rnn::cublas_steps_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", forward, CUDA, cuda::rnn::persistent_algorithm());
EMBER_REGISTER_ALGORITHM(RnnProblem, "rnn", backward, CUDA, cuda::rnn::persistent_algorithm());
}  // namespace ember
